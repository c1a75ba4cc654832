"""cuDNN's fused conv + bias + ReLU (``torch.cudnn_convolution_relu``) against what
``cute_conv.nn.Conv2d`` runs on grouped convs past ``grouped_rule``'s bound (cuDNN's conv,
then the bias added in float32, then the ReLU), on the grouped convs of torchvision models,
each with a ReLU after it as ResNeXt's and RegNet's have (H100/H200):

    python benchmarks/experiments/grouped_cudnn_relu_ab.py --models resnext50_32x4d \
        --batches 1 8 32 --out grouped_cudnn_relu_ab.json

Same rows, inputs, checks and timing as ``grouped_direct_ab.py`` (bf16 channels_last, the
filter KRSC as ``nn.Conv2d`` hands it to cuDNN, NaN-poisoned float32 checks, CUDA-graph
replays in interleaved rounds); ``fused`` takes the bias in bf16, as the op requires.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from grouped_direct_ab import checks, random_operands, run_ab  # noqa: E402
from models import replayed_us  # noqa: E402


def measure(conv: torch.nn.Conv2d, shape: tuple, rounds: int) -> dict:
    groups = conv.groups
    geom = (conv.stride, conv.padding, conv.dilation)
    x, weight, bias = random_operands(conv, shape)
    weight = weight.bfloat16().to(memory_format=torch.channels_last)
    ref = torch.relu(F.conv2d(x.float(), weight.float(), bias, *geom, groups))

    def unfused():
        y = F.conv2d(x, weight, None, *geom, groups)
        return torch.relu(y.add_(bias.view(-1, 1, 1)))

    bias16 = bias.bfloat16()
    fns = {
        "unfused": unfused,
        "fused": lambda: torch.cudnn_convolution_relu(x, weight, bias16, *geom, groups),
    }
    return {"module": repr(conv), "input": list(shape), "checks": checks(fns, ref),
            "graph_us": replayed_us(fns, rounds)}  # fmt: skip


if __name__ == "__main__":
    run_ab(
        __doc__.splitlines()[0], lambda conv, shape, _, rounds: measure(conv, shape, rounds),
        ("unfused", "fused"), ["resnext50_32x4d"],
    )  # fmt: skip
