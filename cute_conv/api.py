"""The public conv functions on torch (or DLPack) tensors."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .compile import CompiledConv2d, compile_kernel, geometry_args
from .config import Conv2dConfig, default_config
from .problem import Conv2dProblemShape
from .validation import check_alignment, validate_conv_inputs, validate_device

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
    """Conv2D forward propagation: ``out[n,p,q,k] = sum_{r,s,c} act[n,h,w,c] * flt[k,r,s,c]``.

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
        ``out`` (or a new ``[N, P, Q, K]`` tensor), written by one kernel launch.

    Raises:
        TypeError, ValueError: on bad input, before anything is launched or written.

    Accumulation is in float32. C or K not a multiple of 8 are padded with zeros on the device
    (an extra copy of the activation and/or filter, and for K an extra output copy).
    """
    activation, filter, out = _as_torch(activation, filter, out)
    if stream is not None and not isinstance(stream, torch.cuda.Stream):
        raise TypeError(f"stream must be a torch.cuda.Stream or None, got {type(stream).__name__}")
    plan = _plan(activation, filter, out, stride, padding, dilation, out_dtype, config)
    _check_alignment(activation, filter, out)
    device = activation.device
    if out is None:
        out = torch.empty(plan.problem.output_shape, dtype=plan.out_dtype, device=device)
    if plan.problem.gemm_m == 0:
        return out
    if stream is None:
        stream = torch.cuda.current_stream(device)
    if plan.channel_padding:
        with torch.cuda.device(device), torch.cuda.stream(stream):
            _run_channel_padded(plan, activation, filter, out, stream.cuda_stream)
    elif device.index == torch.cuda.current_device():
        plan.launch(activation, filter, out, stream.cuda_stream)
    else:
        with torch.cuda.device(device):
            plan.launch(activation, filter, out, stream.cuda_stream)
    return out


@dataclass(frozen=True)
class _LaunchPlan:
    """Everything a call needs that depends only on tensor metadata and arguments."""

    problem: Conv2dProblemShape  # the user's problem
    out_dtype: torch.dtype
    kernel: CompiledConv2d
    kernel_problem: Conv2dProblemShape  # channels padded to multiples of 8
    scalars: tuple  # the kernel's runtime scalars for kernel_problem

    @property
    def channel_padding(self) -> bool:
        return self.kernel_problem is not self.problem

    def launch(self, act: torch.Tensor, flt: torch.Tensor, out: torch.Tensor, stream: int):
        self.kernel.launch_raw(act.data_ptr(), flt.data_ptr(), out.data_ptr(), self.scalars, stream)


def _plan(activation, filter, out, stride, padding, dilation, out_dtype, config) -> _LaunchPlan:  # noqa: A002
    """Validate a call and pick its kernel; memoized on the call's metadata.

    The key holds every property of the tensors and arguments that validation looks at
    except the data pointers (checked on every call by ``_check_alignment``), so a cached
    plan is exactly what a fresh validation would produce.
    """
    try:
        key = (
            _tensor_key(activation),
            _tensor_key(filter),
            None if out is None else _tensor_key(out),
            _freeze(stride),
            _freeze(padding),
            _freeze(dilation),
            out_dtype,
            config,
        )
        hash(key)
    except TypeError:  # an unhashable argument: validation will say what is wrong with it
        return _make_plan(activation, filter, out, stride, padding, dilation, out_dtype, config)
    plan = _plans.get(key)
    if plan is None:
        plan = _make_plan(activation, filter, out, stride, padding, dilation, out_dtype, config)
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[key] = plan
    return plan


_plans: dict[tuple, _LaunchPlan] = {}
_MAX_PLANS = 4096


def _make_plan(activation, filter, out, stride, padding, dilation, out_dtype, config):  # noqa: A002
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
    arch = validate_device(activation, filter, out)
    num_sms = _sm_count(activation.device.index)
    config = config or default_config(problem, num_sms)
    kernel = compile_kernel(
        arch,
        act_dtype=activation.dtype,
        filter_dtype=filter.dtype,
        out_dtype=out_dtype,
        config=config,
    )
    kernel_problem = _channel_aligned(problem)
    max_clusters = num_sms // (config.cluster_m * config.cluster_n)
    scalars = (*geometry_args(kernel_problem), max_clusters)
    return _LaunchPlan(problem, out_dtype, kernel, kernel_problem, scalars)


def _tensor_key(t: torch.Tensor) -> tuple:
    return (type(t), t.dtype, t.device, t.layout, tuple(t.shape), t.stride())


def _freeze(value: Any) -> Any:
    """Lists (at any depth) to tuples, so equal arguments give equal cache keys."""
    if isinstance(value, (list, tuple)):
        return (type(value) is tuple, tuple(_freeze(v) for v in value))
    return (type(value), value)


def _check_alignment(*tensors: torch.Tensor | None) -> None:
    for name, t in zip(("activation", "filter", "out"), tensors, strict=False):
        if t is not None:
            check_alignment(name, t)


def _as_torch(activation: Any, filter: Any, out: Any) -> tuple[Any, Any, Any]:  # noqa: A002
    """Wrap DLPack tensors (zero-copy) when ``out`` is given; torch tensors pass through."""
    tensors = {"activation": activation, "filter": filter, "out": out}
    foreign = [n for n, t in tensors.items() if t is not None and not isinstance(t, torch.Tensor)]
    if not foreign:
        return activation, filter, out
    for name in foreign:
        if not hasattr(tensors[name], "__dlpack__"):
            raise TypeError(
                f"{name} must be a torch.Tensor or a DLPack tensor, "
                f"got {type(tensors[name]).__name__}"
            )
    if out is None:
        raise TypeError(
            f"{', '.join(foreign)} is a non-torch DLPack tensor: pass out= (a preallocated "
            "[N, P, Q, K] tensor) so the result has a home outside torch"
        )
    return tuple(
        t if isinstance(t, torch.Tensor) else torch.from_dlpack(t) for t in tensors.values()
    )


def _channel_aligned(problem: Conv2dProblemShape) -> Conv2dProblemShape:
    """``problem`` with C and K rounded up to multiples of 8 (the same object if aligned)."""
    c = -(-problem.C // CHANNEL_ALIGNMENT) * CHANNEL_ALIGNMENT
    k = -(-problem.K // CHANNEL_ALIGNMENT) * CHANNEL_ALIGNMENT
    if (c, k) == (problem.C, problem.K):
        return problem
    return Conv2dProblemShape(
        problem.N, problem.H, problem.W, c, k, problem.R, problem.S,
        padding=problem.padding, stride=problem.stride, dilation=problem.dilation,
    )  # fmt: skip


def _run_channel_padded(
    plan: _LaunchPlan,
    activation: torch.Tensor,
    filter: torch.Tensor,  # noqa: A002
    out: torch.Tensor,
    stream: int,
) -> None:
    """Zero-pad C and K so every TMA row is 16 bytes, run, and keep the first K channels.

    Zero channels add nothing to the sum; padded output channels go to a scratch tensor.
    """
    c_pad = plan.kernel_problem.C - plan.problem.C
    k_pad = plan.kernel_problem.K - plan.problem.K
    act = F.pad(activation, (0, c_pad)) if c_pad else activation
    flt = F.pad(filter, (0, c_pad, 0, 0, 0, 0, 0, k_pad))
    kernel_out = out
    if k_pad:
        kernel_out = torch.empty(
            plan.kernel_problem.output_shape, dtype=out.dtype, device=out.device
        )
    plan.launch(act, flt, kernel_out, stream)
    if kernel_out is not out:
        out.copy_(kernel_out[..., : plan.problem.K])


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count
