"""``ChannelLayerNorm``: a LayerNorm over the channels of an NCHW tensor, for ``optimize``.

torchvision's ``LayerNorm2d`` (ConvNeXt's stem and downsampling layers) permutes to NHWC and
calls ``F.layer_norm`` over C, whose CUDA kernel is slow on these rows of C = 96..768 channels:
ConvNeXt-T's five took 277 us of a 2,167 us batch-32 forward on an H200, several times what
reading and writing the tensors takes. Here the normalization runs in the grouped kernel's
epilogue (``grouped_conv2d(channel_norm_eps=...)``) on an identity depthwise 1x1 conv, and the
affine after it as one ``torch.addcmul``. Where torch's kernel is the faster (rows of many
channels, small tensors: ``runs_norm_kernel``), the module calls it instead.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .grouped import grouped_limits
from .nn import Conv2d

__all__ = ["ChannelLayerNorm", "runs_norm_kernel", "KERNEL_MAX_CHANNELS", "KERNEL_MIN_ELEMENTS"]

# Fitted on ConvNeXt-T's five LayerNorm2d calls at batch 1, 8 and 32 on an H200
# (benchmarks/experiments/channel_ops_ab_H200.json): torch's kernel, a block per row, wastes
# most of it on rows of 96 or 192 channels, and is as fast as ours (two launches) from 384 on;
# tensors under ~1.2M elements are launch-bound either way, and ours launches twice.
KERNEL_MAX_CHANNELS = 256
KERNEL_MIN_ELEMENTS = 1 << 21


def runs_norm_kernel(channels: int, elements: int) -> bool:
    """Whether ``ChannelLayerNorm`` normalizes an input of ``elements`` values over
    ``channels`` channels on the grouped kernel (else torch's ``F.layer_norm``): at most
    ``KERNEL_MAX_CHANNELS`` channels and at least ``KERNEL_MIN_ELEMENTS`` elements."""
    return channels <= KERNEL_MAX_CHANNELS and elements >= KERNEL_MIN_ELEMENTS


class ChannelLayerNorm(nn.Module):
    """``F.layer_norm`` over dim 1 of an NCHW input, as torchvision's ``LayerNorm2d`` computes it:
    ``(x - mean) / sqrt(var + eps) * weight + bias`` per pixel, over its channels.

    4-D inputs of the module's dtype that ``runs_norm_kernel`` takes run the normalization as
    ``cute_conv.nn.Conv2d`` runs a normalizing depthwise conv, on the grouped kernel (CUDA
    tensors only, as the fused convs), here of an identity filter, then the affine as one
    ``torch.addcmul`` (``kernel_forward``). Other inputs go to ``F.layer_norm`` on the NHWC view
    (``torch_forward``). The output is channels_last for channels_last inputs either way.

    Args:
        channels: C, even, at most ``MAX_NORM_CHANNELS`` (2048; 1024 where C is not a
            multiple of 8 but of 4, 512 where it is of 2 only).
        eps: the LayerNorm's eps, a float >= 0.
        weight, bias: the LayerNorm's ``[C]`` affine (copied), or None.
        dtype: bfloat16 or float16, the inputs' dtype.

    Raises:
        ValueError, TypeError: channels the grouped kernel does not take, what
            ``cute_conv.nn.Conv2d`` refuses of a depthwise conv of ``channels`` channels with
            ``channel_norm_eps=eps`` (a non-number ``eps``, a dtype other than 16 bits), or
            an affine that is not a tensor of shape ``[channels]``.
    """

    def __init__(
        self,
        channels: int,
        eps: float,
        weight: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        *,
        dtype: torch.dtype = torch.bfloat16,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        grouped_limits(channels, channels, channels)  # the kernel's, or a ValueError naming it
        self.norm = Conv2d(channels, channels, 1, groups=channels, bias=False, dtype=dtype,
                           device=device, channel_norm_eps=eps)  # fmt: skip
        self.norm.weight.requires_grad_(False)
        with torch.no_grad():
            self.norm.weight.fill_(1)
        self.eps = eps
        for name, value in (("weight", weight), ("bias", bias)):
            if value is not None and not isinstance(value, torch.Tensor):
                raise TypeError(f"{name} must be a tensor or None, got {type(value).__name__}")
            if value is not None and tuple(value.shape) != (channels,):
                raise ValueError(f"{name} must have shape ({channels},), got {tuple(value.shape)}")
            param = None if value is None else nn.Parameter(value.detach().to(dtype).clone())
            self.register_parameter(name, param)

    @property
    def channels(self) -> int:
        return self.norm.out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (
            x.dim() == 4
            and x.dtype == self.norm.weight.dtype
            and runs_norm_kernel(self.channels, x.numel())
        ):
            return self.kernel_forward(x)
        return self.torch_forward(x)

    def torch_forward(self, x: torch.Tensor) -> torch.Tensor:
        """torch's ``F.layer_norm`` over the channels of the NHWC view of ``x``."""
        nhwc = F.layer_norm(x.permute(0, 2, 3, 1), (self.channels,), self.weight, self.bias,
                            self.eps)  # fmt: skip
        return nhwc.permute(0, 3, 1, 2)

    def kernel_forward(self, x: torch.Tensor) -> torch.Tensor:
        """The norm on the grouped kernel, then the affine (``x``: 4-D, the module's dtype)."""
        y = self.norm(x)
        weight = None if self.weight is None else self.weight.view(1, -1, 1, 1)
        bias = None if self.bias is None else self.bias.view(1, -1, 1, 1)
        if weight is not None and bias is not None:
            return torch.addcmul(bias, y, weight)
        if weight is not None:
            return y * weight
        return y if bias is None else y + bias

    def extra_repr(self) -> str:
        return f"{self.channels}, eps={self.eps:g}, affine={self.weight is not None}"
