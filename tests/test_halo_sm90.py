"""Halo tiles on the GPU: each tap's A operand a shifted view of one loaded halo."""

from __future__ import annotations

import pytest
import torch

import cute_conv
from cute_conv.config import pingpong_halo_tile
from cute_conv.testing import random_conv_inputs
from cute_conv.untuned import heuristic_config
from tests.repeated_calls import assert_repeated_calls_match

pytestmark = pytest.mark.gpu


def halo(
    tile_m: int, tile_n: int, tile_w: int, halo_h: int, pingpong: bool = False, halo_w: int = 0
) -> cute_conv.Conv2dConfig:
    return cute_conv.Conv2dConfig(
        tile_m=tile_m, tile_n=tile_n, tile_w=tile_w, halo_h=halo_h, pingpong=pingpong,
        halo_w=halo_w,
    )  # fmt: skip


# (N, H, W, C, K, R, S), padding, dilation, config: the default's shape (r50 3x3, 64 channels),
# 128-row tiles, two c-blocks with a K tail and P not a multiple of the tile's rows, a 5x5
# filter, dilation 2, no padding, three warpgroups' 192-row tiles (3 output rows), a C tail
# inside the c-block, a halo taller than needed. Ping-pong consumers (several tiles per CTA,
# so both take tiles): the r50 shape, two c-blocks with a K tail, a 5x5 filter.
CASES = [
    ((4, 56, 56, 64, 64, 3, 3), 1, 1, halo(256, 64, 64, 6)),
    ((4, 56, 56, 64, 64, 3, 3), 1, 1, halo(128, 64, 64, 4)),
    ((2, 17, 17, 128, 96, 3, 3), 1, 1, halo(128, 128, 32, 6)),
    ((3, 20, 30, 64, 64, 5, 5), 2, 1, halo(256, 64, 64, 8)),
    ((2, 24, 24, 64, 128, 3, 3), 2, 2, halo(128, 128, 32, 8)),
    ((2, 30, 30, 64, 64, 3, 3), 0, 1, halo(128, 64, 32, 6)),
    ((3, 20, 50, 64, 64, 3, 3), 1, 1, halo(192, 64, 64, 5)),
    ((2, 14, 14, 96, 64, 3, 3), 1, 1, halo(128, 64, 32, 6)),
    ((2, 9, 9, 64, 64, 3, 3), 1, 1, halo(128, 64, 32, 12)),
    ((16, 56, 56, 64, 64, 3, 3), 1, 1, halo(128, 64, 64, 4, pingpong=True)),
    ((64, 17, 17, 128, 96, 3, 3), 1, 1, halo(128, 128, 32, 6, pingpong=True)),
    ((43, 20, 26, 64, 64, 5, 5), 2, 1, halo(128, 64, 32, 8, pingpong=True)),
]
# Pitched halos (tiles side by side along Q): Q one tile wide, Q=150 (three tiles, the last
# 22 columns), a 5x5 filter at dilation (1, 2) (the reach fills the pitch), 256 rows (4 rows),
# 192 rows (3), 64 rows (one tile row), two c-blocks with a C tail, ping-pong with several
# tiles per CTA.
PITCHED_CASES = [
    ((2, 64, 64, 64, 128, 3, 3), 1, 1, halo(128, 128, 64, 4, halo_w=72)),
    ((2, 21, 150, 64, 96, 3, 3), 1, 1, halo(128, 96, 64, 4, halo_w=72)),
    ((2, 30, 100, 64, 64, 5, 5), (2, 4), (1, 2), halo(128, 64, 64, 6, halo_w=72)),
    ((2, 40, 130, 64, 64, 3, 3), 1, 1, halo(256, 64, 64, 6, halo_w=72)),
    ((2, 33, 70, 64, 64, 3, 3), 1, 1, halo(192, 64, 64, 6, halo_w=72)),
    ((1, 20, 300, 64, 128, 3, 3), 1, 1, halo(64, 128, 64, 4, halo_w=72)),
    ((2, 18, 90, 120, 256, 3, 3), 0, 1, halo(128, 256, 64, 4, halo_w=72)),
    ((16, 32, 128, 64, 128, 3, 3), 1, 1, halo(128, 128, 64, 4, pingpong=True, halo_w=72)),
]


@pytest.mark.parametrize(
    "shape, pad, dilation, config",
    CASES + PITCHED_CASES,
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else None,
)
def test_halo_tiles_match_the_reference(shape, pad, dilation, config):
    act, flt = random_conv_inputs(*shape)
    assert_repeated_calls_match(act, flt, pad, config, calls=2, dilation=dilation)


def test_default_config_of_r50_c2_uses_halo_tiles_on_the_gpu():
    act, flt = random_conv_inputs(128, 56, 56, 64, 64, 3, 3)
    problem = cute_conv.Conv2dProblemShape.from_shapes(act.shape, flt.shape, padding=1)
    config = cute_conv.default_config(problem)
    assert config.tile_w == 64
    assert_repeated_calls_match(act, flt, 1, None, calls=1)


def test_default_config_of_a_vae_output_conv_takes_pitched_halo_tiles_on_the_gpu():
    act, flt = random_conv_inputs(1, 96, 250, 128, 3, 3, 3)  # 4 tiles across, the last clipped
    problem = cute_conv.Conv2dProblemShape.from_shapes(act.shape, flt.shape, padding=1)
    config = heuristic_config(problem, 132)
    assert (config.tile_m, config.tile_w, config.halo_w) == (256, 64, 72)
    assert_repeated_calls_match(act, flt, 1, None, calls=1)


@pytest.mark.parametrize(
    "geometry, match",
    [
        ({"padding": 1, "stride": 2}, "stride 1"),
        ({"padding": 1, "dilation": (1, 5)}, "Q \\+ \\(S-1\\)\\*dilation_w"),
        ({"padding": 2, "dilation": (3, 1)}, "halo_h"),
    ],
)
def test_a_halo_config_that_does_not_fit_is_rejected_before_launch(geometry, match):
    act, flt = random_conv_inputs(2, 28, 28, 64, 64, 3, 3)
    out_shape = cute_conv.Conv2dProblemShape.from_shapes(act.shape, flt.shape, **geometry)
    out = torch.full(out_shape.output_shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match=match):
        cute_conv.conv2d_fprop(act, flt, out=out, config=halo(128, 64, 32, 6), **geometry)
    assert out.isnan().all()


def test_pingpong_halo_candidate_of_r50_c3_on_the_gpu():
    act, flt = random_conv_inputs(40, 28, 28, 128, 128, 3, 3)  # 280 tiles: two per SM
    problem = cute_conv.Conv2dProblemShape.from_shapes(act.shape, flt.shape, padding=1)
    tile_w, halo_h = pingpong_halo_tile(problem)
    assert (tile_w, halo_h) == (32, 6)
    config = cute_conv.Conv2dConfig(tile_w=tile_w, halo_h=halo_h, pingpong=True)
    assert_repeated_calls_match(act, flt, 1, config, calls=1)
