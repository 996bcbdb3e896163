"""How a decoder LLM is split across GPUs, as it is trained in 2024-26, and what each split holds in memory.

The layouts (the names ``compare`` shows and ``--layout`` takes):

* ``fsdp``: fully sharded data parallelism (PyTorch FSDP2 / ZeRO-3) over every data-parallel GPU,
  as torchtitan and llm-foundry train models that fit it; ``tp2 fsdp`` adds tensor parallelism
  inside the node (torchtitan's 2D);
* ``hsdp<S>``: hybrid sharding, the model sharded over ``S`` GPUs of a node and replicated across
  nodes (only the replicas' gradient all-reduce crosses the network);
* ``tp<T> pp<P> cp<C> vp<V> dp<D>``: Megatron-LM / NeMo: tensor parallelism with sequence
  parallelism inside an NVLink domain, pipeline stages (``vp``: the interleaved schedule's virtual
  stages per GPU), context parallelism for long sequences, and data parallelism with the
  distributed optimizer (ZeRO-1: weights and gradients kept, Adam state sharded);
* ``+recompute``: full activation recomputation (the blocks' forward again: about a third more
  compute). Without it, attention
  is recomputed anyway by FlashAttention, which never stores the score matrix.

Memory per GPU (bytes), bf16 training with fp32 master weights and Adam:

* model state: FSDP 16 per parameter over the shard group; ZeRO-1 2 (bf16 weights) + 2 (bf16
  gradient buffer: Megatron-Core's ``grad_reduce_in_fp32`` is off by default) per parameter of the
  GPU's tensor x pipeline shard, and 12 (master weights and two moments) spread over the data- and
  context-parallel ranks; FP8 keeps one more byte per parameter (the FP8 weight copy);
* activations per token and layer, FlashAttention and sequence parallelism (each divided by ``tp``):
  the attention block keeps its input, the norm's output, Q, K, V and the attention output
  (4 d + 2 d_kv values), the MLP its input, the norm's output and the up/gate projections and
  activation (2 d + 3 f gated, 2 d + 2 f not); 2 bytes each (Korthikanti et al. 2022 without the
  5 a s score term, which FlashAttention does not store); with full recomputation only each
  layer's input (2 d bytes) plus one layer's working set;
* micro-batches in flight: a pipeline's first stage holds ``pp`` of them (1F1B schedule);
* logits: the last stage holds one micro-batch's logits, bf16 plus fp32 for the loss (6 V bytes a token).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from gpufleet.errors import InputError

MEMORY_USABLE = 0.85  # of the GPU's memory: the CUDA context, NCCL buffers and fragmentation take the rest
MIN_WIDTH_PER_TP = 1024  # d_model / tp: below this the split matrix products starve the GPU
MIN_LAYERS_PER_STAGE = 2  # (Narayanan et al. 2021, table 1: tp 1-8 as d grows from 2304 to 25600)
LAYERS_PER_VIRTUAL_STAGE = 4  # the interleaved schedule's chunk: NeMo's Llama 3 70B recipe runs pp4 vp5 on 80 layers
MIN_CP_TOKENS = 8192  # context parallelism is for long sequences: each rank keeps at least 8k tokens of one
MAX_TP = 8  # tensor parallelism stays inside an 8-GPU NVLink domain in every published recipe


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    cp: int = 1
    dp: int = 1  # data-parallel ranks (sharded or not)
    shard: str = "zero1"  # fsdp | hsdp | zero1 (Megatron's distributed optimizer)
    vp: int = 1
    recompute: bool = False
    shard_group: int = 0  # hsdp: the GPUs one copy of the model is sharded over

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def dims(self) -> int:
        """How many ways the model is split beyond plain data parallelism: practitioners take the
        layout with fewer when two are about as fast."""
        return (self.tp > 1) + (self.pp > 1) + (self.cp > 1) + (self.shard == "hsdp") + self.recompute

    @property
    def name(self) -> str:
        parts = [f"tp{self.tp}"] if self.tp > 1 else []
        if self.shard == "fsdp":
            parts += ["fsdp"] + [f"cp{self.cp}"] * (self.cp > 1) + [f"dp{self.dp}"]
        elif self.shard == "hsdp":
            parts += [f"hsdp{self.shard_group}", f"dp{self.dp}"]
        else:
            parts += [f"tp{self.tp}"] if self.tp == 1 and (self.pp > 1 or self.cp > 1) else []
            parts += [f"pp{self.pp}"] * (self.pp > 1) + [f"cp{self.cp}"] * (self.cp > 1) + [f"vp{self.vp}"] * (self.vp > 1)
            parts.append(f"dp{self.dp}")
        return " ".join(parts) + (" +recompute" if self.recompute else "")


_TOKEN = re.compile(r"^(tp|pp|cp|dp|vp|hsdp)(\d+)$|^(fsdp|hsdp|zero1|ddp|recompute|\+recompute)$")


def read(text: str) -> tuple[dict[str, int], str, bool]:
    """The degrees, sharding and recomputation a layout names, checked for spelling only."""
    got: dict[str, int] = {}
    shard, recompute = "zero1", False
    for tok in text.lower().replace(",", " ").split():
        m = _TOKEN.match(tok)
        if not m:
            raise InputError(f"layout {text!r}: {tok!r} is not understood",
                             "write e.g. 'tp4 pp2 dp8', 'fsdp', 'tp2 fsdp', 'hsdp8' or 'tp8 pp4 vp5 +recompute'")
        if m.group(1) == "hsdp":
            shard, got["hsdp"] = "hsdp", int(m.group(2))
        elif m.group(1):
            got[m.group(1)] = int(m.group(2))
        elif m.group(3) in ("recompute", "+recompute"):
            recompute = True
        elif m.group(3) in ("fsdp", "hsdp"):
            shard = m.group(3)
    if not got and shard == "zero1" and not text.strip():
        raise InputError("the layout is empty", "write e.g. 'tp4 pp2 dp8' or 'fsdp'")
    if min(got.values(), default=1) < 1:
        raise InputError(f"layout {text!r}: every degree is at least 1")
    if shard != "zero1" and (got.get("pp", 1) > 1 or (shard == "hsdp" and got.get("cp", 1) > 1)):
        raise InputError(f"layout {text!r}: FSDP is modelled with tensor and context parallelism, HSDP with tensor "
                         "parallelism only", "use tp/pp/cp/dp (Megatron's distributed optimizer) for pipelines")
    if got.get("vp", 1) > 1 and got.get("pp", 1) == 1:
        raise InputError(f"layout {text!r}: vp{got['vp']} (the interleaved schedule's virtual stages) needs a pipeline",
                         f"add pp2 or more (e.g. 'pp2 vp{got['vp']}'), or leave out vp")
    return got, shard, recompute


def check(text: str, w) -> None:
    """That the layout ``text`` can split the decoder ``w`` (its layers): InputError saying why not.

    Megatron-LM's own rules (megatron/training/arguments.py, ``validate_args``, and Megatron-Core's
    TransformerConfig, read 2026-11): a stage holds whole layers, so there are at most as many
    stages as layers; the interleaved schedule cuts the layers into pp x vp chunks of equal size,
    where the embedding and the loss may each count as one more layer
    (``account_for_embedding_in_pipeline_split``, ``account_for_loss_in_pipeline_split``: NeMo runs
    Llama 3.1 405B's 126 layers as 128 on pp8 vp8). A pp that divides none of them is taken as
    uneven stages (``decoder_first_pipeline_num_layers`` and ``..._last_...``): ``memory_per_gpu``
    holds the fullest stage's ceil(layers / pp) layers, ``llm.step`` spreads the compute evenly, as
    those settings are there to balance the stages."""
    got, _, _ = read(text)
    pp, vp, layers = got.get("pp", 1), got.get("vp", 1), max(1, w.layers)
    if pp > layers:
        raise InputError(f"layout {text!r}: pp{pp} is more pipeline stages than {w.name}'s {layers} layers",
                         f"a stage holds whole layers: pp{layers} at most, pp{max(1, layers // MIN_LAYERS_PER_STAGE)} "
                         f"for {MIN_LAYERS_PER_STAGE} layers a stage")
    if vp > 1 and not interleaves(layers, pp, vp):
        fitting = [v for v in range(2, 9) if interleaves(layers, pp, v)]
        raise InputError(f"layout {text!r}: the interleaved schedule cuts {w.name}'s layers into pp x vp = {pp * vp} "
                         f"chunks of equal size, and {layers} layers are not a multiple of {pp * vp} (nor with the "
                         "embedding and the loss counted as layers)",
                         f"with pp{pp}: vp{' or vp'.join(map(str, fitting))}" if fitting else "leave out vp")


def interleaves(layers: int, pp: int, vp: int) -> bool:
    """Whether ``layers`` (with the embedding, the loss or both counted as layers) cut into pp x vp
    equal chunks (``check``)."""
    return any((layers + extra) % (pp * vp) == 0 for extra in (0, 1, 2))


def parse(text: str, gpus: int, gpus_per_node: int, w=None) -> Layout:
    """A layout as written (``"tp4 pp2 dp8"``, ``"fsdp"``, ``"tp2 fsdp"``, ``"hsdp8"``, ``"tp8 pp4 vp5
    +recompute"``) for ``gpus`` GPUs (and the decoder ``w``, whose layers it must split: ``check``);
    an omitted ``dp`` is what the others leave."""
    if w is not None:
        check(text, w)
    got, shard, recompute = read(text)
    tp, pp, cp, vp = (got.get(k, 1) for k in ("tp", "pp", "cp", "vp"))
    inner = tp * pp * cp
    dp = got.get("dp", gpus // inner if gpus % inner == 0 else 0)
    if inner * dp != gpus:
        raise InputError(f"layout {text!r} is {inner * max(dp, 1)} GPUs (tp x pp x cp x dp); the cluster has {gpus}",
                         f"give a dp that makes {gpus}, or leave dp out")
    if tp > gpus_per_node:
        raise InputError(f"layout {text!r}: tp{tp} spans more than a node's {gpus_per_node} GPUs",
                         "tensor parallelism stays inside a node's NVLink domain")
    group = 0
    if shard == "hsdp":
        group = got.get("hsdp") or max(1, gpus_per_node // tp)
        if dp % group:
            raise InputError(f"layout {text!r}: {dp} data-parallel ranks do not split into shard groups of {group}")
    return Layout(tp, pp, cp, dp, shard, vp, recompute, group)


def _powers(limit: int):
    v = 1
    while v <= limit:
        yield v
        v *= 2


def candidates(n: int, gpus_per_node: int, w) -> list[Layout]:
    """Every layout practice would consider for ``n`` GPUs: FSDP (with tensor parallelism inside the
    node), hybrid sharding across nodes, and tensor x pipeline x context x data parallelism, each
    with and without full recomputation."""
    tps = [t for t in _powers(min(gpus_per_node, MAX_TP)) if t == 1 or w.d_model / t >= MIN_WIDTH_PER_TP]
    cps = [c for c in _powers(8) if c == 1 or w.seq_len // c >= MIN_CP_TOKENS]
    out = []
    for recompute in (False, True):
        for tp in tps:
            if n % tp:
                continue
            for cp in cps:
                if n % (tp * cp) == 0:
                    out.append(Layout(tp, 1, cp, n // (tp * cp), "fsdp", 1, recompute))
            group = gpus_per_node // tp
            if n > gpus_per_node and group > 1:
                out.append(Layout(tp, 1, 1, n // tp, "hsdp", 1, recompute, group))
            for cp in cps:
                for pp in _powers(max(1, w.layers // MIN_LAYERS_PER_STAGE)):
                    inner = tp * pp * cp
                    if inner > n or n % inner:
                        continue
                    vp = virtual_stages(w.layers, pp)
                    out.append(Layout(tp, pp, cp, n // inner, "zero1", vp, recompute))
    return out


def virtual_stages(layers: int, pp: int) -> int:
    """The interleaved schedule's virtual stages per GPU: chunks of about four layers, the most (up
    to 8) that cut the layers into pp x vp equal chunks (``interleaves``); 1 where none does."""
    if pp <= 1:
        return 1
    most = max(1, min(8, layers // (pp * LAYERS_PER_VIRTUAL_STAGE)))
    return next(v for v in range(most, 0, -1) if v == 1 or interleaves(layers, pp, v))


def activation_bytes(w) -> float:
    """Bytes one token keeps per layer for the backward pass (bf16, FlashAttention), before tensor parallelism."""
    d = w.d_model
    kv = d * (w.kv_heads or w.heads or 1) / (w.heads or 1)
    ffn = w.ffn or 4 * d
    attention = 4 * d + 2 * kv
    mlp = 2 * d + (3 if w.gated else 2) * ffn
    return 2.0 * (attention + mlp)


def memory_per_gpu(w, lay: Layout, micro_seqs: int, fp8: bool = False) -> float:
    """Peak bytes a GPU of the layout holds with ``micro_seqs`` sequences per micro-batch."""
    P, L, d = w.params, max(1, w.layers), w.d_model
    model_split = lay.tp * lay.pp
    if lay.shard == "fsdp":
        state = 16.0 * P / (lay.tp * lay.dp * lay.cp) + 2 * 2.0 * P / L / lay.tp  # + two layers gathered (prefetch)
    elif lay.shard == "hsdp":
        state = 16.0 * P / (lay.tp * lay.shard_group) + 2 * 2.0 * P / L / lay.tp
    else:
        state = 4.0 * P / model_split + 12.0 * P / (model_split * lay.dp * lay.cp)
    if fp8:
        state += P / model_split
    tokens = micro_seqs * w.seq_len / lay.cp
    layers = math.ceil(L / lay.pp)
    per_token = activation_bytes(w) / lay.tp
    in_flight = lay.pp
    if lay.recompute:
        acts = tokens * (layers * 2.0 * d / lay.tp * in_flight + per_token)
    else:
        acts = tokens * layers * per_token * in_flight
    logits = tokens * (w.vocab or 50000) * 6.0 / lay.tp
    return state + acts + logits
