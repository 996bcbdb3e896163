"""The user's own measurements: a layer over the shipped calibration (``gpufleet bench --record``).

As the refreshed prices are a layer over the shipped ones (``catalog.store``), the training steps a user
measured on their own GPUs are kept in one JSON file of theirs (``paths.measured_path()``), each with its
provenance (GPU, instance type, host, date, versions) and the prediction it was measured against.
``speed`` turns the rows of one GPU and workload family into the factor its GPU time is divided by
(``Scenario.measured_speed``): the geometric mean of measured / predicted, so that ``compare`` predicts that
GPU as it ran on the user's machines and the shipped fit everywhere else.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpufleet.errors import EXIT_FAILED, GpufleetError
from gpufleet.paths import measured_path, replace_atomically
from gpufleet.perf import llm_shapes, workloads
from gpufleet.perf.model import Scenario
from gpufleet.perf.workloads import Workload
from gpufleet.userfiles import TABLE_BYTES, read_text

SCHEMA = 1
# outside this, a row is a broken measurement (a GPU that was shared, a unit mix-up), not the GPU's speed
RATIO_BOUNDS = (0.05, 20.0)


class MeasuredDamaged(GpufleetError):
    """The measurements file cannot be read. Exit code 1: gpufleet's own file, not the user's input."""

    exit_code = EXIT_FAILED

    def __init__(self, path: Path, problem: str):
        self.path = path
        super().__init__(f"{path}: your recorded measurements cannot be read ({problem})",
                         "move it aside (compare then uses the shipped calibration alone) and record again with "
                         "`gpufleet bench --here --record`")


@dataclass(frozen=True)
class Measured:
    gpu: str  # the catalog's name
    workload: str
    family: str
    unit: str
    measured: float  # per GPU
    predicted: float  # the model's prediction when it was measured
    batch: int
    when: str  # ISO 8601 UTC
    instance: str = ""
    host: str = ""
    versions: dict = field(default_factory=dict)
    cluster: str = ""  # the cluster `gpufleet bench CLUSTER` measured; empty for `bench --here`

    @property
    def ratio(self) -> float:
        return self.measured / self.predicted

    @classmethod
    def from_dict(cls, d: dict) -> "Measured":
        m = cls(gpu=str(d["gpu"]), workload=str(d["workload"]), family=str(d["family"]), unit=str(d["unit"]),
                measured=float(d["measured"]), predicted=float(d["predicted"]), batch=int(d["batch"]),
                when=str(d["when"]), instance=str(d.get("instance") or ""), host=str(d.get("host") or ""),
                versions={str(k): str(v) for k, v in (d.get("versions") or {}).items()},
                cluster=str(d.get("cluster") or ""))
        lo, hi = RATIO_BOUNDS
        if not (m.measured > 0 and m.predicted > 0 and lo <= m.ratio <= hi):
            raise ValueError(f"{m.gpu} {m.workload}: measured {m.measured:g} against predicted {m.predicted:g}")
        return m


def read(path: Path | None = None) -> list[Measured]:
    """The recorded rows, none when nothing was recorded; a damaged file is MeasuredDamaged."""
    path = path or measured_path()
    try:
        text = read_text(path, "recorded measurements (JSON)", TABLE_BYTES, variable="GPUFLEET_MEASURED")
    except FileNotFoundError:
        return []
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("rows"), list):
            raise ValueError(f"not gpufleet's measurements of schema {SCHEMA}")
        return [Measured.from_dict(r) for r in doc["rows"]]
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
        raise MeasuredDamaged(path, str(e)[:200]) from None


def add(rows: list[Measured], path: Path | None = None) -> Path:
    """``rows`` kept after those already recorded (the file replaced whole, never half written)."""
    path = path or measured_path()
    for r in rows:
        Measured.from_dict(asdict(r))  # what is written reads back
    doc = {"schema": SCHEMA, "rows": [asdict(r) for r in read(path) + list(rows)]}
    replace_atomically(path, lambda f: f.write(json.dumps(doc, indent=1) + "\n"), "GPUFLEET_MEASURED")
    return path


def speed(rows: list[Measured], gpu: str, family: str) -> tuple[float, list[Measured]] | None:
    """(the factor a GPU's time is divided by, the rows it comes from) for ``gpu`` on ``family``, or None."""
    mine = [r for r in rows if r.gpu == gpu and r.family == family]
    if not mine:
        return None
    return math.exp(sum(math.log(r.ratio) for r in mine) / len(mine)), mine


def bench_workload(name: str) -> Workload:
    """The workload a benchmark trains, as the node runs it: a decoder with the parameters its shape holds
    (an ``llm:<size>`` is named by its nominal size; its MFU and prediction count the real weights)."""
    w = workloads.get(name)
    if w.family != "llm":
        return w
    tied = llm_shapes.nearest(w.params).tied
    held = llm_shapes.parameters(w.layers, w.d_model, w.heads, w.kv_heads, w.ffn, w.vocab, tied)
    return workloads.decoder(w.name, {"params": held, "layers": w.layers, "d_model": w.d_model, "heads": w.heads,
                                      "kv_heads": w.kv_heads, "ffn": w.ffn, "gated": True, "vocab": w.vocab,
                                      "seq_len": w.seq_len}, "<bench>")


def scenario(w: Workload, gpu, batch: int, gpus_per_node: int = 1, nodes: int = 1) -> Scenario:
    """``gpus_per_node`` GPUs on each of ``nodes`` training ``w`` as the node benchmark does: bf16, synthetic data,
    ``batch`` samples a step on each GPU (a decoder fully sharded over them all: its micro-batch is a GPU's step)."""
    if w.family == "llm":
        return Scenario(workload=w, gpu=gpu, gpus_per_node=gpus_per_node, nodes=nodes, precision="bf16",
                        synthetic_data=True, layout="fsdp", micro_batch=batch,
                        global_batch_tokens=float(batch * w.seq_len * gpus_per_node * nodes))
    return Scenario(workload=w, gpu=gpu, gpus_per_node=gpus_per_node, nodes=nodes, precision="bf16", batch_per_gpu=batch,
                    synthetic_data=True)
