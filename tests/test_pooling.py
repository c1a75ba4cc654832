"""The pools ``optimize`` rewrites against torch's: ``TiledMaxPool2d``'s amax on the CPU (the
same values, NaN included, for windows that tile the map, with or without a remainder; torch's
own pool for the inputs it does not take), ``MaxPool2d``'s kernel (``TiledMaxPool2d``'s too)
and ``AvgPool2d``'s compiled here and run on a GPU (the same bits, NaN included),
``GlobalAvgPool2d``'s GEMV against float32 means (on the CPU and on a GPU)."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from cute_conv.kernels.common.pool import TAPS_IN_FLIGHT, PoolWindow
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from cute_conv.compile import compile_avg_pool, compile_max_pool
from cute_conv.pooling import (
    AvgPool2d,
    GlobalAvgPool2d,
    MaxPool2d,
    TiledMaxPool2d,
    _global_avg_pool_nhwc,
    _output_size,
    _pooled,
    _sum_row,
    averages_the_map,
    pool_for,
    runs_as_kernel,
    tiles_the_map,
)
from cute_conv.testing import compare_to_reference
from tests.gpu import requires_sm90


def _channels_last(*shape: int, dtype=torch.bfloat16) -> torch.Tensor:
    return torch.randn(*shape).to(dtype).to(memory_format=torch.channels_last)


@pytest.mark.parametrize("kernel", [2, 3, (2, 3)])
@pytest.mark.parametrize("hw", [(8, 12), (7, 9), (3, 3)])
def test_matches_torch_on_channels_last(kernel, hw):
    x = _channels_last(2, 24, *hw)
    x[1, 5, 0, 0] = float("nan")
    x[0, 3, 1, 1] = float("-inf")
    ours = TiledMaxPool2d(kernel)(x)
    ref = F.max_pool2d(x, kernel)
    assert ours.shape == ref.shape and ours.dtype == ref.dtype
    assert ours.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(ours.isnan(), ref.isnan())
    assert torch.equal(ours.nan_to_num(0.0), ref.nan_to_num(0.0))


def test_other_inputs_go_to_torch():
    pool = TiledMaxPool2d(2)
    x = torch.randn(2, 8, 6, 6)  # NCHW-contiguous
    assert torch.equal(pool(x), F.max_pool2d(x, 2))
    x = _channels_last(2, 8, 6, 6, dtype=torch.float32).requires_grad_()
    pool(x).sum().backward()  # torch's gradient: one element of each window
    assert x.grad.count_nonzero() == 2 * 8 * 3 * 3
    with pytest.raises(RuntimeError, match="too small"):
        pool(_channels_last(1, 8, 1, 5))


def test_tiled_pool_sends_what_the_kernel_takes_to_it(monkeypatch):
    """A tiling pool is a ``MaxPool2d``: an input the kernel takes goes to the kernel with the
    pool's window (faster than the amax on a GPU); fp8 inputs it does not take go to the
    float32 fallback (torch has no fp8 amax)."""
    import cute_conv.pooling as pooling

    launched = []
    monkeypatch.setattr(pooling, "_kernel_takes", lambda x, window, ceil_mode: x.dim() == 4)
    monkeypatch.setattr(
        pooling, "_max_pool2d_nhwc", lambda x, window, ceil: launched.append((window, ceil)) or x
    )
    x = _channels_last(2, 8, 6, 6)
    assert TiledMaxPool2d((2, 3))(x) is x
    assert launched == [(PoolWindow((2, 3), (2, 3), (0, 0), (1, 1)), False)]
    monkeypatch.undo()
    fp8 = _channels_last(2, 8, 6, 6, dtype=torch.float32).to(torch.float8_e4m3fn)
    ours = TiledMaxPool2d(2)(fp8)
    assert ours.dtype == torch.float8_e4m3fn
    assert torch.equal(ours.float(), F.max_pool2d(fp8.float(), 2))


@pytest.mark.parametrize(
    "pool, tiles",
    [
        (nn.MaxPool2d(2), True),
        (nn.MaxPool2d(2, stride=2), True),
        (nn.MaxPool2d((2, 3), stride=(2, 3)), True),
        (nn.MaxPool2d(3, stride=2, padding=1), False),  # ResNet's: windows overlap
        (nn.MaxPool2d(2, padding=1), False),
        (nn.MaxPool2d(2, dilation=2), False),
        (nn.MaxPool2d(2, ceil_mode=True), False),
        (nn.MaxPool2d(2, return_indices=True), False),
        (nn.AvgPool2d(2), False),
    ],
)
def test_which_pools_tile_the_map(pool, tiles):
    assert tiles_the_map(pool) is tiles
    if not tiles:
        with pytest.raises(ValueError, match="do not tile the map"):
            TiledMaxPool2d.from_torch(pool)


@pytest.mark.parametrize(
    "pool, runs",
    [
        (nn.MaxPool2d(3, stride=2, padding=1), True),
        (nn.MaxPool2d(2), True),
        (nn.MaxPool2d(2, dilation=2), True),
        (nn.MaxPool2d(3, stride=2, ceil_mode=True), True),  # GoogLeNet's
        (nn.MaxPool2d(2, return_indices=True), False),
        (nn.AvgPool2d(2), False),
    ],
)
def test_which_pools_run_as_the_kernel(pool, runs):
    assert runs_as_kernel(pool) is runs
    if not runs:
        with pytest.raises(ValueError, match="without return_indices"):
            MaxPool2d.from_torch(pool)


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("size", range(1, 15))
@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation"),
    [(3, 2, 0, 1), (3, 2, 1, 1), (2, 2, 0, 1), (3, 1, 1, 1), (3, 3, 1, 2), (1, 2, 0, 1), (4, 3, 2, 1)],
)
def test_output_size_is_torchs(size, kernel, stride, padding, dilation, ceil_mode):
    """The pooled size the kernel is launched with, against torch's own pool's (ceil mode's
    partial last window, and its drop where it would start in the padding)."""
    if dilation * (kernel - 1) + 1 > size + 2 * padding:
        return  # no window fits: torch raises, and the kernel is not called
    x = torch.empty(1, 1, size, size)
    expected = F.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode=ceil_mode).shape[-1]
    assert _output_size(size, kernel, stride, padding, dilation, ceil_mode) == expected


class _AtenOps(TorchDispatchMode):
    """The aten ops run inside it, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.__name__)
        return func(*args, **(kwargs or {}))


