"""Grouped and depthwise convs with the fused epilogue, on the CUDA-core direct kernel.

    out = act(alpha * conv(x, filter, groups) * scale + bias) [+ beta * source]

``grouped_conv2d`` takes the package's layouts: ``x`` NHWC, ``filter`` ``[K, R, S, C / groups]``
(KRSC of one group's channels, as ``torch.nn.Conv2d(groups=...)``'s weight permuted), the
output NPQK. The kernel (``kernels/common/grouped_direct.py``) reads the filter staged
``[R, S, C / groups, K]``: ``stage_filter`` makes it, once per call, or once per weight in
``cute_conv.nn.Conv2d`` (which passes it with ``filter_layout="rsck"``).

Under torch.compile / torch.export, or when an input requires grad, a call runs as the op
``torch.ops.cute_conv.grouped_conv2d`` (its gradients are torch's, as ``cute_conv.autograd``
derives them for the plain conv).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .autograd import EpilogueArgs
from .autograd import backward as _backward
from .autograd import setup_context as _setup_context
from .compile import CompiledConv2d, compile_kernel, forget_on_clear, kernel_scalars
from .cuda_context import current_raw_stream, device_arch, on_device
from .dispatch import freeze_arg, out_overlaps_inputs, tensor_key
from .dtypes import dtype_name
from .epilogue import RESIDUAL_ORDERS, kernel_vector_dtype, validate_epilogue_args
from .grouped_rule import channel_split_for, pixels_per_thread
from .kernels.common.grouped_direct import (
    DEPTHWISE_VECTORS,
    MAX_GROUP_IN,
    MAX_NORM_CHANNELS,
    MAX_PIXELS,
    MAX_WINDOW,
    NORM_THREADS,
    VECTOR,
    GroupedDirectConfig,
    check_channel_split,
)
from .ops import meta_stand_ins, padding_pairs, takes_torch_path
from .plan_cache import PlanCache
from .problem import Conv2dProblemShape, normalize_padding, normalize_pair
from .staging import span_bytes
from .validation import (
    ALIGNMENT_BYTES,
    MAX_GEMM_M,
    channel_slice_stride,
    check_alignment,
    check_tensor,
    out_pixel_stride,
)

__all__ = [
    "check_channel_norm_eps",
    "check_groups",
    "check_norm_channels",
    "grouped_conv2d",
    "grouped_limits",
    "stage_filter",
    "vector_operand",
]

SIXTEEN_BIT_DTYPES = (torch.bfloat16, torch.float16)
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_AFTER = RESIDUAL_ORDERS[0]
Tensor = torch.Tensor


def check_groups(in_channels: int, out_channels: int, groups: int) -> None:
    """Raise a ``ValueError`` unless the channel counts and ``groups`` are positive ints and
    ``groups`` divides both (what any grouped conv needs)."""
    for name, value in (("in_channels", in_channels), ("out_channels", out_channels),
                        ("groups", groups)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if in_channels % groups or out_channels % groups:
        raise ValueError(
            f"groups={groups} must divide in_channels={in_channels} and "
            f"out_channels={out_channels}"
        )


def grouped_limits(in_channels: int, out_channels: int, groups: int) -> GroupedDirectConfig:
    """The kernel config of a conv of these channels and groups, or a ``ValueError`` naming
    the limit: ``check_groups``; a group has at most ``MAX_GROUP_IN`` input channels; one
    input and one output channel per group (depthwise, C even: a thread takes 8 channels, or 4
    or 2 where C is not a multiple of 8), or output channels per group a multiple of 8."""
    check_groups(in_channels, out_channels, groups)
    group_in, group_out = in_channels // groups, out_channels // groups
    if group_in > MAX_GROUP_IN:
        raise ValueError(
            f"groups={groups}: {group_in} input channels per group; the grouped kernel takes "
            f"at most {MAX_GROUP_IN}"
        )
    depthwise = group_in == group_out == 1
    if depthwise:
        vector = next((v for v in DEPTHWISE_VECTORS if out_channels % v == 0), None)
        if vector is None:
            raise ValueError(
                f"a depthwise conv of {out_channels} channels: the kernel needs a multiple of "
                f"{DEPTHWISE_VECTORS[-1]}"
            )
        return GroupedDirectConfig(1, 1, vector=vector)
    if group_out % VECTOR:
        raise ValueError(
            f"groups={groups}: {group_out} output channels per group; the grouped kernel needs "
            f"a multiple of {VECTOR} (or one input and one output channel per group: depthwise)"
        )
    return GroupedDirectConfig(group_in, group_out)


def check_norm_channels(name: str, channels: int) -> None:
    """Raise a ``ValueError`` naming ``name`` unless the kernel normalizes ``channels`` output
    channels (``channel_norm_eps``): a CTA of ``NORM_THREADS`` holds a pixel's channels, so
    at most ``MAX_NORM_CHANNELS`` (2048) at 8 channels per thread, 1024 at 4, 512 at 2."""
    vector = next((v for v in DEPTHWISE_VECTORS if channels % v == 0), 1)
    most = NORM_THREADS * vector
    if channels > most:
        odd = "" if most == MAX_NORM_CHANNELS else f" ({channels} is not a multiple of 8)"
        raise ValueError(
            f"channel_norm_eps: {name}={channels}; the kernel normalizes at most {most}{odd}"
        )


def row_window(problem: Conv2dProblemShape, config: GroupedDirectConfig) -> int:
    """The depthwise row window the kernel compiles in for ``problem`` (its filter width) where
    a filter row's taps read adjacent input columns (stride and dilation 1 along the row) and
    the width is at most ``MAX_WINDOW``; else 0 (the taps walked at run time)."""
    adjacent = problem.stride[1] == 1 and problem.dilation[1] == 1
    return problem.S if config.depthwise and adjacent and problem.S <= MAX_WINDOW else 0


def stage_filter(filter: Tensor) -> Tensor:  # noqa: A002
    """The ``[R, S, C / groups, K]`` filter the kernel reads, from a KRSC one (a copy)."""
    return filter.permute(1, 2, 3, 0).contiguous()


def grouped_conv2d(
    x: Tensor,
    filter: Tensor,  # noqa: A002
    /,
    *,
    groups: int,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | Sequence[Sequence[int]] = 0,
    dilation: int | Sequence[int] = 1,
    alpha: float = 1.0,
    bias: Tensor | None = None,
    scale: Tensor | None = None,
    activation: str | None = None,
    source: Tensor | None = None,
    beta: float = 1.0,
    residual_order: str = _AFTER,
    out: Tensor | None = None,
    filter_layout: str = "krsc",
    pixels: int | None = None,
    channel_norm_eps: float | None = None,
    channel_split: int | None = None,
) -> Tensor:
    """A grouped (or depthwise) conv with the fused epilogue, in one kernel on CUDA cores:

        out = act(alpha * conv(x, filter, groups) * scale + bias) + beta * source

    (``residual_order="before_activation"``: the source joins before ``act``.) With
    ``channel_norm_eps``, each output pixel is normalized over its K channels instead of the
    activation and the residual:

        z = alpha * conv(x, filter, groups) * scale + bias
        out = (z - mean(z)) / sqrt(var(z) + channel_norm_eps)

    (a ``LayerNorm`` over the channels without its affine: fold that into the next layer, as
    ``cute_conv.optimize`` does for ConvNeXt's depthwise conv -> LayerNorm -> Linear).

    Args:
        x: ``[N, H, W, C]`` contiguous (NHWC), bfloat16 or float16, on a Hopper (or later)
            GPU.
        filter: ``[K, R, S, C / groups]`` contiguous, of ``x``'s dtype; or, with
            ``filter_layout="rsck"``, the ``[R, S, C / groups, K]`` filter the kernel reads
            (``stage_filter`` of the former: a caller with a fixed weight stages it once).
        groups: divides C and K; at most 256 input channels per group; K / groups a
            multiple of 8, or C / groups == K / groups == 1 (depthwise) with C a multiple of 8.
        stride, dilation: int or ``(h, w)``, at least 1.
        padding: int, ``(h, w)`` or ``((top, bottom), (left, right))``, zeros.
        alpha, bias, scale, activation: as ``cute_conv.conv2d_fprop`` takes them.
        source: optional residual ``[N, P, Q, K]`` contiguous, of the output's dtype;
            ``beta`` scales it and ``residual_order`` places it.
        out: optional ``[N, P, Q, K]`` output (bfloat16, float16 or float32; may be
            ``source`` itself, must not overlap ``x`` or ``filter``): contiguous, or a channel
            slice of a contiguous ``[N, P, Q, L]`` tensor written in place (as
            ``conv2d_fprop``'s ``out``, L also a multiple of the kernel's 8-channel stores,
            or 4 / 2 for depthwise convs of fewer channels); else a new one of ``x``'s dtype.
        filter_layout: ``"krsc"`` (staged on each call: a copy of the filter) or ``"rsck"``.
        pixels: output pixels of a row per thread (1 .. 8); None: ``grouped_rule``'s
            ``pixels_per_thread``. Sets speed only, never the result.
        channel_norm_eps: None, or a float >= 0: normalize each output pixel over its K
            channels (K at most 2048; no ``activation`` and no ``source`` then). Variance
            biased, as ``LayerNorm``'s.
        channel_split: threads per output vector (1, 2, 4 or 8; more than 1 on grouped,
            not depthwise, convs without ``channel_norm_eps``, at most one per 8 input
            channels of a group): each sums a share of the group's input channels, their
            sums added by warp shuffles; cuts a wide group's chain of multiply-adds. None:
            ``grouped_rule``'s ``channel_split_for``. Sets speed only (the float32 sums'
            order changes).

    Returns:
        ``out`` or the new output. Sums are float32.

    Raises:
        TypeError, ValueError: bad input, before anything is launched or written.

    The kernel runs whatever the size; ``cute_conv.nn.Conv2d`` sends calls past
    ``cute_conv.grouped_rule``'s bound to cuDNN instead.
    """
    _check_groups_arg(groups)
    _check_pixels_arg(pixels)
    _check_channel_split_arg(channel_split)
    if filter_layout == "krsc":
        check_tensor("filter", filter, SIXTEEN_BIT_DTYPES)
        filter = stage_filter(filter)  # noqa: A001
    elif filter_layout != "rsck":
        raise ValueError(f"filter_layout must be 'krsc' or 'rsck', got {filter_layout!r}")
    stride, dilation = normalize_pair("stride", stride), normalize_pair("dilation", dilation)
    pairs = normalize_padding(padding)
    if source is None:
        beta, residual_order = 0.0, _AFTER
    if takes_torch_path(x, filter, source, bias, scale, None):
        if out is not None:
            raise TypeError(
                "out= is not taken under torch.compile or with inputs that require grad: "
                "use the returned tensor"
            )
        return torch.ops.cute_conv.grouped_conv2d(
            x, filter, source, bias, scale, groups, list(stride), [*pairs[0], *pairs[1]],
            list(dilation), float(alpha), float(beta), residual_order, activation, pixels,
            channel_norm_eps, channel_split,
        )  # fmt: skip
    return _run(x, filter, source, bias, scale, groups, stride, pairs, dilation, alpha, beta,
                residual_order, activation, pixels, channel_norm_eps, channel_split,
                out)  # fmt: skip


def _check_groups_arg(groups: Any) -> None:
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError(f"groups must be an int, got {type(groups).__name__}")


def _check_pixels_arg(pixels: Any) -> None:
    if pixels is None:
        return
    if isinstance(pixels, bool) or not isinstance(pixels, int):
        raise TypeError(f"pixels must be an int or None, got {type(pixels).__name__}")
    if not 1 <= pixels <= MAX_PIXELS:
        raise ValueError(f"pixels must be in 1 .. {MAX_PIXELS}, got {pixels}")


def _check_channel_split_arg(split: Any) -> None:
    """Its type; what it must be for the call: ``check_channel_split`` in ``_validate``."""
    if split is not None and (isinstance(split, bool) or not isinstance(split, int)):
        raise TypeError(f"channel_split must be an int or None, got {type(split).__name__}")


def check_channel_norm_eps(eps: Any) -> None:
    """A ``TypeError`` unless ``eps`` is None or a number, a ``ValueError`` unless it is also
    finite and >= 0 (``channel_norm_eps`` of ``grouped_conv2d`` and ``nn.Conv2d``)."""
    if eps is None:
        return
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"channel_norm_eps must be a float or None, got {type(eps).__name__}")
    if not 0.0 <= eps < math.inf:
        raise ValueError(f"channel_norm_eps must be a finite float >= 0, got {eps!r}")


def _validate(x, staged_filter, source, bias, scale, groups, stride, padding, dilation,
              alpha, beta, residual_order, activation, pixels, channel_norm_eps, channel_split,
              out):  # fmt: skip
    """Check a call; return its problem (C, K the whole conv's), config, epilogue spec and
    output dtype. Reads shapes, dtypes and strides only (meta tensors pass)."""
    _check_groups_arg(groups)
    _check_pixels_arg(pixels)
    _check_channel_split_arg(channel_split)
    check_channel_norm_eps(channel_norm_eps)
    pixel_stride = channel_slice_stride(x)  # None: x must be contiguous
    check_tensor("activation", x, SIXTEEN_BIT_DTYPES, contiguous=pixel_stride is None)
    if not isinstance(staged_filter, torch.Tensor):
        raise TypeError(f"filter must be a torch.Tensor, got {type(staged_filter).__name__}")
    if staged_filter.dim() != 4 or not staged_filter.is_contiguous():
        raise ValueError(
            "the staged filter must be a contiguous [R, S, C / groups, K] tensor "
            f"(stage_filter), got shape {tuple(staged_filter.shape)}"
        )
    if staged_filter.dtype != x.dtype:
        raise TypeError(f"filter has dtype {staged_filter.dtype}; activation has {x.dtype}")
    check_alignment("filter", staged_filter)
    n, h, w, c = x.shape
    r, s, group_in, k = staged_filter.shape
    config = grouped_limits(c, k, groups)
    if group_in != config.group_in:
        raise ValueError(
            f"filter has {group_in} input channels per group; activation's C={c} in "
            f"groups={groups} makes {config.group_in}"
        )
    problem = Conv2dProblemShape(
        N=n, H=h, W=w, C=c, K=k, R=r, S=s, padding=padding, stride=stride, dilation=dilation
    )
    if min(min(pair) for pair in problem.padding) < 0:
        raise ValueError(f"padding must be >= 0, got {problem.padding}")
    if problem.P < 1 or problem.Q < 1:
        raise ValueError(
            f"the filter ({r}x{s}, dilation {dilation}) does not fit the padded {h}x{w} input: "
            f"output {problem.P}x{problem.Q}"
        )
    if problem.gemm_m >= MAX_GEMM_M or n * h * w >= MAX_GEMM_M:
        raise ValueError(
            f"N*P*Q = {problem.gemm_m} and N*H*W = {n * h * w} must stay below 2**31"
        )
    if pixels is None:
        pixels = pixels_per_thread(problem, config)
    if channel_norm_eps is not None:  # its type and range checked above
        check_norm_channels("K", k)
        if activation is not None or source is not None:
            raise ValueError(
                "channel_norm_eps normalizes alpha * conv * scale + bias: pass no activation "
                "and no source with it"
            )
        channel_norm_eps = float(channel_norm_eps)
    config = replace(config, pixels=pixels, window=row_window(problem, config),
                     channel_norm_eps=channel_norm_eps)  # fmt: skip
    if channel_split is None:
        channel_split = channel_split_for(problem, config)
    check_channel_split("channel_split", channel_split, config.group_in, config.in_vector,
                        grouped=not config.depthwise and channel_norm_eps is None)  # fmt: skip
    config = replace(config, channel_split=channel_split)
    in_vector = config.vector if config.depthwise else config.in_vector
    if pixel_stride is not None and pixel_stride % in_vector:
        raise ValueError(
            f"activation is a channel slice of a tensor of {pixel_stride} channels; its pixel "
            f"stride must be a multiple of {in_vector} (the kernel's loads)"
        )
    out_dtype, out_pixels = x.dtype, None
    if out is not None:
        check_tensor("out", out, OUT_DTYPES, contiguous=False)
        out_pixels = out_pixel_stride(out)  # a channel slice is written in place
        out_dtype = out.dtype
        if tuple(out.shape) != problem.output_shape:
            raise ValueError(
                f"out has shape {tuple(out.shape)}; this conv writes [N, P, Q, K] = "
                f"{problem.output_shape}"
            )
        if out_pixels % config.vector:
            raise ValueError(
                f"out is a channel slice of a tensor of {out_pixels} channels; its pixel "
                f"stride must be a multiple of {config.vector} (the kernel's stores)"
            )
    spec = validate_epilogue_args(
        problem, out_dtype, x.device, alpha=alpha, bias=bias, scale=scale,
        activation=activation, epilogue_fn=None, source=source, beta=beta,
        residual_order=residual_order,
    )  # fmt: skip
    return problem, config, spec, out_dtype, pixel_stride, out_pixels


@dataclass(frozen=True)
class _GroupedPlan:
    """What a call needs that depends only on tensor metadata and arguments."""

    out_shape: tuple[int, int, int, int]
    out_dtype: torch.dtype
    has_residual: bool
    vector_dtype: torch.dtype
    kernel: CompiledConv2d
    scalars: tuple
    empty: bool  # N*P*Q == 0: nothing to launch


def _run(x, staged_filter, source, bias, scale, groups, stride, padding, dilation, alpha,
         beta, residual_order, activation, pixels, channel_norm_eps, channel_split,
         out) -> Tensor:  # fmt: skip
    """The direct path: the call's plan (validated and compiled once per metadata), the
    checks that read data pointers, the launch."""
    plan = _plan(x, staged_filter, source, bias, scale, groups, stride, padding, dilation,
                 alpha, beta, residual_order, activation, pixels, channel_norm_eps,
                 channel_split, out)  # fmt: skip
    for name, t in (("activation", x), ("filter", staged_filter), ("source", source),
                    ("out", out)):  # fmt: skip
        if t is not None:
            check_alignment(name, t)
    if out is not None and out_overlaps_inputs(
        out.data_ptr(), x.data_ptr(), staged_filter.data_ptr(),
        source.data_ptr() if plan.has_residual else 0,
        tuple(span_bytes(t) for t in (x, staged_filter, out)),
    ):  # fmt: skip
        raise ValueError(
            "out overlaps activation or filter, or partly the source: pass a separate output "
            "tensor (out may be the source itself)"
        )
    if out is None:
        out = torch.empty(plan.out_shape, dtype=plan.out_dtype, device=x.device)
    if plan.empty:
        return out
    # Bias and scale in one dtype, contiguous (copies only where they are not already).
    bias, scale = (None if t is None else vector_operand(t, plan.vector_dtype)
                   for t in (bias, scale))  # fmt: skip
    pointers = (
        x.data_ptr(), staged_filter.data_ptr(), out.data_ptr(),
        source.data_ptr() if plan.has_residual else 0,
        0 if bias is None else bias.data_ptr(), 0 if scale is None else scale.data_ptr(),
        *([0] * 7),
    )  # fmt: skip
    with on_device(x.device.index):
        plan.kernel.launch(pointers, plan.scalars, current_raw_stream(x.device.index))
    return out


def _plan(x, staged_filter, source, bias, scale, groups, stride, padding, dilation, alpha,
          beta, residual_order, activation, pixels, channel_norm_eps, channel_split,
          out) -> _GroupedPlan:  # fmt: skip
    """``_make_plan``, memoized on the call's metadata (as ``dispatch._plan``: the key holds
    everything validation reads but the data pointers)."""
    args = (groups, stride, padding, dilation, alpha, beta, residual_order, activation, pixels,
            channel_norm_eps, channel_split)  # fmt: skip
    return _plans.memo(_plan_key, _make_plan, (x, staged_filter, source, bias, scale, out, args))


def _plan_key(x, staged_filter, source, bias, scale, out, args: tuple) -> tuple:
    (groups, stride, padding, dilation, alpha, beta, residual_order, activation, pixels, eps,
     split) = args  # fmt: skip
    return (
        *(None if t is None else tensor_key(t)
          for t in (x, staged_filter, source, bias, scale, out)),
        *(freeze_arg(a) for a in (groups, stride, padding, dilation, residual_order, activation,
                                  pixels, eps, split)),  # fmt: skip
        # With the sign, which 0.0 == -0.0 leaves out and the kernel's products keep.
        *((type(v), v, math.copysign(1.0, v)) for v in (alpha, beta)),
    )  # fmt: skip


_plans: PlanCache[_GroupedPlan] = PlanCache()
forget_on_clear(_plans.clear)  # a plan holds its kernel: compile.clear_cache drops both


def _make_plan(x, staged_filter, source, bias, scale, out, args: tuple) -> _GroupedPlan:
    problem, config, spec, out_dtype, pixel_stride, out_pixels = _validate(
        x, staged_filter, source, bias, scale, *args, out
    )
    _, _, _, _, alpha, beta, *_ = args  # as _plan packs them
    for name, t in (("filter", staged_filter), ("source", source), ("bias", bias),
                    ("scale", scale), ("out", out)):  # fmt: skip
        if t is not None and t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but activation is on {x.device}")
    if x.device.type != "cuda":
        raise ValueError(f"activation is on {x.device}; cute_conv runs on CUDA tensors")
    kernel = compile_kernel(
        device_arch(x.device.index), act_dtype=dtype_name(x.dtype),
        out_dtype=dtype_name(out_dtype), config=config, epilogue=spec,
    )  # fmt: skip
    return _GroupedPlan(
        problem.output_shape, out_dtype, spec.has_residual, kernel_vector_dtype(bias, scale),
        kernel, kernel_scalars(problem, alpha, beta, 1, pixel_stride, out_pixels),
        problem.gemm_m == 0,
    )


def vector_operand(t: Tensor, dtype: torch.dtype) -> Tensor:
    """``t`` as the kernels read it: of ``dtype``, contiguous, 16-byte aligned (its vector
    loads); a copy only where it is not."""
    t = t.to(dtype).contiguous()
    return t.clone() if t.data_ptr() % ALIGNMENT_BYTES else t


@torch.library.custom_op("cute_conv::grouped_conv2d", mutates_args=())
def _grouped_op(
    x: Tensor,
    staged_filter: Tensor,
    source: Optional[Tensor],
    bias: Optional[Tensor],
    scale: Optional[Tensor],
    groups: int,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    alpha: float,
    beta: float,
    residual_order: str,
    activation: Optional[str],
    pixels: Optional[int] = None,
    channel_norm_eps: Optional[float] = None,
    channel_split: Optional[int] = None,
) -> Tensor:
    """``grouped_conv2d`` on a staged filter as an op (its direct path: autograd runs the
    forward with grad mode off)."""
    return _run(x, staged_filter, source, bias, scale, groups, tuple(stride),
                padding_pairs(padding), tuple(dilation), alpha, beta, residual_order,
                activation, pixels, channel_norm_eps, channel_split, None)  # fmt: skip


@_grouped_op.register_fake
def _(x, staged_filter, source, bias, scale, groups, stride, padding, dilation, alpha, beta,
      residual_order, activation, pixels=None, channel_norm_eps=None,
      channel_split=None):  # fmt: skip
    with unset_fake_temporarily():
        metas = meta_stand_ins((x, staged_filter, source, bias, scale))
        problem, _, _, out_dtype, _, _ = _validate(
            *metas, groups, tuple(stride), padding_pairs(padding), tuple(dilation), alpha, beta,
            residual_order, activation, pixels, channel_norm_eps, channel_split, None,
        )  # fmt: skip
    return x.new_empty(problem.output_shape, dtype=out_dtype)


def _setup(ctx, inputs, output) -> None:
    # The pixels per thread (input 13) and the channel split (input 15) set speed only.
    x, staged, source, bias, scale, groups, stride, padding, dilation, alpha, beta, order, act = (
        inputs[:13]
    )
    eps = inputs[14] if len(inputs) > 14 else None
    args = EpilogueArgs(stride, padding, dilation, alpha, beta, act, order, groups, eps)
    needs = tuple(ctx.needs_input_grad[:5])
    # The backward takes the KRSC filter: the staged one permuted back (a view).
    _setup_context(ctx, (x, staged.permute(3, 0, 1, 2), source, bias, scale), args, output,
                   needs)  # fmt: skip


def _backward_op(ctx, grad_out):
    gx, gw, gs, gb, gsc = _backward(ctx, grad_out, tuple(ctx.needs_input_grad[:5]))
    if gw is not None:
        gw = gw.permute(1, 2, 3, 0)  # KRSC -> the staged layout
    return (gx, gw, gs, gb, gsc) + (None,) * 11


_grouped_op.register_autograd(_backward_op, setup_context=_setup)
