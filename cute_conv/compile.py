"""Ahead-of-time compilation of the conv kernels (and of the stem's space-to-depth staging
kernel) and the in-process cache of compiled kernels.

Compilation needs no GPU: kernels are traced with null pointers and symbolic geometry, for the
arch named by the caller. The cache key holds the arch, the dtypes and the config, never the
geometry: every N/H/W/C/K/R/S/padding/stride/dilation runs through the same compiled kernel.
"""

from __future__ import annotations

import dataclasses
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_stream, make_ptr

from . import disk_cache
from .arch import ARCHS
from .config import check_channels
from .dtypes import CUTLASS_DTYPES, FP8_INPUT_DTYPES, INPUT_DTYPES, dtype_name
from .kernels.common.channel_scale import SCALE_TYPES, ChannelScaleNhwc
from .kernels.common.entry import ConvLaunchParams, ConvPointers, check_kernel_dtypes
from .kernels.common.epilogue import EpilogueSpec
from .kernels.common.grouped_direct import GroupedDirectConfig, GroupedDirectConv
from .kernels.common.im2col import ConvGeometry
from .kernels.common.pointwise_gemv import PointwiseGemv, PointwiseGemvConfig
from .kernels.common.pool import (
    AVG_POOL_TYPES,
    POOL_TYPES,
    AvgPool2dNhwc,
    MaxPool2dNhwc,
    PoolWindow,
)
from .kernels.common.quantize import QuantizeFp8
from .kernels.common.space_to_depth import SpaceToDepthFold
from .kernels.common.unfold import (
    Im2colColumns,
    Im2colPatchRows,
    check_patch_taps,
)
from .kernels.sm90.config import Conv2dConfig
from .kernels.sm100.config import Conv2dConfigSm100
from .problem import Conv2dProblemShape

# The SMEM capacity per compilation target (see ``arch.ARCHS``).
SMEM_CAPACITY_BY_ARCH: dict[str, int] = {name: arch.smem_capacity for name, arch in ARCHS.items()}


@dataclasses.dataclass(frozen=True)
class KernelKey:
    """Everything a compiled kernel depends on. Geometry is deliberately absent."""

    arch: str
    act_dtype: str
    filter_dtype: str
    out_dtype: str
    config: Conv2dConfig | Conv2dConfigSm100 | PointwiseGemvConfig | GroupedDirectConfig
    epilogue: EpilogueSpec = EpilogueSpec()


@dataclasses.dataclass(frozen=True)
class CompiledConv2d:
    """A compiled conv kernel: its PTX and cubin, its SMEM size, and a launcher."""

    key: KernelKey
    ptx: str
    cubin: bytes
    smem_bytes: int
    _fn: Callable = dataclasses.field(repr=False)

    def launch(self, pointers: tuple[int, ...], scalars: tuple, stream: int) -> None:
        """Run the kernel: the hot path of every call.

        ``pointers``: device addresses in ``ConvPointers`` order (activation, filter, out,
        source, bias, scale, the fp8 scales of activation, filter and output, the output's
        amax, stream-K partials, stream-K / dynamic-scheduling flags), 0 for terms the kernel
        leaves out and for a workspace it does not use; ``scalars``: ``kernel_scalars(...)``,
        the rest of ``ConvLaunchParams``; ``stream``: a raw ``cudaStream_t`` handle. The
        problem must be validated and channel-aligned.
        """
        self._fn(*pointers, *scalars, stream)


def kernel_scalars(
    problem: Conv2dProblemShape,
    alpha: float,
    beta: float,
    max_clusters: int,
    pixel_stride: int | None = None,
    out_pixel_stride: int | None = None,
) -> tuple:
    """The kernel's runtime scalars, ``ConvLaunchParams`` after the pointers: the geometry
    (``ConvGeometry``), alpha, beta and the bound of the persistent grid. ``pixel_stride``:
    the grouped kernel's activation read as a channel slice of a tensor of this many channels
    (its ``geometry.c``; the others' is C). ``out_pixel_stride``: the output written as a
    channel slice of a tensor of this many channels (None: K, a contiguous output)."""
    (pad_top, pad_bottom), (pad_left, pad_right) = problem.padding
    c = problem.C if pixel_stride is None else pixel_stride
    out_pixels = problem.K if out_pixel_stride is None else out_pixel_stride
    geometry = ConvGeometry(
        n=problem.N, h=problem.H, w=problem.W, c=c, k=problem.K, r=problem.R,
        s=problem.S, p=problem.P, q=problem.Q, pad_top=pad_top, pad_bottom=pad_bottom,
        pad_left=pad_left, pad_right=pad_right, stride_h=problem.stride[0],
        stride_w=problem.stride[1], dil_h=problem.dilation[0], dil_w=problem.dilation[1],
        out_pixel_stride=out_pixels,
    )  # fmt: skip
    return (*geometry, float(alpha), float(beta), max_clusters)


