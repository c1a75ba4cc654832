"""GPU numerics of gathered operands (``Conv2dConfig.gather``): convs whose C is not a
multiple of 8, activation and filter read unpadded, against a float32 reference with the output inside a sentinel
guard band (``test_thread_store_sm90.run_and_check``): odd and even C, padding, strides,
dilation, M and C tails inside a k-tile, several k-tiles per tap, loads of 1, 2 and 4
channels (``gather_vector``), taps packed into k-tiles (``pack_taps``), residuals, K not a multiple of 8 (thread stores), CUDA-graph
replays, and the heuristic's choice of it."""

from __future__ import annotations

import pytest
import torch

import cute_conv
import cute_conv.reference
import cute_conv.testing
from cute_conv import Conv2dConfig
from cute_conv.dispatch import _plan
from tests.test_thread_store_sm90 import run_and_check

pytestmark = pytest.mark.gpu

GATHER = Conv2dConfig(tile_n=64, tile_k=16, gather=True)

# (n, h, w, c, k, r, s, geometry): C from 1 to 84; 1x1 and 3x3/5x5 filters; padding on
# every side; stride 2; dilation; GEMM M (= N*P*Q) not a multiple of the tile.
PROBLEMS = {
    "c4-1x1": (1, 64, 64, 4, 4, 1, 1, {}),
    "c3-3x3-pad": (2, 17, 19, 3, 64, 3, 3, dict(padding=1)),
    "c5-1x1-dilated": (4, 35, 7, 5, 86, 1, 1, dict(dilation=(3, 1))),
    "c13-5x5-s2": (2, 23, 21, 13, 40, 5, 5, dict(stride=2, padding=2)),
    "c30-1x1": (8, 1, 1, 30, 336, 1, 1, {}),
    "c12-3x3-s2-asym": (4, 7, 18, 12, 331, 3, 3, dict(stride=3, padding=((0, 1), (0, 0)))),
    "c84-1x1": (8, 1, 1, 84, 336, 1, 1, {}),
    "c1-7x7-dil2": (2, 30, 30, 1, 32, 7, 7, dict(padding=3, dilation=2)),
}


@pytest.mark.parametrize("tile_k", [16, 32, 64])
@pytest.mark.parametrize("problem", PROBLEMS.values(), ids=PROBLEMS.keys())
def test_gathered_operands(problem, tile_k):
    *shape, geom = problem
    config = Conv2dConfig(tile_n=64, tile_k=tile_k, gather=True)
    run_and_check(*shape, geom=geom, config=config)


# Even C loaded 2 or 4 channels at a time (gather_vector), every vector that divides C.
VECTOR_CASES = [
    pytest.param(problem, vector, id=f"{name}-v{vector}")
    for name, problem in PROBLEMS.items()
    for vector in (2, 4)
    if problem[3] % vector == 0
]


@pytest.mark.parametrize("tile_k", [16, 64])
@pytest.mark.parametrize("problem,vector", VECTOR_CASES)
def test_gathered_operands_by_vectors(problem, vector, tile_k):
    *shape, geom = problem
    config = Conv2dConfig(tile_n=64, tile_k=tile_k, gather=True, gather_vector=vector)
    run_and_check(*shape, geom=geom, config=config)


# Packed taps (pack_taps): every problem, every vector that divides its C, k-tiles of 16 and
# 64 channels (a k-tile holding several taps, a tap's channels split across two k-tiles, the
# row's last k-tile part past R*S*C).
PACKED_CASES = [
    pytest.param(problem, vector, id=f"{name}-v{vector}")
    for name, problem in PROBLEMS.items()
    for vector in (1, 2, 4)
    if problem[3] % vector == 0
]


@pytest.mark.parametrize("tile_k", [16, 64])
@pytest.mark.parametrize("problem,vector", PACKED_CASES)
def test_gathered_operands_with_packed_taps(problem, vector, tile_k):
    *shape, geom = problem
    config = Conv2dConfig(
        tile_n=64, tile_k=tile_k, gather=True, gather_vector=vector, pack_taps=True
    )
    run_and_check(*shape, geom=geom, config=config)


@pytest.mark.parametrize(
    "c,config",
    [(3, Conv2dConfig(tile_m=64, tile_n=32, tile_k=16, gather=True, pack_taps=True)),
     (20, Conv2dConfig(tile_m=64, tile_n=32, tile_k=32, gather=True, gather_vector=4,
                       pack_taps=True)),
     (6, Conv2dConfig(tile_m=256, tile_n=32, tile_k=32, gather=True, gather_vector=2,
                      pack_taps=True))],
    ids=["c3-64x32x16", "c20-64x32x32-v4", "c6-256x32x32-v2"],
)  # fmt: skip
@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
def test_packed_taps_with_a_residual(c, config, order):
    run_and_check(3, 17, 13, c, 40, 3, 5, geom=dict(padding=(1, 2), dilation=(2, 1)),
                  config=config, beta=0.5, order=order)  # fmt: skip


def test_the_heuristic_packs_the_taps_of_a_one_channel_1x7():
    x = torch.empty(8, 12, 34, 1, device="cuda", dtype=torch.bfloat16)
    flt = torch.empty(24, 1, 7, 1, device="cuda", dtype=torch.bfloat16)
    args = ((2, 2), ((0, 0), (5, 0)), (1, 3), 1.0, 0.0, "after_activation", None, None, None,
            None)  # fmt: skip
    plan = _plan(x, flt, None, None, None, None, args, None)
    assert plan.kernel.key.config.gather and plan.kernel.key.config.pack_taps
    run_and_check(8, 12, 34, 1, 24, 1, 7, geom=dict(stride=2, padding=((0, 0), (5, 0)),
                  dilation=(1, 3)))  # fmt: skip


