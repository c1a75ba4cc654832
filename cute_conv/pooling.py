"""Max, average and global average pooling of channels_last activations, for ``optimize``.

torch's channels_last ``max_pool2d`` kernel is slow on the bf16 maps of a model: VGG-16's five
2x2 pools took 95 us of a 388 us batch-1 forward on an H100 (inductor's kernels: 12 us), and
ResNet-50's 3x3 stride-2 pool 436 us of a ~3 ms batch-128 forward (inductor's: 98 us).

- ``MaxPool2d``: any ``nn.MaxPool2d`` without indices (ResNet's, GoogLeNet's ceil mode), run on
  a GPU by one pass of ``kernels.common.pool``, as the op ``cute_conv::max_pool2d`` under
  ``torch.compile``.
- ``TiledMaxPool2d``: a ``MaxPool2d`` whose windows tile the map (kernel size equal to the
  stride, no padding, dilation 1, no ceil mode: VGG's pools). Inputs the kernel does not take
  (channels not filling 16-byte vectors, CPU tensors) are one ``amax`` over the window dims of
  a reshaped NHWC view, a reduction torch vectorizes along the contiguous channels, rather than
  torch's pool.
- ``AvgPool2d``: any ``nn.AvgPool2d`` (DenseNet's 2x2 transitions) or ``F.avg_pool2d`` call
  (Inception's 3x3 stride-1 branch pools), every argument of torch's kept, run on a GPU by one
  pass of ``kernels.common.pool`` (the same bits as torch's channels_last pool), as the op
  ``cute_conv::avg_pool2d`` under ``torch.compile``. torch's took 29.6 us for DenseNet-121's
  three at batch 8 on an H200 (~0.5 TB/s).

torch's channels_last mean over H and W is slow too: the 16 squeeze-excitation pools of an
EfficientNet-B0 took ~150 us of a ~740 us batch-8 forward on an H200, 6-27 us of kernel time
each (inductor fuses them into the kernels before them).

- ``GlobalAvgPool2d``: ``nn.AdaptiveAvgPool2d(1)`` (squeeze-excitation blocks, classifier
  heads) as one batched GEMV through cuBLAS, a row of 2**-k times each image's ``[H*W, C]``
  view (``torch.baddbmm``, float32 accumulation), as the op ``cute_conv::global_avg_pool2d``
  under ``torch.compile``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .compile import compile_avg_pool, compile_max_pool
from .cuda_context import current_raw_stream, device_arch, on_device
from .dtypes import dtype_name
from .kernels.common.channel_rows import VECTOR_BYTES
from .kernels.common.pool import AVG_POOL_TYPES, POOL_TYPES, PoolWindow

__all__ = [
    "AvgPool2d",
    "GlobalAvgPool2d",
    "MaxPool2d",
    "TiledMaxPool2d",
    "averages_the_map",
    "pool_for",
    "runs_as_kernel",
    "tiles_the_map",
]


# The dtypes the kernels pool (``POOL_TYPES``, ``AVG_POOL_TYPES``), as torch names them.
_KERNEL_DTYPES = tuple(getattr(torch, dtype_name(t)) for t in POOL_TYPES)
_AVG_KERNEL_DTYPES = tuple(getattr(torch, dtype_name(t)) for t in AVG_POOL_TYPES)
# The dtypes ``GlobalAvgPool2d`` averages by a GEMV, and the largest map it takes: its row
# holds 2**-k (k = ceil(log2(H*W))), a float16 subnormal down to 2**-24.
_GEMV_DTYPES = (torch.bfloat16, torch.float16)
_GEMV_MAX_PIXELS = 2**24
# The dims of an NCHW map a ``mean`` may name (``GlobalAvgPool2d(dims=...)``).
MAP_DIMS = ((2, 3), (-2, -1))


def _pair(value: int | tuple[int, ...]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[-1]))


def tiles_the_map(pool: nn.Module) -> bool:
    """Whether ``pool`` is a plain ``nn.MaxPool2d`` whose windows tile the map."""
    if type(pool) is not nn.MaxPool2d or pool.return_indices or pool.ceil_mode:
        return False
    stride = pool.kernel_size if pool.stride is None else pool.stride
    return (
        _pair(pool.kernel_size) == _pair(stride)
        and _pair(pool.padding) == (0, 0)
        and _pair(pool.dilation) == (1, 1)
    )


def runs_as_kernel(pool: nn.Module) -> bool:
    """Whether ``pool`` is a plain ``nn.MaxPool2d`` that ``MaxPool2d`` runs (no indices; its
    inputs are checked on each call)."""
    return type(pool) is nn.MaxPool2d and not pool.return_indices


class MaxPool2d(nn.Module):
    """``nn.MaxPool2d(kernel_size, stride, padding, dilation, ceil_mode)`` whose channels_last CUDA
    inputs of 16-bit, float32 or float8_e4m3fn values (an fp8 stem's output, see ``optimize``),
    channels filling 16-byte vectors, go through one kernel pass (``kernels.common.pool``);
    other inputs, and inputs that require grad, go to ``F.max_pool2d`` (float8_e4m3fn ones
    through float32, which torch pools). The same values as torch's pool, NaN included."""

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        ceil_mode: bool = False,
    ) -> None:
        super().__init__()
        kernel = _pair(kernel_size)
        self.window = PoolWindow(
            kernel, kernel if stride is None else _pair(stride), _pair(padding), _pair(dilation)
        )
        self.ceil_mode = bool(ceil_mode)

    @classmethod
    def from_torch(cls, pool: nn.MaxPool2d) -> "MaxPool2d":
        if not runs_as_kernel(pool):
            raise ValueError(
                f"MaxPool2d.from_torch takes an nn.MaxPool2d without return_indices, got {pool}"
            )
        return cls(pool.kernel_size, pool.stride, pool.padding, pool.dilation, pool.ceil_mode)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling() and x.is_cuda and x.dim() == 4 and not x.requires_grad:
            # Opaque to the tracer (the launch reads data pointers): the op checks the rest.
            return torch.ops.cute_conv.max_pool2d(x, *map(list, self.window), self.ceil_mode)
        if not _kernel_takes(x, self.window, self.ceil_mode):
            return self._fallback(x)
        return _max_pool2d_nhwc(x, self.window, self.ceil_mode)

    def _fallback(self, x: torch.Tensor) -> torch.Tensor:
        """The pool of an input the kernel does not take: torch's (and its errors, if any)."""
        return _torch_pool(x, self.window, self.ceil_mode)

    def extra_repr(self) -> str:
        kernel_size, stride, padding, dilation = self.window
        return (f"kernel_size={kernel_size}, stride={stride}, padding={padding}, "
                f"dilation={dilation}, ceil_mode={self.ceil_mode}")  # fmt: skip


