"""``ChannelScale``: a squeeze-excitation block's closing ``scale * x``, for ``optimize``.

torch multiplies an ``[N, C, 1, 1]`` scale into a channels_last ``[N, C, H, W]`` map on its
generic broadcasting kernel, a fraction of the memory rate. Here it is one pass of
``kernels.common.channel_scale`` (16-byte vectors, the product rounded once, as torch's), an op
(``cute_conv::scale_channels``) under ``torch.compile``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
from torch import fx, nn

from .compile import compile_channel_scale
from .cuda_context import current_raw_stream, device_arch, on_device
from .kernels.common.channel_rows import VECTOR_BYTES

__all__ = ["ChannelScale", "kernel_takes", "match_excitation_scale"]

_KERNEL_DTYPES = (torch.bfloat16, torch.float16)


def kernel_takes(scale: torch.Tensor, x: torch.Tensor) -> bool:
    """Whether the kernel computes ``scale * x``: ``_shapes_fit`` (CUDA tensors of one 16-bit
    dtype that need no grad, ``scale`` of ``x``'s ``[N, C, 1, 1]``), ``x`` channels_last with
    16-byte channel rows, ``scale``'s channels of an image adjacent and images C apart
    (contiguous, or channels_last), both 16-byte aligned."""
    if not _shapes_fit(scale, x):
        return False
    n, c = x.shape[:2]
    return (
        x.is_contiguous(memory_format=torch.channels_last)
        and (c == 1 or scale.stride(1) == 1)
        and (n == 1 or scale.stride(0) == c)
        and c * x.element_size() % VECTOR_BYTES == 0
        and x.data_ptr() % VECTOR_BYTES == 0
        and scale.data_ptr() % VECTOR_BYTES == 0
    )


@torch.library.custom_op("cute_conv::scale_channels", mutates_args=())
def _scale_channels_op(scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``scale * x`` as an op: the kernel where it takes them, else torch's product (made
    channels_last, as the fake implementation says)."""
    if not kernel_takes(scale, x):
        return (scale * x).contiguous(memory_format=torch.channels_last)
    n, c, h, w = x.shape
    out = torch.empty_like(x, memory_format=torch.channels_last)
    if out.numel():
        device_index = x.get_device()
        kernel = compile_channel_scale(device_arch(device_index), x.dtype)
        vectors = c * x.element_size() // VECTOR_BYTES
        with on_device(device_index):
            kernel.launch(x.data_ptr(), scale.data_ptr(), out.data_ptr(), n, h * w, vectors,
                          current_raw_stream(device_index))  # fmt: skip
    return out


@_scale_channels_op.register_fake
def _(scale, x):
    return torch.empty_like(x, memory_format=torch.channels_last)


class ChannelScale(nn.Module):
    """``scale * x`` of an ``[N, C, 1, 1]`` scale and an ``[N, C, H, W]`` map (a
    squeeze-excitation block's output). Where ``kernel_takes`` them, one pass of the kernel
    (``cute_conv::scale_channels``, also under ``torch.compile`` for CUDA maps that need no
    grad: the op checks the rest when it runs), channels_last out; anything else (other
    shapes and dtypes, CPU tensors, inputs that need grad) is torch's ``scale * x``."""

    def forward(self, scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        compiling = torch.compiler.is_compiling() and _shapes_fit(scale, x)
        if compiling or kernel_takes(scale, x):
            return torch.ops.cute_conv.scale_channels(scale, x)
        return scale * x


def _shapes_fit(scale: torch.Tensor, x: torch.Tensor) -> bool:
    """What ``kernel_takes`` checks of the shapes, dtypes, devices and grad (no data
    pointers or strides: what a fake tensor under ``torch.compile`` has)."""
    return (
        isinstance(scale, torch.Tensor)
        and isinstance(x, torch.Tensor)
        and x.is_cuda
        and x.dim() == 4
        and x.dtype in _KERNEL_DTYPES
        and scale.dtype == x.dtype
        and scale.device == x.device
        and tuple(scale.shape) == (*x.shape[:2], 1, 1)
        and not (x.requires_grad or scale.requires_grad)
    )


_MULS = (operator.mul, torch.mul)
_PATH_TO_POOL = 8  # nodes from the scale back to the pool: a squeeze-excitation's are 3-5


def match_excitation_scale(
    node: fx.Node, is_global_pool: Callable[[fx.Node], bool]
) -> tuple[fx.Node, fx.Node] | None:
    """``(scale, x)`` where ``node`` is ``scale * x`` (or ``x * scale``) and ``scale`` is
    computed from a global average pool of ``x`` alone (``is_global_pool(pool_node)``), each
    step reading the step before and no other value (its first argument): a
    squeeze-excitation block's closing multiply. Else None."""
    if node.op != "call_function" or node.target not in _MULS or node.kwargs:
        return None
    if len(node.args) != 2 or not all(isinstance(a, fx.Node) for a in node.args):
        return None
    for scale, x in (node.args, node.args[::-1]):
        step = scale
        for _ in range(_PATH_TO_POOL):
            if is_global_pool(step) and step.args[:1] == (x,):
                return scale, x
            inputs = [a for a in (*step.args, *step.kwargs.values()) if isinstance(a, fx.Node)]
            if len(inputs) != 1 or inputs[0] is not step.args[0] or inputs[0] is x:
                break  # the scale's steps each read the step before alone
            step = inputs[0]
    return None