@pytest.mark.parametrize(
    "c,config",
    [(44, Conv2dConfig(tile_m=256, tile_n=32, tile_k=32, gather=True, gather_vector=4)),
     (38, Conv2dConfig(tile_m=192, tile_n=128, tile_k=64, gather=True, gather_vector=2)),
     (36, Conv2dConfig(tile_n=128, tile_k=16, stages=2, gather=True, gather_vector=4))],
    ids=["256x32-v4", "192x128-v2", "two-stages-v4"],
)  # fmt: skip
def test_gathered_vectors_on_other_tiles(c, config):
    # C past one k-tile of 16 or 32 channels, and not a multiple of it: a tail vector row.
    run_and_check(3, 13, 15, c, 70, 3, 3, geom=dict(padding=1), config=config)


@pytest.mark.parametrize(
    "config",
    [Conv2dConfig(tile_m=256, tile_n=32, tile_k=32, gather=True),
     Conv2dConfig(tile_m=192, tile_n=128, tile_k=64, gather=True),
     Conv2dConfig(tile_n=128, tile_k=16, stages=2, gather=True)],
    ids=["256x32", "192x128", "two-stages"],
)  # fmt: skip
def test_gathered_operands_on_other_tiles(config):
    # 3 k-tiles per tap at tile_k 16 (C=37): the ring wraps within one tile's mainloop.
    run_and_check(3, 13, 15, 37, 70, 3, 3, geom=dict(padding=1), config=config)


@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
@pytest.mark.parametrize("k", [6, 64])
@pytest.mark.parametrize("vector", [1, 4])
def test_gathered_operands_with_a_residual(order, k, vector):
    config = Conv2dConfig(tile_n=64, tile_k=16, gather=True, gather_vector=vector)
    run_and_check(2, 9, 11, 12, k, 3, 3, geom=dict(padding=1), config=config, beta=0.5,
                  order=order)  # fmt: skip


@pytest.mark.parametrize("vector", [2, 4])
def test_a_gathering_warp_loads_the_residual_of_every_tile(vector):
    """392 tiles over at most 132 CTAs: warp 1, one of the four gather warps, loads each
    later tile's C after that tile's gathers (the first tile's before them)."""
    config = Conv2dConfig(tile_m=64, tile_n=64, tile_k=16, gather=True, gather_vector=vector)
    run_and_check(8, 56, 56, 12, 64, 3, 3, geom=dict(padding=1), config=config, beta=0.5,
                  order="after_activation")  # fmt: skip


def test_gathered_operands_are_not_written_and_replay_from_a_graph():
    x = torch.randn(1, 16, 16, 12, device="cuda").to(torch.bfloat16)
    flt = torch.randn(24, 3, 3, 12, device="cuda").to(torch.bfloat16)
    x0, flt0 = x.clone(), flt.clone()
    out = torch.full((1, 16, 16, 24), float("nan"), device="cuda", dtype=torch.bfloat16)
    cute_conv.conv2d_fprop(x, flt, padding=1, config=GATHER, out=out)
    torch.cuda.synchronize()
    assert torch.equal(x, x0) and torch.equal(flt, flt0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cute_conv.conv2d_fprop(x, flt, padding=1, config=GATHER, out=out)
    x.copy_(torch.randn_like(x))  # the replay reads the current operands
    flt.copy_(torch.randn_like(flt))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref = cute_conv.reference.conv2d_reference(x, flt, padding=1)
    assert cute_conv.testing.compare_to_reference(out, ref).ok


def test_the_heuristic_gathers_a_small_conv_and_pads_a_large_one():
    def plan_for(n, h, c, r):
        x = torch.empty(n, h, h, c, device="cuda", dtype=torch.bfloat16)
        flt = torch.empty(64, r, r, c, device="cuda", dtype=torch.bfloat16)
        args = (1, r // 2, 1, 1.0, 0.0, "after_activation", None, None, None, None)
        return _plan(x, flt, None, None, None, None, args, None)

    small, large = plan_for(1, 16, 12, 1), plan_for(64, 128, 12, 3)
    assert small.kernel.key.config.gather and not small.needs_staging
    assert small.kernel.key.config.gather_vector == 4  # C=12: 4 channels per load
    assert small.staging.kernel_problem.C == 12
    assert not large.kernel.key.config.gather and large.staging.kernel_problem.C == 16
    run_and_check(1, 16, 16, 12, 64, 1, 1)


def test_the_heuristic_gathers_a_small_rgb_conv_unfolded_otherwise():
    x = torch.empty(1, 8, 8, 3, device="cuda", dtype=torch.bfloat16)
    flt = torch.empty(64, 2, 2, 3, device="cuda", dtype=torch.bfloat16)
    args = (1, 0, 1, 1.0, 0.0, "after_activation", None, None, None, None)
    plan = _plan(x, flt, None, None, None, None, args, None)
    assert plan.kernel.key.config.gather and not plan.needs_staging
    run_and_check(1, 8, 8, 3, 64, 2, 2)
