"""The user's own measurements: a layer over the shipped calibration (``gpufleet bench --record``).

As the refreshed prices are a layer over the shipped ones (``catalog.store``), the training steps a user
measured on their own GPUs are kept in one JSON file of theirs (``paths.measured_path()``), each with its
provenance (GPU, instance type, host, date, versions) and the prediction it was measured against.
``speed`` turns the rows of one GPU and workload family into the factor its GPU time is divided by
(``Scenario.measured_speed``): the geometric mean of measured / today's prediction of the row's own run, so that
``compare`` predicts that GPU as it ran on the user's machines and the shipped fit everywhere else. A row's stored
prediction is only its provenance (the fit of the release that recorded it, or whatever a teammate's object says);
a row beyond the GPU's dense peak, or of several nodes (whose shortfall may be the network as much as the GPU:
``calibrate --mine`` refits with it), is left out of the GPU's speed and said.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpufleet.errors import EXIT_FAILED, GpufleetError
from gpufleet.paths import measured_path, replace_atomically
from gpufleet.perf import llm_shapes, workloads
from gpufleet.perf.model import Scenario, predict, resolve_precision
from gpufleet.perf.workloads import Workload
from gpufleet.userfiles import TABLE_BYTES, read_text

SCHEMA = 1
# outside this, a row is a broken measurement (a GPU that was shared, a unit mix-up), not the GPU's speed
RATIO_BOUNDS = (0.05, 20.0)
BENCH_PRECISION = "bf16"  # the node script trains in bf16 (autocast, or FSDP2's bf16 parameters)


class MeasuredDamaged(GpufleetError):
    """The measurements file cannot be read. Exit code 1: gpufleet's own file, not the user's input."""

    exit_code = EXIT_FAILED

    def __init__(self, path: Path, problem: str):
        self.path = path
        super().__init__(f"{path}: your recorded measurements cannot be read ({problem})",
                         "move it aside (compare then uses the shipped calibration alone) and record again with "
                         "`gpufleet bench --here --record`")


# A row's words: rows come from the user's file or from the team store (anyone of the team writes there) and are
# shown in a terminal, a report and compare's assumptions: short and printable, checked before use
WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._:+@()/-]{0,119}")
WHEN = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")  # ISO 8601 UTC, as the node script writes it
UNITS = ("img/s", "seq/s", "tok/s")
MAX_VERSIONS = 16


@dataclass(frozen=True)
class Measured:
    gpu: str  # the catalog's name; empty for a tiny row (the CPU)
    workload: str
    family: str
    unit: str
    measured: float  # per GPU
    predicted: float | None  # the model's prediction when it was measured; None for a tiny row
    batch: int
    when: str  # ISO 8601 UTC
    instance: str = ""
    host: str = ""
    versions: dict = field(default_factory=dict)
    cluster: str = ""  # the cluster `gpufleet bench CLUSTER` measured; empty for `bench --here`
    # toy shapes (`bench --tiny`): kept with their provenance, shown, never used by the fit or by compare
    tiny: bool = False
    gpus: int = 1  # the job's world size (`--gpus`, `--nodes`) and its nodes: what the prediction was for
    nodes: int = 1

    @property
    def ratio(self) -> float:
        return self.measured / self.predicted

    @property
    def used(self) -> bool:
        """Whether the row speaks for its GPU: a real measurement beside a prediction, not toy shapes."""
        return not self.tiny

    @classmethod
    def from_dict(cls, d: dict) -> "Measured":
        """A row checked against its format (a store's rows are anyone's): ValueError says what is wrong."""
        if not isinstance(d, dict):
            raise ValueError(f"a row is an object, not {type(d).__name__}")
        tiny = d.get("tiny", False)
        if not isinstance(tiny, bool):
            raise ValueError(f"tiny: {tiny!r} is not true or false")
        versions = d.get("versions") or {}
        if not isinstance(versions, dict) or len(versions) > MAX_VERSIONS:
            raise ValueError("versions: not an object of at most 16 names")
        m = cls(gpu=_text(d, "gpu", required=not tiny), workload=_text(d, "workload"), family=_text(d, "family"),
                unit=_text(d, "unit"), measured=_number(d, "measured"),
                predicted=None if tiny else _number(d, "predicted"), batch=int(_number(d, "batch")),
                when=_text(d, "when", pattern=WHEN), instance=_text(d, "instance", required=False),
                host=_text(d, "host", required=False),
                versions={_text({"name": k}, "name"): _text(versions, k) for k in versions},
                cluster=_text(d, "cluster", required=False), tiny=tiny,
                gpus=int(_number(d, "gpus", 1)), nodes=int(_number(d, "nodes", 1)))
        if m.unit not in UNITS:
            raise ValueError(f"unit: {m.unit!r} is not one of {', '.join(UNITS)}")
        # what the row means, not only its characters: a store's row bends every prediction of its GPU and family
        if not 1 <= m.nodes <= m.gpus:
            raise ValueError(f"gpus {m.gpus}, nodes {m.nodes}: a job runs on one node or more, each with a GPU or more")
        if m.batch < 1:
            raise ValueError(f"batch: {m.batch}: a step trains one sample or more")
        try:
            w = bench_workload(m.workload)
        except GpufleetError:
            w = None
        if w is None or bench_kind(w) is None:
            raise ValueError(f"workload: {m.workload!r} is not one `gpufleet bench` runs (resnet50, bert-large, "
                             "llm:<size>)")
        if (m.family, m.unit) != (w.family, f"{w.unit}/s"):
            raise ValueError(f"{m.workload}: family {m.family!r} in {m.unit!r}; it is {w.family!r} in {w.unit}/s")
        if m.tiny:
            if not m.measured > 0:
                raise ValueError(f"{m.workload}: measured {m.measured:g}")
            return m
        lo, hi = RATIO_BOUNDS
        if not (m.measured > 0 and m.predicted > 0 and lo <= m.ratio <= hi):
            raise ValueError(f"{m.gpu} {m.workload}: measured {m.measured:g} against predicted {m.predicted:g}")
        return m


def _text(d: dict, key: str, *, required: bool = True, pattern: re.Pattern = WORD) -> str:
    v = d.get(key)
    if v in (None, "") and not required:
        return ""
    if not isinstance(v, str) or not pattern.fullmatch(v):
        raise ValueError(f"{key}: {str(v)[:40]!r} is not {'a date (YYYY-MM-DDTHH:MM:SSZ)' if pattern is WHEN else 'a name'}")
    return v


def _number(d: dict, key: str, default: float | None = None) -> float:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{key}: {str(v)[:40]!r} is not a number")
    return float(v)


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


@dataclass(frozen=True)
class Speed:
    """What a GPU's recorded rows of one workload family do to its prediction."""

    factor: float | None  # its GPU time is divided by this; None when no row applies
    used: list[Measured]
    left_out: list[tuple[Measured, str]]  # rows of this GPU and family not applied, and why


