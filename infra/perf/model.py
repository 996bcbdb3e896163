"""Analytical model of training throughput, physics first, with few fitted numbers.

A training step on ``n = gpus_per_node x nodes`` GPUs is:

* **GPU time per sample**: math plus memory traffic, ``t_gpu = t_math + t_mem`` (training runs
  math-bound matrix kernels and memory-bound normalisation/activation kernels one after the
  other: their times add; a fitted roofline exponent went to 1, its bound, when it was free),
  with ``t_math = train_FLOPs / (peak(precision) * u)``
  (``u``: achievable fraction of peak, one value per tensor-core generation, Volta/Turing,
  Ampere/Ada, Hopper/Blackwell, and for plain FP32 units one for Kepler and one for Pascal and
  later; a CNN's FLOPs are weighted per layer by ``1 + conv_width / w``, ``w`` the narrow side of the
  layer's implicit GEMM, so many narrow convolutions run further below peak than a few wide ones)
  and ``t_mem`` the bytes a sample
  moves through GPU memory over its bandwidth: its activations (elements from the
  architecture, ``perf.architecture``, times ``act_passes``: the reads and writes of forward,
  batch norm/activation and backward, one value for CNNs, one for encoders and one for decoder LLMs) plus its
  share of the weights, gradients and optimizer state read and written once per step.
  Activation checkpointing adds one forward pass.
* **Gradient exchange** (alpha-beta): per gradient bucket (25 MB, PyTorch DDP's default) a
  latency per hop, plus bytes over bandwidth: a ring inside the node over NVLink (or PCIe), and
  between nodes the cheaper of NCCL's ring (2(N-1) hops) and tree (2 log2 N hops) over the
  node's network at ``net_eff`` of line rate; FSDP moves 1.5x an all-reduce's bytes; a
  parameter server loads each server link with N/P workers' push and pull. A fraction
  ``overlap`` of the exchange hides behind the backward pass (2/3 of the math), never the last
  bucket's. Synchronous steps wait for the slowest GPU: ``x (1 + jitter * sqrt(2 ln n))``, the
  expected maximum of n normally distributed step times, so scaling curves bend with size.
* **Framework**: the same network runs at different speeds in different frameworks on the same
  GPUs (their kernels, fusion and graph overheads): NVIDIA's DeepLearningExamples publish
  BERT-large phase 1 on 8 A100 80GB with mixed precision at 4,553 sequences/s in PyTorch, 3,804 in
  TensorFlow 2 and 5,541 in PaddlePaddle. GPU time is divided by one speed per framework, relative
  to PyTorch (``fw:<name>``, fitted like the rest; the ``mxnet`` rows are NVIDIA's MLPerf ResNet-50
  submissions, tuned beyond a framework's defaults, so its factor is what that tuning buys).
  ``compare`` predicts PyTorch unless told otherwise.
* **Padding**: a BERT sequence costs its full length unless the loader bins sequences by length
  (NVIDIA's LDDL, used by the PyTorch and PaddlePaddle BERT examples, pads each mini-batch only to
  its longest sequence); then phase 2 computes ``bin_fill`` of its 512 tokens. Padded, those
  published rows would run at 54-85% of the tensor cores' peak (TensorFlow's padded ones: 19-35%),
  and at 120% of a V100's FP32 peak.
* **Input pipeline**: CPU decode (images per vCPU-second; none when the data is synthetic or
  decoded on the GPU with DALI) and storage read bandwidth (sample bytes); the slowest of GPU,
  CPU and storage sets the pace, as in the BOXX paper.

Decoder LLMs take their own path (``_predict_llm``): a step of the global batch under the layout
practice would pick or the one pinned (``perf.parallel`` for layouts and memory, ``perf.llm`` for
the step), with the weights' matrix products (6 N FLOPs a token, N without an untied input embedding,
narrowed by tensor parallelism, sped up by FP8) apart from causal attention (FlashAttention's backward
recomputes its scores), the memory-bound kernels and the loss over the vocabulary's logits.

The free parameters are fitted to the published measurements in ``data/measurements.csv`` and
``data/llm_runs.csv`` by :mod:`gpufleet.perf.calibration`, pulled toward the priors below, and stored in
``data/fitted.json``; nothing here is tuned by hand.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from importlib import resources

from gpufleet.errors import InputError
from gpufleet.perf import llm, parallel
from gpufleet.perf.llm import BUCKET_BYTES, NVLINK_ALPHA_S
from gpufleet.perf.workloads import Workload

PCIE_GBS = {3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}  # effective host<->GPU GB/s per x16 link, one direction
TENSOR_ARCHS = {"volta", "turing", "ampere", "ada", "hopper", "blackwell"}
GENERATION = {"volta": "volta", "turing": "volta", "ampere": "ampere", "ada": "ampere", "hopper": "hopper",
              "blackwell": "blackwell"}
STATE_BYTES_PER_PARAM = 16.0  # mixed-precision Adam: weights, grads, fp32 master, 2 moments
OPTIMIZER_TRAFFIC = 16.0  # bytes per parameter the optimizer step reads and writes (fp32 master + moments)
# FlashAttention's backward recomputes the scores: 2.5x the forward's FLOPs, 3.5x for both where the 3x rule
# of the weights says 3 (flash-attention's benchmarks/benchmark_flash_attention.py, flops(); Dao 2023). MFU
# still counts the model's 3x (Workload.train_flops), as PaLM's and torchtitan's do.
FLASH_FWD_BWD = 3.5
# bytes per vocabulary entry a token's loss moves through memory beside the output layer's GEMM, as PyTorch
# computes cross_entropy on fp32 logits, eager (torchtitan's loss; bench's under autocast, which runs
# log_softmax in fp32): the cast (read 2, write 4), log_softmax (4, 4), nll_loss's dense gradient (4),
# log_softmax's backward (4, 4, 4), the cast back (4, 2); a floor: a 128k-entry row too long for one pass of
# the softmax kernel is read again (~48). Megatron's unfused vocab-parallel loss moves ~52, Transformer
# Engine's fused one (Megatron-Bridge) ~10-22. A 128k vocabulary moves 4.6 MB a token, more than llm:8b's
# activations pass once (issue 52, review rev52 11)
LOSS_BYTES_PER_LOGIT = 36.0

# name -> (prior, spread of the prior in log space, (lower, upper)); the fit is pulled toward the
# prior and a value that ends at a bound is reported (calibration.warnings)
PRIORS: dict[str, tuple[float, float, tuple[float, float]]] = {
    # MLPerf-class training reaches 35-55% of dense tensor peak (MFU reported by NVIDIA, MosaicML)
    "u_tensor:volta": (0.45, 0.5, (0.1, 0.95)),
    "u_tensor:ampere": (0.5, 0.5, (0.1, 0.95)),
    "u_tensor:hopper": (0.45, 0.5, (0.1, 0.95)),
    # Blackwell's BF16 peak is 2.3x Hopper's; its published LLM rows reach a lower share of it (issue 34:
    # B200 rows 17% below Hopper's efficiency)
    "u_tensor:blackwell": (0.4, 0.5, (0.1, 0.95)),
    # FP8 over BF16 on the weights' matrix products (attention, norms and the optimizer stay in BF16/FP32):
    # end to end, NVIDIA's and torchtitan's published pairs measure 1.16-1.36x, not the 2x of peak
    "fp8_gain": (1.4, 0.15, (1.0, 2.0)),
    # a GEMM whose width tensor parallelism cuts to d/tp loses about as one tp_width narrower would
    "tp_width": (256.0, 0.8, (16.0, 4096.0)),
    # the share of tensor/context-parallel traffic NOT hidden behind the matrix products (Megatron's TP
    # communication overlap and torchtitan's async TP hide most of it; ring attention overlaps its sends)
    "tp_exposed": (0.3, 1.0, (0.001, 1.0)),
    # FlashAttention reaches a lower share of peak than the weight GEMMs (FA2 ~50-70% on A100/H100,
    # Dao 2023; FA3 up to 75% on H100, Shah et al. 2024)
    "attn_eff": (0.7, 0.4, (0.2, 1.2)),
    # plain FP32 units: SGEMM reaches 70-90% of peak from Pascal on, whole networks less; Kepler
    # (the K80 of the 2017 TensorFlow benchmarks) needs instruction-level parallelism that
    # convolution kernels rarely have, and loses more
    "u_simt": (0.6, 0.4, (0.2, 0.95)),
    "u_simt:kepler": (0.4, 0.5, (0.05, 0.95)),
    # speed-up of stride-1 3x3 convolutions on FP32 units (Winograd F(2x2,3x3): at most 2.25x fewer
    # multiplications, Lavin & Gray 2016; less in practice: the transforms cost memory traffic)
    "winograd": (1.6, 0.3, (1.0, 2.25)),
    # a convolution is an implicit GEMM (cuDNN); one whose narrow side (output channels, or input channels x
    # kernel) is w runs at 1 / (1 + conv_width / w) of a wide one's speed: its tiles (64-128 wide) are part
    # empty and its K loop short, so GoogLeNet's and Inception's many 16-96-channel layers run far below peak
    # where VGG's 64-512-channel ones do not (issue 52); the same loss as tp_width's for a narrowed LLM GEMM
    "conv_width": (32.0, 0.8, (4.0, 512.0)),
    # memory passes per activation element: a CNN's count is its conv/pool outputs only, each also
    # read and written by batch norm and ReLU forward and backward (~15-25 passes). A decoder's count
    # (Korthikanti) is what the backward keeps; the traffic beside the GEMMs' and FlashAttention's own
    # operands (which run under their math), per Llama layer and token: ~110 bytes per d fused (Transformer
    # Engine, torch.compile), ~3 passes of the kept activations; ~345 eager (an RMSNorm as Llama's reference
    # and torchtitan's norms.py write it moves 36 bytes per element forward: the cast 2+4, pow 4+4, mean 4,
    # the scaling 4+4, type_as 4+2, the weight 2+2), ~10; ~13-15 with torchtitan's selective recomputation.
    # The rows mix both: 3-15 (the comment said ~2-4 before, the stores alone; review rev52 11). An encoder of
    # DeepLearningExamples' era (BERT, no FlashAttention) keeps its seq x seq scores, softmax and dropout mask
    # (Korthikanti's 5 a s bytes), which scale, mask, softmax, dropout, the product with V and their backward
    # each read and write: ~10 passes on the scores, which outweigh the rest at 512 tokens (~5-12). One value
    # for both, fitted to both, took u_simt (through BERT's FP32 rows on V100) to its bound
    "act_passes:cnn": (16.0, 0.5, (4.0, 40.0)),
    "act_passes:transformer": (8.0, 0.5, (2.0, 24.0)),
    "act_passes:llm": (5.0, 0.5, (1.5, 20.0)),
    "net_eff": (0.8, 0.2, (0.5, 0.95)),  # NCCL bus bandwidth reaches ~70-85% of line rate
    "nvl_eff": (0.85, 0.25, (0.5, 1.2)),  # above 1: NVSwitch in-network reduction (NVLS) on Hopper
    "alpha_us": (15.0, 0.8, (2.0, 200.0)),  # per hop between nodes, IB/RoCE to TCP
    "jitter": (0.02, 1.0, (0.001, 0.2)),
    "overlap": (0.7, 0.4, (0.05, 1.0)),
    "decode_per_vcpu": (150.0, 0.5, (40.0, 600.0)),  # JPEG decode + augmentation per core, images/s
    # LDDL's sequence binning pads a mini-batch only to its longest sequence (NVIDIA LDDL README);
    # BERT's phase-2 sequences are often shorter than 512, so a binned loader computes this share
    # of the 512 tokens (phase 1's 128 are nearly always filled)
    "bin_fill": (0.7, 0.3, (0.3, 1.0)),
    # speed of a framework relative to PyTorch on the same network and GPUs (the module docstring)
    "fw:tf1": (1.0, 0.3, (0.4, 1.5)),
    "fw:tf2": (1.0, 0.3, (0.4, 1.5)),
    "fw:paddle": (1.0, 0.3, (0.4, 1.5)),
    "fw:mxnet": (1.0, 0.3, (0.4, 1.5)),
    # NVIDIA's Megatron-Core / NeMo stack (Transformer Engine's fused kernels, communication overlap
    # tuned per system) against PyTorch-native trainers (torchtitan, llm-foundry, fms-fsdp)
    "fw:megatron": (1.0, 0.3, (0.5, 2.0)),
}
NAMES = tuple(PRIORS)
ACT_PASSES = {"cnn": "act_passes:cnn", "dense": "act_passes:cnn", "transformer": "act_passes:transformer",
              "llm": "act_passes:llm"}  # a family's memory passes (PRIORS)
FRAMEWORKS = ("pytorch",) + tuple(n.split(":", 1)[1] for n in NAMES if n.startswith("fw:"))


@dataclass
class Params:
    values: dict[str, float] = field(default_factory=lambda: {k: v[0] for k, v in PRIORS.items()})

    def __getattr__(self, name: str) -> float:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def u(self, arch: str, tensor: bool) -> float:
        if tensor:
            return self.values[f"u_tensor:{GENERATION[arch]}"]
        return self.values.get(f"u_simt:{arch}", self.values["u_simt"])

    def to_vector(self, names=NAMES) -> list[float]:
        return [math.log(self.values[n]) for n in names]

    @classmethod
    def from_vector(cls, vec: list[float], names=NAMES, base: "Params | None" = None) -> "Params":
        values = dict((base or cls()).values)
        values.update({n: math.exp(v) for n, v in zip(names, vec)})
        return cls(values)


@functools.lru_cache(maxsize=1)
def fitted_document() -> dict:
    """data/fitted.json: the parameters and the out-of-fold errors of the last calibration."""
    return json.loads(resources.files("gpufleet.perf").joinpath("data", "fitted.json").read_text(encoding="utf-8"))


def fitted_params() -> Params:
    return Params({**Params().values, **fitted_document()["params"]})


fitted_params.cache_clear = fitted_document.cache_clear  # type: ignore[attr-defined]


def error_band(family: str, multi_gpu: bool) -> float:
    """The model's typical relative error for a prediction like this one: the median out-of-fold
    |error| (each source's rows predicted by a fit without that source) of the published rows of
    the same family on one GPU or several, from the last calibration (fitted.json)."""
    oof = fitted_document().get("out_of_fold") or {}
    bands = oof.get("bands") or {}
    return bands.get(f"{family}:{'multi' if multi_gpu else 'single'}") or bands.get(family) or oof.get("median", 0.0)


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
    gpu_decode: bool = False  # images decoded on the GPU (DALI): no CPU limit
    nvlink: bool | None = None  # None: from the GPU spec
    framework: str = "pytorch"  # one of FRAMEWORKS
    sequence_binning: bool = False  # BERT phase 2 through a binning loader (LDDL): see bin_fill
    # decoder LLMs: a pinned layout ("tp4 pp2 dp8", "fsdp"; None: the one practice would pick, perf.llm),
    # the global batch in tokens per step (None: batch_per_gpu x GPUs, else 4M) and the micro-batch in sequences
    layout: str | None = None
    global_batch_tokens: float | None = None
    micro_batch: int | None = None
    # this GPU's speed on this family as the user measured it, relative to the model (perf.measured, from
    # `gpufleet bench --record`); 1: the shipped calibration alone
    measured_speed: float = 1.0


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
    layout: str = "data parallel"  # LLMs: the split chosen, e.g. "tp8 pp4 dp16" or "fsdp dp64"
    runner_up: str = ""  # LLMs: the fastest other layout and how it compares


def resolve_precision(gpu, precision: str) -> str:
    if precision == "mixed":
        for p in ("bf16", "fp16"):
            if p in gpu.tflops and gpu.arch in TENSOR_ARCHS:
                return p
        return "fp32"
    return gpu.effective_precision(precision)


def _gpu_time_per_sample(s: Scenario, p: Params, prec: str, batch: int) -> tuple[float, float, float]:
    g, w = s.gpu, s.workload
    extra = 4.0 / 3.0 if s.activation_checkpointing else 1.0
    tensor = prec != "fp32" and g.arch in TENSOR_ARCHS
    flops = w.train_flops
    if not tensor:  # cuDNN's Winograd 3x3 convolutions on FP32 units: fewer multiplications
        flops *= 1.0 - w.winograd_share + w.winograd_share / p.winograd
    if w.gemm_widths:  # many narrow layers run further below peak than a few wide ones of the same FLOPs
        flops *= sum(share * (1.0 + p.conv_width / width) for share, width in w.gemm_widths)
    t_math = flops * extra / (g.tflops[prec] * 1e12 * p.u(g.arch, tensor))
    elem = 4.0 if prec in ("fp32", "tf32") else 2.0
    passes = p.values[ACT_PASSES[w.family]]
    traffic = w.activations * elem * passes * extra + w.params * (3.0 * elem + OPTIMIZER_TRAFFIC) / batch
    t_mem = traffic / (g.memory_bw_gbs * 1e9)
    # the framework's speed relative to PyTorch; the share of a padded sequence a binning loader computes
    speed = _framework_speed(s, p)
    scale = (p.values["bin_fill"] if s.sequence_binning else 1.0) / speed
    return (t_math + t_mem) * scale, t_math * scale, t_mem * scale


def _framework_speed(s: Scenario, p: Params) -> float:
    """The speed of ``s``'s framework relative to PyTorch (``fw:<name>``), times the GPU's own measured speed
    relative to the model where the user recorded one."""
    return (1.0 if s.framework == "pytorch" else p.values[f"fw:{s.framework}"]) * s.measured_speed


def _intra_node_bytes_s(s: Scenario, p: Params) -> float:
    """One direction of a GPU's link to the others in its node: NVLink, or PCIe without it."""
    nvlink = s.nvlink if s.nvlink is not None else (s.gpu.nvlink_gbs > 0)
    if nvlink:
        return s.gpu.nvlink_gbs / 2.0 * p.nvl_eff * 1e9
    return PCIE_GBS.get(s.gpu.pcie_gen, 12.0) * p.net_eff * 1e9


def _comm_time(s: Scenario, p: Params, prec: str, comm: str) -> tuple[float, float]:
    """(seconds per step of gradient exchange, of which the last bucket's)."""
    n = s.gpus_per_node * s.nodes
    if n <= 1:
        return 0.0, 0.0
    # DDP with AMP keeps fp32 gradients; LLM trainers reduce bf16 ones
    grad = s.workload.params * (2.0 if s.workload.family == "llm" and prec not in ("fp32", "tf32") else 4.0)
    buckets = max(1, math.ceil(grad / BUCKET_BYTES))
    volume = 1.5 if comm == "fsdp" else 1.0
    g, N = s.gpus_per_node, s.nodes
    t = 0.0
    if g > 1:
        t += 2.0 * (g - 1) / g * grad * volume / _intra_node_bytes_s(s, p) + buckets * 2 * (g - 1) * NVLINK_ALPHA_S
    if N > 1:
        b_net = s.network_gbps / 8.0 * 1e9 * p.net_eff
        alpha = p.alpha_us * 1e-6
        if comm == "ps":
            shards = s.ps_shards or N
            t += 2.0 * grad * max(1.0, N / shards) / b_net + buckets * 2 * alpha
        else:
            hops = min(2 * (N - 1), 2 * math.ceil(math.log2(N)))  # NCCL picks the cheaper of ring and tree
            t += 2.0 * (N - 1) / N * grad * volume / b_net + buckets * hops * alpha
    return t, t / buckets


def predict(s: Scenario, p: Params | None = None, _single: bool = False, efficiency: bool = True) -> Prediction:
    """The steady-state throughput of ``s`` (``efficiency=False``: without the scaling efficiency,
    which needs a second prediction of one GPU; calibration only needs the throughput)."""
    p = p or fitted_params()
    w, g = s.workload, s.gpu
    prec = resolve_precision(g, s.precision)
    if w.family == "llm" and s.comm in ("auto", "fsdp"):  # as people train LLMs: perf.llm
        return _predict_llm(s, p, prec)
    n = s.gpus_per_node * s.nodes
    comm = s.comm if s.comm != "auto" else "allreduce"
    b = s.batch_per_gpu or w.batch_per_gpu

    # memory capacity: model state must fit (sharded across all GPUs under FSDP)
    state = w.params * STATE_BYTES_PER_PARAM / (n if comm == "fsdp" else 1)
    feasible, reason = True, ""
    if state > 0.85 * g.memory_gb * 1e9:
        need = math.ceil(w.params * STATE_BYTES_PER_PARAM / (0.85 * g.memory_gb * 1e9))
        feasible = False
        reason = (f"model state {state / 1e9:.1f} GB per GPU (weights, gradients and Adam moments, "
                  f"{STATE_BYTES_PER_PARAM:g} bytes a parameter) exceeds the {0.85 * g.memory_gb:.1f} GB usable of the "
                  f"{g.name}'s {g.memory_gb:g} GB (85%: the CUDA context and buffers take the rest); "
                  f"needs >= {need} GPUs with sharding")

    t_gpu, t_math, t_mem = _gpu_time_per_sample(s, p, prec, b)
    compute = b * t_gpu
    straggle = 1.0 + p.jitter * math.sqrt(2.0 * math.log(n)) if n > 1 else 1.0
    layout = "parameter server" if comm == "ps" else "data parallel"
    t_comm, last = _comm_time(s, p, prec, comm)
    exposed = max(last, t_comm - p.overlap * compute * (2.0 / 3.0)) if t_comm else 0.0
    step = (compute + exposed) * straggle
    gpu_rate = n * b / step
    limits = {"gpu": gpu_rate}
    first_epoch_limits = dict(limits)
    if not s.synthetic_data:
        if w.decode and not s.gpu_decode:
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

    if _single or n == 1 or not efficiency:
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
        feasible=feasible, reason=reason, layout=layout,
    )


