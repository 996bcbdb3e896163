"""FLOPs and activation traffic of a training sample, derived from the network's layer shapes.

The model's memory term needs the bytes a sample's activations move through GPU memory; these
follow from the architecture, not from a number fitted per workload. For the CNNs the layers
are written out below (input 224x224, Inception-v3 299x299) from their papers: AlexNet
(Krizhevsky et al. 2012, torchvision's single-tower variant), VGG-16 (Simonyan & Zisserman
2014, config D), ResNet-50/152 (He et al. 2015, bottleneck blocks [3,4,6,3] / [3,8,36,3]),
GoogLeNet (Szegedy et al. 2014, table 1), Inception-v3 (Szegedy et al. 2015, torchvision's
layout). Each layer gives its multiply-accumulates and its output elements; batch norm and
activations add passes over those outputs, which the model's traffic multiplier covers. The
MACs of stride-1 3x3 convolutions are counted apart: cuDNN computes them with Winograd's
algorithm on FP32 units (Lavin & Gray 2016: F(2x2,3x3) needs 2.25x fewer multiplications).

Transformers and decoder LLMs: per token and layer, 34·d + 5·a·s bytes of activations at 16-bit
(Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
eq. 1, a = d/64 heads), i.e. 17·d + 2.5·a·s elements; decoder LLMs are trained with
FlashAttention (MosaicML's LLM Foundry benchmarks: "our models use Flash Attention"; Megatron-LM
and the others alike), which keeps the 2.5·a·s scores out of memory.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    macs: float  # forward multiply-accumulates per sample
    activations: float  # forward activation elements per sample (layer outputs)
    winograd_macs: float = 0.0  # of the MACs, those in stride-1 3x3 convolutions (see the model)
    # per layer, (its share of the MACs, its GEMM width): a convolution is an implicit GEMM whose narrow side
    # is min(output channels, input channels x kernel); narrow GEMMs run below peak (the model's conv_width)
    gemm_widths: tuple[tuple[float, int], ...] = ()


class _Net:
    def __init__(self):
        self.macs = 0.0
        self.acts = 0.0
        self.wino = 0.0
        self.layers: list[tuple[float, int]] = []  # (MACs, GEMM width)

    def conv(self, cin: int, cout: int, kh: int, hw: tuple[int, int] | int, kw: int | None = None,
             stride: int = 1) -> int:
        h, w = (hw, hw) if isinstance(hw, int) else hw
        macs = cout * h * w * cin * kh * (kw or kh)
        self.macs += macs
        self.layers.append((macs, min(cout, cin * kh * (kw or kh))))
        if kh == 3 and (kw or kh) == 3 and stride == 1:
            self.wino += macs
        self.acts += cout * h * w
        return cout

    def pool(self, c: int, hw: int) -> None:
        self.acts += c * hw * hw

    def fc(self, cin: int, cout: int) -> int:
        self.macs += cin * cout
        self.layers.append((cin * cout, min(cin, cout)))
        self.acts += cout
        return cout


def _alexnet(n: _Net) -> None:
    n.conv(3, 64, 11, 55, stride=4)
    n.pool(64, 27)
    n.conv(64, 192, 5, 27)
    n.pool(192, 13)
    c = n.conv(192, 384, 3, 13)
    c = n.conv(c, 256, 3, 13)
    c = n.conv(c, 256, 3, 13)
    n.pool(256, 6)
    n.fc(n.fc(n.fc(256 * 36, 4096), 4096), 1000)


def _vgg16(n: _Net) -> None:
    c, hw = 3, 224
    for width, convs in ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3)):
        for _ in range(convs):
            c = n.conv(c, width, 3, hw)
        hw //= 2
        n.pool(c, hw)
    n.fc(n.fc(n.fc(512 * 49, 4096), 4096), 1000)


def _resnet(blocks: tuple[int, ...]):
    def build(n: _Net) -> None:
        c = n.conv(3, 64, 7, 112, stride=2)
        hw = 56
        n.pool(64, hw)
        for stage, (width, count) in enumerate(zip((64, 128, 256, 512), blocks)):
            for b in range(count):
                stride = 2 if stage > 0 and b == 0 else 1
                out = hw // stride
                if b == 0:
                    n.conv(c, 4 * width, 1, out, stride=stride)  # the projection shortcut
                n.conv(c, width, 1, hw)
                n.conv(width, width, 3, out, stride=stride)
                c = n.conv(width, 4 * width, 1, out)
                hw = out
        n.fc(c, 1000)
    return build


# GoogLeNet table 1: (#1x1, #3x3 reduce, #3x3, #5x5 reduce, #5x5, pool proj), and a pool after 3b and 4e
_GOOGLENET = [("3a", 28, (64, 96, 128, 16, 32, 32)), ("3b", 28, (128, 128, 192, 32, 96, 64)),
              ("4a", 14, (192, 96, 208, 16, 48, 64)), ("4b", 14, (160, 112, 224, 24, 64, 64)),
              ("4c", 14, (128, 128, 256, 24, 64, 64)), ("4d", 14, (112, 144, 288, 32, 64, 64)),
              ("4e", 14, (256, 160, 320, 32, 128, 128)), ("5a", 7, (256, 160, 320, 32, 128, 128)),
              ("5b", 7, (384, 192, 384, 48, 128, 128))]


def _googlenet(n: _Net) -> None:
    n.conv(3, 64, 7, 112, stride=2)
    n.pool(64, 56)
    n.conv(64, 64, 1, 56)
    c = n.conv(64, 192, 3, 56)
    n.pool(192, 28)
    for name, hw, (b1, r3, b3, r5, b5, pp) in _GOOGLENET:
        n.conv(c, b1, 1, hw)
        n.conv(c, r3, 1, hw)
        n.conv(r3, b3, 3, hw)
        n.conv(c, r5, 1, hw)
        n.conv(r5, b5, 5, hw)
        n.pool(c, hw)
        n.conv(c, pp, 1, hw)
        c = b1 + b3 + b5 + pp
        if name in ("3b", "4e"):
            n.pool(c, hw // 2)
    n.fc(c, 1000)


def _inception3(n: _Net) -> None:
    n.conv(3, 32, 3, 149, stride=2)
    n.conv(32, 32, 3, 147)
    n.conv(32, 64, 3, 147)
    n.pool(64, 73)
    n.conv(64, 80, 1, 73)
    c = n.conv(80, 192, 3, 71)
    n.pool(192, 35)
    for pool_proj in (32, 64, 64):  # Mixed_5b-5d at 35x35
        n.conv(c, 64, 1, 35)
        n.conv(n.conv(c, 48, 1, 35), 64, 5, 35)
        n.conv(n.conv(n.conv(c, 64, 1, 35), 96, 3, 35), 96, 3, 35)
        n.pool(c, 35)
        n.conv(c, pool_proj, 1, 35)
        c = 64 + 64 + 96 + pool_proj
    n.conv(c, 384, 3, 17, stride=2)  # Mixed_6a: to 17x17
    n.conv(n.conv(n.conv(c, 64, 1, 35), 96, 3, 35), 96, 3, 17, stride=2)
    n.pool(c, 17)
    c = 384 + 96 + c
    for c7 in (128, 160, 160, 192):  # Mixed_6b-6e, factorised 7x7
        n.conv(c, 192, 1, 17)
        n.conv(n.conv(n.conv(c, c7, 1, 17), c7, 1, 17, kw=7), 192, 7, 17, kw=1)
        x = n.conv(c, c7, 1, 17)
        for cout, (kh, kw) in ((c7, (7, 1)), (c7, (1, 7)), (c7, (7, 1)), (192, (1, 7))):
            x = n.conv(x, cout, kh, 17, kw=kw)
        n.pool(c, 17)
        n.conv(c, 192, 1, 17)
        c = 768
    n.conv(n.conv(c, 192, 1, 17), 320, 3, 8, stride=2)  # Mixed_7a: to 8x8
    x = n.conv(c, 192, 1, 17)
    x = n.conv(n.conv(x, 192, 1, 17, kw=7), 192, 7, 17, kw=1)
    n.conv(x, 192, 3, 8, stride=2)
    n.pool(c, 8)
    c = 320 + 192 + c
    for _ in range(2):  # Mixed_7b, 7c
        n.conv(c, 320, 1, 8)
        x = n.conv(c, 384, 1, 8)
        n.conv(x, 384, 1, 8, kw=3)
        n.conv(x, 384, 3, 8, kw=1)
        x = n.conv(n.conv(c, 448, 1, 8), 384, 3, 8)
        n.conv(x, 384, 1, 8, kw=3)
        n.conv(x, 384, 3, 8, kw=1)
        n.pool(c, 8)
        n.conv(c, 192, 1, 8)
        c = 320 + 768 + 768 + 192
    n.fc(c, 1000)


_CNNS = {"alexnet": _alexnet, "vgg16": _vgg16, "resnet50": _resnet((3, 4, 6, 3)),
         "resnet152": _resnet((3, 8, 36, 3)), "googlenet": _googlenet, "inception3": _inception3}
NAMES = tuple(_CNNS)


@functools.lru_cache(maxsize=None)
def cnn(name: str) -> Shape:
    n = _Net()
    _CNNS[name](n)
    return Shape(n.macs, n.acts, n.wino, tuple((m / n.macs, w) for m, w in n.layers))


def transformer_activations(layers: int, d_model: int, seq_len: int, flash: bool = False) -> float:
    """Activation elements per token of a transformer's forward pass (Korthikanti et al. 2022).
    ``flash``: FlashAttention (Dao et al. 2022) never writes the seq x seq attention scores,
    softmax and dropout mask to GPU memory, so their 2.5·a·s term goes."""
    heads = max(1, d_model // 64)
    return layers * (17.0 * d_model + (0.0 if flash else 2.5 * heads * seq_len))
