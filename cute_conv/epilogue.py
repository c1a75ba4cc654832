"""Host side of the fused epilogue: checking its arguments and building its ``EpilogueSpec``.

    D = epilogue_fn(act(alpha * conv(x, filter) * scale + bias)) + beta * source
    D = epilogue_fn(act(alpha * conv(x, filter) * scale + bias + beta * source))

(the residual after the activation, or before it as in ResNet's blocks). Like ``validation``,
nothing here queries CUDA, so every check is testable on a CPU.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Callable

import torch

from .dtypes import dtype_name
from .kernels.common.epilogue import ACTIVATIONS, RESIDUAL_ORDERS, EpilogueSpec
from .problem import Conv2dProblemShape
from .validation import check_tensor

__all__ = ["ACTIVATIONS", "RESIDUAL_ORDERS", "EpilogueSpec", "validate_epilogue_args"]

CHANNEL_VECTOR_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def validate_epilogue_args(
    problem: Conv2dProblemShape,
    out_dtype: torch.dtype,
    device: torch.device,
    *,
    alpha: float,
    bias: torch.Tensor | None,
    scale: torch.Tensor | None,
    activation: str | None,
    epilogue_fn: Callable | None,
    source: torch.Tensor | None = None,
    beta: float = 0.0,
    residual_order: str = RESIDUAL_ORDERS[0],
) -> EpilogueSpec:
    """Check the epilogue arguments of a call; return the spec its kernel is compiled with.

    ``source`` is the residual ``[N, P, Q, K]`` tensor (same dtype as the output). With
    ``beta == 0`` it is still checked, but the kernel does not read it. ``residual_order``:
    one of ``RESIDUAL_ORDERS`` (checked by ``EpilogueSpec``).
    """
    _check_scalar("alpha", alpha)
    _check_scalar("beta", beta)
    for name, vector in (("bias", bias), ("scale", scale)):
        if vector is not None:
            _check_channel_vector(name, vector, problem.K, device)
    if activation is not None and not isinstance(activation, str):
        raise TypeError(
            f"activation must be None or a name ({', '.join(ACTIVATIONS)}), "
            f"got {type(activation).__name__}"
        )
    if source is not None:
        if isinstance(source, torch.Tensor) and source.dtype != out_dtype:
            raise TypeError(
                f"source has dtype {source.dtype}; it must equal the output dtype {out_dtype} "
                "(out_dtype, else out.dtype, else the activation's dtype)"
            )
        check_tensor("source", source, (out_dtype,))
        if tuple(source.shape) != problem.output_shape:
            raise ValueError(
                f"source has shape {tuple(source.shape)}; the residual must have the output's "
                f"shape [N, P, Q, K] = {problem.output_shape}"
            )
        if source.device != device:
            raise ValueError(
                f"source is on {source.device} but activation is on {device}; "
                "they must be on the same device"
            )
    return EpilogueSpec(
        has_bias=bias is not None,
        has_scale=scale is not None,
        activation=activation,
        epilogue_fn=epilogue_fn,
        has_residual=source is not None and beta != 0,
        vector_dtype=dtype_name(kernel_vector_dtype(bias, scale)),
        residual_order=residual_order,
    )


def kernel_vector_dtype(*vectors: torch.Tensor | None) -> torch.dtype:
    """The dtype the kernel reads bias and scale in: theirs when they agree (no conversion on
    the host), else float32 (``staging`` converts them)."""
    dtypes = {v.dtype for v in vectors if v is not None}
    return dtypes.pop() if len(dtypes) == 1 else torch.float32


def _check_scalar(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")


def _check_channel_vector(name: str, t: object, k: int, device: torch.device) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of length K={k}, got {type(t).__name__}")
    if t.dtype not in CHANNEL_VECTOR_DTYPES:
        raise TypeError(
            f"{name} has dtype {t.dtype}; use one of "
            f"{', '.join(str(d) for d in CHANNEL_VECTOR_DTYPES)} (it is applied in float32)"
        )
    if t.dim() != 1 or t.shape[0] != k:
        raise ValueError(
            f"{name} has shape {tuple(t.shape)}; it holds one value per output channel: "
            f"shape ({k},)"
        )
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but activation is on {device}")