def test_the_kernels_output_is_allocated_channels_last_without_a_copy():
    """The pool kernel's output: one allocation, viewed as NCHW, channels_last (no copy, which
    would be a kernel launch per pool on the GPU)."""
    x = _channels_last(2, 16, 9, 11)
    with _AtenOps() as ops:
        out = _pooled(x, PoolWindow((3, 3), (2, 2), (1, 1), (1, 1)), ceil_mode=True)
    assert out.shape == F.max_pool2d(x, 3, 2, 1, ceil_mode=True).shape
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert [name.split(".")[0] for name in ops.names] == ["new_empty", "permute"]


def test_max_pool_module_on_the_cpu_is_torchs():
    pool = MaxPool2d.from_torch(nn.MaxPool2d(3, stride=2, padding=1))
    assert "kernel_size=(3, 3), stride=(2, 2), padding=(1, 1)" in repr(pool)
    x = _channels_last(2, 16, 9, 11)
    assert torch.equal(pool(x), F.max_pool2d(x, 3, 2, 1))
    with pytest.raises(RuntimeError, match="pad should be"):
        MaxPool2d(2, padding=2)(x)  # torch's error


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float8_e4m3fn"])
def test_max_pool_kernel_is_one_vectorized_pass(dtype):
    """Every window tap is one 16-byte load, all in flight together (but the first tap's,
    which ptxas reloads where it counts), the result one 16-byte store; the max keeps NaN."""
    from tests.sass import loads_waiting_on_loads, sass_of_ptx

    window = PoolWindow((3, 3), (2, 2), (1, 1), (1, 1))
    ptx = compile_max_pool("sm_90a", dtype, window).ptx
    assert len(re.findall(r"ld\.global(\.\w+)*\.v4", ptx)) == 9
    assert len(re.findall(r"st\.global(\.\w+)*\.v4", ptx)) == 1
    assert "max.NaN.f32" in ptx
    assert loads_waiting_on_loads(sass_of_ptx(ptx, "sm_90a")) <= 1
    with pytest.raises(TypeError, match="window must be a PoolWindow"):
        compile_max_pool("sm_90a", dtype, ((3, 3), (2, 2), (1, 1), (1, 1)))
    with pytest.raises(TypeError, match="dtype=int8 is not supported"):
        compile_max_pool("sm_90a", torch.int8, window)
    with pytest.raises(TypeError, match="dtype=float8_e5m2 is not supported"):
        compile_max_pool("sm_90a", torch.float8_e5m2, window)  # its inf would saturate