def _build(key: KernelKey):
    # The CUDA-core kernels (few-row 1x1 convs, grouped convs) are the same code on every arch.
    if isinstance(key.config, PointwiseGemvConfig):
        kernel_class = PointwiseGemv
    elif isinstance(key.config, GroupedDirectConfig):
        kernel_class = GroupedDirectConv
    else:
        kernel_class = ARCHS[key.arch].kernel_class
    return kernel_class(
        CUTLASS_DTYPES[key.act_dtype],
        CUTLASS_DTYPES[key.filter_dtype],
        CUTLASS_DTYPES[key.out_dtype],
        key.config,
        key.epilogue,
    )


def _fake_launch_args(key: KernelKey) -> list:
    """``ConvLaunchParams`` of null pointers and placeholder scalars, flattened: what the
    kernel is traced with (the values are never read at compile time)."""
    vector = key.epilogue.vector_dtype
    pointers = ConvPointers(
        act=key.act_dtype, filter=key.filter_dtype, out=key.out_dtype, source=key.out_dtype,
        bias=vector, scale=vector, act_scale=cutlass.Float32, filter_scale=cutlass.Float32,
        out_scale=cutlass.Float32, amax=cutlass.Float32, source_scale=cutlass.Float32,
        partials=cutlass.Float32, flags=cutlass.Int32,
    )  # fmt: skip
    params = ConvLaunchParams(
        pointers=[_null_pointer(dtype) for dtype in pointers],
        geometry=[cutlass.Int32(1)] * len(ConvGeometry._fields),
        alpha=cutlass.Float32(1.0),
        beta=cutlass.Float32(1.0),
        max_clusters=cutlass.Int32(1),
    )
    return [*params.pointers, *params.geometry, *params[2:]]


def _cute_compile(kernel: Any, args: list, arch: str) -> tuple[Callable, str, bytes]:
    """``cute.compile`` for ``arch`` through TVM-FFI, keeping the PTX and the cubin."""
    with tempfile.TemporaryDirectory(prefix="cute_conv_") as dump_dir:
        fn = cute.compile(
            kernel,
            *args,
            make_fake_stream(),
            options=(
                f"--gpu-arch {arch} --enable-tvm-ffi --keep-ptx --keep-cubin --dump-dir {dump_dir}"
            ),
        )
        ptx = fn.__ptx__ or ""
        cubin = fn.__cubin__ or b""
        if isinstance(cubin, str):
            cubin = Path(cubin).read_bytes() if Path(cubin).is_file() else cubin.encode()
    return fn, ptx, cubin


def _positional_launcher(fn: Callable) -> Callable:
    """The TVM-FFI function inside a freshly compiled ``fn``, which the DSL wraps in two Python
    layers for keyword arguments (0.4-0.7 us of each launch with our 29 arguments, measured on
    an H200 host); our calls are positional, as the disk cache's loaded functions (plain
    TVM-FFI functions) take them. The TVM-FFI function keeps the JIT engine that holds its
    code alive."""
    unwrap = getattr(fn, "__tvm_ffi_object__", None)
    execution_args = getattr(fn, "execution_args", None)
    if unwrap is None or getattr(execution_args, "has_pointer_address_arg_specs", True):
        return fn  # not the wrapper, or one that must convert pointer arguments first
    raw = unwrap()  # None where the function was compiled without a GPU to load it on
    return fn if raw is None else raw


def _null_pointer(dtype: str | type[cutlass.Numeric]) -> cute.Pointer:
    element = CUTLASS_DTYPES[dtype] if isinstance(dtype, str) else dtype
    return make_ptr(element, 0, cute.AddressSpace.gmem, assumed_align=16)


