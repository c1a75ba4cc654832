"""The direct path of a conv call: validate once per call signature (a cached plan), pick and
compile the kernel for the device's arch, launch it on the caller's stream.

``api`` (the public functions) and ``ops`` (the torch.library ops) both call ``conv2d``; this
module imports neither of them. The autotuner times candidate configs through
``config_runner``, which it receives rather than imports.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from .arch import ARCHS, check_config_type
from .compile import CompiledConv2d, compile_kernel, forget_on_clear, kernel_scalars
from .config import bulk_tile_store_pays
from .cuda_context import current_device, current_raw_stream
from .direct_rule import check_direct_dense_fits
from .dtypes import dtype_name
from .epilogue import EpilogueSpec, kernel_vector_dtype, validate_epilogue_args
from .gemv_rule import check_pointwise_gemv_fits
from .kernels.common.grouped_direct import GroupedDirectConfig, runs_epilogue
from .kernels.common.pointwise_gemv import PointwiseGemvConfig
from .occupancy import resident_clusters
from .plan_cache import PlanCache
from .problem import Conv2dProblemShape
from .schedule import launch_clusters
from .staging import (
    StagingPlan,
    kernel_problem_for,
    run_staged,
    span_bytes,
    spans_overlap,
    staging_plan,
)
from .tuning import stored_or_tuned_config
from .untuned import cuda_core_config, untuned_config
from .validation import (
    ALIGNMENT_BYTES,
    FP8_DTYPES,
    check_alignment,
    check_fp8_scales,
    out_pixel_stride,
    output_rows_unaligned,
    validate_conv_inputs,
    validate_device,
)
from .workspace import workspace_pointers

__all__ = [
    "config_runner",
    "conv2d",
    "freeze_arg",
    "out_overlaps_inputs",
    "sm_count",
    "tensor_key",
]


def conv2d(  # noqa: A002
    x, filter, source, bias, scale, out, stream, args: tuple, fp8_scales: tuple | None = None
) -> torch.Tensor:
    """The shared body of the public functions and of the ops; its fast path is a cached
    plan + a launch.

    ``args`` are the other arguments, positional (a keyword dict of them cost ~1 us a call):
    ``(stride, padding, dilation, alpha, beta, residual_order, activation, epilogue_fn,
    out_dtype, config)``. ``fp8_scales``: ``(x_scale, w_scale, out_scale, out_amax,
    source_scale)`` (each a tensor or None), None when the call passes none of them.
    """
    if not (type(x) is torch.Tensor and type(filter) is torch.Tensor):  # noqa: E721
        x, filter, source, out = _as_torch(x, filter, source, out)
    elif (out is not None and type(out) is not torch.Tensor) or (  # noqa: E721
        source is not None and type(source) is not torch.Tensor  # noqa: E721
    ):
        x, filter, source, out = _as_torch(x, filter, source, out)
    if stream is not None and not isinstance(stream, torch.cuda.Stream):
        raise TypeError(f"stream must be a torch.cuda.Stream or None, got {type(stream).__name__}")
    plan = _plan(x, filter, source, out, bias, scale, args, fp8_scales)
    epi = plan.epilogue
    bias = bias if epi.has_bias else None
    scale = scale if epi.has_scale else None
    source = source if epi.has_residual else None
    fresh_out = out is None
    if fresh_out:
        # new_empty: x's device without a device argument to parse (~1 us a call)
        out = x.new_empty(plan.out_shape, dtype=plan.out_dtype)
    x_ptr, f_ptr, out_ptr = x.data_ptr(), filter.data_ptr(), out.data_ptr()
    src_ptr = 0 if source is None else source.data_ptr()
    if (x_ptr | f_ptr | out_ptr | src_ptr) % ALIGNMENT_BYTES:
        tensors = {"activation": x, "filter": filter, "out": out, "source": source}
        for name, t in tensors.items():
            if t is not None:
                check_alignment(name, t)
    if plan.empty:
        return out
    # The kernel cannot write an input, nor read a source it is overwriting.
    aliased = not fresh_out and out_overlaps_inputs(out_ptr, x_ptr, f_ptr, src_ptr, plan.nbytes)
    needs_staging = plan.needs_staging or aliased
    scale_pointers = _NO_SCALES if fp8_scales is None else _scale_pointers(fp8_scales)
    # x is a CUDA tensor (validated), so get_device() is its index, without a device object.
    device_index = x.get_device()
    raw_stream = current_raw_stream(device_index) if stream is None else stream.cuda_stream
    if needs_staging:
        launch = functools.partial(
            plan.launch, scale_pointers=scale_pointers, device_index=device_index,
            stream=raw_stream,
        )  # fmt: skip
        staged = (plan.staging, x, filter, out, source, bias, scale)
        if stream is None and device_index == current_device():
            # The staging ops go to the current stream, the one the kernel launches on.
            run_staged(launch, *staged, stream=raw_stream, may_alias=aliased)
        else:
            with torch.cuda.device(device_index), torch.cuda.stream(stream):
                run_staged(launch, *staged, stream=raw_stream, may_alias=aliased)
        return out
    pointers = (
        x_ptr, f_ptr, out_ptr, src_ptr,
        0 if bias is None else bias.data_ptr(), 0 if scale is None else scale.data_ptr(),
        *scale_pointers, *plan.workspace_pointers(device_index, raw_stream),
    )  # fmt: skip
    if device_index == current_device():
        plan.kernel.launch(pointers, plan.scalars, raw_stream)
    else:
        with torch.cuda.device(device_index):
            plan.kernel.launch(pointers, plan.scalars, raw_stream)
    return out


# ``fp8_scales`` of a call that passes none: (x_scale, w_scale, out_scale, out_amax,
# source_scale).
NO_SCALE_TENSORS = (None, None, None, None, None)
_NO_SCALES = (0, 0, 0, 0, 0)


def _scale_pointers(fp8_scales: tuple) -> tuple[int, ...]:
    """The kernel's pointers to x_scale, w_scale, out_scale, out_amax and source_scale (0
    for None), in ``ConvPointers``' order (written out, not looped: every fp8 call runs it)."""
    x_scale, w_scale, out_scale, out_amax, source_scale = fp8_scales
    return (
        0 if x_scale is None else x_scale.data_ptr(),
        0 if w_scale is None else w_scale.data_ptr(),
        0 if out_scale is None else out_scale.data_ptr(),
        0 if out_amax is None else out_amax.data_ptr(),
        0 if source_scale is None else source_scale.data_ptr(),
    )