class TiledMaxPool2d(MaxPool2d):
    """``nn.MaxPool2d(kernel_size)`` (stride = kernel size, no padding: windows that tile the
    map). Inputs the kernel takes go to it as in ``MaxPool2d`` (on an H200, 1.2-3.3x faster
    than the ``amax`` below on VGG-16's five pools at batch 1, 8 and 32); other channels_last
    inputs are one ``amax`` over the window dims of a reshaped view; inputs that require grad
    (whose gradient torch routes to one element of a tied window, amax to all), fp8 ones and
    other layouts go to ``MaxPool2d``'s fallback. NaN propagates as in torch's pool."""

    def __init__(self, kernel_size: int | tuple[int, int]) -> None:
        super().__init__(kernel_size)

    @classmethod
    def from_torch(cls, pool: nn.MaxPool2d) -> "TiledMaxPool2d":
        if not tiles_the_map(pool):
            raise ValueError(f"{pool} has windows that do not tile the map")
        return cls(pool.kernel_size)

    def _fallback(self, x: torch.Tensor) -> torch.Tensor:
        kh, kw = self.window.kernel_size
        channels_last = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)
        if (
            not channels_last
            or x.requires_grad
            or x.dtype == torch.float8_e4m3fn  # (torch has no fp8 amax)
            or x.shape[2] < kh
            or x.shape[3] < kw
        ):
            return super()._fallback(x)  # (torch's error for a too-small map)
        n, c, h, w = x.shape
        p, q = h // kh, w // kw  # rows and columns past the last whole window are dropped
        nhwc = x.permute(0, 2, 3, 1)[:, : p * kh, : q * kw]
        return nhwc.view(n, p, kh, q, kw, c).amax(dim=(2, 4)).permute(0, 3, 1, 2)


def _output_size(
    size: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool = False
) -> int:
    """torch's pooled size: with ``ceil_mode`` a last, partial window too, unless it would
    start in the right padding."""
    span = size + 2 * padding - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + padding:
        out -= 1
    return out


def _torch_pool(x: torch.Tensor, window: PoolWindow, ceil_mode: bool) -> torch.Tensor:
    """``F.max_pool2d``; an fp8 ``x`` (which torch does not pool) through float32, exact: the
    maxima are values of ``x``."""
    if x.dtype == torch.float8_e4m3fn:
        return F.max_pool2d(x.float(), *window, ceil_mode=ceil_mode).to(x.dtype)
    return F.max_pool2d(x, *window, ceil_mode=ceil_mode)


