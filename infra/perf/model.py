"""Analytical model of data-parallel training throughput.

Following the reasoning of HPE's Deep Learning Cookbook and the platform talks this
project grew from, a training step on ``n = gpus_per_node x nodes`` GPUs is:

* **GPU time per sample**: a roofline of math and memory traffic,
  ``t_gpu = (t_math^k + t_mem^k)^(1/k)`` with
  ``t_math = train_FLOPs / (peak(precision) * u)`` (``u`` = achievable fraction of peak:
  one value for tensor-core math, one for plain FP32 units) and
  ``t_mem = (train_FLOPs / I_w) * (bytes_per_element / 2) / HBM_bandwidth``, where ``I_w``
  is the workload's effective arithmetic intensity (FLOPs per byte at 16-bit).
  Memory-bound CNNs at mixed precision are why an H100 is not 3x an A100 on ResNet-50.
  Activation checkpointing adds one forward pass (x4/3).
* **Gradient exchange** every ``batch_per_gpu`` samples: hierarchical ring all-reduce,
  ``2(g-1)/g * G / B_intra`` over NVLink (or PCIe) inside a node plus
  ``2(N-1)/N * G / B_net`` between N nodes (G = gradient bytes); FSDP moves 1.5x that per
  micro-batch; the parameter-server variant loads each server with N/P workers' traffic.
  A fraction ``overlap`` of it hides behind the backward pass (2/3 of the math).
* **Input pipeline**: CPU decode (images per vCPU-second) and storage read bandwidth
  (sample bytes); the slowest of GPU, CPU and storage sets the pace, as in the BOXX paper.

The free parameters (``u_tensor``, ``u_simt``, ``k``, ``overlap``, ``net_eff``,
``decode_per_vcpu``, and ``I_w`` per workload with published data) are *fitted* to the
published measurements in ``data/measurements.csv`` by :mod:`gpufleet.perf.calibration`
and stored in ``data/fitted.json``; nothing here is tuned by hand.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from importlib import resources

from gpufleet.perf.workloads import Workload

PCIE_GBS = {3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}  # effective host<->GPU GB/s per x16 link, one direction
TENSOR_ARCHS = {"volta", "turing", "ampere", "ada", "hopper", "blackwell"}
STATE_BYTES_PER_PARAM = 16.0  # mixed-precision Adam: weights, grads, fp32 master, 2 moments


@dataclass
class Params:
    u_tensor: float = 0.5
    u_simt: float = 0.6
    k: float = 2.0
    overlap: float = 0.5
    net_eff: float = 0.7
    decode_per_vcpu: float = 100.0
    intensity: dict[str, float] = field(default_factory=dict)  # workload or family -> FLOPs/byte

    def intensity_for(self, w: Workload) -> float:
        return self.intensity.get(w.name) or self.intensity.get(f"family:{w.family}") or 100.0

    def to_vector(self, names: list[str]) -> list[float]:
        return [math.log(self.intensity[n[2:]] if n.startswith("I:") else getattr(self, n)) for n in names]

    @classmethod
    def from_vector(cls, names: list[str], vec: list[float], base: "Params") -> "Params":
        p = Params(**{k: getattr(base, k) for k in ("u_tensor", "u_simt", "k", "overlap", "net_eff", "decode_per_vcpu")},
                   intensity=dict(base.intensity))
        for n, v in zip(names, vec):
            if n.startswith("I:"):
                p.intensity[n[2:]] = math.exp(v)
            else:
                setattr(p, n, math.exp(v))
        return p


@functools.lru_cache(maxsize=1)
def fitted_params() -> Params:
    raw = json.loads(resources.files("gpufleet.perf").joinpath("data", "fitted.json").read_text(encoding="utf-8"))
    return Params(**raw["params"])


@dataclass(frozen=True)
class Scenario:
    workload: Workload
    gpu: object  # catalog.Gpu
    gpus_per_node: int = 1
    nodes: int = 1
    precision: str = "mixed"  # mixed | fp32 | tf32 | fp16 | bf16 | fp8
    batch_per_gpu: int | None = None
    network_gbps: float = 10.0  # per node, between nodes
    vcpus: int = 8  # per node
    storage_mbps: float | None = None  # read bandwidth; None = not a limit
    storage_shared: bool = True  # shared file system (aggregate) vs per-node local disks
    node_memory_gib: float = 0.0  # page cache: a shard that fits is read from storage once
    comm: str = "auto"  # auto | allreduce | fsdp | ps
    ps_shards: int | None = None
    activation_checkpointing: bool = False
    synthetic_data: bool = False  # benchmarks on synthetic data skip the input pipeline
    nvlink: bool | None = None  # None: from the GPU spec


@dataclass
class Prediction:
    throughput: float  # samples/s for the whole cluster, steady state
    throughput_first_epoch: float
    per_gpu: float
    bottleneck: str  # compute | network | cpu | storage | memory-capacity
    gpu_bound: str  # math | memory-bw
    scaling_efficiency: float
    precision: str
    step_time_s: float
    breakdown: dict[str, float]
    feasible: bool = True
    reason: str = ""


def resolve_precision(gpu, precision: str) -> str:
    if precision == "mixed":
        for p in ("bf16", "fp16"):
            if p in gpu.tflops and gpu.arch in TENSOR_ARCHS:
                return p
        return "fp32"
    return gpu.effective_precision(precision)


def _gpu_time_per_sample(s: Scenario, p: Params, prec: str) -> tuple[float, float, float]:
    g, w = s.gpu, s.workload
    flops = w.train_flops * (4.0 / 3.0 if s.activation_checkpointing else 1.0)
    tensor = prec != "fp32" and g.arch in TENSOR_ARCHS
    u = p.u_tensor if tensor else p.u_simt
    t_math = flops / (g.tflops[prec] * 1e12 * u)
    elem_bytes = 4.0 if prec in ("fp32", "tf32") else 2.0
    t_mem = (flops / p.intensity_for(w)) * (elem_bytes / 2.0) / (g.memory_bw_gbs * 1e9)
    t = (t_math ** p.k + t_mem ** p.k) ** (1.0 / p.k)
    return t, t_math, t_mem


def _comm_time(s: Scenario, p: Params, prec: str, comm: str) -> float:
    n = s.gpus_per_node * s.nodes
    if n <= 1:
        return 0.0
    grad_bytes = s.workload.params * (4.0 if prec in ("fp32", "tf32") else 2.0)
    factor = 1.5 if comm == "fsdp" else 1.0
    g, N = s.gpus_per_node, s.nodes
    nvlink = s.nvlink if s.nvlink is not None else (s.gpu.nvlink_gbs > 0)
    t = 0.0
    if g > 1:
        b_intra = (s.gpu.nvlink_gbs / 2.0 if nvlink else PCIE_GBS.get(s.gpu.pcie_gen, 12.0)) * 1e9 * p.net_eff
        t += 2.0 * (g - 1) / g * grad_bytes * factor / b_intra
    if N > 1:
        b_net = s.network_gbps / 8.0 * 1e9 * p.net_eff
        vol = 2.0 * (N - 1) / N * grad_bytes * factor
        if comm == "ps":
            shards = s.ps_shards or N
            vol = max(vol, 2.0 * grad_bytes * N / shards * (N - 1) / N)
        t += vol / b_net
    return t


def predict(s: Scenario, p: Params | None = None, _single: bool = False) -> Prediction:
    p = p or fitted_params()
    w, g = s.workload, s.gpu
    prec = resolve_precision(g, s.precision)
    n = s.gpus_per_node * s.nodes
    comm = s.comm if s.comm != "auto" else ("fsdp" if w.family == "llm" else "allreduce")
    b = s.batch_per_gpu or w.batch_per_gpu

    # memory capacity: model state must fit (sharded across all GPUs under FSDP)
    state = w.params * STATE_BYTES_PER_PARAM / (n if comm == "fsdp" else 1)
    feasible, reason = True, ""
    if state > 0.85 * g.memory_gb * 1e9:
        need = math.ceil(w.params * STATE_BYTES_PER_PARAM / (0.85 * g.memory_gb * 1e9))
        feasible = False
        reason = (f"model state {state / 1e9:.0f} GB per GPU exceeds {g.name} memory ({g.memory_gb:g} GB); "
                  f"needs >= {need} GPUs with sharding")

    t_gpu, t_math, t_mem = _gpu_time_per_sample(s, p, prec)
    compute = b * t_gpu
    t_comm = _comm_time(s, p, prec, comm)
    exposed = max(0.0, t_comm - p.overlap * compute * (2.0 / 3.0))
    step = compute + exposed
    gpu_rate = n * b / step

    limits = {"gpu": gpu_rate}
    first_epoch_limits = dict(limits)
    if not s.synthetic_data:
        if w.decode:
            limits["cpu"] = s.nodes * s.vcpus * p.decode_per_vcpu
            first_epoch_limits["cpu"] = limits["cpu"]
        if s.storage_mbps:
            agg = s.storage_mbps * (1 if s.storage_shared else s.nodes)
            storage_rate = agg * 1e6 / w.sample_bytes
            first_epoch_limits["storage"] = storage_rate
            shard_gib = (w.dataset_samples or 0) * w.sample_bytes / s.nodes / 2**30
            cached = w.dataset_samples is not None and 0 < shard_gib < 0.5 * s.node_memory_gib
            if not cached:
                limits["storage"] = storage_rate
    rate = min(limits.values())
    first = min(first_epoch_limits.values())
    which = min(limits, key=limits.get)
    if which == "gpu":
        # the network is the bottleneck once waiting for it costs a fifth of the step
        bottleneck = "network" if exposed > 0.2 * step else "compute"
    else:
        bottleneck = which
    if not feasible:
        bottleneck = "memory-capacity"

    if _single or n == 1:
        eff = 1.0
    else:
        # the reference: one GPU with its fair share of its node's CPUs and disks (or of the shared store)
        share = n if s.storage_shared else s.gpus_per_node
        one = predict(Scenario(**{**s.__dict__, "gpus_per_node": 1, "nodes": 1,
                                  "vcpus": max(1, s.vcpus // max(1, s.gpus_per_node)),
                                  "storage_mbps": s.storage_mbps / share if s.storage_mbps else None}),
                      p, _single=True)
        eff = rate / (n * one.throughput) if one.throughput > 0 else 0.0
    return Prediction(
        throughput=rate, throughput_first_epoch=first, per_gpu=rate / n, bottleneck=bottleneck,
        gpu_bound="math" if t_math >= t_mem else "memory-bw", scaling_efficiency=min(eff, 1.0),
        precision=prec, step_time_s=n * b / rate,
        breakdown={"compute_s": compute, "comm_s": t_comm, "exposed_comm_s": exposed,
                   **{f"limit_{k}": v for k, v in limits.items()}},
        feasible=feasible, reason=reason,
    )
