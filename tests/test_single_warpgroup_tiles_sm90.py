"""GPU numerics of 64-row tiles (one consumer warpgroup) against a float32 reference, the
output inside a sentinel guard band (``test_thread_store_sm90.run_and_check``): whole- and
half-step widths with M and K tails, clusters both ways, stream-K, dynamic scheduling,
residuals in both orders (TMA- and thread-stored), gathered operands, halo tiles, fp8 inputs
with 16-bit and e4m3 outputs, fp32 outputs, and a default call the single-warpgroup rule
gives them."""

from __future__ import annotations

import pytest
import torch

from cute_conv import Conv2dConfig, Conv2dProblemShape
from cute_conv.untuned import heuristic_config
from tests.test_fp8_sm90 import run_fp8
from tests.test_thread_store_sm90 import run_and_check

pytestmark = pytest.mark.gpu

E4M3 = torch.float8_e4m3fn


@pytest.mark.parametrize("tile_n", [32, 48, 64, 128, 256])
def test_every_width_class(tile_n):
    # M = 2*11*13 = 286: four whole 64-row tiles and a 30-row tail; K = 1.5 tiles.
    run_and_check(2, 11, 13, 64, tile_n + tile_n // 2, 3, 3, geom=dict(padding=1),
                  config=Conv2dConfig(tile_m=64, tile_n=tile_n))  # fmt: skip


CONFIGS = {
    "64x64-2x1": Conv2dConfig(tile_m=64, tile_n=64, cluster_m=2),
    "64x128-1x2": Conv2dConfig(tile_m=64, tile_n=128, cluster_n=2),
    "64x64-stream-k": Conv2dConfig(tile_m=64, tile_n=64, stream_k=True),
    "64x32-split-3": Conv2dConfig(tile_m=64, tile_n=32, stream_k=True, stream_k_split=3),
    "64x64-dynamic": Conv2dConfig(tile_m=64, tile_n=64, dynamic_schedule=True),
    "64x64-k32": Conv2dConfig(tile_m=64, tile_n=64, tile_k=32),
    # The widened tiles of the single-warpgroup rule: half steps on clusters both ways.
    "64x80-1x2": Conv2dConfig(tile_m=64, tile_n=80, cluster_n=2),
    "64x208-2x1": Conv2dConfig(tile_m=64, tile_n=208, cluster_m=2),
}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_single_warpgroup_schedules(config):
    run_and_check(2, 20, 20, 128, 160, 3, 3, geom=dict(padding=1, stride=2), config=config)


@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
@pytest.mark.parametrize("k", [160, 84], ids=["tma-store", "thread-store"])
def test_single_warpgroup_tiles_with_a_residual(order, k):
    run_and_check(2, 20, 20, 64, k, 3, 3, geom=dict(padding=1),
                  config=Conv2dConfig(tile_m=64, tile_n=64), beta=0.5, order=order)  # fmt: skip


def test_single_warpgroup_tiles_gathered():
    config = Conv2dConfig(tile_m=64, tile_n=32, tile_k=32, gather=True, gather_vector=2)
    run_and_check(2, 20, 20, 30, 120, 3, 3, geom=dict(padding=1), config=config)


def test_single_warpgroup_halo_tiles():
    # Q = 28 in 32-wide tile rows: two output rows per 64-row tile.
    config = Conv2dConfig(tile_m=64, tile_n=64, tile_w=32, halo_h=4)
    run_and_check(2, 28, 28, 64, 64, 3, 3, geom=dict(padding=1), config=config)


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, E4M3], ids=["bf16-out", "e4m3-out"])
def test_single_warpgroup_fp8_tiles(out_dtype):
    run_fp8((2, 20, 20, 128, 192, 3, 3, dict(padding=1)), out_dtype=out_dtype,
            config=Conv2dConfig(tile_m=64, tile_n=64, tile_k=128))  # fmt: skip


def test_single_warpgroup_tiles_with_fp32_output():
    run_and_check(2, 12, 12, 64, 200, 3, 3, geom=dict(padding=1), out_dtype=torch.float32,
                  config=Conv2dConfig(tile_m=64, tile_n=128))  # fmt: skip


def test_a_default_call_takes_64_row_tiles():
    # ResNet's batch-8 14x14 stride-2 3x3 (C=256 -> 512): 128x64 split four ways without
    # the rule, 64x64 unsplit with it.
    problem = Conv2dProblemShape.from_shapes((8, 14, 14, 256), (512, 3, 3, 256), padding=1,
                                             stride=2)  # fmt: skip
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    if heuristic_config(problem, num_sms).tile_m != 64:
        pytest.skip(f"on {num_sms} SMs the rule keeps 128-row tiles here")
    run_and_check(8, 14, 14, 256, 512, 3, 3, geom=dict(padding=1, stride=2))