def _kernel_takes(
    x: torch.Tensor, window: PoolWindow, ceil_mode: bool, dtypes: tuple = _KERNEL_DTYPES
) -> bool:
    """Whether a pool kernel of ``dtypes`` runs ``x``: see ``MaxPool2d``. The window must be
    one torch takes (padding at most half the kernel) with an output of at least one pixel,
    over a map of at least one (the kernel reads a tap past the map at the nearest pixel;
    torch rejects an empty map)."""
    if not (
        x.is_cuda
        and x.dim() == 4
        and x.dtype in dtypes
        and not x.requires_grad
        and x.is_contiguous(memory_format=torch.channels_last)
        and x.shape[1] * x.element_size() % VECTOR_BYTES == 0
        and x.data_ptr() % VECTOR_BYTES == 0
    ):
        return False
    kernel_size, stride, padding, dilation = window
    sizes = zip(x.shape[2:], kernel_size, stride, padding, dilation, strict=True)
    for size, k, st, pad, dil in sizes:
        if size < 1 or min(k, st, dil) < 1 or not 0 <= pad <= k // 2:
            return False
        if _output_size(size, k, st, pad, dil, ceil_mode) < 1:
            return False
    return True


def _pooled(x: torch.Tensor, window: PoolWindow, ceil_mode: bool) -> torch.Tensor:
    """The empty channels_last output of pooling ``x`` over ``window``: an NHWC allocation
    seen as NCHW (a ``.contiguous(memory_format=...)`` of an NCHW one would copy it, a kernel
    launch per pool)."""
    n, c, h, w = x.shape
    sizes = zip((h, w), *window, strict=True)
    p, q = (_output_size(*args, ceil_mode) for args in sizes)
    return x.new_empty((n, p, q, c)).permute(0, 3, 1, 2)


def _pool2d_nhwc(
    x: torch.Tensor, window: PoolWindow, ceil_mode: bool, compile_fn: Callable
) -> torch.Tensor:
    """The pool of an NCHW channels_last CUDA tensor that a pool module sends to the kernel
    ``compile_fn(arch, dtype)`` (no check here), in one pass; the output is channels_last.
    (The kernels skip every tap outside the map: ceil mode's partial windows are the output
    size alone.)"""
    out = _pooled(x, window, ceil_mode)
    if out.numel():
        n, c, h, w = x.shape
        device_index = x.get_device()
        kernel = compile_fn(device_arch(device_index), x.dtype)
        vectors = c * x.element_size() // VECTOR_BYTES
        with on_device(device_index):
            kernel.launch(x.data_ptr(), out.data_ptr(), n, h, w, *out.shape[2:], vectors,
                          current_raw_stream(device_index))  # fmt: skip
    return out


def _max_pool2d_nhwc(x: torch.Tensor, window: PoolWindow, ceil_mode: bool) -> torch.Tensor:
    """``F.max_pool2d(x, *window, ceil_mode=ceil_mode)`` by ``kernels.common.pool``."""
    compile_fn = lambda arch, dtype: compile_max_pool(arch, dtype, window)  # noqa: E731
    return _pool2d_nhwc(x, window, ceil_mode, compile_fn)


@torch.library.custom_op("cute_conv::max_pool2d", mutates_args=())
def _max_pool2d_op(
    x: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    ceil_mode: bool,
) -> torch.Tensor:
    """``MaxPool2d``'s forward as an op: the kernel where it takes ``x``, else torch's pool
    (its output made channels_last, as the fake implementation says)."""
    window = PoolWindow(*(tuple(v) for v in (kernel_size, stride, padding, dilation)))
    if not _kernel_takes(x, window, ceil_mode):
        return _torch_pool(x, window, ceil_mode).contiguous(memory_format=torch.channels_last)
    return _max_pool2d_nhwc(x, window, ceil_mode)


@_max_pool2d_op.register_fake
def _(x, kernel_size, stride, padding, dilation, ceil_mode):
    window = PoolWindow(*(tuple(v) for v in (kernel_size, stride, padding, dilation)))
    return _pooled(x, window, ceil_mode)


