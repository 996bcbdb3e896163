"""``llm:<size>`` describes a decoder that could exist (issue 52): grouped-query attention needs the
heads to be a multiple of the key/value heads, the width a whole number of heads, and the shape
close to the published models of that size (gpufleet.perf.llm_shapes.REFERENCES)."""

import importlib.util
import math

import pytest

from gpufleet.fleet import bench
from gpufleet.perf import llm_shapes, measured, workloads


def _sizes(lo: float, hi: float, per_decade: int = 24) -> list[str]:
    """Sizes as a user writes them (``llm:<size>``), log-spaced from ``lo`` to ``hi`` parameters."""
    n = round(math.log10(hi / lo) * per_decade)
    rounded = (float(f"{lo * (hi / lo) ** (i / n) / 1e6:.3g}") for i in range(n + 1))
    return [f"{m:f}".rstrip("0").rstrip(".") + "m" for m in rounded]


@pytest.mark.parametrize("size", _sizes(1e8, 1e12))
def test_every_size_from_100m_to_1t_is_a_decoder_that_can_exist(size):
    w = workloads.get(f"llm:{size}")
    head = w.d_model // w.heads
    assert w.heads % w.kv_heads == 0, f"llm:{size}: {w.heads} heads over {w.kv_heads} KV heads"
    assert head * w.heads == w.d_model and head in (64, 128), f"llm:{size}: width {w.d_model}, {w.heads} heads"
    assert w.ffn % 256 == 0 and w.layers >= 2
    # the parameters its shape holds are those of its size, as its reference's are of the reference's nominal size
    nominal = workloads.parse_size(size)
    held = llm_shapes.parameters(w.layers, w.d_model, w.heads, w.kv_heads, w.ffn, w.vocab, llm_shapes.nearest(nominal).tied)
    assert 0.7 < held / nominal < 1.3, f"llm:{size}: its shape holds {held / 1e9:.3g}B parameters"


def test_every_size_the_parser_accepts_keeps_heads_divisible_by_kv_heads():
    for size in _sizes(1e6, 1e13, per_decade=6):
        w = workloads.get(f"llm:{size}")
        assert w.heads % w.kv_heads == 0 and w.d_model % w.heads == 0, (size, w.heads, w.kv_heads, w.d_model)


@pytest.mark.parametrize("ref", llm_shapes.REFERENCES, ids=lambda r: r.name)
def test_a_published_size_is_the_published_model(ref):
    w = workloads.get(f"llm:{ref.nominal / 1e9:g}b")
    assert (w.layers, w.d_model, w.heads, w.kv_heads, w.ffn, w.vocab) == (
        ref.layers, ref.d_model, ref.heads, ref.kv_heads, ref.ffn, ref.vocab)


def test_llm_1b_is_no_longer_17_heads_over_8():
    w = workloads.get("llm:1b")
    assert (w.heads, w.kv_heads) != (17, 8) and w.heads % w.kv_heads == 0


def test_a_user_shape_whose_heads_do_not_divide_is_refused(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("odd:\n  family: llm\n  params: 1e9\n  layers: 16\n  d_model: 2176\n  heads: 17\n  kv_heads: 8\n")
    with pytest.raises(workloads.SpecError, match="17 heads are not a multiple of 8 key/value heads"):
        workloads.load_user(f)


@pytest.mark.parametrize("name", ["llm:1b:2048", "llm:7b:2048", "llm:70b:2048", "llm:8b"])
def test_the_decoder_the_node_trains_has_the_parameters_of_the_workload_it_is_named(name):
    """rev52 finding 7: llm:7b:2048 is the library's llm-7b (MPT-7B: a 4d GELU MLP, not gated, tied, 6.66B); the plan
    sent its ffn alone and the node built a SwiGLU of it (three d x ffn matrices): a 9.0B model recorded as llm-7b
    (llm-1b 1.71B for 1.32B, llm-70b +34%). The plan now sends `gated` (and MPT's tied embedding); the node's own
    builder, run on PyTorch's meta device (no memory), holds the parameters of the workload it is named by, and
    bench_workload (MFU, prediction) counts those."""
    w = workloads.get(name)
    (b,) = bench.plan([name], tiny=False)["benchmarks"]
    sent = llm_shapes.parameters(b["layers"], b["d_model"], b["heads"], b["kv_heads"], b["ffn"], b["vocab"], b["tied"],
                                 b["gated"])
    assert sent == pytest.approx(w.params, rel=0.10), f"{name} is {w.name} ({w.params / 1e9:.2f}B, {w.source}); " \
                                                      f"the plan holds {sent / 1e9:.2f}B"
    assert measured.bench_workload(name).params == sent
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (the test extra brings it): the node's own model not built")
    import torch

    from gpufleet.nodebench.train_steps import build_decoder

    with torch.device("meta"):
        model = build_decoder(torch, torch.nn, b)
    built = sum(p.numel() for p in model.parameters())  # shared (tied) weights once
    assert built == pytest.approx(sent, rel=0.001), f"the node builds {built / 1e9:.3f}B for {sent / 1e9:.3f}B"