def out_overlaps_inputs(out_ptr: int, x_ptr: int, f_ptr: int, src_ptr: int, nbytes: tuple) -> bool:
    """Whether a given ``out`` overlaps ``x`` or the filter, or (partly) a distinct source."""
    x_bytes, f_bytes, out_bytes = nbytes
    return (
        spans_overlap(out_ptr, out_bytes, x_ptr, x_bytes)
        or spans_overlap(out_ptr, out_bytes, f_ptr, f_bytes)
        or bool(
            src_ptr and src_ptr != out_ptr and spans_overlap(out_ptr, out_bytes, src_ptr, out_bytes)
        )
    )


@dataclass(frozen=True)
class _LaunchPlan:
    """Everything a call needs that depends only on tensor metadata and arguments."""

    problem: Conv2dProblemShape  # the user's problem
    out_shape: tuple[int, int, int, int]  # problem.output_shape, computed once
    out_dtype: torch.dtype
    epilogue: EpilogueSpec
    kernel: CompiledConv2d
    staging: StagingPlan  # what the kernel runs (staging.kernel_problem_for) and how
    scalars: tuple  # the kernel's runtime scalars, writing ``out`` where it is
    staged_scalars: tuple  # the same for a staged call, which writes a contiguous output
    workspace: tuple[int, int] | None  # float32 partials and int32 flags it needs, if any
    nbytes: tuple[int, int, int]  # sizes of x, filter and out, for the aliasing checks
    empty: bool  # N == 0: nothing to launch
    # The problem is staged, or bias/scale (those used) are not contiguous vectors of the
    # kernel's vector dtype: the call goes through ``staging.run_staged``.
    needs_staging: bool

    def workspace_pointers(self, device_index: int, stream: int) -> tuple[int, int]:
        """The stream-K / dynamic scheduling workspace of this call's stream, or null
        pointers."""
        return workspace_pointers(self.workspace, device_index, stream)

    def launch(
        self, x, flt, out, source, bias, scale, *, scale_pointers, device_index: int, stream: int
    ) -> None:
        """Launch on tensors already laid out for the kernel (see ``staging``); the
        tensors of terms the epilogue leaves out are None."""
        pointers = (
            x.data_ptr(), flt.data_ptr(), out.data_ptr(),
            0 if source is None else source.data_ptr(), 0 if bias is None else bias.data_ptr(),
            0 if scale is None else scale.data_ptr(), *scale_pointers,
            *self.workspace_pointers(device_index, stream),
        )  # fmt: skip
        self.kernel.launch(pointers, self.staged_scalars, stream)


