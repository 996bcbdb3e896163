"""A decoder LLM's training step under a layout (``perf.parallel``), and the layout practice would pick.

Per optimizer step of ``G`` tokens (the global batch) on ``n`` GPUs, each GPU:

* **computes** ``G / n`` tokens' worth of the model (training FLOPs per token over the GPU's BF16
  peak at the fitted efficiency of its generation), slower as tensor parallelism narrows the
  matrix products (``1 + tp_width * tp / d`` against ``1 + tp_width / d``: a GEMM ``tp_width``
  columns narrower loses about what it would at that width) and faster with FP8 by the measured
  end-to-end gain ``fp8_gain`` (Transformer Engine: about 1.2-1.4x, not the 2x of peak); full
  recomputation adds the blocks' forward pass (not the output layer's or the loss's); a pipeline waits
  for its slowest stage, the last, which also holds the output layer;
* waits for the **pipeline bubble**: ``(pp - 1) / (vp * m)`` of the compute with ``m``
  micro-batches per step (the interleaved 1F1B schedule, Narayanan et al. 2021);
* moves **tensor- and context-parallel** traffic over NVLink (sequence parallelism: four
  all-gathers and four reduce-scatters of the layer's activations per layer; ring attention:
  K and V around the context group, and their gradients back), of which ``tp_exposed`` is not
  hidden behind the matrix products, and the pipeline's stage-to-stage activations over the network;
* exchanges **gradients** among its data-parallel ranks: ZeRO-1 reduce-scatters gradients and
  all-gathers weights once per step, hidden behind the last micro-batch's backward and the
  first one's forward (``overlap`` of them); FSDP gathers weights for every micro-batch's forward
  and backward, hidden behind that micro-batch; HSDP does that inside its shard group and
  all-reduces its shard across the replicas once per step.

Collectives that leave the node share the node's network: a group with ``k`` GPUs on each node
moves ``bytes * gpus_per_node / k`` through the node's NICs per GPU's ``bytes`` (NCCL's rings run
one per NIC; a group spread one GPU per node uses one NIC of many).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpufleet.perf import parallel
from gpufleet.perf.parallel import Layout

DEFAULT_GLOBAL_BATCH = 4 * 2**20  # tokens per step: Llama 2 and 3 pre-trained with 4M-token batches (their papers)
MICRO_BATCHES = (8, 4, 2, 1)  # sequences per micro-batch an FSDP run tries, largest first
BUCKET_BYTES = 25 * 2**20  # PyTorch DDP bucket_cap_mb=25 (Megatron's too): one latency per bucket per hop
NVLINK_ALPHA_S = 2e-6  # NCCL's per-hop latency inside a node is microseconds (NCCL docs, tuning)


@dataclass(frozen=True)
class Step:
    layout: Layout
    seconds: float
    compute_s: float  # the GPU's own work, bubble and stage imbalance excluded
    bubble_s: float
    exposed_comm_s: float
    comm_s: float
    micro_seqs: int


@dataclass(frozen=True)
class TokenTime:
    """Seconds a GPU spends on one token of the whole model, unsplit (perf.model's ``_llm_token_time``)."""

    seconds: float
    math: float  # of which the weights' matrix products: tensor parallelism narrows them, FP8 speeds them up
    mem: float  # of which memory traffic
    recompute_math: float  # what full recomputation adds: the blocks' weights' forward
    recompute_other: float  # and their attention forward and activations' forward traffic


@dataclass(frozen=True)
class Links:
    nvlink: float  # bytes/s a GPU moves to another of its NVLink domain
    node: float  # bytes/s through a node's NICs, all of them
    alpha_s: float  # latency per hop between nodes
    gpus_per_node: int

    def group_time(self, volume: float, size: int, stride: int, collectives: float = 1.0) -> float:
        """Seconds for a collective group of ``size`` GPUs ``stride`` apart (Megatron's rank order:
        tensor, context, data, pipeline) to move ``volume`` bytes per GPU."""
        if size <= 1 or volume <= 0:
            return 0.0
        g = self.gpus_per_node
        if size * stride <= g:
            return volume / self.nvlink + collectives * 2 * (size - 1) * NVLINK_ALPHA_S
        k = max(1, min(size, g // stride)) if stride <= g else 1  # the group's GPUs on one node
        across = size // k
        inter = volume * g / k / self.node
        hops = 2 * math.ceil(math.log2(max(2, across)))
        return max(inter, volume / self.nvlink) + collectives * hops * self.alpha_s


def step(w, lay: Layout, *, tokens: float, token: TokenTime, links: Links, p, fp8: bool,
         micro_seqs: int, jitter: float) -> Step:
    """One optimizer step of ``tokens`` under ``lay``; ``token`` the GPU's seconds per token of the whole
    model unsplit, ``p`` the fitted parameters."""
    n, L, d = lay.gpus, max(1, w.layers), max(1, w.d_model)
    seq = max(1, w.seq_len)
    replica_tokens = tokens / lay.dp
    m = max(1, round(replica_tokens / (micro_seqs * seq)))
    narrow = (1 + p.tp_width * lay.tp / d) / (1 + p.tp_width / d)
    matmul = narrow / (p.fp8_gain if fp8 else 1.0)
    per_token = token.math * matmul + (token.seconds - token.math)
    if lay.recompute:
        per_token += token.recompute_math * matmul + token.recompute_other
    compute = tokens / n * per_token
    if lay.pp > 1:  # the last stage also runs the output layer: the pipeline waits for it
        per_layer = max(1.0, (w.params - 2.0 * (w.vocab or 0) * d) / L)
        extra = (w.vocab or 0) * d / per_layer
        compute *= (L / lay.pp + extra) / ((L + extra) / lay.pp)
    bubble = compute * (lay.pp - 1) / (lay.vp * m)
    local = replica_tokens / lay.cp  # tokens a GPU's tensor group handles per step
    layers = L / lay.pp
    tp_bytes = 16.0 * d * (lay.tp - 1) / lay.tp * layers * local
    kv = d * (w.kv_heads or w.heads or 1) / (w.heads or 1)
    cp_bytes = 12.0 * kv / lay.tp * (lay.cp - 1) * layers * local
    t_inner = links.group_time(tp_bytes, lay.tp, 1) + links.group_time(cp_bytes, lay.cp, lay.tp)
    if lay.pp > 1:  # each micro-batch's activations forward and its gradients back, per virtual stage
        p2p = 2.0 * lay.vp * m * micro_seqs * seq / lay.cp * d * 2.0 / lay.tp
        stride = lay.tp * lay.cp * lay.dp
        t_inner += p2p * links.gpus_per_node / links.node if stride >= links.gpus_per_node else p2p / links.nvlink
    exposed = p.tp_exposed * t_inner
    comm = t_inner
    shard = 2.0 * w.params / (lay.tp * lay.pp)  # the bf16 weights (and gradients) of a GPU's model slice
    if lay.shard == "zero1":
        ranks = lay.dp * lay.cp
        t_dp = links.group_time(2.0 * (ranks - 1) / ranks * shard, ranks, lay.tp,
                                collectives=2 * math.ceil(shard / BUCKET_BYTES))
        exposed += max(0.0, t_dp - p.overlap * compute / m)
    elif lay.shard == "fsdp":  # sharded over the data- and context-parallel ranks (torchtitan's dp_shard x cp)
        ranks = lay.dp * lay.cp
        gather = links.group_time(2.0 * (ranks - 1) / ranks * shard, ranks, lay.tp, collectives=2 * L)
        scatter = links.group_time((ranks - 1) / ranks * shard, ranks, lay.tp, collectives=L)
        t_dp = m * gather + scatter
        exposed += m * max(0.0, gather - p.overlap * compute / m) + max(0.0, scatter - p.overlap * compute / m / 2)
    else:  # hsdp: FSDP inside the shard group, the shard's gradients all-reduced across replicas
        g = lay.shard_group
        gather = links.group_time(2.0 * (g - 1) / g * shard, g, lay.tp, collectives=2 * L)
        replicas = lay.dp // g
        reduce = links.group_time(2.0 * (replicas - 1) / replicas * shard / g, replicas, lay.tp * g,
                                  collectives=2 * math.ceil(shard / g / BUCKET_BYTES))
        t_dp = m * gather + reduce
        exposed += m * max(0.0, gather - p.overlap * compute / m) + max(0.0, reduce - p.overlap * compute / m)
    comm += t_dp
    straggle = 1.0 + jitter * math.sqrt(2.0 * math.log(n)) if n > 1 else 1.0
    return Step(lay, (compute + bubble + exposed) * straggle, compute, bubble, exposed, comm, micro_seqs)


def fits(w, lay: Layout, micro_seqs: int, usable: float, fp8: bool) -> bool:
    return parallel.memory_per_gpu(w, lay, micro_seqs, fp8) <= usable


def micro_choices(lay: Layout, tokens: float, seq: int) -> tuple[int, ...]:
    """Micro-batch sizes (sequences) to try: a pipeline or Megatron layout runs one sequence at a
    time (the bubble shrinks with more micro-batches); FSDP the largest that fits and that the
    batch allows (fewer micro-batches gather the weights fewer times)."""
    if lay.shard == "zero1":
        return (1,)
    most = max(1, int(tokens / lay.dp / seq))
    return tuple(b for b in MICRO_BATCHES if b <= most) or (1,)


@dataclass(frozen=True)
class Choice:
    best: Step | None
    runner_up: Step | None  # the fastest other layout


def choose(w, n: int, gpus_per_node: int, *, tokens: float, usable: float, fp8: bool, band: float, **kw) -> Choice:
    """The layout practice would pick: of those that fit and that the batch allows, the fastest,
    unless a layout with fewer parallel dimensions is within ``band`` (the model's own error) of it."""
    steps: list[Step] = []
    seq = max(1, w.seq_len)
    for lay in parallel.candidates(n, gpus_per_node, w):
        if tokens < lay.dp * seq:  # each data-parallel rank needs a whole sequence per step
            continue
        for b in micro_choices(lay, tokens, seq):
            if fits(w, lay, b, usable, fp8):
                steps.append(step(w, lay, tokens=tokens, micro_seqs=b, fp8=fp8, **kw))
                break
    if not steps:
        return Choice(None, None)
    fastest = min(steps, key=lambda s: s.seconds)
    close = [s for s in steps if s.seconds <= fastest.seconds * (1.0 + band)]
    best = min(close, key=lambda s: (s.layout.dims, s.seconds))
    others = [s for s in steps if s.layout.name != best.layout.name]
    runner = min(others, key=lambda s: s.seconds) if others else None
    return Choice(best, runner)
