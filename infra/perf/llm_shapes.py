"""The shape of ``llm:<size>``: a decoder that could exist, close to the published models of that size.

Each size takes the published model nearest to it (in log parameters) as its reference and keeps the
reference's design: head width, key/value heads, MLP ratio, vocabulary, tied embeddings and the
width-to-depth ratio. The width is a multiple of the head width times the key/value heads (so the
heads divide among the key/value heads, as grouped-query attention needs), and the depth is what
makes the parameters come to the size, scaled as the reference's own count is to its nominal size,
so that a published size gives back the published model (``llm:8b`` is Llama 3.1 8B's shape).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Reference:
    name: str
    nominal: float  # the size the model is named by
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    ffn: int  # SwiGLU width (three matrices)
    vocab: int
    tied: bool  # input and output embeddings shared

    @property
    def head(self) -> int:
        return self.d_model // self.heads


# Each row from the model's config.json on Hugging Face (hidden_size, num_hidden_layers, num_attention_heads,
# num_key_value_heads, intermediate_size, vocab_size, tie_word_embeddings), as published: Llama 3.1
# (meta-llama/Llama-3.1-8B, -70B, -405B, July 2024), Llama 3.2 (meta-llama/Llama-3.2-1B, -3B, September 2024),
# Qwen2.5 (Qwen/Qwen2.5-0.5B, -1.5B, -14B, -32B, September 2024), Mistral (mistralai/Mistral-7B-v0.3, May 2024;
# Mistral-Large-Instruct-2407, July 2024). One model per nominal size; Llama first where it has one.
REFERENCES = (
    Reference("Qwen2.5-0.5B", 0.5e9, 24, 896, 14, 2, 4864, 151936, True),
    Reference("Llama-3.2-1B", 1e9, 16, 2048, 32, 8, 8192, 128256, True),
    Reference("Qwen2.5-1.5B", 1.5e9, 28, 1536, 12, 2, 8960, 151936, True),
    Reference("Llama-3.2-3B", 3e9, 28, 3072, 24, 8, 8192, 128256, True),
    Reference("Mistral-7B-v0.3", 7e9, 32, 4096, 32, 8, 14336, 32768, False),
    Reference("Llama-3.1-8B", 8e9, 32, 4096, 32, 8, 14336, 128256, False),
    Reference("Qwen2.5-14B", 14e9, 48, 5120, 40, 8, 13824, 152064, False),
    Reference("Qwen2.5-32B", 32e9, 64, 5120, 40, 8, 27648, 152064, False),
    Reference("Llama-3.1-70B", 70e9, 80, 8192, 64, 8, 28672, 128256, False),
    Reference("Mistral-Large-2407", 123e9, 88, 12288, 96, 8, 28672, 32768, False),
    Reference("Llama-3.1-405B", 405e9, 126, 16384, 128, 8, 53248, 128256, False),
)


@dataclass(frozen=True)
class Shape:
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    reference: str


def parameters(layers: int, d_model: int, heads: int, kv_heads: int, ffn: int, vocab: int, tied: bool,
               gated: bool = True) -> float:
    """Weights of a Llama-style decoder: attention (query and output d x d, key and value d x kv width),
    the MLP (SwiGLU: three d x ffn; ``gated`` False, MPT's GELU: two), the embeddings (twice when the output
    layer has its own); norms left out."""
    kv_width = d_model // heads * kv_heads
    per_layer = 2 * d_model * d_model + 2 * d_model * kv_width + (3 if gated else 2) * d_model * ffn
    return layers * per_layer + (1 if tied else 2) * vocab * d_model


def nearest(params: float) -> Reference:
    return min(REFERENCES, key=lambda r: abs(math.log(params / r.nominal)))


def shape(params: float) -> Shape:
    """The decoder of ``params`` parameters in the design of the nearest published model."""
    ref = nearest(params)
    target = params * parameters(ref.layers, ref.d_model, ref.heads, ref.kv_heads, ref.ffn, ref.vocab, ref.tied) / ref.nominal
    depth_per_width = ref.layers / ref.d_model
    mlp_ratio = ref.ffn / ref.d_model

    def held(d: float, layers: float) -> float:  # parameters at width d (continuous), the reference's ratios
        kv = d * ref.kv_heads / ref.heads
        return layers * (2 * d * d + 2 * d * kv + 3 * d * d * mlp_ratio) + (1 if ref.tied else 2) * ref.vocab * d

    lo, hi = 1.0, 1e6  # the width at which a model of the reference's proportions holds the target: bisection
    for _ in range(100):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if held(mid, mid * depth_per_width) < target else (lo, mid)
    step = ref.head * ref.kv_heads  # whole heads, as many for each key/value head
    d_model = max(step, round(lo / step) * step)
    ffn = max(256, round(mlp_ratio * d_model / 256) * 256)
    heads = d_model // ref.head
    per_layer = parameters(1, d_model, heads, ref.kv_heads, ffn, 0, True)
    layers = max(2, round((target - held(d_model, 0)) / per_layer))
    return Shape(layers, d_model, heads, ref.kv_heads, ffn, ref.vocab, ref.name)
