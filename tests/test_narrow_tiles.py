"""32-wide tiles (K <= 32): the heuristic's choice, the SMEM plan that fits them (and every
tile) at launch, and the kernels they compile to (no GPU)."""

from __future__ import annotations

import itertools
import re

import cutlass
import pytest
from cute_conv.kernels.sm90.config import MAX_TILE_ELEMS, SMEM_CAPACITY_SM90, TILE_N_CHOICES
from cute_conv.kernels.sm90.smem import sm90_smem_struct

import cute_conv
from cute_conv import Conv2dConfig, Conv2dProblemShape


@pytest.mark.parametrize(
    "shape,expected",
    [
        ((8, 512, 512, 128, 3, 3), (256, 32, 2)),  # SD's VAE output conv: tall, filter shared
        ((1, 128, 128, 320, 4, 3), (128, 32, 1)),  # too few 256-row tiles
        ((8, 128, 128, 512, 32, 3), (128, 32, 1)),  # K=32: 128 rows
        ((8, 100, 168, 256, 12, 1), (128, 32, 1)),  # pointwise: no ping-pong at 32 wide
        ((8, 64, 64, 512, 48, 3), (None, 48, None)),  # K > 32: no 32-wide tiles (a half step)
    ],
)
def test_heuristic_takes_32_wide_tiles_for_k_up_to_32(shape, expected):
    n, hw, w, c, k, r = shape
    problem = Conv2dProblemShape(n, hw, w, c, k, r, r, padding=r // 2)
    config = cute_conv.default_config(problem, 132)
    tile_m, tile_n, cluster_m = expected
    assert config.tile_n == tile_n and not config.pingpong
    if tile_m is not None:
        assert (config.tile_m, config.cluster_m) == (tile_m, cluster_m)
    residual = cute_conv.default_config(problem, 132, has_residual=True)
    assert residual.cluster_m == 1  # residual kernels keep single-CTA clusters here


BF16, FP8, FP32 = cutlass.BFloat16, cutlass.Float8E4M3FN, cutlass.Float32


@pytest.mark.parametrize("tile_m", [128, 192, 256])
def test_the_shared_storage_of_every_plan_fits(tile_m):
    """The kernel's shared storage struct, sized from the plan, is the plan's size and fits:
    a plan that filled SMEM to the byte once overflowed at launch (its storage has 3 KB of
    barriers and alignment outside the buffers)."""
    for tile_n, tile_k, act, out, residual, pingpong in itertools.product(
        TILE_N_CHOICES, (16, 32, 64, 128), (BF16, FP8), (BF16, FP32, FP8), (False, True),
        (False, True),
    ):  # fmt: skip
        if tile_m * tile_n > MAX_TILE_ELEMS or (out is FP8 and act is BF16):
            continue
        try:
            config = Conv2dConfig(tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, pingpong=pingpong)
            plan = config.plan(act, out, residual)
        except ValueError:  # ping-pong on a tile it does not take, or a k-tile of the dtype
            continue
        storage = sm90_smem_struct(
            act_dtype=act, filter_dtype=act, out_dtype=out,
            act_elems=tile_m * tile_k * plan.ab_stages,
            filter_elems=tile_n * tile_k * plan.ab_stages,
            out_elems=tile_m * plan.epi_n * plan.epi_stages * config.num_epilogues,
            source_elems=tile_m * plan.epi_n * max(plan.source_stages, 1),
            ab_stages=plan.ab_stages, queue_stages=1, halo_stages=0,
            source_stages=plan.source_stages, turn_barriers=4,
        )  # fmt: skip
        assert storage.size_in_bytes() == plan.smem_bytes <= SMEM_CAPACITY_SM90, config


@pytest.mark.parametrize(
    "config,act,spec",
    [
        (Conv2dConfig(tile_n=32), "bfloat16", cute_conv.EpilogueSpec(store_by_threads=True)),
        (Conv2dConfig(tile_m=256, tile_n=32, tile_k=32, cluster_m=2), "bfloat16",
         cute_conv.EpilogueSpec(has_bias=True, activation="relu")),
        (Conv2dConfig(tile_n=32, tile_k=128), "float8_e4m3fn",
         cute_conv.EpilogueSpec(has_residual=True)),
    ],
)  # fmt: skip
def test_32_wide_tiles_compile_to_n32_wgmmas(config, act, spec):
    kernel = cute_conv.compile_kernel("sm_90a", act_dtype=act, config=config, epilogue=spec)
    shapes = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", kernel.ptx))
    assert shapes and all(shape.startswith("m64n32") for shape in shapes)