def speed(rows: list[Measured], gpu, family: str) -> Speed | None:
    """The speed of ``gpu`` (the catalog's GPU) on ``family`` from the rows recorded on it, None without any; each
    row is held to today's prediction of its own run (the one ``calibrate --mine`` refits with), tiny rows never
    count."""
    mine = [r for r in rows if r.used and r.gpu == gpu.name and r.family == family]
    if not mine:
        return None
    ratios: list[float] = []
    used: list[Measured] = []
    left_out: list[tuple[Measured, str]] = []
    for r in mine:
        w = bench_workload(r.workload)
        mfu = r.measured * w.train_flops / peak_flops(gpu)
        if mfu > 1.0:
            left_out.append((r, f"{mfu:.0%} of the {gpu.name}'s dense {BENCH_PRECISION.upper()} peak: no GPU runs "
                                "faster than its peak"))
            continue
        if r.nodes > 1:  # the network's share of its shortfall is not the GPU's: calibrate --mine places it
            left_out.append((r, f"a job of {r.nodes} nodes: its speed is the network's as much as the GPU's "
                                "(`gpufleet calibrate --mine` refits with it)"))
            continue
        ratio = r.measured / predict(scenario(w, gpu, r.batch, gpus_per_node=r.gpus)).per_gpu
        lo, hi = RATIO_BOUNDS
        if not lo <= ratio <= hi:
            left_out.append((r, f"{ratio:.2g}x today's prediction: a broken measurement, not the GPU's speed"))
            continue
        ratios.append(ratio)
        used.append(r)
    factor = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
    return Speed(factor, used, left_out)


