"""`gpufleet bench`: time standard training steps on this machine (``--here``) or on a cluster's nodes, and hold
the model's prediction to them.

The node side is ``gpufleet/nodebench/train_steps.py`` (the standard library and torch only), run as a
subprocess of the Python that has the user's PyTorch; this side writes its plan (shapes and batches of the
workloads the model knows), and judges its answer: per benchmark the model's prediction for this GPU (what
``compare`` predicts for one GPU of it), the error, MFU against the GPU's dense BF16 peak, and a flag
where the error is beyond the model's stated error, with what it suggests. On a cluster every node runs the
plan at once through its kind (``nodes``: rack hosts over SSH, cloud nodes through their bucket) and is judged
against its pool's GPU; the per-node spread shows a node slower than its peers.
"""

from __future__ import annotations

import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from importlib import resources

from gpufleet import nodes as kinds
from gpufleet.catalog import Catalog
from gpufleet.configure.pillar import gpu_of
from gpufleet.errors import GpufleetError, InputError, ToolMissing
from gpufleet.fleet import team
from gpufleet.nodebench.launch import TORCHRUN, Launch
from gpufleet.nodebench.train_steps import NO_TORCH
from gpufleet.nodes.run import Run, Seams
from gpufleet.perf import measured, workloads
from gpufleet.perf.model import error_band, predict
from gpufleet.perf.workloads import Workload
from gpufleet.state import measurements
from gpufleet.state.recorded import recorded
from gpufleet.state.shared import StoreError

# Batches per GPU on a GPU: NVIDIA's DeepLearningExamples ResNet-50 (256 a GPU, bf16) and BERT phase 1
# (per-GPU 64 to 128 at 128 tokens); a decoder's micro-batch of 8,192 tokens, which leaves room on an 80 GB
# GPU for a 1B Llama shape's 128k-token logits
GPU_BATCH = {"cnn": 256, "encoder": 128}
DECODER_TOKENS = 8192
GPU_STEPS = {"warmup": 5, "steps": 20}
# --tiny: toy shapes that train on a CPU in seconds (what CI runs); no prediction: no catalog GPU runs them
TINY = {"cnn": {"width": 8, "blocks": [1, 1, 1, 1], "image": 32, "classes": 10, "batch": 4},
        "encoder": {"layers": 2, "d_model": 64, "heads": 4, "ffn": 256, "vocab": 1000, "seq": 32, "batch": 4},
        "decoder": {"layers": 2, "d_model": 64, "heads": 4, "kv_heads": 2, "ffn": 256, "vocab": 1000, "seq": 32,
                    "batch": 2}}
TINY_STEPS = {"warmup": 2, "steps": 3}
TIMEOUT_S = 1800  # the whole run: compilation and three benchmarks take minutes on a GPU


@dataclass
class Judged:
    """One benchmark: what the node measured and what the model says of it."""

    name: str
    workload: str
    unit: str
    measured: float | None  # samples (tokens for a decoder) per second per GPU
    predicted: float | None = None
    error: float | None = None  # predicted / measured - 1, as calibration scores the published rows
    band: float | None = None  # the model's typical error for this family on one GPU
    flagged: bool = False
    suggests: str = ""
    mfu: float | None = None
    peak_mem_gb: float | None = None
    step_s: float | None = None
    batch: int | None = None
    compiled: bool = False
    note: str = ""  # why there is no prediction or no measurement
    sharding: str | None = None  # under torchrun: fsdp2 (transformers) or ddp (the CNN)
    ranks: list[dict] | None = None  # under torchrun: each rank's rate (rank, node, host, samples_per_s, step_s)
    rank_spread: float | None = None  # the fastest rank's rate over the slowest's, minus 1

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class BenchReport:
    device: dict
    versions: dict
    gpu: str | None  # the catalog's name for the GPU, None on a CPU or a GPU the catalog lacks
    tiny: bool
    rows: list[Judged] = field(default_factory=list)
    when: str = ""

    def to_dict(self) -> dict:
        return {"device": self.device, "versions": self.versions, "gpu": self.gpu, "tiny": self.tiny, "when": self.when,
                "benchmarks": [r.to_dict() for r in self.rows]}


def _kind(w: Workload) -> str:
    kind = measured.bench_kind(w)
    if kind is None:
        raise InputError(f"bench runs resnet50, bert-large and llm:<size>[:<seq>], not {w.name!r}",
                         "e.g. --workload resnet50,bert-large,llm:1b")
    return kind


