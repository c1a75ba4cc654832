"""The conv as torch.library ops: what torch.compile, torch.export and autograd see.

    torch.ops.cute_conv.conv2d_fprop(x, filter, bias, scale, x_scale, w_scale, out_scale,
        stride, padding, dilation, alpha, activation, out_dtype, config) -> Tensor
    torch.ops.cute_conv.conv2d_fprop_with_residual(x, filter, source, bias, scale, x_scale,
        w_scale, out_scale, source_scale, stride, padding, dilation, alpha, beta,
        residual_order, activation, out_dtype, config) -> Tensor
    torch.ops.cute_conv.conv2d_fprop_out(x, filter, source, bias, scale, x_scale, w_scale,
        out_scale, out_amax, source_scale, out, stride, padding, dilation, alpha, beta,
        residual_order, activation, out_dtype, config) -> ()  # writes out

``x_scale``, ``w_scale`` and ``out_scale`` are the fp8 scales (None for 16-bit calls),
``source_scale`` the residual source's device factor of ``beta`` (or None),
``out_amax`` the optional amax the kernel raises: only the out= op takes it (it mutates it,
and a functional op with autograd may mutate nothing), so a functional call with an amax runs
as the out= op on a fresh output.

``stride``/``dilation`` are ``[h, w]``, ``padding`` ``[top, bottom, left, right]`` and
``config`` a kernel config's ``repr`` (``config_to_str``) or None. Each op runs the public
function; its fake implementation computes the output's shape and dtype with the package's own
validation, on meta stand-ins of the tensors, so it works on fake, meta and CPU tensors and
makes no CUDA query. The functional ops have gradients (``cute_conv.autograd``).

The public functions call these ops only when ``takes_torch_path`` says so (compiling, or a
gradient to track): the dispatcher costs tens of microseconds a call, which eager calls
without gradients do not pay.
"""

import ast
import dataclasses
import functools
from typing import Any, Callable, Optional

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from . import dispatch
from .arch import check_config_type, config_types
from .autograd import EpilogueArgs
from .autograd import backward as _backward
from .autograd import setup_context as _setup_context
from .config import Conv2dConfig
from .epilogue import validate_epilogue_args
from .problem import Conv2dProblemShape, normalize_padding, normalize_pair
from .validation import check_fp8_scales, default_out_dtype, validate_conv_inputs

__all__ = [
    "call_op",
    "config_from_str",
    "config_to_str",
    "meta_stand_ins",
    "padding_pairs",
    "takes_torch_path",
]

_AFTER = "after_activation"
_CONFIG_CLASSES = {cls.__name__: cls for cls in config_types()}
Tensor = torch.Tensor


def takes_torch_path(x: Any, filter: Any, source, bias, scale, out) -> bool:  # noqa: A002
    """Whether a public call goes through the ops: under torch.compile / torch.export, or in
    grad mode with a tensor that requires grad. It runs on every eager call: a few hundred
    nanoseconds, attribute reads written out rather than looped over."""
    if torch.compiler.is_compiling():
        return True
    if not torch.is_grad_enabled():
        return False
    try:
        return (
            x.requires_grad
            or filter.requires_grad
            or (source is not None and source.requires_grad)
            or (bias is not None and bias.requires_grad)
            or (scale is not None and scale.requires_grad)
            or (out is not None and out.requires_grad)
        )
    except AttributeError:  # a DLPack tensor other than torch's (allowed with out=)
        return _requires_grad((x, filter, source, bias, scale, out))


def _requires_grad(tensors: tuple) -> bool:
    return any(getattr(t, "requires_grad", False) for t in tensors)