def _predict_llm(s: Scenario, p: Params, prec: str) -> Prediction:
    """A decoder LLM's steady-state tokens/s under its pinned layout, or under the one practice would
    pick (perf.llm.choose); its scaling efficiency is the share of the step the GPUs compute."""
    w, g = s.workload, s.gpu
    n = s.gpus_per_node * s.nodes
    fp8 = prec == "fp8"
    tokens = s.global_batch_tokens or (s.batch_per_gpu * n if s.batch_per_gpu else llm.DEFAULT_GLOBAL_BATCH)
    token = _llm_token_time(s, p, resolve_precision(g, "mixed") if fp8 else prec, tokens)
    domain = _nvlink_domain(s)  # GPUs that reach each other over NVLink: a node, or a GB200 NVL72 rack's share
    links = llm.Links(_intra_node_bytes_s(s, p), s.network_gbps * domain / s.gpus_per_node / 8.0 * 1e9 * p.net_eff,
                      p.alpha_us * 1e-6, domain)
    usable = parallel.MEMORY_USABLE * g.memory_gb * 1e9
    kw = {"token": token, "links": links, "p": p, "jitter": p.jitter}
    pinned = s.layout or ("fsdp" if s.comm == "fsdp" else None)
    feasible, reason, runner = True, "", ""
    lay = None
    if pinned:
        try:
            lay = parallel.parse(pinned, n, domain, w)
        except InputError as e:  # a pinned layout this cluster cannot have (its GPU count, its node size)
            feasible, reason = False, str(e)
    if lay is not None:
        if s.activation_checkpointing and not lay.recompute:
            lay = parallel.Layout(**{**lay.__dict__, "recompute": True})
        sizes = (s.micro_batch,) if s.micro_batch else llm.micro_choices(lay, tokens, max(1, w.seq_len))
        fitting = next((b for b in sizes if llm.fits(w, lay, b, usable, fp8)), None)
        micro = fitting or sizes[-1]
        if fitting is None:
            need = parallel.memory_per_gpu(w, lay, micro, fp8)
            feasible, reason = False, (f"{lay.name} needs {need / 1e9:.0f} GB per GPU with {micro}-sequence "
                                       f"micro-batches; {usable / 1e9:.0f} GB usable of the {g.name}'s {g.memory_gb:g} GB")
        best = llm.step(w, lay, tokens=tokens, micro_seqs=micro, fp8=fp8, **kw)
    else:
        choice = llm.choose(w, n, domain, tokens=tokens, usable=usable, fp8=fp8,
                            band=error_band("llm", n > 1), **kw)
        best = choice.best
        if best is None:
            lay = parallel.Layout(1, 1, 1, n, "fsdp", 1, True)
            best = llm.step(w, lay, tokens=tokens, micro_seqs=1, fp8=fp8, **kw)
            need = parallel.memory_per_gpu(w, lay, 1, fp8)
            feasible, reason = False, reason or (
                f"no layout of {w.name} on {n} x {g.name} fits a {tokens / 2**20:.3g}M-token batch in memory (fully "
                f"sharded with recomputation needs {need / 1e9:.1f} GB per GPU; {usable / 1e9:.1f} GB usable of the "
                f"{g.name}'s {g.memory_gb:g} GB, 85%: the CUDA context and buffers take the rest)")
        elif choice.runner_up is not None:
            r = choice.runner_up
            x = r.seconds / best.seconds - 1
            runner = f"{r.layout.name}: {abs(x):.0%} {'slower' if x >= 0 else 'faster, with more parallel dimensions'}"
    rate = tokens / best.seconds
    return Prediction(
        throughput=rate, throughput_first_epoch=rate, per_gpu=rate / n,
        bottleneck="memory-capacity" if not feasible else "network" if best.exposed_comm_s > 0.2 * best.seconds
        else "compute", gpu_bound="math" if token.math >= token.mem else "memory-bw",
        scaling_efficiency=min(1.0, best.compute_s / best.seconds), precision=prec, step_time_s=best.seconds,
        breakdown={"compute_s": best.compute_s, "comm_s": best.comm_s, "exposed_comm_s": best.exposed_comm_s,
                   "bubble_s": best.bubble_s, "global_batch_tokens": tokens, "micro_batch": best.micro_seqs},
        feasible=feasible, reason=reason, layout=best.layout.name if lay is not None or not pinned else pinned,
        runner_up=runner)


