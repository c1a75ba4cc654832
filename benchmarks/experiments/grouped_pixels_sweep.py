"""The grouped / depthwise kernel's output pixels per thread (``grouped_conv2d(pixels=)``)
swept on the grouped convs of torchvision models, with cuDNN beside them (H100/H200):

    python benchmarks/experiments/grouped_pixels_sweep.py --models convnext_tiny \
        --batches 1 8 32 --out grouped_pixels_sweep.json

Same rows, inputs, checks and timing as ``grouped_direct_ab.py`` (bf16 channels_last, random
weights and bias, the activation after the conv in the model, NaN-poisoned float32 checks,
CUDA-graph replays in interleaved rounds): ``cudnn`` is ``F.conv2d`` then the activation,
``p1`` .. ``p8`` the kernel with 1 .. 8 output pixels per thread. The rows feed the rule that
picks the pixels (``cute_conv.grouped_rule.pixels_per_thread``): fitted on ``FIT_MODELS``,
judged on ``HELD_OUT_MODELS`` (named before either was measured).
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from grouped_direct_ab import ab_calls, checks, run_ab  # noqa: E402
from models import replayed_us  # noqa: E402

FIT_MODELS = (
    "convnext_tiny", "mobilenet_v3_large", "regnet_y_1_6gf", "resnext50_32x4d", "regnet_x_1_6gf",
)  # fmt: skip
HELD_OUT_MODELS = (
    "efficientnet_b3", "mobilenet_v2", "mnasnet1_0", "regnet_y_3_2gf", "regnet_x_3_2gf",
)  # fmt: skip
PIXELS = (1, 2, 4, 8)
METHODS = ("cudnn", *(f"p{p}" for p in PIXELS))


def measure(conv: nn.Conv2d, shape: tuple, activation: str | None, rounds: int) -> dict:
    cudnn, kernel, ref = ab_calls(conv, shape, activation)
    fns = {"cudnn": cudnn, **{f"p{p}": kernel(p, 1) for p in PIXELS}}  # one thread per vector
    return {"module": repr(conv), "input": list(shape), "output": list(ref.shape),
            "activation": activation, "checks": checks(fns, ref),
            "graph_us": replayed_us(fns, rounds)}  # fmt: skip


if __name__ == "__main__":
    run_ab(__doc__.splitlines()[0], measure, METHODS, list(FIT_MODELS))