def _plan(x, filter, source, out, bias, scale, args: tuple, fp8_scales) -> _LaunchPlan:  # noqa: A002
    """Validate a call and pick its kernel; memoized on the call's metadata (``_plan_key``)."""
    return _plans.memo(_plan_key, _make_plan, (x, filter, source, out, bias, scale, args,
                                               fp8_scales))  # fmt: skip


def _plan_key(x, filter, source, out, bias, scale, args: tuple, fp8_scales) -> tuple:  # noqa: A002
    """Every property of the tensors and arguments that validation looks at except the data
    pointers (their alignment is checked on every call), so that a cached plan is exactly
    what a fresh validation would produce."""
    stride, padding, dilation, alpha, beta, order, activation, epilogue_fn, out_dtype, config = args
    return (
        tensor_key(x),
        tensor_key(filter),
        None if source is None else tensor_key(source),
        None if out is None else tensor_key(out),
        None if bias is None else tensor_key(bias),
        None if scale is None else tensor_key(scale),
        # freeze_arg of the other arguments, with the common cases inline (every call runs this)
        stride if type(stride) is int else freeze_arg(stride),
        padding if type(padding) is int else freeze_arg(padding),
        dilation if type(dilation) is int else freeze_arg(dilation),
        # With the sign, which 0.0 == -0.0 leaves out and the kernel's products keep.
        (type(alpha), alpha, math.copysign(1.0, alpha)),
        (type(beta), beta, math.copysign(1.0, beta)),
        order if type(order) is str else freeze_arg(order),
        # activation, epilogue_fn, out_dtype and config: mostly all None, tested at once
        None
        if activation is epilogue_fn is out_dtype is config is None
        else (freeze_arg(activation), freeze_arg(epilogue_fn), freeze_arg(out_dtype),
              freeze_arg(config)),
        None if fp8_scales is None else _scale_keys(*fp8_scales),
    )  # fmt: skip


def _scale_key(t: torch.Tensor | None) -> tuple | None:
    """The plan key of one scale tensor: what ``validation.check_scale_tensor`` reads (type,
    dtype, device, layout, element count), not the strides of its one element."""
    return None if t is None else (type(t), t.dtype, t.device, t.layout, t.shape)


def _scale_keys(x_scale, w_scale, out_scale, out_amax, source_scale) -> tuple:
    """The scale tensors' keys, written out rather than looped (every fp8 call runs it)."""
    return (
        _scale_key(x_scale), _scale_key(w_scale), _scale_key(out_scale), _scale_key(out_amax),
        _scale_key(source_scale),
    )  # fmt: skip


_plans: PlanCache[_LaunchPlan] = PlanCache()
forget_on_clear(_plans.clear)  # a plan holds its kernel: compile.clear_cache drops both


