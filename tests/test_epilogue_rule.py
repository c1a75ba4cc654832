"""The epilogue rule (``cute_conv.epilogue_rule``): which calls without a config store their
output in 64-wide subtiles, and what it rejects."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from cute_conv import Conv2dConfig, Conv2dProblemShape
from cute_conv.epilogue_rule import (
    WIDE_EPI_N,
    WIDE_EPILOGUE_MAX_K_TILES,
    WIDE_EPILOGUE_MIN_AB_STAGES,
    wide_epilogue_config,
)
from cute_conv.schedule import schedule_shape
from cute_conv.untuned import heuristic_config


def conv(n, hw, c, k, rs=1, **geom):
    geom.setdefault("padding", rs // 2)
    return Conv2dProblemShape.from_shapes((n, hw, hw, c), (k, rs, rs, c), **geom)


REGNET = conv(32, 56, 48, 120)  # one k-tile per 128x128 tile: store-bound


def test_a_short_mainloop_takes_64_wide_subtiles_up_to_the_bound():
    base = Conv2dConfig()
    assert schedule_shape(REGNET, 128, 128, 64)[1] == 1
    assert wide_epilogue_config(base, REGNET, max_k_tiles=1) == replace(base, epi_n=WIDE_EPI_N)
    assert wide_epilogue_config(base, REGNET, max_k_tiles=0) == base
    long = conv(8, 56, 512, 512, 3)  # 72 k-tiles per tile
    assert wide_epilogue_config(base, long, max_k_tiles=71) == base
    assert wide_epilogue_config(base, long, max_k_tiles=math.inf).epi_n == WIDE_EPI_N


def test_a_ring_the_wider_buffers_leave_too_shallow_keeps_32_wide_subtiles():
    wide_tile = Conv2dConfig(tile_n=256)  # 64-wide buffers leave 3 A/B stages of 48 KB
    assert WIDE_EPILOGUE_MIN_AB_STAGES > 3
    assert wide_epilogue_config(wide_tile, REGNET) == wide_tile
    assert wide_epilogue_config(wide_tile, REGNET, min_ab_stages=3).epi_n == WIDE_EPI_N


def test_calls_without_a_config_take_the_fitted_bound():
    config = heuristic_config(REGNET, 132)
    _, k_tiles = schedule_shape(REGNET, config.tile_m, config.tile_n, config.tile_k)
    wide = k_tiles <= WIDE_EPILOGUE_MAX_K_TILES and config.tile_n % WIDE_EPI_N == 0
    assert config.epi_n == (WIDE_EPI_N if wide else 0)
    assert heuristic_config(REGNET, 132, has_residual=True).epi_n == 0


@pytest.mark.parametrize(
    "config, kwargs",
    [
        pytest.param(Conv2dConfig(tile_n=64), {}, id="one-subtile-per-tile"),
        pytest.param(Conv2dConfig(tile_n=96), {}, id="not-a-multiple-of-64"),
        pytest.param(Conv2dConfig(epi_n=32), {}, id="its-own-width"),
        pytest.param(Conv2dConfig(), dict(has_residual=True), id="residual"),
        pytest.param(Conv2dConfig(tile_k=128), dict(element_bytes=1), id="fp8-inputs"),
        pytest.param(Conv2dConfig(), dict(out_bytes=4), id="fp32-output"),
        pytest.param(Conv2dConfig(tile_n=256, stages=4), {}, id="depth-that-leaves-no-room"),
    ],
)
def test_the_rule_leaves_configs_it_does_not_take(config, kwargs):
    assert wide_epilogue_config(config, REGNET, max_k_tiles=math.inf, **kwargs) == config


@pytest.mark.parametrize(
    "args, kwargs, exc, match",
    [
        pytest.param(("128x128", REGNET), {}, TypeError, "config must be a Conv2dConfig", id="config"),
        pytest.param((Conv2dConfig(), (32, 56)), {}, TypeError, "problem", id="problem"),
        pytest.param((Conv2dConfig(), REGNET, 0), {}, ValueError, "num_sms", id="num-sms"),
        pytest.param((Conv2dConfig(), REGNET), dict(element_bytes=4), ValueError, "element_bytes", id="element-bytes"),
        pytest.param((Conv2dConfig(), REGNET), dict(out_bytes=3), ValueError, "out_bytes", id="out-bytes"),
        pytest.param((Conv2dConfig(), REGNET), dict(max_k_tiles=-1), ValueError, "max_k_tiles must be", id="bound"),
        pytest.param((Conv2dConfig(), REGNET), dict(max_k_tiles=True), ValueError, "max_k_tiles must be", id="bound-bool"),
        pytest.param((Conv2dConfig(), REGNET), dict(min_ab_stages=4.0), TypeError, "min_ab_stages must be", id="stages"),
    ],
)  # fmt: skip
def test_the_rule_rejects_bad_arguments(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        wide_epilogue_config(*args, **kwargs)
