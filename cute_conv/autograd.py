"""Gradients of the fused conv: the forward is cute_conv's kernel, the backward is torch's.

    z   = alpha * conv(x, filter) * scale + bias  [+ beta * source]   (before_activation)
    out = act(z)                                  [+ beta * source]   (after_activation)

The backward runs ``aten.convolution_backward`` (cuDNN on a GPU) for ``x`` and ``filter``,
reductions over N, P, Q for ``bias`` and ``scale``, and aten's own derivative kernels for the
activation (``gelu_backward``, ``silu_backward``, ...: torch's formulas, which the kernel's
activations in ``kernels/common/epilogue.py`` follow). ``setup_context`` and ``backward`` are
registered on the ops by ``cute_conv.ops`` (``torch.library.register_autograd``), so the same
backward serves eager calls, ``torch.compile`` and ``torch.export``.

What is saved and what is recomputed: the inputs are saved (they are alive anyway, and the
conv backward needs ``x`` and ``filter``). The pre-activation ``z`` is not saved (it would cost
a float32 output-sized tensor per call): where torch's own autograd derives the activation's
derivative from its output (relu, leaky_relu, sigmoid, tanh) and the output is ``act(z)`` (no
residual after the activation), the output is saved and used; otherwise (gelu, gelu_tanh,
silu, a residual added after the activation, or a ``scale`` that needs its gradient, which
needs ``conv`` itself) the backward recomputes ``conv`` with one torch convolution.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from .kernels.common.epilogue import LEAKY_RELU_SLOPE

__all__ = ["EpilogueArgs", "conv2d_fprop_backward", "conv_operands", "derives_from_output"]

aten = torch.ops.aten


class EpilogueArgs(NamedTuple):
    """The non-tensor arguments of a call, as the ops' schemas carry them."""

    stride: list[int]  # [h, w]
    padding: list[int]  # [top, bottom, left, right]
    dilation: list[int]  # [h, w]
    alpha: float
    beta: float
    activation: str | None
    residual_order: str
    groups: int = 1  # a grouped conv's (``cute_conv.grouped``)
    # A grouped conv's output normalized over its channels with this epsilon (no activation
    # or residual then), else None.
    channel_norm_eps: float | None = None

    def residual_before_activation(self, has_source: bool) -> bool:
        return has_source and self.beta != 0 and self.residual_order == "before_activation"

    def output_is_activation(self, has_source: bool) -> bool:
        """Whether ``out == act(z)``: no residual added after the activation."""
        return not has_source or self.beta == 0 or self.residual_order == "before_activation"


# d act(z)/dz * grad, from z (float32).
_GRAD_FROM_INPUT: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "relu": lambda g, z: aten.threshold_backward(g, z, 0.0),
    "leaky_relu": lambda g, z: aten.leaky_relu_backward(g, z, LEAKY_RELU_SLOPE, False),
    "gelu": lambda g, z: aten.gelu_backward(g, z, approximate="none"),
    "gelu_tanh": lambda g, z: aten.gelu_backward(g, z, approximate="tanh"),
    "silu": lambda g, z: aten.silu_backward(g, z),
    "sigmoid": lambda g, z: aten.sigmoid_backward(g, torch.sigmoid(z)),
    "tanh": lambda g, z: aten.tanh_backward(g, torch.tanh(z)),
    "mish": lambda g, z: aten.mish_backward(g, z),
    "relu6": lambda g, z: aten.hardtanh_backward(g, z, 0.0, 6.0),
    "hardswish": lambda g, z: aten.hardswish_backward(g, z),
    "hardsigmoid": lambda g, z: aten.hardsigmoid_backward(g, z),
}
# The same from y = act(z), for the activations whose derivative torch takes from the output.
_GRAD_FROM_OUTPUT: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "relu": lambda g, y: aten.threshold_backward(g, y, 0.0),  # y > 0 exactly where z > 0
    "leaky_relu": lambda g, y: aten.leaky_relu_backward(g, y, LEAKY_RELU_SLOPE, True),
    "sigmoid": lambda g, y: aten.sigmoid_backward(g, y),
    "tanh": lambda g, y: aten.tanh_backward(g, y),
}