def _make_plan(x, filter, source, out, bias, scale, args: tuple, fp8_scales) -> _LaunchPlan:  # noqa: A002
    stride, padding, dilation, alpha, beta, order, activation, epilogue_fn, out_dtype, config = args
    problem, out_dtype = validate_conv_inputs(
        x, filter, stride=stride, padding=padding, dilation=dilation, out=out, out_dtype=out_dtype
    )
    check_fp8_scales(
        x.dtype, out_dtype, x.device, *(fp8_scales or NO_SCALE_TENSORS), has_source=source is not None
    )
    epilogue = validate_epilogue_args(
        problem,
        out_dtype,
        x.device,
        alpha=alpha,
        bias=bias,
        scale=scale,
        activation=activation,
        epilogue_fn=epilogue_fn,
        source=source,
        beta=beta,
        residual_order=order,
    )
    check_config_type(config)
    arch = validate_device(x, filter, out, source=source, bias=bias, scale=scale)
    element_bytes, out_bits = x.element_size(), torch.finfo(out_dtype).bits
    kernel_problem = kernel_problem_for(problem, element_bytes)
    if output_rows_unaligned(kernel_problem.K, out_bits):
        epilogue = replace(
            epilogue, store_by_threads=True, thread_store_pairs=kernel_problem.K % 2 == 0
        )
    if fp8_scales is not None and fp8_scales[3] is not None:
        epilogue = replace(epilogue, has_amax=True)
    if fp8_scales is not None and fp8_scales[4] is not None:
        epilogue = replace(epilogue, has_source_scale=True)  # dropped where beta == 0
    num_sms = sm_count(x.device.index)
    target = ARCHS[arch]
    config = _config_for_call(
        config, target, problem, kernel_problem, x, tuple(filter.shape), out_dtype, num_sms,
        epilogue,
    )  # fmt: skip
    on_cuda_cores = isinstance(config, (PointwiseGemvConfig, GroupedDirectConfig))
    if on_cuda_cores:  # it reads the operands as they are
        if isinstance(config, PointwiseGemvConfig):
            check_pointwise_gemv_fits(config, problem, element_bytes, out_bits // 8)
        else:
            check_direct_dense_fits(config, problem, element_bytes, out_bits // 8, epilogue)
        kernel_problem = problem
        # Its threads store every value: one spelling of the epilogue, one cached kernel.
        epilogue = replace(epilogue, store_by_threads=False, thread_store_pairs=False)
    else:  # a kernel that gathers its operands reads them unstaged
        kernel_problem = kernel_problem_for(
            problem, element_bytes, gathered=getattr(config, "gather", False)
        )
    if target.check_fits is not None and isinstance(config, target.config_class):
        target.check_fits(config, kernel_problem)
    if (
        epilogue.store_by_threads
        and bulk_tile_store_pays(kernel_problem, out_bits, epilogue.has_residual)
        and target.whole_rows_rule is not None
        and isinstance(config, target.config_class)
        and target.whole_rows_rule(config, kernel_problem, dtype_name(x.dtype), dtype_name(out_dtype))
    ):
        epilogue = replace(epilogue, bulk_tile_store=True)
    kernel = compile_kernel(
        arch,
        act_dtype=x.dtype,
        filter_dtype=filter.dtype,
        out_dtype=out_dtype,
        config=config,
        epilogue=epilogue,
    )
    max_clusters = 1  # the CUDA-core kernel's grid is its own (no persistent clusters)
    if not on_cuda_cores:
        cluster_size = config.cluster_m * config.cluster_n
        max_clusters = launch_clusters(
            kernel_problem, config, num_sms, resident_clusters(x.device.index, cluster_size)
        )
    staged_scalars = kernel_scalars(kernel_problem, alpha, beta, max_clusters)
    # A channel slice of a wider tensor (``out_pixel_stride``) is written in place by a direct
    # launch; a staged call writes a contiguous scratch output and copies it in.
    out_pixels = problem.K if out is None else out_pixel_stride(out)
    scalars = staged_scalars
    if out_pixels != problem.K:
        scalars = kernel_scalars(kernel_problem, alpha, beta, max_clusters, None, out_pixels)
    used_vectors = (bias if epilogue.has_bias else None, scale if epilogue.has_scale else None)
    vector_dtype = kernel_vector_dtype(*used_vectors)
    vectors_ready = all(
        v is None or (v.dtype == vector_dtype and v.is_contiguous()) for v in used_vectors
    )
    # A channel slice's span ends at its last pixel's channels.
    out_bytes = math.prod(problem.output_shape) * out_bits // 8 if out is None else span_bytes(out)
    nbytes = (x.numel() * x.element_size(), filter.numel() * filter.element_size(), out_bytes)
    workspace = None
    if target.workspace_size is not None and not on_cuda_cores:
        workspace = target.workspace_size(kernel_problem, config, max_clusters)
    staging = staging_plan(problem, kernel_problem, element_bytes)
    # The patch view reads and writes the tensors in place: their pointers are the views'.
    staged = kernel_problem is not problem and not staging.patches
    return _LaunchPlan(
        problem, problem.output_shape, out_dtype, epilogue, kernel, staging, scalars,
        staged_scalars, workspace, nbytes, problem.gemm_m == 0, staged or not vectors_ready,
    )  # fmt: skip


def _config_for_call(
    config, target, problem, kernel_problem, x, filter_shape, out_dtype, num_sms, epilogue
):
    """The config a call runs: ``config`` if given, else a CUDA-core kernel's where one of the
    arch's rules takes the conv (``untuned.cuda_core_config``; the direct conv's only for an
    epilogue it runs; before the autotuner, which tunes tensor-core configs), else the
    autotuner's choice (stored, or tuned now), else the untuned one
    (``untuned.untuned_config``). A tuned choice stands as it is: the gather, small-M and
    single-warpgroup rules replace only the heuristic's guess."""
    out_bytes = torch.finfo(out_dtype).bits // 8
    has_residual = epilogue.has_residual
    if config is None:
        config = cuda_core_config(target, problem, x.element_size(), out_bytes)
        if isinstance(config, GroupedDirectConfig) and not runs_epilogue(epilogue):
            config = None
    if config is None and target.autotuned:
        config = stored_or_tuned_config(
            problem, kernel_problem, x, filter_shape, out_dtype, has_residual,
            make_runner=config_runner,
        )  # fmt: skip
    if config is None:
        config = untuned_config(
            target, problem, kernel_problem, num_sms, has_residual, x.element_size(), out_bytes,
            cuda_cores=False,  # their rules declined above
        )  # fmt: skip
    return config


def tensor_key(t: torch.Tensor) -> tuple:
    """The metadata of ``t`` that validation reads (no data pointer): a plan cache's key."""
    return (type(t), t.dtype, t.device, t.layout, t.shape, t.stride())


def freeze_arg(value: Any) -> Any:
    """A hashable key that tells apart what validation tells apart (1 vs True vs 1.0)."""
    kind = type(value)
    if kind is int or value is None:  # the common case, cheapest key
        return value
    # A pair of ints, as nn.Conv2d passes its geometry: its own key, at a fifth of the cost
    # of freezing each element (1.7 -> 0.4 us a pair on a CPU host; three pairs a call).
    if kind is tuple and len(value) == 2:
        first, second = value
        if type(first) is int and type(second) is int:
            return (True, value)
        # Per-side padding, ((top, bottom), (left, right)): as cheap a key, by the same test.
        if (
            type(first) is tuple and type(second) is tuple and len(first) == len(second) == 2
            and type(first[0]) is int and type(first[1]) is int
            and type(second[0]) is int and type(second[1]) is int
        ):  # fmt: skip
            return (False, value)
    if kind is float:
        return (kind, value)
    if isinstance(value, (list, tuple)):
        return (kind is tuple, tuple([freeze_arg(v) for v in value]))
    return (kind, value)


def _as_torch(*tensors: Any) -> tuple[Any, ...]:
    """Wrap DLPack tensors (zero-copy) when ``out`` (the last) is given."""
    names = ("activation", "filter", "source", "out")
    foreign = [
        name
        for name, t in zip(names, tensors, strict=True)
        if t is not None and not isinstance(t, torch.Tensor)
    ]
    if not foreign:
        return tensors
    for name, t in zip(names, tensors, strict=True):
        if name in foreign and not hasattr(t, "__dlpack__"):
            raise TypeError(
                f"{name} must be a torch.Tensor or a DLPack tensor, got {type(t).__name__}"
            )
    if tensors[-1] is None:
        raise TypeError(
            f"{', '.join(foreign)} is a non-torch DLPack tensor: pass out= (a preallocated "
            "[N, P, Q, K] tensor) so the result has a home outside torch"
        )
    return tuple(
        t if t is None or isinstance(t, torch.Tensor) else torch.from_dlpack(t) for t in tensors
    )


@functools.lru_cache(maxsize=None)
def sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def config_runner(
    problem: Conv2dProblemShape,
    dtype: torch.dtype,
    out_dtype: torch.dtype,
    device: torch.device,
    has_residual: bool,
) -> Callable[[Any], torch.Tensor]:
    """``tuning.RunnerFactory``: scratch tensors of ``problem``'s shapes (random, the filter
    scaled down so the output stays finite; fp8 ones with unit scales), and a function that
    runs the conv on them with a given config (with a residual add of ``beta = 1`` when
    ``has_residual``)."""
    x = torch.randn(*problem.activation_shape, device=device).to(dtype)
    flt = (torch.randn(*problem.filter_shape, device=device) / 16).to(dtype)
    out = torch.empty(problem.output_shape, dtype=out_dtype, device=device)
    fp8_scales = None
    if dtype in FP8_DTYPES:
        one = torch.ones((), device=device)
        out_scale = one if out_dtype in FP8_DTYPES else None
        fp8_scales = (one, one, out_scale, *NO_SCALE_TENSORS[3:])  # no amax, no source scale
    source = None
    beta = 0.0
    if has_residual:
        source = torch.randn(problem.output_shape, device=device).to(out_dtype)
        beta = 1.0
    geometry = (problem.stride, problem.padding, problem.dilation)
    order = "after_activation"

    def run(config: Any) -> torch.Tensor:
        args = (*geometry, 1.0, beta, order, None, None, None, config)
        return conv2d(x, flt, source, None, None, out, None, args, fp8_scales)

    return run