class AvgPool2d(nn.Module):
    """``nn.AvgPool2d(kernel_size, stride, padding, ceil_mode, count_include_pad,
    divisor_override)`` whose channels_last CUDA inputs of 16-bit or float32 values, channels
    filling 16-byte vectors, go through one kernel pass (``kernels.common.pool``: the same
    bits as torch's pool); other inputs, and inputs that require grad, go to
    ``F.avg_pool2d``. As the op ``cute_conv::avg_pool2d`` under ``torch.compile``."""

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__()
        kernel = _pair(kernel_size)
        stride = kernel if stride is None else _pair(stride)
        self.window = PoolWindow(kernel, stride, _pair(padding), (1, 1))
        self.ceil_mode = bool(ceil_mode)
        self.count_include_pad = bool(count_include_pad)
        self.divisor_override = divisor_override

    @classmethod
    def from_torch(cls, pool: nn.AvgPool2d) -> "AvgPool2d":
        if type(pool) is not nn.AvgPool2d:
            raise ValueError(f"AvgPool2d.from_torch takes an nn.AvgPool2d, got {pool}")
        return cls(pool.kernel_size, pool.stride, pool.padding, pool.ceil_mode,
                   pool.count_include_pad, pool.divisor_override)  # fmt: skip

    @property
    def _divisor(self) -> tuple[bool, int | None]:
        return self.count_include_pad, self.divisor_override

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel_size, stride, padding, _ = self.window
        if torch.compiler.is_compiling() and x.is_cuda and x.dim() == 4 and not x.requires_grad:
            # Opaque to the tracer (the launch reads data pointers): the op checks the rest.
            return torch.ops.cute_conv.avg_pool2d(
                x, list(kernel_size), list(stride), list(padding), self.ceil_mode, *self._divisor
            )
        if not _kernel_takes(x, self.window, self.ceil_mode, _AVG_KERNEL_DTYPES):
            return F.avg_pool2d(x, kernel_size, stride, padding, self.ceil_mode, *self._divisor)
        return _avg_pool2d_nhwc(x, self.window, self.ceil_mode, *self._divisor)

    def extra_repr(self) -> str:
        kernel_size, stride, padding, _ = self.window
        return (f"kernel_size={kernel_size}, stride={stride}, padding={padding}, "
                f"ceil_mode={self.ceil_mode}, count_include_pad={self.count_include_pad}, "
                f"divisor_override={self.divisor_override}")  # fmt: skip


