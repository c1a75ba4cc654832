"""The max pools ``optimize`` rewrites against ``F.max_pool2d``: ``TiledMaxPool2d`` on the CPU
(the same values, NaN included, for windows that tile the map, with or without a remainder;
torch's own pool for the inputs it does not take), ``MaxPool2d``'s kernel compiled here and run
on a GPU (the same bits, NaN included)."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from cute_conv.kernels.common.max_pool import PoolWindow
from torch import nn

from cute_conv.compile import compile_max_pool
from cute_conv.pooling import MaxPool2d, TiledMaxPool2d, runs_as_kernel, tiles_the_map
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
        (nn.MaxPool2d(2, ceil_mode=True), False),
        (nn.MaxPool2d(2, return_indices=True), False),
        (nn.AvgPool2d(2), False),
    ],
)
def test_which_pools_run_as_the_kernel(pool, runs):
    assert runs_as_kernel(pool) is runs
    if not runs:
        with pytest.raises(ValueError, match="without ceil_mode or return_indices"):
            MaxPool2d.from_torch(pool)


def test_max_pool_module_on_the_cpu_is_torchs():
    pool = MaxPool2d.from_torch(nn.MaxPool2d(3, stride=2, padding=1))
    assert "kernel_size=(3, 3), stride=(2, 2), padding=(1, 1)" in repr(pool)
    x = _channels_last(2, 16, 9, 11)
    assert torch.equal(pool(x), F.max_pool2d(x, 3, 2, 1))
    with pytest.raises(RuntimeError, match="pad should be"):
        MaxPool2d(2, padding=2)(x)  # torch's error


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float8_e4m3fn"])
def test_max_pool_kernel_is_one_vectorized_pass(dtype):
    """Every window tap is one 16-byte load, the result one 16-byte store; the max keeps NaN."""
    window = PoolWindow((3, 3), (2, 2), (1, 1), (1, 1))
    ptx = compile_max_pool("sm_90a", dtype, window).ptx
    assert len(re.findall(r"ld\.global(\.\w+)*\.v4", ptx)) == 9
    assert len(re.findall(r"st\.global(\.\w+)*\.v4", ptx)) == 1
    assert "max.NaN.f32" in ptx
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
    ((2, 2), (2, 2), (0, 0), (1, 1)),
]


@requires_sm90
@pytest.mark.parametrize("window", GPU_POOLS, ids=str)
@pytest.mark.parametrize(
    "dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn], ids=str
)
@pytest.mark.parametrize("shape", [(2, 64, 17, 23), (1, 8, 5, 4), (3, 24, 112, 112)], ids=str)
def test_max_pool_kernel_matches_torch(window, dtype, shape):
    """fp8 maps (16-channel vectors; the others go to the float32 fallback) against torch's
    pool of their float32 values."""
    if dtype == torch.float32 and shape[1] % 4:
        pytest.skip("float32 vectors are 4 channels")
    x = torch.randn(*shape, device="cuda").to(dtype).contiguous(memory_format=torch.channels_last)
    x[0, 1, 2, 3] = float("nan")
    x[-1, -1, 0, 0] = float("-inf")  # NaN in e4m3, which has no infinity
    ref = F.max_pool2d(x.float(), *window)
    ours = MaxPool2d(*window)(x)
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
    x = torch.randn(4, 64, 56, 56, device="cuda").to(torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    compiled = torch.compile(pool, fullgraph=True)
    assert torch.equal(compiled(x), F.max_pool2d(x, 3, 2, 1))
    static = torch.zeros_like(x)
    pool(static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pool(static)
    static.copy_(x)
    graph.replay()
    assert torch.equal(out, F.max_pool2d(x, 3, 2, 1))
    grad = x.float().requires_grad_()
    pool(grad).sum().backward()  # requires grad: torch's pool and its gradient
    assert grad.grad is not None