def _compile(key: KernelKey) -> CompiledConv2d:
    kernel = _build(key)

    def compile_now() -> tuple[Callable, str, bytes, int]:
        return *_cute_compile(kernel, _fake_launch_args(key), key.arch), kernel.smem_bytes()

    if key.epilogue.epilogue_fn is None:
        fn, ptx, cubin, smem_bytes = _disk_cached(key, compile_now)
    else:
        fn, ptx, cubin, smem_bytes = compile_now()
    return CompiledConv2d(key, ptx, cubin, smem_bytes, _positional_launcher(fn))


def _disk_cached(key: Any, compile_now: Callable[[], tuple]) -> tuple:
    if disk_cache.enabled():
        return disk_cache.load_or_compile(key, compile_now)
    return compile_now()


_cache: dict[Any, Any] = {}
# Compiles take turns: the DSL's tracing is not thread-safe (two threads compiling different
# kernels at once fail inside MLIR, "requires a Location"). Concurrent first uses of a kernel
# (threads serving one model) compile it once; cached kernels are returned without the lock.
_compile_lock = threading.Lock()


def _cached(key: Any, compile_fn: Callable[[Any], Any]) -> Any:
    compiled = _cache.get(key)
    if compiled is None:
        with _compile_lock:
            compiled = _cache.get(key)  # compiled by the thread that held the lock before
            if compiled is None:
                compiled = _cache[key] = compile_fn(key)
    return compiled


def _check_bulk_tile_store(arch: str, config: Any, act: str, out: str) -> None:
    """``EpilogueSpec.bulk_tile_store`` where the arch and config have such a store: checked
    on a problem whose K fills the config's N tile (a call sets it where K fits)."""
    rule = ARCHS[arch].whole_rows_rule
    tiled = not isinstance(config, PointwiseGemvConfig)  # the CUDA-core kernel has no tiles
    fits = tiled and rule is not None and rule(
        config, Conv2dProblemShape.from_shapes((1, 1, 1, 8), (config.tile_n, 1, 1, 8)), act, out
    )
    if not fits:
        raise ValueError(
            f"epilogue.bulk_tile_store=True needs an SM90 config whose tiles run along M "
            f"(tile_w=0), without ping-pong, whose staging buffers hold a whole tile; got "
            f"arch={arch!r}, {config!r}"
        )


def _check_arch(arch: object) -> None:
    if not isinstance(arch, str):
        raise TypeError(f"arch must be a str, one of {', '.join(sorted(ARCHS))}; got {arch!r}")
    if arch not in ARCHS:
        raise ValueError(f"arch={arch!r} has no kernel; available: {', '.join(sorted(ARCHS))}")