def derives_from_output(args: EpilogueArgs, has_source: bool, scale_needs_grad: bool) -> bool:
    """Whether the backward takes the activation's derivative from the saved output (and so
    needs no recomputed conv): see the module docstring."""
    return (
        args.activation in _GRAD_FROM_OUTPUT
        and args.output_is_activation(has_source)
        and not scale_needs_grad
    )


def conv2d_fprop_backward(
    grad_out: torch.Tensor,
    x: torch.Tensor,
    filter: torch.Tensor,  # noqa: A002
    bias: torch.Tensor | None,
    scale: torch.Tensor | None,
    *,
    source_dtype: torch.dtype | None,
    source: torch.Tensor | None,
    out: torch.Tensor | None,
    args: EpilogueArgs,
    needs_grad: tuple[bool, bool, bool, bool, bool],
) -> tuple[torch.Tensor | None, ...]:
    """The gradients of ``(x, filter, source, bias, scale)`` (None where not needed or absent).

    ``source_dtype`` is the residual's dtype (None: the call had none); ``source`` its values,
    needed only where ``z`` is recomputed with the residual before the activation. ``out`` is
    the forward's output where ``derives_from_output`` said so, else None (the backward then
    recomputes ``conv``). Tensors are NHWC / KRSC / NPQK, as in the forward.
    """
    need_x, need_filter, need_source, need_bias, need_scale = needs_grad
    has_source = source_dtype is not None
    grad = _wide(grad_out)
    x_nchw, w_kcrs, conv_padding, padded = conv_operands(x, filter, args.padding)
    conv = None
    normalized = args.channel_norm_eps is not None
    if need_scale or normalized or (args.activation is not None and out is None):
        # In the input dtype: the tensor-core conv the forward also runs; z is float32 from it.
        conv = aten.convolution(
            x_nchw, w_kcrs, None, args.stride, conv_padding, args.dilation, False, [0, 0],
            args.groups,
        )
        conv = _wide(conv.permute(0, 2, 3, 1))
    if normalized:
        grad_z = _channel_norm_grad(grad, _pre_activation(conv, None, bias, scale, args),
                                    args.channel_norm_eps)  # fmt: skip
    elif args.activation is None:
        grad_z = grad
    elif out is not None:
        grad_z = _GRAD_FROM_OUTPUT[args.activation](grad, _wide(out))
    else:
        z = _pre_activation(conv, source, bias, scale, args)
        grad_z = _GRAD_FROM_INPUT[args.activation](grad, z)

    grad_source = grad_bias = grad_scale = None
    if need_source and has_source:
        into_source = grad_z if args.residual_before_activation(has_source) else grad
        grad_source = (into_source * args.beta).to(source_dtype)
    if need_bias and bias is not None:
        grad_bias = grad_z.sum((0, 1, 2)).to(bias.dtype)
    if need_scale and scale is not None:
        grad_scale = ((grad_z * conv).sum((0, 1, 2)) * args.alpha).to(scale.dtype)

    grad_x = grad_filter = None
    if need_x or need_filter:
        grad_conv = grad_z * args.alpha
        if scale is not None:
            grad_conv = grad_conv * _wide(scale)
        grad_conv = grad_conv.to(x.dtype).permute(0, 3, 1, 2)
        grad_x, grad_filter, _ = aten.convolution_backward(
            grad_conv, x_nchw, w_kcrs, None, args.stride, conv_padding, args.dilation,
            False, [0, 0], args.groups, [need_x, need_filter, False],
        )  # fmt: skip
        if grad_x is not None:
            if padded:
                top, _, left, _ = args.padding
                grad_x = grad_x[:, :, top : top + x.shape[1], left : left + x.shape[2]]
            grad_x = grad_x.permute(0, 2, 3, 1)
        if grad_filter is not None:
            grad_filter = grad_filter.permute(0, 2, 3, 1)
    return grad_x, grad_filter, grad_source, grad_bias, grad_scale


