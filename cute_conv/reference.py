"""A float32 reference Conv2D forward in plain torch, for tests and benchmarks.

Takes the same NHWC activation / KRSC filter and the same ``stride``/``padding``/``dilation``
forms as the kernels, including asymmetric padding. The convolution runs in true float32: cuDNN
is disabled (its algorithms may use TF32 or Winograd) and TF32 matmul is off for the duration of
the call, so the result does not depend on global torch flags. Works on CPU and CUDA tensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

from .problem import normalize_padding, normalize_pair

__all__ = ["TORCH_ACTIVATIONS", "conv2d_reference"]

# The kernels' activations (``cute_conv.ACTIVATIONS``) as torch functions, by the same names.
TORCH_ACTIVATIONS = {
    None: lambda y: y,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "leaky_relu": lambda y: F.leaky_relu(y, 0.01),
    "mish": F.mish,
    "relu6": F.relu6,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
}


@contextlib.contextmanager
def _ieee_fp32() -> Iterator[None]:
    """Disable cuDNN and TF32 (cuDNN and cuBLAS) and restore the caller's flags afterwards."""
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_tf32
    try:
        matmul.allow_tf32 = False
        with torch.backends.cudnn.flags(enabled=False, allow_tf32=False):
            yield
    finally:
        matmul.allow_tf32 = saved


def conv2d_reference(
    activation: torch.Tensor,
    filter: torch.Tensor,
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | Sequence[Sequence[int]] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
) -> torch.Tensor:
    """Return ``conv(activation, filter)`` as a contiguous float32 ``[N, P, Q, K]`` tensor.

    Args:
        activation: ``[N, H, W, C]`` tensor of any floating dtype.
        filter: ``[K, R, S, C / groups]`` tensor of any floating dtype.
        stride: int or ``(h, w)``.
        padding: int, ``(h, w)``, or ``((top, bottom), (left, right))``; zero padding.
        dilation: int or ``(h, w)``.
        groups: as ``torch.nn.functional.conv2d`` takes it.
    """
    for name, t in (("activation", activation), ("filter", filter)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be a rank-4 tensor, got shape {tuple(t.shape)}")
    stride_hw = normalize_pair("stride", stride)
    dilation_hw = normalize_pair("dilation", dilation)
    (top, bottom), (left, right) = normalize_padding(padding)

    x = activation.float().permute(0, 3, 1, 2)  # NCHW
    w = filter.float().permute(0, 3, 1, 2)  # KCRS
    x = F.pad(x, (left, right, top, bottom))  # F.pad lists the last dimension first
    with _ieee_fp32():
        y = F.conv2d(x, w, stride=stride_hw, dilation=dilation_hw, groups=groups)
    return y.permute(0, 2, 3, 1).contiguous()