def plan(names: list[str], tiny: bool) -> dict:
    """What the node runs: each workload's shape (toy ones with ``tiny``), batch and the steps to time."""
    benchmarks = []
    for name in names:
        w = workloads.get(name)
        kind = _kind(w)
        if tiny:
            shape = dict(TINY[kind])
        elif kind == "cnn":
            shape = {"width": 64, "blocks": [3, 4, 6, 3], "image": 224, "classes": 1000}
        elif kind == "encoder":  # BERT-large: 16 heads of 64, a 4d GELU MLP, WordPiece's 30,522 tokens
            shape = {"layers": w.layers, "d_model": w.d_model, "heads": w.d_model // 64, "ffn": 4 * w.d_model,
                     "vocab": 30522, "seq": w.seq_len}
        else:
            shape = {"layers": w.layers, "d_model": w.d_model, "heads": w.heads, "kv_heads": w.kv_heads, "ffn": w.ffn,
                     "gated": w.gated, "vocab": w.vocab, "tied": w.tied, "seq": w.seq_len}
        shape.setdefault("batch", GPU_BATCH[kind] if kind != "decoder" else max(1, DECODER_TOKENS // w.seq_len))
        benchmarks.append({"name": w.name, "kind": kind, **shape})
    # a full shape is a GPU's benchmark: "cuda" makes the node script refuse it (a row error) where its PyTorch sees
    # no GPU (a CPU wheel, a driver that no longer matches the kernel) rather than time it on the CPU
    return {"device": "cpu" if tiny else "cuda", "compile": not tiny, **(TINY_STEPS if tiny else GPU_STEPS),
            "benchmarks": benchmarks}


def script_path() -> str:
    return str(resources.files("gpufleet.nodebench").joinpath("train_steps.py"))


def run_here(the_plan: dict, python: str | None = None, timeout_s: float = TIMEOUT_S, launch: Launch | None = None
             ) -> dict:
    """The node script's answer on this machine (``launch``: on several processes), its progress lines passed through to
    stderr."""
    python = python or sys.executable
    try:
        if launch and subprocess.run([python, "-c", f"import {TORCHRUN}"], capture_output=True,
                                     timeout=120).returncode != 0:
            raise ToolMissing(f"{python} has no PyTorch with torchrun ({TORCHRUN}): --gpus runs the step "
                              "under torchrun, with the PyTorch you use (gpufleet does not bring one)",
                              "install PyTorch for this machine's GPU (https://pytorch.org/get-started), or name the "
                              "Python that has it with --python")
        # not the rack bench's gpufleet-bench.* (nodes/racks/bench.py), whose test counts those it leaves
        with tempfile.TemporaryDirectory(prefix="gpufleet-bench-here.") as folder:
            plan_file = f"{folder}/plan.json"
            with open(plan_file, "w", encoding="utf-8") as f:
                json.dump(launch.plan(the_plan) if launch else the_plan, f)
            done = subprocess.run([python, *(launch.args() if launch else []), script_path(), plan_file],
                                  stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise InputError(f"no Python at {python}", "--python names the interpreter that has PyTorch") from None
    except subprocess.TimeoutExpired:
        raise GpufleetError(f"the benchmark did not end within {timeout_s:.0f} s",
                            "run fewer benchmarks (--workload) or look at what else uses the GPU (nvidia-smi)") from None
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
    except ValueError:
        answer = {}
    if done.returncode == NO_TORCH:
        raise ToolMissing(f"PyTorch is not installed in {answer.get('python') or python}: bench trains with the "
                          "PyTorch you use (gpufleet does not bring one)",
                          "install PyTorch for this machine's GPU (https://pytorch.org/get-started), or name the "
                          "Python that has it with --python")
    if done.returncode != 0 or "results" not in answer:
        raise GpufleetError(f"the benchmark ended with exit {done.returncode} and no results",
                            "its progress lines above say where it stopped")
    return answer


# PyTorch's name of a GPU (torch.cuda.get_device_name: the CUDA driver's cudaDeviceProp.name, the name nvidia-smi
# shows) where it is no name or alias of the catalog's, as NVIDIA's drivers report them (seen in nvidia-smi and
# torch output of public reports and peers' GPU tables, read 2026-11). A name neither here nor in the catalog is
# unknown: never the nearest shorter name ("NVIDIA H200 NVL", 835 TFLOPS dense BF16, is no H200 SXM, 989.5)
TORCH_NAMES = {"NVIDIA H100 80GB HBM3": "H100", "NVIDIA A100-PCIE-40GB": "A100-40GB-PCIe",
               "Tesla V100-SXM2-16GB": "V100", "Tesla V100-SXM2-32GB": "V100-32GB"}


def catalog_gpu(cat: Catalog, device_name: str) -> str | None:
    """The catalog's name for a GPU as PyTorch names it ("NVIDIA H100 80GB HBM3" -> H100), or None: the whole name,
    as the table above or the catalog's names and aliases have it (its words joined by "-", "NVIDIA"/"Tesla" or not)."""
    if device_name in TORCH_NAMES:
        return TORCH_NAMES[device_name]
    words = device_name.split()
    for name in ("-".join(words), "-".join(words[1:]) if words[:1] in (["NVIDIA"], ["Tesla"]) else ""):
        if name and cat.has_gpu(name):
            return cat.gpu(name).name
    return None


def _suggestion(error: float, world: int, nodes: int) -> str:
    if error <= 0:
        return "faster than predicted: --record it, and compare uses this GPU's measured speed"
    # the list: a job over several nodes waits on the network first (synthetic data: no input pipeline), one
    # over several GPUs of a node on their links, one GPU on itself
    if nodes > 1:
        first = ("the network between the nodes first: nccl-tests all_reduce_perf across them, the fabric (EFA, "
                 "InfiniBand: NCCL_DEBUG=INFO names the transport it chose; a TCP socket is far slower)")
    elif world > 1:
        first = "the links between the GPUs first: nvidia-smi topo -m (NVLink, or PCIe through the CPU), nccl-tests"
    else:
        first = "clocks or power (nvidia-smi -q -d PERFORMANCE), another process on the GPU, the versions"
    return f"slower than predicted: {first}; or the model overrates this family (issue 52)"


def _not_this_gpu(cat: Catalog, device: dict, gpu, tiny: bool) -> str | None:
    """Why the answer is no measurement of ``gpu`` (None where it is one): toy shapes, a run that was not on a GPU, or
    a GPU that PyTorch names as another of the catalog's (a wrong inventory, a replaced board)."""
    if gpu is None:
        return None
    if tiny:
        return "toy shapes: nothing to predict"
    if device.get("kind") != "cuda":
        return f"ran on the {device.get('kind') or 'unknown device'}, not on a GPU: no measurement of a {gpu.name}"
    theirs = catalog_gpu(cat, device.get("name") or "")
    if theirs is not None and theirs != gpu.name:
        return (f"PyTorch names this GPU {device.get('name')!r} ({theirs}), not a {gpu.name}: not judged as a "
                f"{gpu.name} (check what the node has: nvidia-smi -L)")
    return None


def judge(answer: dict, cat: Catalog, gpu_name: str | None, tiny: bool) -> BenchReport:
    """The node's answer beside the model's prediction for one GPU of ``gpu_name`` at the same batch."""
    device = answer.get("device", {})
    gpu = cat.gpu(gpu_name) if gpu_name else None
    refused = _not_this_gpu(cat, device, gpu, tiny)
    gpu = None if refused else gpu
    report = BenchReport(device=device, versions=answer.get("versions", {}), gpu=gpu.name if gpu else None, tiny=tiny,
                         when=answer.get("when") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    for r in answer["results"]:
        w = measured.bench_workload(r["name"])
        row = Judged(name=r["name"], workload=w.name, unit=f"{w.unit}/s", measured=r.get("samples_per_s"),
                     peak_mem_gb=r.get("peak_mem_gb"), step_s=r.get("step_s"), batch=r.get("batch"),
                     compiled=bool(r.get("compiled")), sharding=r.get("sharding"), ranks=r.get("ranks"),
                     rank_spread=r.get("rank_spread"))
        report.rows.append(row)
        if row.measured is None:
            row.note = r.get("error") or "no measurement"
            continue
        if r.get("compile_error"):
            row.note = f"without torch.compile, which failed: {r['compile_error']}"
        if gpu is None:
            row.note = refused or ("toy shapes on a CPU: nothing to predict" if tiny or device.get("kind") == "cpu" else
                        f"the catalog has no GPU {device.get('name')!r}: --gpu names it")
            continue
        if "bf16" in gpu.tflops:
            row.mfu = row.measured * w.train_flops / (gpu.tflops["bf16"] * 1e12)
        world, nodes = int(device.get("world_size") or 1), int(device.get("nodes") or 1)
        pr = predict(measured.scenario(w, gpu, int(r.get("batch") or 1), gpus_per_node=world // nodes, nodes=nodes))
        row.predicted = pr.per_gpu
        row.error = row.predicted / row.measured - 1.0
        row.band = error_band(w.family, world > 1)
        if abs(row.error) > row.band:
            row.flagged, row.suggests = True, _suggestion(row.error, world, nodes)
    return report


def _rows(report: BenchReport, instance: str | None, host: str, cluster: str = "") -> list[measured.Measured]:
    """The rows worth keeping: a measurement beside its prediction, or (``--tiny``) a toy measurement, marked so."""
    world, nodes = int(report.device.get("world_size") or 1), int(report.device.get("nodes") or 1)
    return [measured.Measured(gpu=report.gpu or "", workload=r.workload, family=measured.bench_workload(r.name).family,
                              unit=r.unit, measured=r.measured, predicted=None if report.tiny else r.predicted,
                              batch=r.batch or 1, when=report.when, instance=instance or "", host=host, cluster=cluster,
                              versions={k: str(v) for k, v in report.versions.items() if v is not None},
                              tiny=report.tiny, gpus=world, nodes=nodes)
            for r in report.rows if r.measured and (report.tiny or (r.predicted and report.gpu))]


def record(report: BenchReport, instance: str | None = None) -> dict:
    """The rows kept in the user's measurements (``perf.measured``), with their provenance."""
    return _keep(_rows(report, instance, socket.gethostname()))


def _keep(rows: list[measured.Measured]) -> dict:
    """``rows`` kept in the team's store in team mode (every user's compare reads them there), else in the user's
    measurements file; a row that would not read back (measured.Measured.from_dict: a rate beyond its bounds against
    its prediction, a throttled GPU's) is left out and named in ``left_out``, the others kept."""
    if not rows:
        raise GpufleetError("nothing to record: no benchmark has both a measurement and a prediction",
                            "record a GPU the catalog knows (--gpu names it)")
    kept, left_out = [], []
    for r in rows:
        try:
            measured.Measured.from_dict(asdict(r))  # what is written reads back
            kept.append(r)
        except ValueError as e:
            left_out.append(f"{r.host}: {e}")  # the error names the GPU and the workload
    if not kept:
        raise GpufleetError(f"nothing recorded: no row can be kept ({'; '.join(left_out)})",
                            "a rate this far from the model's is a fault to find first (the flag's suggestion), "
                            "not a GPU's speed to keep")
    store = team.current()
    if store is None:
        where = str(measured.add(kept))
    else:
        where = f"{store.url}/{measurements.share(store, kept)}"
    return {"path": where, "rows": len(kept), "tiny": sum(1 for r in kept if r.tiny), "left_out": left_out}


def recorded_rows(skipped: dict[str, str] | None = None) -> list[measured.Measured]:
    """The measured layer as this user sees it: their own file's rows, and in team mode the team's (an object of
    the store that is no recording is left out, its key and why in ``skipped``)."""
    try:
        store = team.current()
        shared = measurements.read(store, skipped) if store is not None else []
    except StoreError as e:  # compare still answers from the shipped fit and the user's own rows, and says why
        if skipped is not None:
            skipped["the team store"] = f"the team's measured rows could not be read: {e.message}"
        shared = []
    return measured.read() + shared


# Identical nodes (same GPUs, driver and software) run the same step within a few percent of each other; one
# this far below the median of its peers has a cause of its own (clocks or power, a hot or shared GPU, a PCIe link
# trained down)
SLOW_NODE = 0.10


@dataclass
class NodeBench:
    """One node of a cluster: its benchmarks judged against its pool's GPU, or why it has none."""

    node: str
    pool: str
    address: str
    report: BenchReport | None = None
    error: str | None = None
    hint: str | None = None

    def to_dict(self) -> dict:
        return {"node": self.node, "pool": self.pool, "address": self.address, "error": self.error, "hint": self.hint,
                **({"bench": self.report.to_dict()} if self.report else {})}


@dataclass
class ClusterBench:
    cluster: str
    tiny: bool
    nodes: list[NodeBench] = field(default_factory=list)
    spread: list[dict] = field(default_factory=list)  # per benchmark and GPU: min, median, max over the nodes
    job: BenchReport | None = None  # --nodes N: the one torchrun job over N nodes (each node: whether it ran its part)

    @property
    def failed(self) -> bool:
        if self.job is not None:
            return any(n.error for n in self.nodes) or any(r.measured is None for r in self.job.rows)
        return not self.nodes or any(n.report is None or any(r.measured is None for r in n.report.rows)
                                     for n in self.nodes)

    def to_dict(self) -> dict:
        return {"cluster": self.cluster, "tiny": self.tiny, "nodes": [n.to_dict() for n in self.nodes],
                "spread": self.spread, "job": self.job.to_dict() if self.job else None}


def bench_cluster(stack, cat: Catalog, names: list[str], *, tiny: bool, python: str, cluster: str | None = None,
                  registry=None, trust_new_hosts: bool = False, progress=None, launch: Launch | None = None,
                  wait_s: float | None = None) -> ClusterBench:
    """Every node of the stack's cluster runs ``names`` (each kind its own way, alone or under torchrun), judged
    against its pool's GPU; with ``launch.nodes`` > 1, one job over that many nodes, judged once. ``wait_s``: how long
    the cloud nodes' answers are waited for (None: their run's longest and a watch interval)."""
    reg = registry or team.registry()
    name = cluster or stack.name
    rec = recorded(reg, name)
    run = Run(stack, cat, name, reg, seams=Seams(wait_s=wait_s), trust_new_hosts=trust_new_hosts, progress=progress,
              record=rec, backend=rec.backend)
    the_plan = launch.plan(plan(names, tiny)) if launch else plan(names, tiny)
    pools = {p.name: p for p in stack.pools}
    out = ClusterBench(name, tiny)
    one_job = launch is not None and launch.nodes > 1
    for kind in kinds.used(stack):
        for b in kind.bench(run, the_plan, python, launch):
            gpu = None if tiny else gpu_of(pools[b.pool], cat)[0]  # a cloud pool names its instance type's
            if one_job:  # every node prints the job's whole answer: judged once
                if b.answer and out.job is None:
                    out.job = judge(b.answer, cat, gpu, tiny)
                out.nodes.append(NodeBench(b.node, b.pool, b.address, None, b.error, b.hint))
                continue
            out.nodes.append(NodeBench(b.node, b.pool, b.address, judge(b.answer, cat, gpu, tiny) if b.answer else None,
                                       b.error, b.hint))
    out.spread = [] if one_job else spread(out.nodes)
    return out


def spread(nodes: list[NodeBench]) -> list[dict]:
    """Per benchmark and GPU, the nodes' measurements (min, median, max); a node more than ``SLOW_NODE`` below the
    median of its peers is flagged in its row, with what it suggests."""
    groups: dict[tuple[str, str | None], list[tuple[NodeBench, Judged]]] = {}
    for n in nodes:
        for r in (n.report.rows if n.report else []):
            if r.measured:
                groups.setdefault((r.name, n.report.gpu), []).append((n, r))
    out = []
    for (name, gpu), got in groups.items():
        values = sorted(r.measured for _, r in got)
        slow = []
        for n, r in got:
            # each node against its peers: the median of all would hold the slow one's own rate in it (two nodes
            # 15% apart: 8% below their median, never flagged)
            peers = statistics.median([p.measured for m, p in got if m is not n]) if len(got) > 1 else None
            if peers and r.measured < peers * (1 - SLOW_NODE):
                slow.append(n.node)
                r.flagged = True
                r.suggests = (f"{1 - r.measured / peers:.0%} below the median of its {len(got) - 1} peer(s): a slow "
                              "node (clocks or power, another process on its GPU, a PCIe link trained down; "
                              f"gpufleet verify --node {n.node})")
        out.append({"benchmark": name, "gpu": gpu, "nodes": len(got), "min": values[0],
                    "median": statistics.median(values), "max": values[-1], "spread": values[-1] / values[0] - 1,
                    "slow": slow})
    return out


def record_cluster(result: ClusterBench, instance: str | None = None, instance_types: dict | None = None) -> dict:
    """Every node's rows kept in the user's measurements, each with its cluster, node and instance type: its pool's
    (``instance_types``, pool -> type), else ``instance`` (a rack host's, from the command line); a job over several
    nodes: its rows once, from its first node."""
    def of(n: NodeBench) -> str | None:
        return (instance_types or {}).get(n.pool) or instance

    if result.job is not None:
        first = result.nodes[0]
        return _keep(_rows(result.job, of(first), first.node, result.cluster))
    return _keep([m for n in result.nodes if n.report for m in _rows(n.report, of(n), n.node, result.cluster)])