def call_op(
    x: Tensor,
    filter: Tensor,  # noqa: A002
    source: Optional[Tensor],
    bias: Optional[Tensor],
    scale: Optional[Tensor],
    out: Optional[Tensor],
    stream: Optional[torch.cuda.Stream],
    stride: Any,
    padding: Any,
    dilation: Any,
    alpha: float,
    beta: float,
    residual_order: str,
    activation: Optional[str],
    epilogue_fn: Optional[Callable],
    out_dtype: Optional[torch.dtype],
    config: Any,
    fp8_scales: Optional[tuple] = None,
) -> Tensor:
    """A public call (``source`` None for ``conv2d_fprop``) through its op, with its
    non-tensor arguments in the op's schema form; ``fp8_scales`` is ``(x_scale, w_scale,
    out_scale, out_amax, source_scale)`` or None."""
    needs_grad = torch.is_grad_enabled() and _requires_grad((x, filter, source, bias, scale, out))
    scales = fp8_scales or dispatch.NO_SCALE_TENSORS
    if needs_grad and any(t is not None for t in scales):
        raise TypeError(
            "an fp8 conv (x_scale/w_scale/out_scale/source_scale given) or one keeping an "
            "amax (out_amax) "
            "has no backward, and an input requires grad: call under torch.no_grad() or "
            "detach the inputs"
        )
    # Without a gradient to track, only torch.compile / torch.export route a call here (it may
    # run this function eagerly after a graph break at one of the errors below).
    compiling = not needs_grad or torch.compiler.is_compiling()
    if epilogue_fn is not None and needs_grad:
        raise TypeError(
            f"epilogue_fn={epilogue_fn!r} has no derivative, and an input requires grad: "
            "gradients cannot flow through a function compiled into the kernel. Call under "
            "torch.no_grad() (or detach the inputs), or use activation="
        )
    if epilogue_fn is not None:
        raise TypeError(
            f"epilogue_fn={epilogue_fn!r} cannot be traced by torch.compile or torch.export: "
            "a Python function compiled into the kernel has no place in an op schema. Use "
            "activation= (and bias/scale/residual), or call cute_conv outside the compiled "
            "region (torch.compiler.disable)"
        )
    if out is not None and needs_grad:
        raise ValueError(
            "cute_conv: functions with out=... arguments don't support automatic "
            "differentiation, but one of the arguments requires grad; call under "
            "torch.no_grad() or leave out= unset"
        )
    if stream is not None and compiling:
        raise TypeError(
            "stream= is not supported under torch.compile / torch.export: the op runs on the "
            "current stream (use a torch.cuda.stream(...) context around the compiled call)"
        )
    geometry = (
        list(normalize_pair("stride", stride)),
        [side for pair in normalize_padding(padding) for side in pair],
        list(normalize_pair("dilation", dilation)),
    )
    config_str = None if config is None else config_to_str(config)
    ops = torch.ops.cute_conv
    if out is None and scales[3] is not None:  # an amax: the out= op, on a fresh output
        out = x.new_empty(
            Conv2dProblemShape.from_shapes(
                x.shape, filter.shape, stride=stride, padding=padding, dilation=dilation
            ).output_shape,
            dtype=out_dtype or default_out_dtype(x.dtype),
        )
    if out is not None:
        ops.conv2d_fprop_out(
            x, filter, source, bias, scale, *scales, out, *geometry, alpha, beta,
            residual_order, activation, out_dtype, config_str,
        )  # fmt: skip
        return out
    if source is None:
        run = lambda: ops.conv2d_fprop(  # noqa: E731
            x, filter, bias, scale, *scales[:3], *geometry, alpha, activation, out_dtype,
            config_str,
        )  # fmt: skip
    else:
        run = lambda: ops.conv2d_fprop_with_residual(  # noqa: E731
            x, filter, source, bias, scale, *scales[:3], scales[4], *geometry, alpha, beta,
            residual_order, activation, out_dtype, config_str,
        )  # fmt: skip
    if stream is None:
        return run()
    # The autograd engine runs the backward on the stream the forward ran on.
    with torch.cuda.stream(stream):
        return run()


def config_to_str(config: Any) -> str:
    """A ``Conv2dConfig`` / ``Conv2dConfigSm100`` as its ``repr`` (built field by field, which
    torch.compile traces; a dense ``Conv2dConfig`` leaves out its ``groups``, as its repr
    does), for an op schema."""
    check_config_type(config)
    shown = config.shown_fields() if isinstance(config, Conv2dConfig) else dataclasses.fields(config)
    fields = ", ".join(f"{f.name}={getattr(config, f.name)!r}" for f in shown)
    return f"{type(config).__name__}({fields})"


def config_from_str(text: Optional[str]) -> Any:
    """The config ``config_to_str`` wrote (None for None); parsed, never evaluated. Every op
    call with a config brings its string: each string is parsed once (a parse took ~160 us
    on a CPU host), and its config, immutable, shared."""
    if text is None:
        return None
    return _parsed_config(text)


@functools.lru_cache(maxsize=256)
def _parsed_config(text: str) -> Any:
    try:
        call = ast.parse(text, mode="eval").body
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.args):
            raise ValueError("not a call with keyword arguments")
        cls = _CONFIG_CLASSES[call.func.id]
        fields = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
    except (SyntaxError, ValueError, KeyError) as exc:
        raise ValueError(
            f"config={text!r} is not a serialized config: expected e.g. "
            f"{config_to_str(Conv2dConfig())!r} ({exc})"
        ) from exc
    return cls(**fields)