def test_max_pool_module_pools_fp8_through_float32_on_the_cpu():
    """torch has no fp8 pool: the module's fallback pools the values in float32, exactly."""
    x = _channels_last(2, 16, 9, 11, dtype=torch.float32).to(torch.float8_e4m3fn)
    x[0, 3, 4, 5] = float("nan")
    ours = MaxPool2d(3, 2, 1)(x)
    ref = F.max_pool2d(x.float(), 3, 2, 1)
    assert ours.dtype == torch.float8_e4m3fn
    assert torch.equal(ours.float().isnan(), ref.isnan())
    assert torch.equal(ours.float().nan_to_num(0.0), ref.nan_to_num(0.0))


GPU_POOLS = [
    ((3, 3), (2, 2), (1, 1), (1, 1)),  # ResNet's
    ((3, 3), (1, 1), (1, 1), (1, 1)),
    ((2, 3), (2, 1), (1, 0), (1, 1)),
    ((3, 3), (3, 2), (0, 1), (2, 1)),
    ((5, 5), (2, 2), (2, 2), (1, 1)),  # 25 taps: loads in flight in two groups
    ((2, 2), (2, 2), (0, 0), (1, 1)),
]
TILING_WINDOW = GPU_POOLS[-1]  # VGG's: also through TiledMaxPool2d


@requires_sm90
@pytest.mark.parametrize("window", GPU_POOLS, ids=str)
@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn], ids=str
)
@pytest.mark.parametrize("shape", [(2, 64, 17, 23), (1, 8, 5, 4), (3, 24, 112, 112)], ids=str)
def test_max_pool_kernel_matches_torch(window, dtype, shape):
    """fp8 maps (16-channel vectors; the others go to the float32 fallback) against torch's
    pool of their float32 values, without and with ceil mode (its partial last windows)."""
    if dtype == torch.float32 and shape[1] % 4:
        pytest.skip("float32 vectors are 4 channels")
    x = torch.randn(*shape, device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)
    x[0, 1, 2, 3] = float("nan")
    x[-1, -1, 0, 0] = float("-inf")  # NaN in e4m3, which has no infinity
    for ceil_mode in (False, True):
        ref = F.max_pool2d(x.float(), *window, ceil_mode=ceil_mode)
        pools = [MaxPool2d(*window, ceil_mode=ceil_mode)]
        if window == TILING_WINDOW and not ceil_mode:
            pools.append(TiledMaxPool2d(2))  # the kernel, or the amax where it does not take x
        for pool in pools:
            ours = pool(x)
            assert ours.shape == ref.shape and ours.dtype == dtype
            assert ours.is_contiguous(memory_format=torch.channels_last)
            assert torch.equal(ours.float().isnan(), ref.isnan())
            assert torch.equal(ours.float().nan_to_num(0.0), ref.nan_to_num(0.0))


