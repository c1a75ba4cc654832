"""The public conv functions on torch (or DLPack) tensors."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from cuda.bindings import driver as cuda

from .compile import compile_kernel
from .config import Conv2dConfig, default_config
from .problem import Conv2dProblemShape
from .validation import validate_conv_inputs, validate_device

__all__ = ["conv2d_fprop"]

# TMA rows are 16 bytes: C and K of 16-bit tensors must be multiples of 8 elements.
CHANNEL_ALIGNMENT = 8


def conv2d_fprop(
    activation: Any,
    filter: Any,  # noqa: A002 - the documented argument name
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | Sequence[Sequence[int]] = 0,
    dilation: int | Sequence[int] = 1,
    out: Any = None,
    out_dtype: torch.dtype | None = None,
    config: Conv2dConfig | None = None,
    stream: torch.cuda.Stream | None = None,
) -> torch.Tensor:
    """Conv2D forward propagation: ``out[n, p, q, k] = sum_{r,s,c} act[n, h, w, c] * flt[k, r, s, c]``.

    Args:
        activation: ``[N, H, W, C]`` contiguous (NHWC), bfloat16 or float16.
        filter: ``[K, R, S, C]`` contiguous (KRSC), same dtype as ``activation``.
        stride, dilation: int or ``(h, w)``.
        padding: int, ``(h, w)`` or ``((top, bottom), (left, right))``.
        out: optional ``[N, P, Q, K]`` contiguous output to write. Any DLPack tensor is
            accepted for the three tensors when ``out`` is given.
        out_dtype: bfloat16, float16 or float32; defaults to ``out.dtype`` or the input dtype.
        config: kernel configuration; defaults to ``default_config(problem)``.
        stream: CUDA stream to run on; defaults to the current torch stream of the
            activation's device.

    Returns:
        ``out`` (or a new ``[N, P, Q, K]`` tensor), written by one fused kernel.

    Raises:
        TypeError, ValueError: on bad input, before anything is launched or written.

    Accumulation is in float32. C or K not a multiple of 8 are padded with zeros on the device
    (an extra copy of the activation and/or filter, and for K an extra output copy).
    """
    activation, filter, out = _as_torch(activation, filter, out)
    problem, out_dtype = validate_conv_inputs(
        activation,
        filter,
        stride=stride,
        padding=padding,
        dilation=dilation,
        out=out,
        out_dtype=out_dtype,
    )
    if config is not None and not isinstance(config, Conv2dConfig):
        raise TypeError(f"config must be a Conv2dConfig or None, got {type(config).__name__}")
    if stream is not None and not isinstance(stream, torch.cuda.Stream):
        raise TypeError(f"stream must be a torch.cuda.Stream or None, got {type(stream).__name__}")
    arch = validate_device(activation, filter, out)
    device = activation.device
    if out is None:
        out = torch.empty(problem.output_shape, dtype=out_dtype, device=device)
    if problem.gemm_m == 0:
        return out
    if stream is None:
        stream = torch.cuda.current_stream(device)

    config = config or default_config(problem)
    kernel = compile_kernel(
        arch,
        act_dtype=activation.dtype,
        filter_dtype=filter.dtype,
        out_dtype=out_dtype,
        config=config,
    )
    with torch.cuda.device(device), torch.cuda.stream(stream):
        act, flt, kernel_out, kernel_problem = _align_channels(activation, filter, out, problem)
        kernel.launch(
            kernel_problem,
            act.data_ptr(),
            flt.data_ptr(),
            kernel_out.data_ptr(),
            stream=cuda.CUstream(stream.cuda_stream),
            max_clusters=_sm_count(device.index) // (config.cluster_m * config.cluster_n),
        )
        if kernel_out is not out:
            out.copy_(kernel_out[..., : problem.K])
    return out


def _as_torch(activation: Any, filter: Any, out: Any) -> tuple[Any, Any, Any]:
    """Wrap DLPack tensors (zero-copy) when ``out`` is given; torch tensors pass through."""
    tensors = (("activation", activation), ("filter", filter), ("out", out))
    foreign = [name for name, t in tensors if t is not None and not isinstance(t, torch.Tensor)]
    if not foreign:
        return activation, filter, out
    for name in foreign:
        if not hasattr(dict(tensors)[name], "__dlpack__"):
            value = dict(tensors)[name]
            raise TypeError(
                f"{name} must be a torch.Tensor or a DLPack tensor, got {type(value).__name__}"
            )
    if out is None:
        raise TypeError(
            f"{', '.join(foreign)} is a non-torch DLPack tensor: pass out= (a preallocated "
            "[N, P, Q, K] tensor) so the result has a home outside torch"
        )
    return tuple(t if isinstance(t, torch.Tensor) else torch.from_dlpack(t) for _, t in tensors)


def _align_channels(
    activation: torch.Tensor,
    filter: torch.Tensor,  # noqa: A002
    out: torch.Tensor,
    problem: Conv2dProblemShape,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Conv2dProblemShape]:
    """Zero-pad C and K up to multiples of 8 so every TMA row is 16 bytes.

    Zero channels add nothing to the sum; padded output channels are computed into a scratch
    tensor and dropped. Aligned problems pass through without a copy.
    """
    c_pad = -problem.C % CHANNEL_ALIGNMENT
    k_pad = -problem.K % CHANNEL_ALIGNMENT
    if c_pad == 0 and k_pad == 0:
        return activation, filter, out, problem
    if c_pad:
        activation = F.pad(activation, (0, c_pad))
    filter = F.pad(filter, (0, c_pad, 0, 0, 0, 0, 0, k_pad))
    padded = Conv2dProblemShape.from_shapes(
        tuple(activation.shape),
        tuple(filter.shape),
        stride=problem.stride,
        padding=problem.padding,
        dilation=problem.dilation,
    )
    if k_pad:
        out = torch.empty(padded.output_shape, dtype=out.dtype, device=out.device)
    return activation.contiguous(), filter.contiguous(), out, padded


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count