def padding_pairs(padding: list[int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """An op's ``[top, bottom, left, right]`` as ``((top, bottom), (left, right))``."""
    top, bottom, left, right = padding
    return ((top, bottom), (left, right))


def meta_stand_ins(tensors: tuple) -> list:
    """Meta tensors of the shapes, strides and dtypes of ``tensors`` (None kept): what a fake
    implementation validates, since validation reads ``data_ptr()`` (alignment), which fake
    tensors refuse. Symbolic sizes are specialized. Call under ``unset_fake_temporarily``."""
    return [
        None
        if t is None
        else torch.empty_strided(
            [int(s) for s in t.shape], [int(s) for s in t.stride()], dtype=t.dtype, device="meta"
        )
        for t in tensors
    ]


def _run(x, filter, source, bias, scale, scales, out, stride, padding, dilation, alpha,  # noqa: A002
         beta, residual_order, activation, out_dtype, config) -> Tensor:  # fmt: skip
    """The public function on an op's arguments. It takes its direct path: an autograd forward
    runs with grad mode off, and a tensor that requires grad here otherwise (the out= op has no
    autograd) gets ``call_op``'s error."""
    if source is None:  # conv2d_fprop's: no residual term
        beta, residual_order = 0.0, _AFTER
    padding, config = padding_pairs(padding), config_from_str(config)
    fp8_scales = None if all(t is None for t in scales) else scales
    if takes_torch_path(x, filter, source, bias, scale, out):
        return call_op(
            x, filter, source, bias, scale, out, None, stride, padding, dilation, alpha, beta,
            residual_order, activation, None, out_dtype, config, fp8_scales,
        )  # fmt: skip
    args = (stride, padding, dilation, alpha, beta, residual_order, activation, None, out_dtype,
            config)  # fmt: skip
    return dispatch.conv2d(x, filter, source, bias, scale, out, None, args, fp8_scales)


def _fake(x, filter, source, bias, scale, scales, out, stride, padding, dilation, alpha,  # noqa: A002
          beta, residual_order, activation, out_dtype, config) -> Tensor:  # fmt: skip
    """The output the call would return, checked as the public function checks it (no
    alignment, device or config-fit check: those need data or a GPU and run with the op)."""
    tensors = (x, filter, source, bias, scale, out, *scales)
    with unset_fake_temporarily():
        m_x, m_filter, m_source, m_bias, m_scale, m_out, *m_scales = meta_stand_ins(tensors)
        problem, out_dtype = validate_conv_inputs(
            m_x, m_filter, stride=stride, padding=padding_pairs(padding), dilation=dilation,
            out=m_out, out_dtype=out_dtype,
        )  # fmt: skip
        validate_epilogue_args(
            problem, out_dtype, m_x.device, alpha=alpha, bias=m_bias, scale=m_scale,
            activation=activation, epilogue_fn=None, source=m_source, beta=beta,
            residual_order=residual_order,
        )  # fmt: skip
        check_fp8_scales(
            m_x.dtype, out_dtype, m_x.device, *m_scales, has_source=m_source is not None
        )
    config_from_str(config)
    return x.new_empty(problem.output_shape, dtype=out_dtype)


@torch.library.custom_op("cute_conv::conv2d_fprop", mutates_args=())
def conv2d_fprop(
    x: Tensor,
    filter: Tensor,  # noqa: A002
    bias: Optional[Tensor],
    scale: Optional[Tensor],
    x_scale: Optional[Tensor],
    w_scale: Optional[Tensor],
    out_scale: Optional[Tensor],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    alpha: float,
    activation: Optional[str],
    out_dtype: Optional[torch.dtype],
    config: Optional[str],
) -> Tensor:
    """``cute_conv.conv2d_fprop`` as an op."""
    return _run(x, filter, None, bias, scale, (x_scale, w_scale, out_scale, None, None), None,
                stride, padding, dilation, alpha, 0.0, _AFTER, activation, out_dtype,
                config)  # fmt: skip


@conv2d_fprop.register_fake
def _(x, filter, bias, scale, x_scale, w_scale, out_scale, stride, padding, dilation, alpha,  # noqa: A002
      activation, out_dtype, config):  # fmt: skip
    return _fake(x, filter, None, bias, scale, (x_scale, w_scale, out_scale, None, None), None,
                 stride, padding, dilation, alpha, 0.0, _AFTER, activation, out_dtype,
                 config)  # fmt: skip


@torch.library.custom_op("cute_conv::conv2d_fprop_with_residual", mutates_args=())
def conv2d_fprop_with_residual(
    x: Tensor,
    filter: Tensor,  # noqa: A002
    source: Tensor,
    bias: Optional[Tensor],
    scale: Optional[Tensor],
    x_scale: Optional[Tensor],
    w_scale: Optional[Tensor],
    out_scale: Optional[Tensor],
    source_scale: Optional[Tensor],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    alpha: float,
    beta: float,
    residual_order: str,
    activation: Optional[str],
    out_dtype: Optional[torch.dtype],
    config: Optional[str],
) -> Tensor:
    """``cute_conv.conv2d_fprop_with_residual`` as an op."""
    scales = (x_scale, w_scale, out_scale, None, source_scale)
    return _run(x, filter, source, bias, scale, scales, None, stride, padding, dilation, alpha,
                beta, residual_order, activation, out_dtype, config)  # fmt: skip


@conv2d_fprop_with_residual.register_fake
def _(x, filter, source, bias, scale, x_scale, w_scale, out_scale, source_scale, stride,  # noqa: A002
      padding, dilation, alpha, beta, residual_order, activation, out_dtype, config):  # fmt: skip
    scales = (x_scale, w_scale, out_scale, None, source_scale)
    return _fake(x, filter, source, bias, scale, scales, None, stride, padding, dilation, alpha,
                 beta, residual_order, activation, out_dtype, config)  # fmt: skip


@torch.library.custom_op("cute_conv::conv2d_fprop_out", mutates_args=("out_amax", "out"))
def conv2d_fprop_out(
    x: Tensor,
    filter: Tensor,  # noqa: A002
    source: Optional[Tensor],
    bias: Optional[Tensor],
    scale: Optional[Tensor],
    x_scale: Optional[Tensor],
    w_scale: Optional[Tensor],
    out_scale: Optional[Tensor],
    out_amax: Optional[Tensor],
    source_scale: Optional[Tensor],
    out: Tensor,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    alpha: float,
    beta: float,
    residual_order: str,
    activation: Optional[str],
    out_dtype: Optional[torch.dtype],
    config: Optional[str],
) -> None:
    """Either public function with ``out=`` (``source`` None: ``conv2d_fprop``) as an op."""
    scales = (x_scale, w_scale, out_scale, out_amax, source_scale)
    _run(x, filter, source, bias, scale, scales, out, stride, padding, dilation, alpha, beta,
         residual_order, activation, out_dtype, config)  # fmt: skip


@conv2d_fprop_out.register_fake
def _(x, filter, source, bias, scale, x_scale, w_scale, out_scale, out_amax, source_scale, out,  # noqa: A002
      stride, padding, dilation, alpha, beta, residual_order, activation, out_dtype,
      config):  # fmt: skip
    scales = (x_scale, w_scale, out_scale, out_amax, source_scale)
    _fake(x, filter, source, bias, scale, scales, out, stride, padding, dilation, alpha, beta,
          residual_order, activation, out_dtype, config)  # fmt: skip


# Autograd: the ops' inputs mapped to autograd's (x, filter, source, bias, scale) and back.
def _needs_plain(ctx) -> tuple[bool, ...]:
    need = ctx.needs_input_grad
    return (need[0], need[1], False, need[2], need[3])


def _setup_plain(ctx, inputs, output) -> None:
    x, filter, bias, scale, _, _, _, stride, padding, dilation, alpha, activation, _, _ = inputs  # noqa: A001
    args = EpilogueArgs(stride, padding, dilation, alpha, 0.0, activation, _AFTER)
    _setup_context(ctx, (x, filter, None, bias, scale), args, output, _needs_plain(ctx))


def _backward_plain(ctx, grad_out):
    gx, gw, _, gb, gs = _backward(ctx, grad_out, _needs_plain(ctx))
    return (gx, gw, gb, gs) + (None,) * 10


def _setup_residual(ctx, inputs, output) -> None:
    x, filter, source, bias, scale, _, _, _, _, stride, padding, dilation, alpha, beta, order, act = (  # noqa: A001
        inputs[:16]
    )
    args = EpilogueArgs(stride, padding, dilation, alpha, beta, act, order)
    needs = tuple(ctx.needs_input_grad[:5])
    _setup_context(ctx, (x, filter, source, bias, scale), args, output, needs)


def _backward_residual(ctx, grad_out):
    return _backward(ctx, grad_out, tuple(ctx.needs_input_grad[:5])) + (None,) * 13


conv2d_fprop.register_autograd(_backward_plain, setup_context=_setup_plain)
conv2d_fprop_with_residual.register_autograd(_backward_residual, setup_context=_setup_residual)
