"""The workload library: FLOPs, parameters and input size per training sample.

Built-ins live in ``data/workloads.yaml`` (with sources). Users add their own in a YAML
file of the same shape (``--workload-file`` or ``~/.config/gpufleet/workloads.yaml``).
A decoder LLM of any size is ``llm:<params>[:<seq>]`` (e.g. ``llm:8b``, ``llm:405b:4096``): grouped-query
attention and SwiGLU in the design of the published model nearest that size (``llm_shapes``) at 8,192 tokens unless told.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from gpufleet import yamlsrc
from gpufleet.errors import InputError, NotFound, SpecError
from gpufleet.paths import user_workloads_path
from gpufleet.perf import architecture, llm_shapes

FAMILIES = ("cnn", "transformer", "llm", "dense")
_UNITS = {"cnn": "img", "transformer": "seq", "llm": "tok", "dense": "sample"}
# activation elements per forward MAC of a CNN given only its MACs: the median of the built-in
# architectures (perf.architecture: 0.8 for AlexNet/VGG to 2.9 for ResNet-50/GoogLeNet)
CNN_ACTIVATIONS_PER_MAC = 2.0e-3
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([kmbt]?)$", re.I)
_MULT = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


@dataclass(frozen=True)
class Workload:
    name: str
    family: str
    params: float
    fwd_flops: float  # per sample (per token for llm)
    sample_bytes: float  # bytes read from storage per sample
    dataset_samples: float | None  # samples per epoch (None: give tokens)
    batch_per_gpu: int  # samples per GPU between gradient exchanges
    unit: str
    decode: bool  # needs CPU decode/augmentation per sample (images)
    source: str
    activations: float = 0.0  # forward activation elements per sample (per token for llm)
    winograd_share: float = 0.0  # of the FLOPs, those in stride-1 3x3 convolutions
    gemm_widths: tuple[tuple[float, int], ...] = ()  # CNNs with layer shapes: (share of the FLOPs, GEMM width)
    layers: int = 0
    d_model: int = 0
    seq_len: int = 0
    # decoder LLMs: attention heads, key/value heads (grouped-query attention), MLP width and
    # whether it is gated (SwiGLU: three matrices), vocabulary; they size activations and the logits
    heads: int = 0
    kv_heads: int = 0
    ffn: int = 0
    gated: bool = False
    vocab: int = 0
    tied: bool = False  # decoder LLMs: the output layer shares the input embedding's weights

    @property
    def train_flops(self) -> float:
        """FLOPs per sample for forward + backward (3x forward; 6N + 6Lds per token for decoder LLMs, N their
        matrices' parameters, attention causal: as bench's MFU counts; perf/model.py times attention with
        FlashAttention's recomputation on top, 7 L d s)."""
        return 3.0 * self.fwd_flops

    @property
    def matmul_params(self) -> float:
        """A decoder's parameters that multiply a token: all but an untied input embedding, a table lookup
        (torchtitan's and Megatron's FLOP counts leave it out; a tied one is also the output layer)."""
        return self.params - input_lookup(self.vocab, self.d_model, self.tied)


def input_lookup(vocab: int, d_model: int, tied: bool) -> float:
    """Parameters of a decoder's input embedding that no token multiplies: an untied table is a lookup."""
    return 0.0 if tied else float(vocab * d_model)


def parse_size(text: str) -> float:
    m = _SIZE.match(str(text).strip())
    if not m:
        raise InputError(f"{text!r} is not a size", "write e.g. 7b, 70b, 1.3b, 350m")
    value = float(m.group(1)) * _MULT[m.group(2).lower()]
    if not 1e6 <= value <= 1e13:  # from a toy model to a hundred times the largest trained
        raise InputError(f"{text!r} is outside 1m to 10000b parameters", "write e.g. 7b, 70b, 1.3b, 350m")
    return value


def _from_dict(name: str, d: dict, where: str) -> Workload:
    fam = d.get("family")
    if fam not in FAMILIES:
        raise SpecError(where, None, f"{name}.family", f"{fam!r} is not one of {', '.join(FAMILIES)}")
    wino = 0.0
    gemm: tuple = ()  # a CNN's layers' (share of the FLOPs, GEMM width); dense nets' `widths` are their layers'
    llm_fields: dict = {}
    try:
        if fam == "cnn":
            params = float(d["params"])
            if d.get("arch"):  # layer shapes: FLOPs and activations both follow from them
                shape = architecture.cnn(d["arch"])
                fwd, acts, wino = 2.0 * shape.macs, shape.activations, shape.winograd_macs / shape.macs
                gemm = shape.gemm_widths
            else:
                fwd = 2.0 * float(d["gmacs_fwd"]) * 1e9
                acts = float(d["gmacs_fwd"]) * 1e9 * CNN_ACTIVATIONS_PER_MAC
        elif fam == "transformer":
            L, dm, s = int(d["layers"]), int(d["d_model"]), int(d["seq_len"])
            params = float(d.get("params") or 12 * L * dm * dm + dm * int(d.get("vocab", 0)))
            per_tok = 2 * 12 * L * dm * dm + 4 * L * dm * s
            fwd = per_tok * s
            acts = architecture.transformer_activations(L, dm, s) * s
        elif fam == "dense":  # fully connected: logistic regression (one layer), multi-layer perceptrons
            widths = [int(x) for x in d["widths"]]
            params = float(sum(a * b + b for a, b in zip(widths, widths[1:])))
            fwd = 2.0 * sum(a * b for a, b in zip(widths, widths[1:]))
            acts = float(sum(widths[1:]))
        else:
            params = float(d["params"])
            L, dm, s = int(d.get("layers", 0)), int(d.get("d_model", 0)), int(d.get("seq_len", 2048))
            if s < 1:
                raise SpecError(where, None, f"{name}.seq_len", f"{s}: the sequence length is at least 1 token")
            if not (L and dm):
                sized = llm_shapes.shape(params)
                L, dm = sized.layers, sized.d_model
                d = {"heads": sized.heads, "kv_heads": sized.kv_heads, "ffn": sized.ffn, "vocab": sized.vocab, **d}
            llm_fields = llm_attention(d, dm, name, where)
            llm_fields["tied"] = bool(d.get("tied", llm_shapes.nearest(params).tied))
            # causal attention: a token attends to those before it, half the 4 L d s of a full one (FlashAttention
            # skips the masked blocks); the model's FLOPs, which MFU counts (perf/model.py times FlashAttention's
            # recomputation on top, FLASH_FWD_BWD). PaLM (Chowdhery et al. 2022, appendix B) and torchtitan count 12 L d s: their
            # MFU of the same run is higher by 6 L d s / (6 N + 6 L d s)
            lookup = input_lookup(llm_fields["vocab"], dm, llm_fields["tied"])
            if params <= lookup:
                raise SpecError(where, None, f"{name}.params", f"{params:g} is not more than its input embedding's "
                                f"{lookup:g} (vocab x d_model)", "give the whole model's parameters, or tied: true")
            fwd = 2.0 * (params - lookup) + 2.0 * L * dm * s
            acts = architecture.transformer_activations(L, dm, s, flash=True)
    except KeyError as e:
        raise SpecError(where, None, f"{name}.{e.args[0]}", f"required for family {fam}") from None
    except (TypeError, ValueError) as e:
        raise SpecError(where, None, name, f"bad number: {e}") from None
    if params <= 0 or fwd <= 0:
        raise SpecError(where, None, name, "params and FLOPs must be positive")
    return Workload(**(llm_fields if fam == "llm" else {}),
        name=name, family=fam, params=params, fwd_flops=fwd,
        sample_bytes=float(d.get("sample_bytes", 4.0 if fam == "llm" else 1024)),
        dataset_samples=float(d["dataset_samples"]) if d.get("dataset_samples") else None,
        batch_per_gpu=int(d.get("batch_per_gpu", 4096 if fam == "llm" else 64)),
        unit=d.get("unit", _UNITS[fam]), decode=(fam == "cnn"),
        source=str(d.get("source", where)),
        layers=int(d.get("layers", 0) or 0), d_model=int(d.get("d_model", 0) or 0),
        seq_len=int(d.get("seq_len", 0) or 0), activations=acts, winograd_share=wino, gemm_widths=gemm,
    )


def decoder(name: str, fields: dict, where: str) -> Workload:
    """A decoder LLM from its published shape (params, layers, d_model, heads, kv_heads, ffn, gated, vocab, seq_len)."""
    return _from_dict(name, {"family": "llm", **fields}, where)


def llm_attention(d: dict, d_model: int, name: str, where: str) -> dict:
    """Heads, KV heads, MLP width, gating and vocabulary of a decoder LLM: as given, else a
    Llama-3-like model's (128-wide heads, up to 8 KV heads that divide them, SwiGLU at 3.5 d,
    128,256 tokens; Llama 3 model card and config, 2024). Grouped-query attention shares each
    key/value head among a whole number of query heads, and each head is a whole slice of the width."""
    heads = int(d.get("heads") or max(1, d_model // 128))
    kv_heads = int(d.get("kv_heads") or max(k for k in range(1, min(heads, 8) + 1) if heads % k == 0))
    if heads % kv_heads:
        raise SpecError(where, None, f"{name}.kv_heads", f"{heads} heads are not a multiple of {kv_heads} key/value heads",
                        "grouped-query attention shares each key/value head among a whole number of heads")
    if d_model % heads:
        raise SpecError(where, None, f"{name}.heads", f"a width of {d_model} does not split into {heads} heads",
                        "d_model is heads x the head width (64 or 128 in published models)")
    gated = bool(d.get("gated", "ffn" not in d))
    ffn = int(d.get("ffn") or (round(3.5 * d_model / 256) * 256 if gated else 4 * d_model))
    return {"heads": heads, "kv_heads": kv_heads, "ffn": ffn, "gated": gated, "vocab": int(d.get("vocab") or 128256)}


LLM_SEQ = 8192  # llm:<size> trains at Llama 3's pre-training sequence (8,192 tokens, its paper), unless told


def llm(params: float, seq_len: int = LLM_SEQ, name: str | None = None) -> Workload:
    sized = llm_shapes.shape(params)
    return _from_dict(name or f"llm:{params / 1e9:g}b", {
        "family": "llm", "params": params, "layers": sized.layers, "d_model": sized.d_model, "heads": sized.heads,
        "kv_heads": sized.kv_heads, "ffn": sized.ffn, "gated": True, "vocab": sized.vocab,
        "tied": llm_shapes.nearest(params).tied, "seq_len": seq_len,
        "source": f"decoder LLM shaped as {sized.reference}, 6N FLOPs per token + attention (Kaplan et al. 2020)"}, "<llm>")


@functools.lru_cache(maxsize=1)
def _builtin() -> dict[str, Workload]:
    import yaml

    text = resources.files("gpufleet.perf").joinpath("data", "workloads.yaml").read_text(encoding="utf-8")
    raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return {k: _from_dict(k, v, "gpufleet/perf/data/workloads.yaml") for k, v in raw.items()}


def load_user(path: str | Path) -> dict[str, Workload]:
    located = yamlsrc.load_file(path)
    if not isinstance(located.data, dict):
        raise SpecError(str(path), 1, "", "expected a mapping of workload name -> fields")
    out = {}
    for k, v in located.data.items():
        if not isinstance(v, dict):
            raise SpecError(str(path), located.line((k,)), str(k), "expected a mapping of fields")
        try:
            out[str(k)] = _from_dict(str(k), v, str(path))
        except SpecError as e:
            raise SpecError(str(path), located.line((k,) + tuple(e.key.split(".")[1:2])), e.key, e.problem) from None
    return out


def library(user_file: str | Path | None = None) -> dict[str, Workload]:
    lib = dict(_builtin())
    path = Path(user_file) if user_file else user_workloads_path()
    if user_file or path.exists():
        if not path.exists():
            raise InputError(f"workload file {path} not found")
        lib.update(load_user(path))
    return lib


def get(name: str, user_file: str | Path | None = None) -> Workload:
    """A workload of the library (or the user's file) by name; ``llm:<size>[:<seq>]`` is any decoder
    LLM (Llama-3-like, 8,192 tokens unless ``:<seq>`` says), the library's own model of that nominal
    size and sequence when there is one (``llm:70b:2048`` is ``llm-70b``, MPT-70B, so the two names
    never give two predictions for one run)."""
    if name.lower().startswith("llm:"):
        parts = name.split(":")
        if len(parts) > 2 and not parts[2].isdigit():
            raise InputError(f"{name!r}: the sequence length after the size is a whole number", "e.g. llm:8b:4096")
        seq = int(parts[2]) if len(parts) > 2 else LLM_SEQ
        if seq < 1:
            raise InputError(f"{name}: the sequence length is at least 1 token", "e.g. llm:8b:4096")
        known = _builtin().get(f"llm-{parts[1].lower()}")
        if known is not None and known.seq_len == seq:
            return known
        return llm(parse_size(parts[1]), seq, name=name)
    lib = library(user_file)
    if name in lib:
        return lib[name]
    lowered = {k.lower(): k for k in lib}
    if name.lower() in lowered:
        return lib[lowered[name.lower()]]
    raise NotFound("workload", name, list(lib) + ["llm:7b"])
