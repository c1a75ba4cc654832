"""The public conv functions on torch (or DLPack) tensors.

The input tensors are positional-only: ``activation=`` names the epilogue's nonlinearity, as in
the rest of the API, so the activation *tensor* is simply the first argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

import torch

from . import dispatch, tuning
from . import ops as _ops  # the torch.library ops: the compile / autograd path
from .config import Conv2dConfig
from .kernels.common.grouped_direct import GroupedDirectConfig
from .kernels.common.pointwise_gemv import PointwiseGemvConfig

__all__ = ["autotune", "conv2d_fprop", "conv2d_fprop_with_residual"]

Geometry = int | Sequence[int]


def conv2d_fprop(
    x: Any,
    filter: Any,  # noqa: A002 - the conv's own word for it
    /,
    *,
    stride: Geometry = 1,
    padding: Geometry | Sequence[Sequence[int]] = 0,
    dilation: Geometry = 1,
    alpha: float = 1.0,
    bias: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    activation: str | None = None,
    epilogue_fn: Callable | None = None,
    out: Any = None,
    out_dtype: torch.dtype | None = None,
    config: Conv2dConfig | PointwiseGemvConfig | GroupedDirectConfig | None = None,
    stream: torch.cuda.Stream | None = None,
    x_scale: torch.Tensor | None = None,
    w_scale: torch.Tensor | None = None,
    out_scale: torch.Tensor | None = None,
    out_amax: torch.Tensor | None = None,
) -> torch.Tensor:
    """Conv2D forward propagation with a fused epilogue, in one kernel:

        out = epilogue_fn(activation(alpha * conv2d(x, filter) * scale + bias))

    Args:
        x: the activation, ``[N, H, W, C]`` contiguous (NHWC), bfloat16 or float16, or fp8
            (float8_e4m3fn or float8_e5m2, with ``x_scale`` and ``w_scale``).
        filter: ``[K, R, S, C]`` contiguous (KRSC), same dtype as ``x`` (fp8: either fp8
            dtype).
        stride, dilation: int or ``(h, w)``.
        padding: int, ``(h, w)`` or ``((top, bottom), (left, right))``.
        alpha: scales the accumulator.
        bias, scale: optional per-output-channel vectors of length K (float32, bfloat16 or
            float16; applied in float32). ``scale`` and ``bias`` together fold a batch norm.
        activation: None or one of "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh",
            "leaky_relu" (negative slope 0.01), "mish", "relu6", "hardswish", "hardsigmoid".
        epilogue_fn: a function of one float32 ``cute.TensorSSA`` (the value after
            ``activation``) returning one of the same shape, compiled into the kernel: use
            arithmetic and ``cutlass.cute.math`` (``lambda y: y * cute.math.tanh(y)``).
            Compiled once per function object.
        out: optional ``[N, P, Q, K]`` output to write: contiguous, or a channel slice of
            a contiguous ``[N, P, Q, L]`` tensor (``buf[..., a:a + K]``, L times the element
            size a multiple of 16 bytes), written in place (a concatenation's part without
            a copy). Any DLPack tensor is accepted for ``x``, ``filter`` and ``out`` when
            ``out`` is given.
        out_dtype: bfloat16, float16 or float32, or float8_e4m3fn from any inputs (with
            ``out_scale``); defaults to ``out.dtype`` or the input dtype (bfloat16 for fp8
            inputs).
        config: kernel configuration (a ``PointwiseGemvConfig`` runs the CUDA-core kernel
            of 1x1 convs without padding, a ``GroupedDirectConfig(C, K, filter_krsc=True)``
            the CUDA-core direct conv, with ``vector=4``, 2 or 1 where K is not a multiple
            of 8: the widest that divides it); defaults to the CUDA-core kernel's for 1x1 convs of
            a few output pixels (``gemv_rule.pointwise_gemv_config``), else the direct
            conv's for few-channel stems (``direct_rule.direct_dense_config``), else to an
            autotuned choice if one is stored, else
            the heuristic's (``untuned.heuristic_config``: ``default_config`` of the kernel
            problem, operands gathered for small odd-C convs, 32-wide unsplit tiles for
            unstaged and gathered convs of a few M tiles, ``small_grid_rules.small_m_config``).
        stream: CUDA stream to run on; defaults to the current torch stream of ``x``'s device.
        x_scale, w_scale: fp8 inputs only, and then required: one-element float32 tensors on
            ``x``'s device, the per-tensor scales of ``x`` and ``filter`` (a real value is the
            fp8 value times its scale). The kernel reads them, so a CUDA graph replays with
            whatever they hold. Per-output-channel filter scales go in ``scale``.
        out_scale: float8_e4m3fn output only, and then required: a one-element float32
            tensor; the kernel stores ``result / out_scale``, saturated to +-448.
        out_amax: optional one-element float32 tensor on ``x``'s device, with any dtypes: the
            kernel raises it to the largest magnitude of the results it stores (before
            ``out_scale`` and the rounding to the output dtype; a NaN result makes it NaN),
            e.g. for the next layer's fp8 scale without a pass over the output. It is not
            reset: zero it to measure one call, or keep it over several.

    Returns:
        ``out`` (or a new ``[N, P, Q, K]`` tensor). Accumulation is in float32; fp8 inputs
        multiply the accumulator by ``alpha * x_scale * w_scale`` first.

    Raises:
        TypeError, ValueError: on bad input, before anything is launched or written.

    C not a multiple of 8 (fp8: 16) is zero-padded on the device (an extra copy of ``x`` and
    ``filter``); any K runs directly (output rows TMA cannot store are stored by the
    epilogue's threads).

    Under torch.compile / torch.export, or when an input requires grad, the call runs as the
    op ``torch.ops.cute_conv.conv2d_fprop`` (differentiable; see ``cute_conv.ops``).
    """
    fp8_scales = _scale_tensors(x_scale, w_scale, out_scale, out_amax)
    if _ops.takes_torch_path(x, filter, None, bias, scale, out):
        return _ops.call_op(
            x, filter, None, bias, scale, out, stream, stride, padding, dilation, alpha, 0.0,
            _AFTER, activation, epilogue_fn, out_dtype, config, fp8_scales,
        )  # fmt: skip
    return dispatch.conv2d(
        x, filter, None, bias, scale, out, stream,
        (stride, padding, dilation, alpha, 0.0, _AFTER, activation, epilogue_fn, out_dtype, config),
        fp8_scales,
    )  # fmt: skip


def conv2d_fprop_with_residual(
    x: Any,
    filter: Any,  # noqa: A002
    source: Any,
    /,
    *,
    beta: float = 1.0,
    residual_order: str = "after_activation",
    stride: Geometry = 1,
    padding: Geometry | Sequence[Sequence[int]] = 0,
    dilation: Geometry = 1,
    alpha: float = 1.0,
    bias: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    activation: str | None = None,
    epilogue_fn: Callable | None = None,
    out: Any = None,
    out_dtype: torch.dtype | None = None,
    config: Conv2dConfig | PointwiseGemvConfig | GroupedDirectConfig | None = None,
    stream: torch.cuda.Stream | None = None,
    x_scale: torch.Tensor | None = None,
    w_scale: torch.Tensor | None = None,
    out_scale: torch.Tensor | None = None,
    out_amax: torch.Tensor | None = None,
    source_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Conv2D forward propagation with a fused epilogue and residual add, in one kernel:

        out = epilogue_fn(activation(alpha * conv2d(x, filter) * scale + bias)) + beta * source

    or, with ``residual_order="before_activation"`` (ResNet's ``relu(bn(conv(x)) + identity)``):

        out = epilogue_fn(activation(alpha * conv2d(x, filter) * scale + bias + beta * source))

    ``source`` is ``[N, P, Q, K]``, contiguous, of the output dtype; a dedicated warp loads it
    by TMA while the mainloop runs. ``out`` may be ``source`` itself (an in-place residual);
    when ``out`` overlaps ``x`` or ``filter`` (``x = x + conv(x)``) the result goes through a
    scratch tensor first. With ``beta == 0`` the source is not read and the result is
    bit-identical to ``conv2d_fprop``. With fp8 output the source is fp8 too, read as it
    is: its scale is ``beta``, or ``source_scale``, a one-element float32 tensor on the
    device that the kernel reads (``beta * source_scale`` multiplies the source; a CUDA
    graph replays with its current value). The other arguments are those of
    ``conv2d_fprop``.
    """
    fp8_scales = _scale_tensors(x_scale, w_scale, out_scale, out_amax, source_scale)
    if _ops.takes_torch_path(x, filter, source, bias, scale, out):
        return _ops.call_op(
            x, filter, source, bias, scale, out, stream, stride, padding, dilation, alpha, beta,
            residual_order, activation, epilogue_fn, out_dtype, config, fp8_scales,
        )  # fmt: skip
    return dispatch.conv2d(
        x, filter, source, bias, scale, out, stream,
        (stride, padding, dilation, alpha, beta, residual_order, activation, epilogue_fn,
         out_dtype, config),
        fp8_scales,
    )  # fmt: skip


_AFTER = "after_activation"  # conv2d_fprop's residual order: there is no residual


def _scale_tensors(x_scale, w_scale, out_scale, out_amax, source_scale=None) -> tuple | None:
    """The call's scale tensors as ``dispatch.conv2d`` takes them: None when all are."""
    if x_scale is w_scale is out_scale is out_amax is source_scale is None:
        return None
    return (x_scale, w_scale, out_scale, out_amax, source_scale)


def autotune(x_shape: Sequence[int], filter_shape: Sequence[int], **options: Any) -> Conv2dConfig:
    """``tuning.autotune`` (see there for the options and what is stored), timing each
    candidate config through the direct path of ``conv2d_fprop`` on scratch tensors."""
    return tuning.autotune(x_shape, filter_shape, make_runner=dispatch.config_runner, **options)
