"""Max pooling of channels_last activations whose windows tile the map, for ``optimize``.

torch's channels_last ``max_pool2d`` kernel is slow on the bf16 maps of a small-batch model:
VGG-16's five 2x2 pools took 95 us of a 388 us batch-1 forward on an H100 (inductor's kernels:
12 us). Where the windows do not overlap (kernel size equal to the stride, no padding, dilation
1, no ceil mode: VGG's pools), the pool is one ``amax`` over the window dims of a reshaped NHWC
view, a reduction torch vectorizes along the contiguous channels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["TiledMaxPool2d", "tiles_the_map"]


def _pair(value: int | tuple[int, ...]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[-1]))


def tiles_the_map(pool: nn.Module) -> bool:
    """Whether ``pool`` is a plain ``nn.MaxPool2d`` whose windows tile the map."""
    if type(pool) is not nn.MaxPool2d or pool.return_indices or pool.ceil_mode:
        return False
    stride = pool.kernel_size if pool.stride is None else pool.stride
    return (
        _pair(pool.kernel_size) == _pair(stride)
        and _pair(pool.padding) == (0, 0)
        and _pair(pool.dilation) == (1, 1)
    )


class TiledMaxPool2d(nn.Module):
    """``nn.MaxPool2d(kernel_size)`` (stride = kernel size, no padding) as an ``amax`` over a
    reshaped view of a channels_last input; other inputs, and inputs that require grad (whose
    gradient torch routes to one element of a tied window, amax to all), go to
    ``F.max_pool2d``. NaN propagates as in torch's pool."""

    def __init__(self, kernel_size: int | tuple[int, int]) -> None:
        super().__init__()
        self.kernel_size = _pair(kernel_size)

    @classmethod
    def from_torch(cls, pool: nn.MaxPool2d) -> "TiledMaxPool2d":
        if not tiles_the_map(pool):
            raise ValueError(f"{pool} has windows that do not tile the map")
        return cls(pool.kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kh, kw = self.kernel_size
        channels_last = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)
        if not channels_last or x.requires_grad or x.shape[2] < kh or x.shape[3] < kw:
            return F.max_pool2d(x, self.kernel_size)  # (torch's error for a too-small map)
        n, c, h, w = x.shape
        p, q = h // kh, w // kw  # rows and columns past the last whole window are dropped
        nhwc = x.permute(0, 2, 3, 1)[:, : p * kh, : q * kw]
        return nhwc.view(n, p, kh, q, kw, c).amax(dim=(2, 4)).permute(0, 3, 1, 2)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}"
