"""Ahead-of-time compilation of the conv kernels and the in-process cache of compiled kernels.

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

from .config import Conv2dConfig
from .kernels.sm90.conv2d_fprop import SMEM_CAPACITY_SM90, Conv2dFpropSm90
from .problem import Conv2dProblemShape

# Kernel class per compilation target. sm_100a joins when its kernel exists.
KERNELS_BY_ARCH: dict[str, type] = {"sm_90a": Conv2dFpropSm90}
SMEM_CAPACITY_BY_ARCH: dict[str, int] = {"sm_90a": SMEM_CAPACITY_SM90}

_CUTLASS_DTYPES: dict[str, type[cutlass.Numeric]] = {
    "bfloat16": cutlass.BFloat16,
    "float16": cutlass.Float16,
    "float32": cutlass.Float32,
}
INPUT_DTYPES = ("bfloat16", "float16")
OUTPUT_DTYPES = ("bfloat16", "float16", "float32")
_NUM_GEOMETRY_ARGS = 17


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16``, ``cutlass.BFloat16`` or ``"bfloat16"`` -> ``"bfloat16"``."""
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type) and issubclass(dtype, cutlass.Numeric):
        name = {v: k for k, v in _CUTLASS_DTYPES.items()}.get(dtype, dtype.__name__)
    else:
        name = str(dtype).removeprefix("torch.")
    if name not in _CUTLASS_DTYPES:
        raise TypeError(
            f"dtype {dtype!r} is not supported; use one of {', '.join(_CUTLASS_DTYPES)}"
        )
    return name


@dataclasses.dataclass(frozen=True)
class KernelKey:
    """Everything a compiled kernel depends on. Geometry is deliberately absent."""

    arch: str
    act_dtype: str
    filter_dtype: str
    out_dtype: str
    config: Conv2dConfig


@dataclasses.dataclass(frozen=True)
class CompiledConv2d:
    """A compiled conv kernel: its PTX and cubin, its SMEM size, and a launcher."""

    key: KernelKey
    ptx: str
    cubin: bytes
    smem_bytes: int
    _fn: Callable = dataclasses.field(repr=False)

    def launch(
        self,
        problem: Conv2dProblemShape,
        act_ptr: int,
        filter_ptr: int,
        out_ptr: int,
        *,
        stream: int,
        max_clusters: int,
    ) -> None:
        """Run on device pointers of contiguous NHWC / KRSC / NPQK tensors.

        ``problem`` must already be validated and channel-aligned; ``stream`` is a raw
        ``cudaStream_t`` handle; ``max_clusters`` bounds the persistent grid.
        """
        self.launch_raw(
            act_ptr, filter_ptr, out_ptr, (*geometry_args(problem), max_clusters), stream
        )

    def launch_raw(
        self, act_ptr: int, filter_ptr: int, out_ptr: int, scalars: tuple, stream: int
    ) -> None:
        """The hot path: ``scalars`` is ``(*geometry_args(problem), max_clusters)``."""
        self._fn(act_ptr, filter_ptr, out_ptr, *scalars, stream)


def geometry_args(problem: Conv2dProblemShape) -> tuple[int, ...]:
    """The runtime geometry scalars, in the order of ``kernels.common.im2col.ConvGeometry``."""
    (pad_top, pad_bottom), (pad_left, pad_right) = problem.padding
    args = (
        problem.N, problem.H, problem.W, problem.C, problem.K, problem.R, problem.S,
        problem.P, problem.Q, pad_top, pad_bottom, pad_left, pad_right,
        *problem.stride, *problem.dilation,
    )  # fmt: skip
    return args


def _build(key: KernelKey):
    cfg = key.config
    return KERNELS_BY_ARCH[key.arch](
        _CUTLASS_DTYPES[key.act_dtype],
        _CUTLASS_DTYPES[key.filter_dtype],
        _CUTLASS_DTYPES[key.out_dtype],
        tile_mnk=(cfg.tile_m, cfg.tile_n, cfg.tile_k),
        cluster_mn=(cfg.cluster_m, cfg.cluster_n),
        stages=cfg.stages,
        swizzle=cfg.swizzle,
        raster_along_m=cfg.raster_along_m,
    )


def _compile(key: KernelKey) -> CompiledConv2d:
    kernel = _build(key)
    null = [
        make_ptr(_CUTLASS_DTYPES[d], 0, cute.AddressSpace.gmem, assumed_align=16)
        for d in (key.act_dtype, key.filter_dtype, key.out_dtype)
    ]
    scalars = [cutlass.Int32(1)] * (_NUM_GEOMETRY_ARGS + 1)
    with tempfile.TemporaryDirectory(prefix="cute_conv_") as dump_dir:
        fn = cute.compile(
            kernel,
            *null,
            *scalars,
            make_fake_stream(),
            options=(
                f"--gpu-arch {key.arch} --enable-tvm-ffi --keep-ptx --keep-cubin "
                f"--dump-dir {dump_dir}"
            ),
        )
        ptx = fn.__ptx__ or ""
        cubin = fn.__cubin__ or b""
        if isinstance(cubin, str):
            cubin = Path(cubin).read_bytes() if Path(cubin).is_file() else cubin.encode()
    return CompiledConv2d(key, ptx, cubin, kernel.smem_bytes(), fn)


_cache: dict[KernelKey, CompiledConv2d] = {}
_cache_lock = threading.Lock()


def compile_kernel(
    arch: str = "sm_90a",
    *,
    act_dtype: Any = "bfloat16",
    filter_dtype: Any = None,
    out_dtype: Any = None,
    config: Conv2dConfig | None = None,
) -> CompiledConv2d:
    """Compile (or fetch from the in-process cache) the conv fprop kernel for ``arch``.

    Needs no GPU. ``act_dtype``/``filter_dtype``: bfloat16 or float16 (torch dtypes, cutlass
    types or names; ``filter_dtype`` defaults to ``act_dtype``); ``out_dtype``: bfloat16,
    float16 or float32 (defaults to ``act_dtype``). ``config`` defaults to ``Conv2dConfig()``.
    The result has ``.ptx``, ``.cubin`` and ``.smem_bytes``.
    """
    if arch not in KERNELS_BY_ARCH:
        raise ValueError(
            f"arch={arch!r} has no kernel; available: {', '.join(sorted(KERNELS_BY_ARCH))}"
        )
    act = dtype_name(act_dtype)
    flt = dtype_name(filter_dtype if filter_dtype is not None else act)
    out = dtype_name(out_dtype if out_dtype is not None else act)
    if act not in INPUT_DTYPES or flt != act:
        raise TypeError(
            f"act_dtype={act} and filter_dtype={flt}: both must be the same one of "
            f"{', '.join(INPUT_DTYPES)}"
        )
    if config is None:
        config = Conv2dConfig()
    if not isinstance(config, Conv2dConfig):
        raise TypeError(f"config must be a Conv2dConfig, got {type(config).__name__}")
    key = KernelKey(arch, act, flt, out, config)
    with _cache_lock:
        compiled = _cache.get(key)
        if compiled is None:
            compiled = _cache[key] = _compile(key)
    return compiled


def cached_kernel_count() -> int:
    """Number of kernels compiled in this process (for tests of cache reuse)."""
    return len(_cache)
