"""ConvNeXt's depthwise conv -> LayerNorm with the norm in the grouped kernel's epilogue
(``grouped_conv2d(channel_norm_eps=...)``) against the conv and torch's LayerNorm apart
(H100/H200):

    python benchmarks/experiments/channel_norm_ab.py --batches 1 8 32 --out channel_norm_ab.json

Each row is one ConvNeXt-T stage's 7x7 depthwise conv with its bias, then the LayerNorm over
the channels without its affine (``optimize`` folds the affine into the next Linear), bf16
channels_last, random weights. ``cudnn+ln``: ``F.conv2d`` then ``F.layer_norm`` on the NHWC
view (torch eager); ``grouped+ln``: the grouped kernel then ``F.layer_norm`` (what
``optimize`` ran before the norm was fused); ``fused``: the grouped kernel normalizing in its
epilogue. Each checked against float32 from a NaN-poisoned output (``compare_to_reference``),
CUDA-graph replays in interleaved rounds (medians); the per-forward sums weigh each stage by
its blocks (3, 3, 9, 3).

``CHANNEL_NORM_PIXELS="1 2 3 4"`` adds ``fused@p``: the fused call at each of those output
pixels per thread (``grouped_conv2d(pixels=)``; ``fused`` takes the rule's), and
``CHANNEL_NORM_STAGES=base`` times ConvNeXt-B's stage channels (128 .. 1024) instead of
ConvNeXt-T's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from cute_conv.grouped import grouped_conv2d, stage_filter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import pointwise_linear_ab  # noqa: E402
from grouped_direct_ab import checks  # noqa: E402
from models import replayed_us  # noqa: E402

EPS = 1e-6  # torchvision ConvNeXt's LayerNorm
PIXELS = tuple(int(p) for p in os.environ.get("CHANNEL_NORM_PIXELS", "").split())
METHODS = ("cudnn+ln", "grouped+ln", "fused", *(f"fused@{p}" for p in PIXELS))
# ConvNeXt-B's stages: (channels, map size, blocks)
BASE_STAGES = ((128, 56, 3), (256, 28, 3), (512, 14, 27), (1024, 7, 3))


def layer_norm(y_nhwc: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(y_nhwc, y_nhwc.shape[-1:], eps=EPS)


def measure(channels: int, size: int, batch: int, rounds: int) -> dict:
    gen = torch.Generator("cuda").manual_seed(0)
    x = torch.randn(batch, size, size, channels, device="cuda", generator=gen)
    flt = torch.randn(channels, 7, 7, 1, device="cuda", generator=gen) / 7
    bias = torch.randn(channels, device="cuda", generator=gen)
    x16, flt16 = x.bfloat16(), flt.bfloat16()
    z = F.conv2d(x16.float().permute(0, 3, 1, 2), flt16.float().permute(0, 3, 1, 2), bias,
                 padding=3, groups=channels)  # fmt: skip
    expected = layer_norm(z.permute(0, 2, 3, 1))
    x_nchw, w_kcrs, staged = x16.permute(0, 3, 1, 2), flt16.permute(0, 3, 1, 2), stage_filter(flt16)
    outs = {name: torch.full_like(expected, float("nan"), dtype=torch.bfloat16)
            for name in METHODS}  # fmt: skip
    common = dict(filter_layout="rsck", groups=channels, padding=3, bias=bias)
    fns = {
        "cudnn+ln": lambda: layer_norm(
            F.conv2d(x_nchw, w_kcrs, bias.bfloat16(), padding=3, groups=channels).permute(0, 2, 3, 1)
        ),
        "grouped+ln": lambda: layer_norm(grouped_conv2d(x16, staged, **common)),
        "fused": lambda: grouped_conv2d(x16, staged, channel_norm_eps=EPS, out=outs["fused"],
                                        **common),
        **{f"fused@{p}": lambda p=p: grouped_conv2d(x16, staged, channel_norm_eps=EPS, pixels=p,
                                                    out=outs[f"fused@{p}"], **common)
           for p in PIXELS},
    }  # fmt: skip
    with torch.no_grad():
        checked = checks(fns, expected)
        graph_us = replayed_us(fns, rounds)
    return {"channels": channels, "size": size, "batch": batch, "checks": checked,
            "graph_us": graph_us}  # fmt: skip


if __name__ == "__main__":
    base = os.environ.get("CHANNEL_NORM_STAGES") == "base"
    pointwise_linear_ab.run_stages(__doc__.splitlines()[0], measure, METHODS,
                                   BASE_STAGES if base else pointwise_linear_ab.STAGES)  # fmt: skip