def compile_kernel(
    arch: str = "sm_90a",
    *,
    act_dtype: Any = "bfloat16",
    filter_dtype: Any = None,
    out_dtype: Any = None,
    config: Conv2dConfig | None = None,
    epilogue: EpilogueSpec | None = None,
) -> CompiledConv2d:
    """Compile (or fetch from the in-process cache) the conv fprop kernel for ``arch``.

    Needs no GPU. ``act_dtype``/``filter_dtype``: bfloat16 or float16, equal, or each
    float8_e4m3fn or float8_e5m2 (torch dtypes, cutlass types or names; ``filter_dtype``
    defaults to ``act_dtype``); ``out_dtype``: bfloat16, float16, float32 or float8_e4m3fn
    (defaults to ``act_dtype``, bfloat16 for fp8). ``config``: a ``Conv2dConfig`` for
    ``sm_90a`` (default ``Conv2dConfig()``), a ``Conv2dConfigSm100`` for ``sm_100a``
    (default ``Conv2dConfigSm100.default_bf16()``; that kernel is compile-verified only), or
    a ``PointwiseGemvConfig`` for either (the CUDA-core kernel of few-row 1x1 convs, 16-bit
    inputs, a 16-bit or float32 output), or a ``GroupedDirectConfig`` (the CUDA-core kernel of
    grouped and depthwise convs, likewise; ``cute_conv.grouped``); ``epilogue`` (bias, scale, activation, epilogue_fn,
    has_residual) to a plain store. A config's launch choices (``stream_k_split``) do not
    change the kernel: the result's ``key.config`` holds them at their defaults.
    The result has ``.ptx``, ``.cubin`` and ``.smem_bytes``. Thread-safe: concurrent calls
    for one kernel compile it once and return the same object.

    Raises:
        TypeError, ValueError: for an unknown arch, dtype, config or epilogue, and
            ``ValueError`` when ``epilogue.epilogue_fn`` cannot be compiled into the kernel
            (it must map one float32 ``cute.TensorSSA`` to one of the same shape).
    """
    _check_arch(arch)
    act = dtype_name(act_dtype, "act_dtype", INPUT_DTYPES)
    flt = dtype_name(act if filter_dtype is None else filter_dtype, "filter_dtype", INPUT_DTYPES)
    if out_dtype is None:
        out_dtype = "bfloat16" if act in FP8_INPUT_DTYPES else act
    out = dtype_name(out_dtype, "out_dtype")
    check_kernel_dtypes(CUTLASS_DTYPES[act], CUTLASS_DTYPES[flt], CUTLASS_DTYPES[out])
    if config is None:
        config = ARCHS[arch].default_config()
    config_type = ARCHS[arch].config_class
    if not isinstance(config, (config_type, PointwiseGemvConfig, GroupedDirectConfig)):
        raise TypeError(
            f"config must be a {config_type.__name__}, a PointwiseGemvConfig or a "
            f"GroupedDirectConfig for arch={arch!r}, got {type(config).__name__}"
        )
    if isinstance(config, Conv2dConfig):  # configs that differ in launch choices share it
        config = config.compiled_form()
    if epilogue is None:
        epilogue = EpilogueSpec()
    if not isinstance(epilogue, EpilogueSpec):
        raise TypeError(f"epilogue must be an EpilogueSpec, got {type(epilogue).__name__}")
    if epilogue.bulk_tile_store:
        _check_bulk_tile_store(arch, config, act, out)
    try:
        return _cached(KernelKey(arch, act, flt, out, config, epilogue), _compile)
    except Exception as exc:
        if epilogue.epilogue_fn is None:
            raise
        # The user's function failed to trace (wrong arity, torch calls, a wrong shape):
        # name it instead of surfacing the DSL's internals.
        raise ValueError(
            f"epilogue_fn {epilogue.epilogue_fn!r} could not be compiled into the kernel: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


@dataclasses.dataclass(frozen=True)
class CompiledHelperKernel:
    """A compiled helper kernel beside the conv (the stem's space-to-depth staging, the fp8
    quantization): its key, PTX and launcher."""

    key: Any
    ptx: str
    _fn: Callable = dataclasses.field(repr=False)

    def launch(self, *args: Any) -> None:
        """The kernel's entry arguments in order (device addresses, Int32 values), the raw
        ``cudaStream_t`` last."""
        self._fn(*args)


def _compile_helper(key: Any, kernel: Any, fake_args: list) -> CompiledHelperKernel:
    """Compile ``kernel`` for ``key.arch`` with ``fake_args`` (through the disk cache)."""

    def compile_now() -> tuple[Callable, str, bytes, int]:
        return *_cute_compile(kernel, fake_args, key.arch), 0

    fn, ptx, _, _ = _disk_cached(key, compile_now)
    return CompiledHelperKernel(key, ptx, _positional_launcher(fn))


@dataclasses.dataclass(frozen=True)
class SpaceToDepthKey:
    """A compiled folded space-to-depth staging kernel depends on these only."""

    arch: str
    dtype: str
    channels: int
    fold_channels: int
    fold_cols: int


def _compile_space_to_depth(key: SpaceToDepthKey) -> CompiledHelperKernel:
    kernel = SpaceToDepthFold(
        CUTLASS_DTYPES[key.dtype], key.channels, key.fold_channels, key.fold_cols
    )
    return _compile_helper(key, kernel, [_null_pointer(key.dtype)] * 2 + [cutlass.Int32(1)] * 7)


def compile_space_to_depth(
    arch: str, dtype: Any, channels: int, fold_channels: int, fold_cols: int
) -> CompiledHelperKernel:
    """Compile (or fetch from the caches) the staging kernel for ``channels`` input channels
    zero-extended to ``fold_channels``, blocks of 2 x ``fold_cols`` pixels; see
    ``cute_conv.staging``. Needs no GPU. Launch with ``(x_ptr, y_ptr, N, H, W, H2, W2,
    pad_top, pad_left, stream)``: the input's and the staged tensor's extents."""
    _check_arch(arch)
    key = SpaceToDepthKey(arch, dtype_name(dtype), channels, fold_channels, fold_cols)
    return _cached(key, _compile_space_to_depth)


@dataclasses.dataclass(frozen=True)
class Im2colKey:
    """A compiled im2col unfolding kernel depends on these only (``taps``: the window, for the
    kernel that takes it at compile time)."""

    arch: str
    dtype: str
    channels: int
    taps: tuple[int, int] | None = None


def _compile_im2col_columns(key: Im2colKey) -> CompiledHelperKernel:
    dtype = CUTLASS_DTYPES[key.dtype]
    if key.taps is None:
        kernel = Im2colColumns(dtype, key.channels)
    else:
        kernel = Im2colPatchRows(dtype, key.channels, key.taps)
    return _compile_helper(key, kernel, [_null_pointer(key.dtype)] * 2 + [cutlass.Int32(1)] * 14)


def compile_im2col_columns(
    arch: str, dtype: Any, channels: int, taps: tuple[int, int] | None = None
) -> CompiledHelperKernel:
    """Compile (or fetch from the caches) the kernel that unfolds an activation of
    ``channels`` channels into im2col columns; see ``cute_conv.staging``. Needs no GPU. Launch
    with ``(x_ptr, y_ptr, N, H, W, P, Q, R, S, pad_top, pad_left, stride_h, stride_w, dil_h,
    dil_w, chunks, stream)``, ``chunks`` a column row's 16-byte vectors
    (``kernels.common.unfold.Im2colColumns``). With ``taps = (R, S)`` (a patch of at most
    ``PATCH_ROW_MAX_COLUMNS`` columns) the window is compile-time and each thread writes a
    whole row (``Im2colPatchRows``); the launch is the same."""
    _check_arch(arch)
    check_channels(channels)
    if taps is not None:
        check_patch_taps(taps, channels)
        taps = (int(taps[0]), int(taps[1]))
    key = Im2colKey(arch, dtype_name(dtype, "dtype", INPUT_DTYPES), channels, taps)
    return _cached(key, _compile_im2col_columns)


@dataclasses.dataclass(frozen=True)
class QuantizeKey:
    """A compiled fp8 quantization kernel depends on these only."""

    arch: str
    dtype: str
    from_amax: bool = False


def _compile_quantize(key: QuantizeKey) -> CompiledHelperKernel:
    dtypes = (key.dtype, cutlass.Float8E4M3FN, cutlass.Float32, cutlass.Float32)
    kernel = QuantizeFp8(CUTLASS_DTYPES[key.dtype], key.from_amax)
    return _compile_helper(key, kernel, [*map(_null_pointer, dtypes), cutlass.Int32(1)])


def compile_quantize(arch: str, dtype: Any, *, from_amax: bool = False) -> CompiledHelperKernel:
    """Compile (or fetch from the caches) the fp8 quantization kernel of ``dtype`` (bfloat16
    or float16) inputs; see ``cute_conv.fp8``. Needs no GPU. Launch with ``(x_ptr, y_ptr,
    scale_ptr, amax_ptr, vectors, stream)``, ``vectors`` the element count over
    ``kernels.common.quantize.VECTOR``: the scale is read, or with ``from_amax`` computed from
    the float32 amax and written (``kernels.common.quantize.QuantizeFp8``)."""
    _check_arch(arch)
    if not isinstance(from_amax, bool):
        raise TypeError(f"from_amax must be a bool, got {from_amax!r}")
    key = QuantizeKey(arch, dtype_name(dtype, "dtype", ("bfloat16", "float16")), from_amax)
    return _cached(key, _compile_quantize)


@dataclasses.dataclass(frozen=True)
class MaxPoolKey:
    """A compiled max-pool kernel depends on these only."""

    arch: str
    dtype: str
    window: PoolWindow


def _compile_max_pool(key: MaxPoolKey) -> CompiledHelperKernel:
    kernel = MaxPool2dNhwc(CUTLASS_DTYPES[key.dtype], key.window)
    return _compile_helper(key, kernel, [_null_pointer(key.dtype)] * 2 + [cutlass.Int32(1)] * 6)


def compile_max_pool(arch: str, dtype: Any, window: PoolWindow) -> CompiledHelperKernel:
    """Compile (or fetch from the caches) the NHWC max-pool kernel of ``dtype`` (bfloat16,
    float16, float32 or float8_e4m3fn) for ``window``; see ``cute_conv.pooling``. Needs no
    GPU. Launch with ``(x_ptr, y_ptr, N, H, W, P, Q, vectors, stream)``, ``vectors`` the
    channels over ``kernels.common.channel_rows.VECTOR_BYTES / element size``."""
    _check_arch(arch)
    _check_pool_window(window)
    dtype = dtype_name(dtype, "dtype", tuple(dtype_name(t) for t in POOL_TYPES))
    return _cached(MaxPoolKey(arch, dtype, window), _compile_max_pool)


@dataclasses.dataclass(frozen=True)
class AvgPoolKey:
    """A compiled average-pool kernel depends on these only."""

    arch: str
    dtype: str
    window: PoolWindow
    count_include_pad: bool
    divisor_override: int | None


def _compile_avg_pool(key: AvgPoolKey) -> CompiledHelperKernel:
    kernel = AvgPool2dNhwc(
        CUTLASS_DTYPES[key.dtype], key.window, key.count_include_pad, key.divisor_override
    )
    return _compile_helper(key, kernel, [_null_pointer(key.dtype)] * 2 + [cutlass.Int32(1)] * 6)


def compile_avg_pool(
    arch: str,
    dtype: Any,
    window: PoolWindow,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> CompiledHelperKernel:
    """Compile (or fetch from the caches) the NHWC average-pool kernel of ``dtype`` (bfloat16,
    float16 or float32) for ``window`` (dilation 1) and ``nn.AvgPool2d``'s divisor arguments;
    see ``cute_conv.pooling``. Needs no GPU. Launched as ``compile_max_pool``'s kernel."""
    _check_arch(arch)
    _check_pool_window(window)
    if tuple(window.dilation) != (1, 1):
        raise ValueError(f"window.dilation must be (1, 1) for an average pool, got {window.dilation}")
    if not isinstance(count_include_pad, bool):
        raise TypeError(f"count_include_pad must be a bool, got {count_include_pad!r}")
    if divisor_override is not None:
        if not isinstance(divisor_override, int) or isinstance(divisor_override, bool):
            raise TypeError(f"divisor_override must be None or an int, got {divisor_override!r}")
        if divisor_override < 1:
            raise ValueError(f"divisor_override must be >= 1, got {divisor_override}")
    dtype = dtype_name(dtype, "dtype", tuple(dtype_name(t) for t in AVG_POOL_TYPES))
    key = AvgPoolKey(arch, dtype, window, count_include_pad, divisor_override)
    return _cached(key, _compile_avg_pool)


def _check_pool_window(window: object) -> None:
    if not isinstance(window, PoolWindow):
        raise TypeError(f"window must be a PoolWindow, got {type(window).__name__}")


@dataclasses.dataclass(frozen=True)
class ChannelScaleKey:
    """A compiled per-image channel-scale kernel depends on these only."""

    arch: str
    dtype: str


def _compile_channel_scale(key: ChannelScaleKey) -> CompiledHelperKernel:
    kernel = ChannelScaleNhwc(CUTLASS_DTYPES[key.dtype])
    return _compile_helper(key, kernel, [_null_pointer(key.dtype)] * 3 + [cutlass.Int32(1)] * 3)


def compile_channel_scale(arch: str, dtype: Any) -> CompiledHelperKernel:
    """Compile (or fetch from the caches) the NHWC per-image channel-scale kernel of ``dtype``
    (bfloat16 or float16); see ``cute_conv.channel_scale``. Needs no GPU. Launch with
    ``(x_ptr, scale_ptr, y_ptr, N, H * W, vectors, stream)``, ``vectors`` the channels over
    ``kernels.common.channel_scale.VECTOR_BYTES / element size``."""
    _check_arch(arch)
    dtype = dtype_name(dtype, "dtype", tuple(dtype_name(t) for t in SCALE_TYPES))
    return _cached(ChannelScaleKey(arch, dtype), _compile_channel_scale)


def cached_kernel_count() -> int:
    """Number of kernels held by this process's in-memory cache."""
    return len(_cache)


def clear_cache() -> None:
    """Forget the kernels held in memory (the on-disk tier, if enabled, keeps them), and
    whatever holds them for later calls (``dispatch``'s launch plans): the next call
    compiles or loads its kernel again."""
    _cache.clear()
    for forget in _holders_of_kernels:
        forget()


# What clear_cache also clears: caches of other modules that hold compiled kernels. They
# register here (``forget_on_clear``) since this module imports none of them.
_holders_of_kernels: list[Callable[[], None]] = []


def forget_on_clear(forget: Callable[[], None]) -> None:
    """Have ``clear_cache`` call ``forget`` (which drops a cache that holds kernels)."""
    _holders_of_kernels.append(forget)
