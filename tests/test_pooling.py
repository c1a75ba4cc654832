"""``TiledMaxPool2d`` (the max pools ``optimize`` rewrites) against ``F.max_pool2d``, on the CPU:
the same values, NaN included, for windows that tile the map, with or without a remainder;
torch's own pool for the inputs it does not take."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from cute_conv.pooling import TiledMaxPool2d, tiles_the_map


def _channels_last(*shape: int, dtype=torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape).to(dtype).to(memory_format=torch.channels_last)


@pytest.mark.parametrize("kernel", [2, 3, (2, 3)])
@pytest.mark.parametrize("hw", [(8, 12), (7, 9), (3, 3)])
def test_matches_torch_on_channels_last(kernel, hw):
    x = _channels_last(2, 24, *hw)
    x[1, 5, 0, 0] = float("nan")
    x[0, 3, 1, 1] = float("-inf")
    ours = TiledMaxPool2d(kernel)(x)
    ref = F.max_pool2d(x, kernel)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert ours.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(ours.isnan(), ref.isnan())
    assert torch.equal(ours.nan_to_num(0.0), ref.nan_to_num(0.0))


def test_other_inputs_go_to_torch():
    pool = TiledMaxPool2d(2)
    x = torch.randn(2, 8, 6, 6)  # NCHW-contiguous
    assert torch.equal(pool(x), F.max_pool2d(x, 2))
    x = _channels_last(2, 8, 6, 6, dtype=torch.float32).requires_grad_()
    pool(x).sum().backward()  # torch's gradient: one element of each window
    assert x.grad.count_nonzero() == 2 * 8 * 3 * 3
    with pytest.raises(RuntimeError, match="too small"):
        pool(_channels_last(1, 8, 1, 5))


@pytest.mark.parametrize(
    "pool, tiles",
    [
        (nn.MaxPool2d(2), True),
        (nn.MaxPool2d(2, stride=2), True),
        (nn.MaxPool2d((2, 3), stride=(2, 3)), True),
        (nn.MaxPool2d(3, stride=2, padding=1), False),  # ResNet's: windows overlap
        (nn.MaxPool2d(2, padding=1), False),
        (nn.MaxPool2d(2, dilation=2), False),
        (nn.MaxPool2d(2, ceil_mode=True), False),
        (nn.MaxPool2d(2, return_indices=True), False),
        (nn.AvgPool2d(2), False),
    ],
)
def test_which_pools_tile_the_map(pool, tiles):
    assert tiles_the_map(pool) is tiles
    if not tiles:
        with pytest.raises(ValueError, match="do not tile the map"):
            TiledMaxPool2d.from_torch(pool)
