"""Quantization to fp8 for the conv's fp8 path: a tensor and the float32 scale(s) that
dequantize it (a real value is the fp8 value times its scale)."""

from __future__ import annotations

import torch

from .compile import compile_quantize
from .cuda_context import current_raw_stream, device_arch, on_device
from .kernels.common.quantize import VECTOR
from .validation import ALIGNMENT_BYTES, FP8_DTYPES, check_scale_tensor

__all__ = [
    "amax_scale", "quantize_dynamic", "quantize_fp8", "quantize_from_amax", "quantize_with_scale",
    "scale_from_amax",
]

E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max


def quantize_fp8(
    t: torch.Tensor,
    per_channel_dim: int | None = None,
    *,
    dtype: torch.dtype = torch.float8_e4m3fn,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``t`` to ``dtype`` with amax scaling; returns ``(fp8 tensor, scale)``.

    ``per_channel_dim=None``: one scale for the whole tensor, a 0-dim float32 tensor on
    ``t``'s device (what ``x_scale`` / ``w_scale`` take). ``per_channel_dim=d``: one scale per
    index of dimension ``d``, a float32 vector of ``t.shape[d]`` (a filter's per-output-channel
    scales, ``d=0``: pass them as the conv's ``scale`` with ``w_scale`` of one). The scale maps
    the largest magnitude to the format's largest finite value; an all-zero or empty tensor
    (or channel) gets scale 1. Computed in float32; the fp8 values keep ``t``'s layout.

    Raises:
        TypeError: ``t`` is not a floating torch tensor, or ``dtype`` not an fp8 dtype.
        ValueError: ``per_channel_dim`` is not a dimension of ``t``.
    """
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise TypeError(
            f"t must be a floating-point torch.Tensor, got "
            f"{t.dtype if isinstance(t, torch.Tensor) else type(t).__name__}"
        )
    if dtype not in FP8_DTYPES:
        raise TypeError(f"dtype must be one of {', '.join(map(str, FP8_DTYPES))}, got {dtype}")
    values = t.float()
    if per_channel_dim is None:
        amax = _max_abs(values)
        shape = ()
    else:
        if isinstance(per_channel_dim, bool) or not isinstance(per_channel_dim, int):
            raise TypeError(f"per_channel_dim must be an int or None, got {per_channel_dim!r}")
        if not -t.dim() <= per_channel_dim < t.dim():
            raise ValueError(
                f"per_channel_dim={per_channel_dim} is not a dimension of a rank-{t.dim()} tensor"
            )
        dim = per_channel_dim % t.dim()
        others = [d for d in range(t.dim()) if d != dim]
        if values.numel() == 0:  # torch's amax refuses to reduce an empty tensor
            amax = values.new_zeros(t.shape[dim])
        else:
            amax = values.abs().amax(dim=others) if others else values.abs()
        shape = [1] * t.dim()
        shape[dim] = t.shape[dim]
    scale = scale_from_amax(amax, dtype)
    quantized = _saturate(values / scale.reshape(shape), dtype)
    return quantized, scale.reshape(-1) if per_channel_dim is not None else scale


def scale_from_amax(amax: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn) -> torch.Tensor:
    """The scale that maps ``amax`` (float32) to ``dtype``'s largest finite value (448 for
    e4m3, 57344 for e5m2); 1 where ``amax`` is 0."""
    return torch.where(amax > 0, amax / torch.finfo(dtype).max, torch.ones_like(amax))


def _saturate(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float32 ``values`` as ``dtype``, clamped to its finite range first (torch's conversion
    would make NaN of what lies past it)."""
    finfo_max = torch.finfo(dtype).max
    return values.clamp(-finfo_max, finfo_max).to(dtype)


def quantize_with_scale(t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``t / scale`` as float8_e4m3fn, saturated to +-448: the input staging of an fp8 conv
    with a given (static or already measured) per-tensor ``scale``, a one-element float32
    tensor on ``t``'s device, read there (CUDA graphs replay with its current value).

    A contiguous bfloat16/float16 CUDA tensor of a multiple of 8 elements takes one pass of
    ``kernels.common.quantize``; other tensors, torch ops.
    """
    _check_16bit(t)
    check_scale_tensor("scale", scale, t.device, "t")
    if torch.compiler.is_compiling():  # opaque to the tracer: it reads data pointers
        return torch.ops.cute_conv.quantize_with_scale(t, scale)
    return _quantize_with_scale(t, scale)


def _quantize_with_scale(t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    if not _kernel_takes(t):
        return _saturate(t.float() / scale, torch.float8_e4m3fn)
    return _launch_quantize(t, scale, scale, from_amax=False)


def quantize_dynamic(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(fp8 tensor, scale)``: ``t`` quantized with its per-tensor e4m3 scale measured now
    (``amax_scale``), without a host synchronization: one reduction for ``max|t|`` and, where
    ``quantize_with_scale`` takes one kernel pass, that pass derives and writes the scale too
    (a 0-dim float32 tensor on ``t``'s device)."""
    _check_16bit(t)
    return _quantize_from_amax_call(t, _max_abs(t))


def quantize_from_amax(t: torch.Tensor, amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(fp8 tensor, scale)``: ``t`` quantized per tensor with the scale of a given ``amax``,
    a one-element float32 tensor on ``t``'s device (e.g. the ``out_amax`` that the conv which
    wrote ``t`` took in its epilogue), read there: where ``quantize_with_scale`` takes one
    kernel pass, that pass derives and writes the scale, without a reduction over ``t``.
    Values past ``amax`` saturate to +-448."""
    _check_16bit(t)
    check_scale_tensor("amax", amax, t.device, "t")
    return _quantize_from_amax_call(t, amax)


def _quantize_from_amax_call(
    t: torch.Tensor, amax: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    if torch.compiler.is_compiling():  # opaque to the tracer: it reads data pointers
        return torch.ops.cute_conv.quantize_from_amax(t, amax)
    return _quantize_from_amax(t, amax)


def _quantize_from_amax(t: torch.Tensor, amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if not _kernel_takes(t):
        scale = scale_from_amax(amax.reshape(()))
        return _saturate(t.float() / scale, torch.float8_e4m3fn), scale
    scale = torch.empty((), dtype=torch.float32, device=t.device)
    return _launch_quantize(t, scale, amax, from_amax=True), scale


# The quantizations as torch.library ops, for torch.compile: the eager calls above skip the
# dispatcher (tens of microseconds a call). Validation happens before, in the public functions.
@torch.library.custom_op("cute_conv::quantize_with_scale", mutates_args=())
def _quantize_with_scale_op(t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return _quantize_with_scale(t, scale)


@_quantize_with_scale_op.register_fake
def _(t: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(t, dtype=torch.float8_e4m3fn)


@torch.library.custom_op("cute_conv::quantize_from_amax", mutates_args=())
def _quantize_from_amax_op(
    t: torch.Tensor, amax: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return _quantize_from_amax(t, amax)


@_quantize_from_amax_op.register_fake
def _(t: torch.Tensor, amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = torch.empty((), dtype=torch.float32, device=t.device)
    return torch.empty_like(t, dtype=torch.float8_e4m3fn), scale


def amax_scale(t: torch.Tensor) -> torch.Tensor:
    """The per-tensor e4m3 scale of ``t`` measured now: ``max|t| / 448`` as a 0-dim float32
    tensor on ``t``'s device (1 for an all-zero tensor); no host synchronization."""
    return scale_from_amax(_max_abs(t))


def _max_abs(t: torch.Tensor) -> torch.Tensor:
    """``max|t|`` as a 0-dim float32 tensor, in one reduction (no ``abs`` copy of ``t``); 0
    for an empty tensor."""
    if t.numel() == 0:
        return torch.zeros((), dtype=torch.float32, device=t.device)
    return torch.linalg.vector_norm(t, ord=float("inf"), dtype=torch.float32)


def _check_16bit(t: object) -> None:
    if not isinstance(t, torch.Tensor) or t.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(
            f"t must be a bfloat16 or float16 tensor, got "
            f"{t.dtype if isinstance(t, torch.Tensor) else type(t).__name__}"
        )


def _kernel_takes(t: torch.Tensor) -> bool:
    """Whether the quantize kernel reads ``t``: contiguous, on the GPU, whole aligned vectors."""
    aligned = t.numel() % VECTOR == 0 and t.data_ptr() % ALIGNMENT_BYTES == 0
    return t.is_cuda and t.is_contiguous() and aligned


def _launch_quantize(
    t: torch.Tensor, scale: torch.Tensor, amax: torch.Tensor, *, from_amax: bool
) -> torch.Tensor:
    out = torch.empty(t.shape, dtype=torch.float8_e4m3fn, device=t.device)
    if t.numel():
        device_index = t.get_device()
        kernel = compile_quantize(device_arch(device_index), t.dtype, from_amax=from_amax)
        stream = current_raw_stream(device_index)
        with on_device(device_index):
            vectors = t.numel() // VECTOR
            pointers = (t.data_ptr(), out.data_ptr(), scale.data_ptr(), amax.data_ptr())
            kernel.launch(*pointers, vectors, stream)
    elif from_amax:
        scale.fill_(1.0)  # the amax of nothing is 0
    return out