@requires_sm90
def test_max_pool_other_inputs_and_compiled():
    pool = MaxPool2d(3, 2, 1)
    nchw = torch.randn(2, 16, 9, 9, device="cuda").to(torch.bfloat16)
    assert torch.equal(pool(nchw), F.max_pool2d(nchw, 3, 2, 1))  # torch's path
    odd = torch.randn(2, 12, 9, 9, device="cuda").to(torch.bfloat16)  # 12 channels: 24 bytes
    odd = odd.contiguous(memory_format=torch.channels_last)
    assert torch.equal(pool(odd), F.max_pool2d(odd, 3, 2, 1))
    # An empty map with a padded window (one output pixel by the size formula): torch's error.
    empty = torch.empty(1, 64, 0, 5, device="cuda", dtype=torch.bfloat16)
    for padded in (MaxPool2d(2, padding=1), AvgPool2d(2, padding=1)):
        with pytest.raises(RuntimeError, match="Expected 3D or 4D"):
            padded(empty.contiguous(memory_format=torch.channels_last))
    _check_compiled_and_graphed(pool, (4, 64, 56, 56), lambda x: F.max_pool2d(x, 3, 2, 1))


def _check_compiled_and_graphed(pool: nn.Module, shape: tuple, expected) -> None:
    """``pool`` under torch.compile(fullgraph=True) (an unbatched 3-D input too: torch's pool)
    and replayed from a CUDA graph computes ``expected(x)``; on an input that requires grad it
    is torch's pool, with its gradient."""
    x = torch.randn(*shape, device="cuda").to(torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    compiled = torch.compile(pool, fullgraph=True)
    assert torch.equal(compiled(x), expected(x))
    assert torch.equal(compiled(x[0]), expected(x[0]))
    static = torch.zeros_like(x)
    pool(static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pool(static)
    static.copy_(x)
    graph.replay()
    assert torch.equal(out, expected(x))
    grad = x.float().requires_grad_()
    pool(grad).sum().backward()
    assert grad.grad is not None


# ---------------------------------------------------------------- average pools

# (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
AVG_POOLS = [
    ((2, 2), (2, 2), (0, 0), False, True, None),  # DenseNet's transitions
    ((3, 3), (1, 1), (1, 1), False, True, None),  # Inception's branches
    ((3, 3), (2, 2), (1, 1), True, True, None),  # ceil mode: the overhang not counted
    ((3, 3), (2, 2), (1, 1), True, False, None),
    ((2, 3), (2, 1), (1, 0), False, False, None),
    ((3, 2), (3, 2), (1, 1), True, True, 5),
    ((5, 4), (3, 3), (2, 1), True, False, None),  # 20 taps: loads in flight in two groups
]


@pytest.mark.parametrize(
    ("pool", "kind"),
    [
        (nn.MaxPool2d(2), TiledMaxPool2d),
        (nn.MaxPool2d(3, stride=2, padding=1), MaxPool2d),
        (nn.MaxPool2d(2, return_indices=True), None),
        (nn.AvgPool2d(2), AvgPool2d),
        (nn.AvgPool2d(3, 1, 1, ceil_mode=True, count_include_pad=False, divisor_override=4), AvgPool2d),
        (type("Sub", (nn.AvgPool2d,), {})(2), None),  # a subclass: its forward may differ
        (nn.AdaptiveAvgPool2d(1), None),  # GlobalAvgPool2d's
    ],
)
def test_which_pools_optimize_replaces(pool, kind):
    ours = pool_for(pool)
    assert type(ours) is kind if kind else ours is None


@pytest.mark.parametrize("args", AVG_POOLS, ids=str)
def test_avg_pool_module_on_the_cpu_is_torchs(args):
    """Inputs the kernel does not take (here: CPU tensors) go to ``F.avg_pool2d``; the module
    keeps every argument of the ``nn.AvgPool2d`` it comes from."""
    torch_pool = nn.AvgPool2d(*args)
    pool = AvgPool2d.from_torch(torch_pool)
    x = _channels_last(2, 16, 9, 11)
    assert torch.equal(pool(x), torch_pool(x))
    assert f"count_include_pad={args[4]}, divisor_override={args[5]}" in repr(pool)
    with pytest.raises(ValueError, match="takes an nn.AvgPool2d"):
        AvgPool2d.from_torch(nn.MaxPool2d(2))


@pytest.mark.parametrize("args", AVG_POOLS[2:], ids=str)
def test_avg_pool_op_passes_opcheck_on_the_cpu(args):
    """``cute_conv::avg_pool2d`` (what ``torch.compile`` traces): torch's pool on CPU tensors,
    channels_last, its fake implementation the same shape (torch.library's opcheck)."""
    kernel_size, stride, padding, *rest = args
    x = _channels_last(2, 16, 9, 11)
    op_args = (x, list(kernel_size), list(stride), list(padding), *rest)
    torch.library.opcheck(torch.ops.cute_conv.avg_pool2d.default, op_args)
    ours = torch.ops.cute_conv.avg_pool2d(*op_args)
    assert ours.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(ours, F.avg_pool2d(x, *args))


@pytest.mark.parametrize("args", AVG_POOLS, ids=str)
def test_avg_pool_kernel_sums_each_tap_and_divides(args):
    """Every window tap one 16-byte load, a window of up to 16 taps' all in flight together
    (but the first tap's), summed in float32 and divided with IEEE rounding (``div.rn``: torch's quotient, not a
    reciprocal's), the result one 16-byte store."""
    from tests.sass import loads_waiting_on_loads, sass_of_ptx

    kernel_size, stride, padding, _, count_include_pad, divisor = args
    window = PoolWindow(kernel_size, stride, padding, (1, 1))
    ptx = compile_avg_pool("sm_90a", torch.bfloat16, window, count_include_pad, divisor).ptx
    taps = kernel_size[0] * kernel_size[1]
    assert len(re.findall(r"ld\.global(\.\w+)*\.v4", ptx)) == taps
    assert len(re.findall(r"st\.global(\.\w+)*\.v4", ptx)) == 1
    assert ptx.count("div.rn.f32") == 8 and "rcp." not in ptx and "max.NaN" not in ptx
    if taps <= TAPS_IN_FLIGHT:  # one group of loads (past it, the groups reuse registers)
        assert loads_waiting_on_loads(sass_of_ptx(ptx, "sm_90a")) <= 1


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(window=PoolWindow((2, 2), (2, 2), (0, 0), (2, 2))), ValueError, "dilation must be"),
        (dict(dtype=torch.float8_e4m3fn), TypeError, "dtype=float8_e4m3fn is not supported"),
        (dict(count_include_pad=1), TypeError, "count_include_pad must be a bool"),
        (dict(divisor_override=0), ValueError, "divisor_override must be >= 1, got 0"),
        (dict(divisor_override=True), TypeError, "divisor_override must be None or an int"),
        (dict(divisor_override=2.0), TypeError, "divisor_override must be None or an int"),
        (dict(window=((2, 2), (2, 2), (0, 0), (1, 1))), TypeError, "window must be a PoolWindow"),
    ],
)
def test_avg_pool_compile_names_a_wrong_argument(kwargs, error, match):
    args = {"arch": "sm_90a", "dtype": torch.bfloat16,
            "window": PoolWindow((2, 2), (2, 2), (0, 0), (1, 1)), **kwargs}  # fmt: skip
    with pytest.raises(error, match=match):
        compile_avg_pool(**args)


