"""What benchmarks/experiments/channel_ops_ab.py times, found on a CPU: DenseNet-121's lone
BatchNorms with their ReLUs and ConvNeXt-T's LayerNorm2d's, each rewritten module beside the
module it replaced, with its input shape."""

from __future__ import annotations

import copy

import channel_ops_ab as ab
import pytest
import torch
from models import build_model
from torch import nn

import cute_conv
from cute_conv.channel_norm import ChannelLayerNorm


@pytest.mark.parametrize(
    "name, count, activation, kind",
    [("densenet121", 62, "relu", cute_conv.nn.Conv2d), ("convnext_tiny", 5, None, ChannelLayerNorm)],
)
def test_rewrites_and_their_inputs(name, count, activation, kind):
    model = build_model(name)
    optimized = cute_conv.optimize(copy.deepcopy(model).to(torch.bfloat16))
    found = ab.rewrites(model, optimized)
    assert len(found) == count and {a for _, _, a in found} == {activation}
    modules = dict(model.named_modules())
    for original, rewritten, _ in found:
        assert isinstance(modules[original], (nn.BatchNorm2d, nn.LayerNorm))
        assert isinstance(optimized.get_submodule(rewritten), kind)
    shapes = ab.input_shapes(model, [original for original, _, _ in found])
    assert all(len(shapes[original]) == 4 and shapes[original][0] == 1 for original, _, _ in found)
    for original, rewritten, _ in found:
        module = optimized.get_submodule(rewritten)
        channels = module.channels if kind is ChannelLayerNorm else module.out_channels
        assert shapes[original][1] == channels
