"""GPU numerics of 32-wide tiles (K <= 32), against a float32 reference, the output inside a
sentinel guard band (``test_thread_store_sm90.run_and_check``): TMA-stored (K a multiple of
8) and thread-stored (K=3) outputs, 128- and 256-row tiles, residuals, fp8 inputs."""

from __future__ import annotations

import pytest
import torch

from cute_conv import Conv2dConfig
from tests.test_fp8_sm90 import run_fp8
from tests.test_thread_store_sm90 import run_and_check

pytestmark = pytest.mark.gpu

CONFIGS = {
    "128x32": Conv2dConfig(tile_n=32),
    "256x32-2x1": Conv2dConfig(tile_m=256, tile_n=32, cluster_m=2),
    "128x32-stream-k": Conv2dConfig(tile_n=32, stream_k=True),
}


@pytest.mark.parametrize("k", [3, 8, 24, 32])
@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_32_wide_tiles(config, k):
    run_and_check(2, 20, 20, 64, k, 3, 3, geom=dict(padding=1), config=config)


@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
@pytest.mark.parametrize("k", [3, 16])
def test_32_wide_tiles_with_a_residual(order, k):
    run_and_check(2, 20, 20, 64, k, 3, 3, geom=dict(padding=1), config=CONFIGS["128x32"],
                  beta=0.5, order=order)  # fmt: skip


def test_32_wide_tiles_by_default_on_a_vae_output_conv():
    run_and_check(1, 128, 128, 128, 3, 3, 3, geom=dict(padding=1))  # the heuristic's choice


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_32_wide_fp8_tiles(out_dtype):
    run_fp8((2, 20, 20, 64, 32, 3, 3, dict(padding=1)), out_dtype=out_dtype,
            config=Conv2dConfig(tile_n=32, tile_k=64))  # fmt: skip