def _llm_token_time(s: Scenario, p: Params, prec: str, tokens: float) -> llm.TokenTime:
    """The seconds a GPU spends on one token of a decoder LLM at ``prec``, unsplit, and their parts. The
    weight matrices cost 6 N FLOPs a token (N without an untied input embedding, a lookup); causal
    attention's forward 2 L d s (FlashAttention skips the masked half of a full one's 4 L d s) and its
    backward 2.5 times that (``FLASH_FWD_BWD``), at ``attn_eff`` of the matrix products' efficiency and in
    BF16 whatever the weights run in (FP8 training casts the linear layers only); the memory traffic is the
    activations' passes, the loss over the vocabulary's logits (``LOSS_BYTES_PER_LOGIT``) and the
    optimizer's pass over its weights, spread over the step's tokens. Full recomputation runs the blocks'
    forward again: their weights' 2 N (not the output layer's), attention's forward and the forward's third
    of the activations' traffic (not the loss, outside the blocks; review rev52 11: x4/3 of all of it had
    charged FlashAttention 4.67 forwards for its 4.5 and recomputed the loss)."""
    w, g = s.workload, s.gpu
    peak = g.tflops[prec] * 1e12 * p.u(g.arch, prec != "fp32" and g.arch in TENSOR_ARCHS)
    dense = 6.0 * w.matmul_params / peak
    attention_fwd = 2.0 * w.layers * w.d_model * w.seq_len / (peak * p.attn_eff)
    elem = 4.0 if prec in ("fp32", "tf32") else 2.0
    bandwidth = g.memory_bw_gbs * 1e9
    activations = w.activations * elem * p.values[ACT_PASSES["llm"]] / bandwidth
    t_mem = activations + (w.vocab * LOSS_BYTES_PER_LOGIT + w.params * OPTIMIZER_TRAFFIC / tokens) / bandwidth
    speed = _framework_speed(s, p)
    # a nominal size below its own table (llm:1m's 128k x 64) leaves its blocks nothing, not less than nothing
    blocks_fwd = 2.0 * max(0.0, w.matmul_params - w.vocab * w.d_model) / peak
    return llm.TokenTime(seconds=(dense + FLASH_FWD_BWD * attention_fwd + t_mem) / speed, math=dense / speed,
                         mem=t_mem / speed, recompute_math=blocks_fwd / speed,
                         recompute_other=(attention_fwd + activations / 3.0) / speed)


def _nvlink_domain(s: Scenario) -> int:
    """The GPUs of ``s`` one NVLink fabric joins: the node's, or (GB200 NVL72) the largest whole number of
    nodes within the GPU's domain that divides the cluster."""
    g, n = s.gpus_per_node, s.gpus_per_node * s.nodes
    if s.gpu.nvlink_domain <= g:
        return g
    nodes = max(k for k in range(1, s.gpu.nvlink_domain // g + 1) if s.nodes % k == 0)
    return g * nodes if n >= g * nodes else g