def _channel_norm_grad(grad: torch.Tensor, z: torch.Tensor, eps: float) -> torch.Tensor:
    """The gradient into ``z`` of ``(z - mean) * rsqrt(var + eps)`` over the last dim
    (torch's layer-norm derivative, without an affine)."""
    z = z.detach().requires_grad_()
    with torch.enable_grad():
        y = F.layer_norm(z, z.shape[-1:], eps=eps)
    return torch.autograd.grad(y, z, grad)[0]


def _wide(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32, or float64 if it is (the CPU tests' precision)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def conv_operands(
    x: torch.Tensor,
    filter: torch.Tensor,  # noqa: A002
    padding: list[int],
) -> tuple[torch.Tensor, torch.Tensor, list[int], bool]:
    """``x`` and ``filter`` as torch's conv takes them (NCHW / KCRS views, no copy), the
    symmetric padding to pass it, and whether ``x`` was padded instead: asymmetric padding is
    applied to ``x`` explicitly (a copy), as torch's conv pads both sides alike."""
    top, bottom, left, right = padding
    x_nchw, w_kcrs = x.permute(0, 3, 1, 2), filter.permute(0, 3, 1, 2)
    if top == bottom and left == right:
        return x_nchw, w_kcrs, [top, left], False
    return F.pad(x_nchw, (left, right, top, bottom)), w_kcrs, [0, 0], True


def _pre_activation(
    conv: torch.Tensor,
    source: torch.Tensor | None,
    bias: torch.Tensor | None,
    scale: torch.Tensor | None,
    args: EpilogueArgs,
) -> torch.Tensor:
    """``z`` in float32 (or float64), in the kernel's order of operations."""
    z = conv * args.alpha
    if scale is not None:
        z = z * _wide(scale)
    if bias is not None:
        z = z + _wide(bias)
    if args.residual_before_activation(source is not None):
        z = z + _wide(source) * args.beta
    return z


def setup_context(
    ctx,
    tensors: tuple[torch.Tensor | None, ...],
    args: EpilogueArgs,
    output: torch.Tensor,
    needs_grad: tuple[bool, bool, bool, bool, bool],
) -> None:
    """Save what ``backward`` needs; ``tensors`` is ``(x, filter, source, bias, scale)``,
    ``needs_grad`` which of them need a gradient."""
    x, filter, source, bias, scale = tensors  # noqa: A001
    has_source = source is not None
    from_output = derives_from_output(args, has_source, scale_needs_grad=needs_grad[4])
    # The source's values enter the backward only through a recomputed z (before_activation).
    recomputes_z = args.activation is not None and not from_output
    if not (recomputes_z and args.residual_before_activation(has_source)):
        source = None
    ctx.save_for_backward(x, filter, bias, scale, source, output if from_output else None)
    ctx.source_dtype = tensors[2].dtype if has_source else None
    ctx.epilogue_args = args


def backward(
    ctx, grad_out: torch.Tensor, needs_grad: tuple[bool, bool, bool, bool, bool]
) -> tuple[torch.Tensor | None, ...]:
    """Gradients of ``(x, filter, source, bias, scale)`` (``needs_grad`` says which are wanted)
    from what ``setup_context`` saved."""
    x, filter, bias, scale, source, out = ctx.saved_tensors  # noqa: A001
    return conv2d_fprop_backward(
        grad_out, x, filter, bias, scale, source_dtype=ctx.source_dtype, source=source,
        out=out, args=ctx.epilogue_args, needs_grad=needs_grad,
    )  # fmt: skip
