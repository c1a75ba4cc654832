"""Ping-pong consumers on the GPU: each warpgroup computes every other tile of its CTA."""

from __future__ import annotations

import pytest

import cute_conv
from cute_conv.testing import random_conv_inputs
from tests.repeated_calls import assert_repeated_calls_match

pytestmark = pytest.mark.gpu

Config = cute_conv.Conv2dConfig
# (N, H, W, C, K, R, S, padding), config: several tiles per CTA (both consumers busy) with two
# N tiles, in 1x2, 2x1 and 1x4 clusters (with an odd count of M tiles); an odd count of tiles per
# CTA with M and K tails; a pointwise conv at 96 wide; fewer tiles than SMs (consumer 1 idle).
CASES = [
    ((64, 28, 28, 128, 256, 3, 3, 1), Config(pingpong=True)),
    ((64, 28, 28, 64, 256, 3, 3, 1), Config(cluster_n=2, pingpong=True)),
    ((67, 28, 28, 64, 200, 3, 3, 1), Config(cluster_m=2, pingpong=True)),
    ((64, 28, 28, 64, 256, 3, 3, 1), Config(cluster_n=4, pingpong=True)),
    ((33, 19, 21, 96, 328, 3, 3, 1), Config(tile_n=64, pingpong=True)),
    ((64, 28, 28, 256, 384, 1, 1, 0), Config(tile_n=96, pingpong=True)),
    ((2, 20, 20, 40, 200, 3, 3, 1), Config(tile_n=96, tile_k=32, pingpong=True)),
    ((4, 14, 14, 64, 256, 3, 3, 1), Config(pingpong=True)),
]


@pytest.mark.parametrize(
    "shape, config",
    CASES,
    ids=lambda v: "x".join(map(str, v[:7])) if isinstance(v, tuple) else None,
)
def test_pingpong_matches_the_reference(shape, config):
    n, h, w, c, k, r, s, pad = shape
    act, flt = random_conv_inputs(n, h, w, c, k, r, s)
    assert_repeated_calls_match(act, flt, pad, config, calls=2)
