"""Host-only checks of the SM90 role table: the arrive counts the kernel builds its pipelines
from (and checks the DSL objects against at trace time)."""

from __future__ import annotations

import pytest
from cute_conv.kernels.common.pipeline_checks import BarrierSpec, check_arrive_count
from cute_conv.kernels.sm90.pipeline_checks import Sm90Roles, sm90_barrier_specs

from cute_conv import Conv2dConfig


def _counts(config: Conv2dConfig, has_residual: bool) -> dict[str, int]:
    return {name: spec.count for name, spec in sm90_barrier_specs(config, has_residual).items()}


def test_cooperative_tile_is_released_by_every_consumer_warp_of_the_multicast_group():
    counts = _counts(Conv2dConfig(cluster_n=2), has_residual=True)
    # 8 consumer warps x the 2 CTAs whose TMA writes a stage (A multicast along N).
    assert counts["ab.empty"] == 16 and counts["ab.full"] == 1
    assert counts["source.empty"] == 8 and counts["named.epilogue"] == 256
    assert counts["named.epilogue_load"] == 64
    assert "halo.full" not in counts and "work.full" not in counts


def test_pingpong_tiles_belong_to_one_warpgroup():
    counts = _counts(Conv2dConfig(tile_w=32, halo_h=6, pingpong=True), has_residual=False)
    assert counts["ab.empty"] == counts["halo.empty"] == 4
    assert counts["named.epilogue"] == 128
    assert "source.full" not in counts


@pytest.mark.parametrize("has_residual,readers", [(False, 256), (True, 288)])
def test_work_queue_is_read_by_every_role_that_walks_the_tiles(has_residual, readers):
    counts = _counts(Conv2dConfig(dynamic_schedule=True), has_residual)
    assert counts["work.empty"] == readers and counts["work.full"] == 1


def test_three_warpgroup_tiles_take_512_threads():
    roles = Sm90Roles.of(Conv2dConfig(tile_m=192, tile_n=128))
    assert (roles.threads_per_cta, roles.tile_threads) == (512, 384)


def test_a_wrong_count_names_the_arithmetic():
    spec = sm90_barrier_specs(Conv2dConfig(cluster_m=2), False)["ab.empty"]
    assert isinstance(spec, BarrierSpec)
    with pytest.raises(ValueError, match=r"ab.empty .* arrive count of 8, .* = 16"):
        check_arrive_count(spec, 8)
