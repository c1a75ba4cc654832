"""Squeeze-excitation's global average pool and closing multiply on NHWC activations: torch's
mean against ``cute_conv.pooling.GlobalAvgPool2d``'s batched GEMV through cuBLAS, torch's
``scale * x`` against ``cute_conv.channel_scale.ChannelScale``'s kernel (H100/H200):

    python benchmarks/experiments/se_mean_ab.py --models efficientnet_b0 --batches 1 8 32 \
        --out se_mean_ab.json

Each row is the input of one of the model's ``torchvision.ops.SqueezeExcitation`` blocks
(found by forward hooks on a CPU pass at 224x224), bf16 channels_last, random values.
``mean``: ``F.adaptive_avg_pool2d(x, 1)`` as the block runs it (aten's mean over H and W);
``gemv``: ``GlobalAvgPool2d`` (``torch.baddbmm`` of a row of 2**-k and the ``[N, H*W, C]``
view, float32 accumulation), what ``optimize`` runs; ``scale*x``: the block's closing
multiply as torch runs it; ``channel_scale``: ``ChannelScale``, what ``optimize`` runs for it.
The pools checked against the float32 mean, the multiplies against the float32 product,
CUDA-graph replays in interleaved rounds (medians); the per-forward sums add the model's
blocks.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import torchvision
from torchvision.ops import SqueezeExcitation

from cute_conv.channel_scale import ChannelScale
from cute_conv.pooling import GlobalAvgPool2d

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import pointwise_linear_ab  # noqa: E402
from grouped_direct_ab import checks  # noqa: E402
from models import replayed_us  # noqa: E402

METHODS = ("mean", "gemv", "scale*x", "channel_scale")


def se_inputs(model_name: str) -> list[tuple[int, int, int]]:
    """``(C, H, W)`` of each squeeze-excitation block's input, in forward order."""
    model = getattr(torchvision.models, model_name)().eval()
    shapes: list[tuple[int, int, int]] = []
    for module in model.modules():
        if isinstance(module, SqueezeExcitation):
            module.register_forward_hook(lambda m, args, out: shapes.append(args[0].shape[1:]))
    with torch.no_grad():
        model(torch.randn(1, 3, 224, 224))
    return [tuple(s) for s in shapes]


def measure(model_name: str, shape: tuple[int, int, int], batch: int, rounds: int) -> dict:
    channels, height, width = shape
    gen = torch.Generator("cuda").manual_seed(0)
    x = torch.randn(batch, height, width, channels, device="cuda", generator=gen)
    x16 = x.bfloat16()
    x_nchw = x16.permute(0, 3, 1, 2)  # channels_last
    expected = x16.float().mean(dim=(1, 2)).view(batch, channels, 1, 1)
    pool = GlobalAvgPool2d()
    scale = torch.rand(batch, channels, 1, 1, device="cuda", generator=gen).bfloat16()
    multiply = ChannelScale()
    fns = {
        "mean": lambda: F.adaptive_avg_pool2d(x_nchw, 1),
        "gemv": lambda: pool(x_nchw),
        "scale*x": lambda: scale * x_nchw,
        "channel_scale": lambda: multiply(scale, x_nchw),
    }
    with torch.no_grad():
        checked = checks({k: fns[k] for k in ("mean", "gemv")}, expected)
        product = scale.float() * x_nchw.float()
        checked |= checks({k: fns[k] for k in ("scale*x", "channel_scale")}, product)
        graph_us = replayed_us(fns, rounds)
    return {"model": model_name, "channels": channels, "height": height, "width": width,
            "batch": batch, "checks": checked, "graph_us": graph_us}  # fmt: skip


def main() -> int:
    args = pointwise_linear_ab.ab_arguments(__doc__.splitlines()[0], ["efficientnet_b0"])
    result = {"device": torch.cuda.get_device_name(), "rows": []}
    for model_name in args.models:
        shapes = se_inputs(model_name)
        for batch in args.batches:
            rows = [(f"{shape} x{shapes.count(shape)}", shapes.count(shape),
                     functools.partial(measure, model_name, shape, batch, args.rounds))
                    for shape in sorted(set(shapes))]  # fmt: skip
            pointwise_linear_ab.measure_rows(f"{model_name} batch {batch}", rows, METHODS,
                                             result, args.out)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
