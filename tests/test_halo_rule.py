"""The halo rule (``cute_conv.halo_rule``): which calls without a config run 256-row halo
tiles, whole-row or pitched, and what it rejects."""

from __future__ import annotations

import math

import pytest

import cute_conv
from cute_conv import Conv2dConfig, Conv2dProblemShape
from cute_conv.config import pitched_halo_tile
from cute_conv.halo_rule import HALO_TILE_M, halo_tile_config, halo_tiled_config
from cute_conv.untuned import heuristic_config


def conv(n, hw, c, k, rs=3, **geom):
    geom.setdefault("padding", rs // 2)
    return Conv2dProblemShape.from_shapes((n, hw, hw, c), (k, rs, rs, c), **geom)


@pytest.mark.parametrize(
    "problem, element_bytes",
    [
        pytest.param(conv(8, 512, 128, 3), 2, id="vae-out-512"),  # narrow: A traffic is all
        pytest.param(conv(1, 1024, 128, 3), 2, id="vae-out-1024"),
        pytest.param(conv(8, 512, 128, 128), 2, id="vae-128-512"),  # wide, 62 waves
        pytest.param(conv(8, 64, 1280, 1280), 2, id="unet-1280-64"),
        pytest.param(conv(8, 512, 128, 128), 1, id="vae-128-512-fp8"),
    ],
)
def test_calls_without_a_config_take_pitched_halo_tiles_where_the_rule_pays(problem, element_bytes):
    config = heuristic_config(problem, 132, element_bytes=element_bytes)
    assert (config.tile_m, config.tile_w, config.halo_h, config.halo_w) == (HALO_TILE_M, 64, 6, 72)
    assert config.tile_k * element_bytes == 128 and config.tile_n <= 128
    cute_conv.check_config_fits(config, problem)


@pytest.mark.parametrize(
    "problem",
    [
        pytest.param(conv(8, 65, 256, 256), id="q65-half-empty-tiles"),
        pytest.param(conv(8, 128, 320, 320), id="k320-pads-more-at-128"),
        pytest.param(conv(1, 64, 640, 640), id="wide-under-four-waves"),
        pytest.param(conv(8, 512, 128, 128, stride=2), id="strided"),
        pytest.param(conv(8, 512, 128, 128, rs=1), id="pointwise"),
    ],
)
def test_calls_where_the_rule_does_not_pay_keep_im2col_tiles(problem):
    assert heuristic_config(problem, 132).tile_w == 0


def test_the_rule_leaves_configs_it_does_not_take():
    problem = conv(8, 512, 128, 128)
    halo = halo_tiled_config(Conv2dConfig(), problem)
    assert halo.halo_w == 72
    for config in (Conv2dConfig(tile_m=64), Conv2dConfig(tile_m=192), halo):
        assert halo_tiled_config(config, problem) == config
    assert halo_tiled_config(Conv2dConfig(), problem, min_column_fill=math.inf) == Conv2dConfig()
    assert halo_tiled_config(Conv2dConfig(), problem, min_waves=math.inf) == Conv2dConfig()


def test_halo_tile_config_gives_none_where_the_halo_does_not_fit():
    problem = conv(8, 100, 64, 64, rs=11)  # 256 rows of an 11x11 filter: 14 halo rows
    assert pitched_halo_tile(problem, 256) == (64, 14, 80)
    assert halo_tile_config(Conv2dConfig(), problem, 256, 64) is None  # 2 x 140 KB of halo
    assert halo_tile_config(Conv2dConfig(), conv(8, 100, 64, 64, stride=2), 256, 64) is None


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        pytest.param(dict(config="128x128"), TypeError, "config must be a Conv2dConfig", id="config"),
        pytest.param(dict(out_bytes=3), ValueError, "out_bytes must be one of", id="out-bytes"),
        pytest.param(dict(element_bytes=4), ValueError, "element_bytes must be", id="element-bytes"),
        pytest.param(dict(num_sms=0), ValueError, "num_sms must be >= 1", id="sms"),
    ],
)  # fmt: skip
def test_bad_arguments_are_rejected(kwargs, exc, match):
    args = dict(config=Conv2dConfig(), problem=conv(8, 512, 128, 128)) | kwargs
    with pytest.raises(exc, match=match):
        halo_tiled_config(**args)