def _avg_pool2d_nhwc(
    x: torch.Tensor,
    window: PoolWindow,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> torch.Tensor:
    """``F.avg_pool2d`` of ``x`` over ``window`` by ``kernels.common.pool``."""
    compile_fn = lambda arch, dtype: compile_avg_pool(  # noqa: E731
        arch, dtype, window, count_include_pad, divisor_override
    )
    return _pool2d_nhwc(x, window, ceil_mode, compile_fn)


@torch.library.custom_op("cute_conv::avg_pool2d", mutates_args=())
def _avg_pool2d_op(
    x: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
) -> torch.Tensor:
    """``AvgPool2d``'s forward as an op: the kernel where it takes ``x``, else torch's pool
    (its output made channels_last, as the fake implementation says)."""
    window = PoolWindow(tuple(kernel_size), tuple(stride), tuple(padding), (1, 1))
    divisor = (count_include_pad, divisor_override)
    if not _kernel_takes(x, window, ceil_mode, _AVG_KERNEL_DTYPES):
        pooled = F.avg_pool2d(x, kernel_size, stride, padding, ceil_mode, *divisor)
        return pooled.contiguous(memory_format=torch.channels_last)
    return _avg_pool2d_nhwc(x, window, ceil_mode, *divisor)


@_avg_pool2d_op.register_fake
def _(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    window = PoolWindow(tuple(kernel_size), tuple(stride), tuple(padding), (1, 1))
    return _pooled(x, window, ceil_mode)


def pool_for(pool: nn.Module) -> nn.Module | None:
    """The module ``optimize`` puts in place of ``pool``: ``TiledMaxPool2d`` for a plain
    ``nn.MaxPool2d`` whose windows tile the map, ``MaxPool2d`` for the other ones without
    indices, ``AvgPool2d`` for a plain ``nn.AvgPool2d``; None for anything else."""
    if tiles_the_map(pool):
        return TiledMaxPool2d.from_torch(pool)
    if runs_as_kernel(pool):
        return MaxPool2d.from_torch(pool)
    if type(pool) is nn.AvgPool2d:
        return AvgPool2d.from_torch(pool)
    return None


def averages_the_map(pool: nn.Module) -> bool:
    """Whether ``pool`` is a plain ``nn.AdaptiveAvgPool2d`` to one pixel, which
    ``GlobalAvgPool2d`` runs."""
    if type(pool) is not nn.AdaptiveAvgPool2d:
        return False
    size = pool.output_size  # an int, or a pair whose entries may be None (the input's size)
    return tuple(size) == (1, 1) if isinstance(size, (tuple, list)) else size == 1


class GlobalAvgPool2d(nn.Module):
    """``nn.AdaptiveAvgPool2d(1)``, or with ``dims`` the mean ``x.mean(dims, keepdim)`` over
    the map's two dims (``(2, 3)`` or ``(-2, -1)``): each channel's mean over the map.
    Channels_last CUDA inputs of 16-bit values go through one batched GEMV (``torch.baddbmm``:
    cuBLAS, float32 accumulation), ``[N, C, 1, 1]`` channels_last as torch's (``[N, C]``
    without ``keepdim``); other inputs, and inputs that require grad, go to torch's op."""

    def __init__(self, dims: tuple[int, int] | None = None, keepdim: bool = True) -> None:
        super().__init__()
        if dims is not None and tuple(dims) not in MAP_DIMS:
            raise ValueError(f"dims must be None or one of {MAP_DIMS}, got {dims!r}")
        if dims is None and not keepdim:
            raise ValueError("keepdim=False takes dims (nn.AdaptiveAvgPool2d keeps them)")
        self.dims = None if dims is None else tuple(dims)
        self.keepdim = keepdim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling() and x.dim() == 4 and x.is_cuda and not x.requires_grad:
            y = torch.ops.cute_conv.global_avg_pool2d(x)  # opaque: the GEMV's row is cached
        elif _gemv_takes(x):
            y = _global_avg_pool_nhwc(x)
        elif self.dims is None:
            return F.adaptive_avg_pool2d(x, 1)
        else:  # (for another rank, the mean it replaced)
            return x.mean(self.dims, keepdim=self.keepdim)
        return y if self.keepdim else y.flatten(1)

    def extra_repr(self) -> str:
        return "" if self.dims is None else f"dims={self.dims}, keepdim={self.keepdim}"


def _gemv_takes(x: torch.Tensor) -> bool:
    """Whether ``_global_avg_pool_nhwc`` runs ``x``: see ``GlobalAvgPool2d``."""
    return (
        x.is_cuda
        and x.dim() == 4
        and x.dtype in _GEMV_DTYPES
        and not x.requires_grad
        and x.numel() > 0
        and x.shape[2] * x.shape[3] <= _GEMV_MAX_PIXELS
        and x.is_contiguous(memory_format=torch.channels_last)
    )


# The GEMV's row per (pixels, dtype, device), made once outside CUDA-graph captures.
_SUM_ROWS: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def _sum_row(pixels: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``[1, 1, pixels]`` of 2**-k, the power of two at most ``1 / pixels``: exact in 16 bits,
    and it keeps any partial sum of cuBLAS's (which may reduce in the output's dtype) within
    the inputs' range."""
    key = (pixels, dtype, device)
    row = _SUM_ROWS.get(key)
    if row is None:
        row = torch.full((1, 1, pixels), 2.0 ** -math.ceil(math.log2(pixels)), dtype=dtype,
                         device=device)  # fmt: skip
        capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        if not capturing:  # a row made in a capture is filled only by the graph's replays
            _SUM_ROWS[key] = row
    return row


def _global_avg_pool_nhwc(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``F.adaptive_avg_pool2d(x, 1)`` of an NCHW channels_last CUDA tensor that
    ``GlobalAvgPool2d`` sends to the GEMV (no check here), into ``out`` (``[N, 1, C]``, made
    if None; its old values are not read)."""
    n, c, h, w = x.shape
    pixels = h * w
    row = _sum_row(pixels, x.dtype, x.device)
    if out is None:
        out = torch.empty((n, 1, c), dtype=x.dtype, device=x.device)
    # alpha scales the row's 2**-k sums to means, in float32
    alpha = 2.0 ** math.ceil(math.log2(pixels)) / pixels
    images = x.permute(0, 2, 3, 1).reshape(n, pixels, c)  # a view: x is channels_last
    torch.baddbmm(out, row.expand(n, 1, pixels), images, beta=0, alpha=alpha, out=out)
    return out.view(n, 1, 1, c).permute(0, 3, 1, 2)


@torch.library.custom_op("cute_conv::global_avg_pool2d", mutates_args=())
def _global_avg_pool2d_op(x: torch.Tensor) -> torch.Tensor:
    """``GlobalAvgPool2d``'s forward as an op: the GEMV where it takes ``x``, else torch's
    pool (its output made channels_last, as the fake implementation says)."""
    if not _gemv_takes(x):
        return F.adaptive_avg_pool2d(x, 1).contiguous(memory_format=torch.channels_last)
    return _global_avg_pool_nhwc(x)


@_global_avg_pool2d_op.register_fake
def _(x):
    return x.new_empty((x.shape[0], x.shape[1], 1, 1)).contiguous(
        memory_format=torch.channels_last
    )