def peak_flops(gpu) -> float:
    """The GPU's dense peak in the precision the benchmark trains in (FLOP/s)."""
    return gpu.tflops[resolve_precision(gpu, BENCH_PRECISION)] * 1e12


def layer(rows: list[Measured]) -> str | None:
    """The measured layer in words, for compare's assumptions: what it holds and where from, per cluster (or host)
    and day; tiny rows are said to be unused. None when nothing was recorded."""
    if not rows:
        return None
    groups: dict[tuple[str, str, bool], int] = {}
    for r in rows:
        where = f"cluster {r.cluster}" if r.cluster else f"host {r.host or 'unknown'}"
        key = (where, r.when[:10], r.tiny)
        groups[key] = groups.get(key, 0) + 1
    return "measured: " + "; ".join(
        f"{n} row{'s' if n > 1 else ''} from {where} on {day}" + (", tiny: not used" if tiny else "")
        for (where, day, tiny), n in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])))


# the node script's model of each family (gpufleet/nodebench/train_steps.py BUILDERS); of the CNNs it trains ResNet-50
BENCH_KINDS = {"cnn": "cnn", "transformer": "encoder", "llm": "decoder"}


def bench_kind(w: Workload) -> str | None:
    """The model the node script builds for ``w``, None for a workload `gpufleet bench` does not run."""
    if w.family not in BENCH_KINDS or (w.family == "cnn" and w.name != "resnet50"):
        return None
    return BENCH_KINDS[w.family]


def bench_workload(name: str) -> Workload:
    """The workload a benchmark trains, as the node runs it: a decoder with the parameters its shape holds
    (an ``llm:<size>`` is named by its nominal size; its MFU and prediction count the real weights)."""
    w = workloads.get(name)
    if w.family != "llm":
        return w
    held = llm_shapes.parameters(w.layers, w.d_model, w.heads, w.kv_heads, w.ffn, w.vocab, w.tied, w.gated)
    return workloads.decoder(w.name, {"params": held, "layers": w.layers, "d_model": w.d_model, "heads": w.heads,
                                      "kv_heads": w.kv_heads, "ffn": w.ffn, "gated": w.gated, "vocab": w.vocab,
                                      "tied": w.tied, "seq_len": w.seq_len}, "<bench>")


def scenario(w: Workload, gpu, batch: int, gpus_per_node: int = 1, nodes: int = 1) -> Scenario:
    """``gpus_per_node`` GPUs on each of ``nodes`` training ``w`` as the node benchmark does: bf16, synthetic data,
    ``batch`` samples a step on each GPU (a decoder fully sharded over them all: its micro-batch is a GPU's step)."""
    if w.family == "llm":
        return Scenario(workload=w, gpu=gpu, gpus_per_node=gpus_per_node, nodes=nodes, precision=BENCH_PRECISION,
                        synthetic_data=True, layout="fsdp", micro_batch=batch,
                        global_batch_tokens=float(batch * w.seq_len * gpus_per_node * nodes))
    return Scenario(workload=w, gpu=gpu, gpus_per_node=gpus_per_node, nodes=nodes, precision=BENCH_PRECISION,
                    batch_per_gpu=batch, synthetic_data=True)