@requires_sm90
@pytest.mark.parametrize("args", AVG_POOLS, ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("shape", [(2, 64, 17, 23), (1, 8, 5, 4), (3, 24, 56, 56)], ids=str)
def test_avg_pool_kernel_matches_torch(args, dtype, shape):
    """The kernel's output is torch's channels_last pool's, bit for bit (sums in its order,
    its divisor, IEEE division), NaN included."""
    if dtype == torch.float32 and shape[1] % 4:
        pytest.skip("float32 vectors are 4 channels")
    x = torch.randn(*shape, device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)
    x[0, 1, 2, 3] = float("nan")
    ref = F.avg_pool2d(x, *args)
    ours = AvgPool2d(*args)(x)
    assert ours.shape == ref.shape and ours.dtype == dtype
    assert ours.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(ours.isnan(), ref.isnan())
    assert torch.equal(ours.nan_to_num(0.0), ref.nan_to_num(0.0))


@requires_sm90
def test_avg_pool_compiled_and_graphed():
    _check_compiled_and_graphed(
        AvgPool2d(3, 1, 1), (4, 64, 35, 35), lambda x: F.avg_pool2d(x, 3, 1, 1)
    )


# ---------------------------------------------------------------- global average pools


@pytest.mark.parametrize(
    ("pool", "averages"),
    [
        (nn.AdaptiveAvgPool2d(1), True),
        (nn.AdaptiveAvgPool2d((1, 1)), True),
        (nn.AdaptiveAvgPool2d(2), False),
        (nn.AdaptiveAvgPool2d((1, None)), False),
        (nn.AvgPool2d(7), False),
        (type("Sub", (nn.AdaptiveAvgPool2d,), {})(1), False),
    ],
)
def test_which_pools_average_the_map(pool, averages):
    assert averages_the_map(pool) is averages


def test_global_avg_pool_module_on_the_cpu_is_torchs():
    x = _channels_last(2, 24, 7, 9)
    assert torch.equal(GlobalAvgPool2d()(x), F.adaptive_avg_pool2d(x, 1))
    assert torch.equal(GlobalAvgPool2d((-2, -1), keepdim=False)(x), x.mean((-2, -1)))
    five = torch.randn(2, 3, 4, 5, 6)  # another rank: the mean it replaced
    assert torch.equal(GlobalAvgPool2d((2, 3))(five), five.mean((2, 3), keepdim=True))


@pytest.mark.parametrize(
    ("dims", "keepdim", "match"),
    [((1, 2), True, "dims must be None or one of"), (None, False, "keepdim=False takes dims")],
)
def test_global_avg_pool_bad_arguments(dims, keepdim, match):
    with pytest.raises(ValueError, match=match):
        GlobalAvgPool2d(dims, keepdim)


@pytest.mark.parametrize("pixels", [1, 3, 49, 3136, 12544, 2**24])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_sum_row_is_an_exact_power_of_two_at_most_the_mean_weight(pixels, dtype):
    """The row's value survives the 16-bit dtype exactly (a float16 subnormal at 2**24
    pixels), and alpha (2**k / pixels) lies in [1, 2): the row's sums stay within the inputs'
    range."""
    row = _sum_row(pixels, dtype, torch.device("cpu"))
    k = math.ceil(math.log2(pixels))
    assert row.shape == (1, 1, pixels) and row.dtype == dtype
    assert torch.all(row.double() == 2.0**-k)
    assert 1 <= 2**k / pixels < 2


@pytest.mark.parametrize("shape", [(3, 40, 7, 7), (2, 5, 1, 1), (1, 32, 112, 112), (4, 1, 3, 5)])
def test_global_avg_pool_gemv_matches_float32_on_the_cpu(shape):
    """The GEMV path itself (torch's CPU baddbmm), into a NaN-poisoned output: each channel's
    mean of the float32 values, within bf16 rounding."""
    x = _channels_last(*shape) * 3 + 1
    out = torch.full((shape[0], 1, shape[1]), float("nan"), dtype=torch.bfloat16)
    ours = _global_avg_pool_nhwc(x, out)
    expected = x.float().mean(dim=(2, 3), keepdim=True)
    assert ours.shape == expected.shape and ours.data_ptr() == out.data_ptr()
    assert ours.is_contiguous(memory_format=torch.channels_last)
    report = compare_to_reference(ours, expected)
    assert report.ok, report


def _cuda_channels_last(*shape: int, dtype=torch.bfloat16) -> torch.Tensor:
    x = torch.randn(*shape, device="cuda") * 3 + 1
    return x.to(dtype).contiguous(memory_format=torch.channels_last)


@requires_sm90
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(
    "shape",
    [(8, 32, 112, 112), (8, 144, 28, 28), (3, 1152, 7, 7), (2, 5, 1, 1), (1, 13, 3, 5)],
    ids=str,
)
def test_global_avg_pool_gemv_matches_float32(shape, dtype):
    """cuBLAS's GEMV, into a NaN-poisoned output and through the module: the float32 means
    within 16-bit rounding."""
    x = _cuda_channels_last(*shape, dtype=dtype)
    expected = x.float().mean(dim=(2, 3), keepdim=True)
    out = torch.full((shape[0], 1, shape[1]), float("nan"), dtype=dtype, device="cuda")
    for ours in (_global_avg_pool_nhwc(x, out), GlobalAvgPool2d()(x)):
        assert ours.shape == expected.shape and ours.dtype == dtype
        assert ours.is_contiguous(memory_format=torch.channels_last)
        report = compare_to_reference(ours, expected)
        assert report.ok, report
    flat = GlobalAvgPool2d((2, 3), keepdim=False)(x)  # x.mean((2, 3))
    assert flat.shape == expected.shape[:2]
    assert compare_to_reference(flat, expected.flatten(1)).ok


@requires_sm90
def test_global_avg_pool_of_large_float16_values_stays_finite():
    """12,544 values of 30,000 sum past float16's range (65,504): the row's 2**-14 keeps
    every partial sum cuBLAS may keep in float16 within it."""
    x = torch.full((2, 8, 112, 112), 30000.0, dtype=torch.float16, device="cuda")
    x = x.contiguous(memory_format=torch.channels_last)
    assert torch.equal(GlobalAvgPool2d()(x), torch.full_like(x[:, :, :1, :1], 30000.0))


@requires_sm90
def test_global_avg_pool_other_inputs_compiled_and_graphed():
    pool = GlobalAvgPool2d()
    nchw = torch.randn(2, 16, 9, 9, device="cuda").to(torch.bfloat16)
    assert torch.equal(pool(nchw), F.adaptive_avg_pool2d(nchw, 1))  # torch's path
    x32 = torch.randn(2, 16, 9, 9, device="cuda").contiguous(memory_format=torch.channels_last)
    assert torch.equal(pool(x32), F.adaptive_avg_pool2d(x32, 1))
    x = _cuda_channels_last(4, 96, 56, 56)
    expected = x.float().mean(dim=(2, 3), keepdim=True)
    compiled = torch.compile(pool, fullgraph=True)
    assert compare_to_reference(compiled(x), expected).ok
    # A map size first seen inside a capture: its row is the graph's, and an eager call
    # after the capture makes its own.
    static = _cuda_channels_last(2, 40, 11, 13)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pool(static)
    fresh = _cuda_channels_last(2, 40, 11, 13)
    static.copy_(fresh)
    graph.replay()
    expected = fresh.float().mean(dim=(2, 3), keepdim=True)
    assert compare_to_reference(out, expected).ok
    assert compare_to_reference(pool(fresh), expected).ok
    grad = x.detach().clone().requires_grad_()
    pool(grad).sum().backward()  # requires grad: torch's pool and its gradient
    assert torch.equal(grad.grad, torch.full_like(grad, 1 / (56 * 56)))
