"""How a decoder LLM is split across GPUs, what each split needs in memory and costs per step.

People train LLMs with fully sharded data parallelism (FSDP / ZeRO-3) while the model is small
for the cluster, and with tensor x pipeline x data parallelism (Megatron-LM) when it is large
(Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters"): tensor
parallelism inside a node over NVLink, pipeline stages across nodes, data parallelism over the
rest, activations recomputed when they do not fit. ``best`` tries each layout that fits memory
and keeps the fastest; the prediction says which.

Memory per GPU (bytes): model state 16 per parameter sharded over all GPUs under FSDP; under
3D, 2 (bf16 weights) + 2 (gradients) per parameter of the GPU's shard plus 12 (fp32 master and
Adam moments) spread over the data-parallel replicas (Megatron's distributed optimizer).
Activations per token and layer (Korthikanti et al. 2022, eq. 2): (10 + 24/t)·d + 5·a·s/t bytes
with tensor parallelism t, 2·d with full recomputation; a pipeline stage holds ``pp``
micro-batches in flight (1F1B schedule).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

MEMORY_USABLE = 0.85  # of the GPU's memory: the CUDA context, NCCL buffers and fragmentation take the rest
TP_ALLREDUCES_PER_LAYER = 4  # two in the forward pass (attention, MLP), two in the backward


@dataclass(frozen=True)
class Layout:
    tp: int
    pp: int
    dp: int
    fsdp: bool
    recompute: bool

    @property
    def name(self) -> str:
        base = f"fsdp x{self.dp}" if self.fsdp else f"tp{self.tp} pp{self.pp} dp{self.dp}"
        return base + (" +recompute" if self.recompute else "")


MIN_WIDTH_PER_TP = 1024  # d_model / tp: below this the split matrix products starve the GPU
MIN_LAYERS_PER_STAGE = 2  # (Narayanan et al. 2021, table 1: tp 1-8 as d grows from 2304 to 25600)


@functools.lru_cache(maxsize=4096)
def layouts(n: int, gpus_per_node: int, layers: int, d_model: int) -> tuple[Layout, ...]:
    """FSDP over all GPUs, then every tensor x pipeline split with tensor groups inside a node, as
    practice bounds them (each GPU keeps at least 1,024 of the model width and 2 layers)."""
    return tuple(_layouts(n, gpus_per_node, layers, d_model))


def _layouts(n: int, gpus_per_node: int, layers: int, d_model: int):
    for recompute in (False, True):
        yield Layout(1, 1, n, True, recompute)
        tp = 1
        while tp <= gpus_per_node and d_model / tp >= MIN_WIDTH_PER_TP:
            pp = 1
            while tp * pp <= n and layers / pp >= MIN_LAYERS_PER_STAGE:
                if n % (tp * pp) == 0 and gpus_per_node % tp == 0 and (tp, pp) != (1, 1):
                    yield Layout(tp, pp, n // (tp * pp), False, recompute)
                pp *= 2
            tp *= 2


def memory_per_gpu(w, lay: Layout, n: int, micro_tokens: int, micro_batches: int) -> float:
    if lay.fsdp:
        state = w.params * 16.0 / n
    else:
        state = w.params * (4.0 + 12.0 / lay.dp) / (lay.tp * lay.pp)
    heads = max(1, w.d_model // 64)
    if lay.recompute:
        per = 2.0 * w.d_model
    else:
        per = (10.0 + 24.0 / lay.tp) * w.d_model + 5.0 * heads * w.seq_len / lay.tp
    in_flight = min(lay.pp, micro_batches)
    return state + per * math.ceil(w.layers / lay.pp) * micro_tokens * in_flight


def extra_time(w, lay: Layout, *, compute_s: float, tokens_per_gpu: float, micro_batches: int,
               nvlink_bytes_s: float) -> float:
    """Seconds per step a 3D layout adds to the compute: tensor-parallel all-reduces (not hidden)
    and the pipeline bubble, (pp - 1) / m of the step with m micro-batches."""
    t = 0.0
    if lay.tp > 1:
        tokens = tokens_per_gpu * lay.tp  # the tensor group works on the same tokens
        per_layer = TP_ALLREDUCES_PER_LAYER * 2.0 * (lay.tp - 1) / lay.tp * tokens * w.d_model * 2.0
        t += per_layer * math.ceil(w.layers / lay.pp) / nvlink_bytes_s
    if lay.pp > 1:
        t += compute_s * (lay.pp - 1) / micro_batches
    return t
