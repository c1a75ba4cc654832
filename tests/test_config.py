"""Conv2dConfig validation, the default heuristic and the autotuner's bookkeeping (CPU)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

import cute_conv
from cute_conv import tuning
from cute_conv.config import (
    Conv2dConfig,
    check_config_fits,
    default_config,
    half_step_widths,
    pingpong_halo_tile,
    pingpong_pays,
    split_tile_config,
    wide_split_shape,
)
from cute_conv.problem import Conv2dProblemShape
from cute_conv.schedule import launch_clusters, schedule_shape, stream_k_schedule
from cute_conv.staging import channels_padded, kernel_problem_for
from cute_conv.untuned import heuristic_config


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        pytest.param(dict(tile_m=96), ValueError, "tile_m must be one of", id="tile-m"),
        pytest.param(dict(tile_m=256, tile_n=160), ValueError, "tile_m\\*tile_n must be", id="tile-mn"),
        pytest.param(dict(tile_m=192, tile_n=192), ValueError, "tile_m\\*tile_n must be", id="tile-mn-192"),
        pytest.param(dict(tile_n=72), ValueError, "tile_n must be one of", id="tile-n"),
        pytest.param(dict(tile_n=16), ValueError, "tile_n must be one of", id="tile-n-16"),
        pytest.param(dict(tile_k=256), ValueError, "tile_k must be one of", id="tile-k"),
        pytest.param(dict(cluster_m=3), ValueError, "cluster_m must be one of", id="cluster-m"),
        pytest.param(dict(cluster_m=4, cluster_n=2), ValueError, "cluster_m\\*cluster_n", id="cluster-size"),
        pytest.param(dict(tile_n=48, cluster_m=4), ValueError, "a multiple of 8 rows", id="cluster-slice-n"),
        pytest.param(dict(tile_n=80, cluster_m=4), ValueError, "8\\*cluster_m", id="cluster-slice-n-80"),
        pytest.param(dict(tile_n=64, cluster_n=4, stream_k=True), ValueError, "stream_k needs clusters of at most 2", id="cluster-4-stream-k"),
        pytest.param(dict(stages=1), ValueError, "stages must be 0", id="stages"),
        pytest.param(dict(swizzle=0), ValueError, "swizzle must be >= 1", id="swizzle"),
        pytest.param(dict(tile_n=128.0), TypeError, "tile_n must be an int", id="tile-n-type"),
        pytest.param(dict(raster_along_m=1), TypeError, "raster_along_m must be a bool", id="raster-type"),
        pytest.param(dict(stream_k=1), TypeError, "stream_k must be a bool", id="stream-k-type"),
        pytest.param(dict(dynamic_schedule=1), TypeError, "dynamic_schedule must be a bool", id="dynamic-type"),
        pytest.param(dict(pingpong=1), TypeError, "pingpong must be a bool", id="pingpong-type"),
        pytest.param(dict(tile_m=256, tile_n=64, pingpong=True), ValueError, "pingpong needs", id="pingpong-tile-m"),
        pytest.param(dict(tile_n=160, pingpong=True), ValueError, "pingpong needs", id="pingpong-tile-n"),
        pytest.param(dict(stream_k=True, pingpong=True), ValueError, "pingpong needs", id="pingpong-stream-k"),
        pytest.param(dict(dynamic_schedule=True, pingpong=True), ValueError, "pingpong needs", id="pingpong-dynamic"),
        pytest.param(dict(cluster_n=2, dynamic_schedule=True), ValueError, "dynamic_schedule needs", id="dynamic-cluster"),
        pytest.param(dict(stream_k=True, dynamic_schedule=True), ValueError, "dynamic_schedule needs", id="dynamic-stream-k"),
        pytest.param(dict(tile_w=48, halo_h=6), ValueError, "tile_w must be one of", id="halo-tile-w"),
        pytest.param(dict(halo_h=6), ValueError, "tile_w must be one of", id="halo-h-alone"),
        pytest.param(dict(tile_m=192, tile_n=64, tile_w=128, halo_h=3), ValueError, "tile_w must divide", id="halo-tile-w-divides"),
        pytest.param(dict(tile_w=32, halo_h=3), ValueError, "halo_h must be in", id="halo-h-short"),
        pytest.param(dict(tile_w=32, halo_h=257), ValueError, "halo_h must be in", id="halo-h-box"),
        pytest.param(dict(tile_w=32, halo_h=6, tile_k=32), ValueError, "need tile_k >= 64", id="halo-tile-k"),
        pytest.param(dict(tile_w=32, halo_h=6, cluster_m=2), ValueError, "need tile_k >= 64", id="halo-cluster"),
        pytest.param(dict(tile_w=32, halo_h=6, stream_k=True), ValueError, "need tile_k >= 64", id="halo-stream-k"),
        pytest.param(dict(halo_w=72), ValueError, "tile_w must be one of", id="halo-w-alone"),
        pytest.param(dict(tile_w=32, halo_h=6, halo_w=72), ValueError, "need tile_w=64", id="pitched-tile-w"),
        pytest.param(dict(tile_w=128, halo_h=3, halo_w=136), ValueError, "need tile_w=64", id="pitched-tile-w-128"),
        pytest.param(dict(tile_w=64, halo_h=4, halo_w=70), ValueError, "halo_w a multiple of 8", id="pitched-halo-w-8"),
        pytest.param(dict(tile_w=64, halo_h=4, halo_w=56), ValueError, "in tile_w..256", id="pitched-halo-w-narrow"),
        pytest.param(dict(tile_w=64, halo_h=4, halo_w=264), ValueError, "in tile_w..256", id="pitched-halo-w-box"),
        pytest.param(dict(tile_w=64, halo_h=5, halo_w=72), ValueError, "halo_h\\*halo_w a multiple of 16", id="pitched-odd-blocks"),
        pytest.param(dict(stream_k_split=4), ValueError, "stream_k_split must be 0", id="split-without-stream-k"),
        pytest.param(dict(stream_k=True, stream_k_split=1), ValueError, "stream_k_split must be 0", id="split-of-one"),
        pytest.param(dict(stream_k=True, stream_k_split=33), ValueError, "in 2..32", id="split-too-wide"),
        pytest.param(dict(stream_k=True, stream_k_split=2.0), TypeError, "stream_k_split must be an int", id="split-type"),
        pytest.param(dict(epi_n=128), ValueError, "epi_n must be one of", id="epi-n"),
        pytest.param(dict(epi_n=8), ValueError, "epi_n must be one of", id="epi-n-8"),
        pytest.param(dict(tile_n=96, epi_n=64), ValueError, "epi_n must divide tile_n", id="epi-n-divides"),
        pytest.param(dict(tile_n=80, epi_n=32), ValueError, "epi_n must divide tile_n", id="epi-n-half-step"),
        pytest.param(dict(epi_n=64.0), TypeError, "epi_n must be an int", id="epi-n-type"),
    ],
)  # fmt: skip
def test_config_rejections(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Conv2dConfig(**kwargs)


def problem(n, hw, c, k, rs, **geom):
    return Conv2dProblemShape.from_shapes((n, hw, hw, c), (k, rs, rs, c), **geom)


@pytest.mark.parametrize(
    "prob,tile_m,tile_n,tile_k,cluster_m,cluster_n",
    [
        pytest.param(problem(128, 64, 384, 384, 3, padding=1), 128, 192, 64, 1, 2, id="k384-fits-192"),
        pytest.param(problem(128, 56, 64, 64, 3, padding=1), 256, 64, 64, 1, 1, id="k64-many-m"),
        pytest.param(problem(16, 56, 64, 64, 3, padding=1), 128, 64, 64, 1, 1, id="k64-few-m"),
        pytest.param(problem(8, 128, 320, 320, 3, padding=1), 128, 160, 64, 1, 2, id="k320-fits-160"),
        pytest.param(problem(128, 14, 256, 256, 3, padding=1), 128, 128, 64, 1, 2, id="few-m-tiles"),
        pytest.param(problem(128, 64, 256, 256, 3, padding=1), 128, 256, 64, 2, 1, id="k256-many-m"),
        pytest.param(problem(64, 16, 96, 192, 5, padding=2), 128, 192, 32, 2, 1, id="c96-tile-k-32"),
        pytest.param(problem(8, 32, 8, 64, 3, padding=1), 128, 64, 16, 1, 1, id="c8-tile-k-16"),
        # The C=8 stem's super-pixel view: 21 k-tiles of 32, 128 wide, 3136 tiles of 256 rows.
        pytest.param(kernel_problem_for(problem(128, 224, 8, 64, 7, stride=2, padding=3)), 256, 128, 32, 2, 1, id="stem-view-short-k-tiles"),
        pytest.param(problem(16, 56, 32, 128, 3, padding=1), 128, 128, 32, 1, 1, id="short-k-tiles-few-m"),
        pytest.param(problem(32, 112, 32, 128, 3, padding=1), 256, 128, 32, 2, 1, id="short-k-tiles-many-m"),
        pytest.param(problem(32, 112, 32, 64, 3, padding=1), 256, 64, 32, 2, 1, id="short-k-tiles-k64"),
        pytest.param(problem(128, 56, 64, 256, 1), 128, 256, 64, 1, 1, id="1x1-k256-short-mainloop"),
        # 98 tiles of 128x256 on 132 SMs; 132 of 192x128.
        pytest.param(problem(128, 7, 512, 512, 3, padding=1), 192, 128, 64, 1, 2, id="r50-c5-fills-at-192"),
        pytest.param(problem(64, 14, 256, 256, 3, padding=1), 192, 128, 64, 1, 2, id="n64-r50-c4-fills-at-192"),
        # 392 tiles of 128x128 (2.97 waves) vs 262 of 192x128 (1.98): alike, so 128.
        pytest.param(problem(128, 14, 256, 256, 3, padding=1), 128, 128, 64, 1, 2, id="r50-c4-alike"),
    ],
)  # fmt: skip
def test_default_config(prob, tile_m, tile_n, tile_k, cluster_m, cluster_n):
    config = default_config(prob)
    chosen = (config.tile_m, config.tile_n, config.tile_k, config.cluster_m, config.cluster_n)
    assert chosen == (tile_m, tile_n, tile_k, cluster_m, cluster_n)


@pytest.mark.parametrize(
    "prob,pingpong",
    [
        pytest.param(problem(128, 14, 256, 1024, 1), True, id="r50-c4-1x1-up-4-k-tiles"),
        pytest.param(problem(128, 28, 512, 128, 1), True, id="r50-c3-1x1-dn-8-k-tiles"),
        pytest.param(problem(128, 56, 64, 256, 1), False, id="r50-c2-1x1-up-one-k-tile"),
        pytest.param(problem(4, 14, 256, 1024, 1), False, id="under-two-tiles-per-sm"),
        pytest.param(problem(128, 28, 128, 128, 3, padding=1), False, id="3x3"),
    ],
)  # fmt: skip
def test_default_config_pingpong(prob, pingpong):
    # With a residual only: the corpus measured plain convs faster without it.
    assert not default_config(prob).pingpong
    config = default_config(prob, has_residual=True)
    assert config.pingpong == pingpong
    if pingpong:
        assert config.tile_shape_mnk == (128, 128, 64) and config.cluster_shape_mn == (1, 1)
        assert not config.dynamic_schedule


def test_default_config_takes_192_rows_only_for_a_wave_or_more():
    r50_c5 = problem(128, 7, 512, 512, 3, padding=1)  # 132 tiles of 192x128, 98 of 128x256
    assert default_config(r50_c5, num_sms=132).tile_m == 192
    # On 140 SMs the 98 128-row tiles leave as much idle, but 192-row ones are under a wave.
    assert default_config(r50_c5, num_sms=140).tile_shape_mnk == (128, 256, 64)


@pytest.mark.parametrize(
    "prob,num_sms,schedule",
    [
        # 16 cluster tiles (1x2) of 72 k-tiles on 66 clusters: 4 ways, 18 k-tiles each.
        pytest.param(problem(8, 7, 512, 512, 3, padding=1), 132, (True, 4), id="n8-r50-c5"),
        pytest.param(problem(1, 7, 512, 512, 3, padding=1), 132, (True, 8), id="n1-r50-c5"),
        pytest.param(problem(1, 16, 1280, 1280, 3, padding=1), 132, (True, 3), id="n1-sd-16-1280"),
        pytest.param(problem(8, 7, 512, 512, 3, padding=1), 40, (False, 0), id="n8-r50-c5-on-40-sms"),
        pytest.param(problem(128, 7, 512, 512, 3, padding=1), 132, (False, 0), id="r50-c5-98-tiles"),
        pytest.param(problem(8, 14, 256, 256, 3, padding=1), 132, (True, 2), id="n8-r50-c4-36-k-tiles"),
        pytest.param(problem(1, 14, 256, 256, 1), 132, (False, 0), id="1x1-four-k-tiles"),
        # 36 cluster tiles of 72 k-tiles: no room for two per tile on 66 clusters; the whole grid.
        pytest.param(Conv2dProblemShape.from_shapes((1, 25, 42, 512), (512, 3, 3, 512), padding=1),
                     132, (True, 0), id="n1-25x42-c512"),
    ],
)  # fmt: skip
def test_default_config_stream_k(prob, num_sms, schedule):
    config = default_config(prob, num_sms)
    assert (config.stream_k, config.stream_k_split) == schedule


@pytest.mark.parametrize(
    "prob,dynamic",
    [
        pytest.param(problem(128, 56, 64, 256, 1), True, id="r50-c2-1x1-up"),
        # 196 tiles: under MIN_WAVES_DYNAMIC waves, where the counter costs more than it evens.
        pytest.param(problem(32, 28, 512, 128, 1), False, id="n32-r50-c3-1x1-dn"),
        pytest.param(problem(128, 14, 256, 1024, 1), False, id="1x1-pingpong"),
        pytest.param(problem(2, 14, 256, 1024, 1), False, id="1x1-in-a-1x2-cluster"),
        pytest.param(problem(128, 28, 128, 128, 3, padding=1), False, id="3x3"),
        pytest.param(problem(1, 7, 4096, 64, 1), False, id="1x1-stream-k"),
        pytest.param(problem(1, 56, 64, 64, 1), False, id="1x1-one-wave"),
        pytest.param(problem(1, 1, 120, 12, 1), False, id="1x1-one-tile"),
    ],
)  # fmt: skip
def test_default_config_dynamic_schedule(prob, dynamic):
    config = default_config(prob)
    assert config.dynamic_schedule == dynamic
    assert not dynamic or config.cluster_shape_mn == (1, 1)


@pytest.mark.parametrize(
    "prob,tile_w,halo_h",
    [
        pytest.param(problem(128, 56, 64, 64, 3, padding=1), 64, 6, id="r50-c2-3x3"),
        pytest.param(problem(128, 56, 64, 64, 5, padding=2), 64, 8, id="5x5"),
        pytest.param(problem(2, 56, 64, 64, 3, padding=1), 0, 0, id="too-few-tiles-for-256-rows"),
        pytest.param(problem(128, 56, 64, 64, 3, padding=1, stride=2), 0, 0, id="stride-2"),
        pytest.param(problem(128, 28, 64, 64, 3, padding=1), 0, 0, id="rows-too-narrow"),
        pytest.param(problem(128, 63, 64, 64, 3, padding=1), 0, 0, id="rows-too-wide"),
        pytest.param(problem(128, 56, 64, 64, 1), 0, 0, id="1x1"),
        pytest.param(problem(128, 28, 128, 128, 3, padding=1), 0, 0, id="128-wide"),
    ],
)  # fmt: skip
def test_default_config_halo_tiles(prob, tile_w, halo_h):
    config = default_config(prob)
    assert (config.tile_w, config.halo_h) == (tile_w, halo_h)
    check_config_fits(config, prob)  # what the heuristic picks, the kernel can run


@pytest.mark.parametrize(
    "prob,match",
    [
        pytest.param(problem(2, 28, 64, 64, 3, padding=1, stride=2), "need stride 1", id="stride"),
        pytest.param(problem(2, 31, 64, 64, 3, padding=1), "Q \\+ \\(S-1\\)", id="wide-rows"),
        pytest.param(problem(2, 20, 64, 64, 3, padding=5, dilation=(1, 5)), "\\(S-1\\)\\*dilation_w <= 8", id="far-taps"),
        pytest.param(problem(2, 28, 64, 64, 5, padding=2), "halo_h=6", id="short-halo"),
    ],
)  # fmt: skip
def test_check_config_fits_rejects_what_halo_tiles_cannot_run(prob, match):
    config = Conv2dConfig(tile_w=32, halo_h=6)
    with pytest.raises(ValueError, match=match):
        check_config_fits(config, prob)
    check_config_fits(Conv2dConfig(), prob)  # im2col configs run anything


def test_tuning_times_halo_tiles_where_they_run():
    odd = Conv2dProblemShape.from_shapes((16, 64, 64, 96), (192, 5, 5, 96), padding=2)
    for element_bytes in (2, 1):
        halos = [c for c in tuning.candidate_configs(odd, element_bytes=element_bytes) if c.tile_w]
        assert {(c.tile_m, c.tile_n, c.halo_w) for c in halos} == {(128, 96, 72), (128, 192, 72)}
        assert all(c.tile_k * element_bytes == 128 for c in halos)
    pointwise = problem(8, 64, 512, 512, 1)
    assert not any(c.tile_w for c in tuning.candidate_configs(pointwise))


def test_pitched_halo_tiles_fit_any_row_width_within_their_reach():
    pitched = Conv2dConfig(tile_w=64, halo_h=4, halo_w=72)
    for width in (31, 64, 150, 1024):  # tiles side by side along Q, the last one clipped
        check_config_fits(pitched, problem(2, width, 64, 64, 3, padding=1))
    far = problem(2, 150, 64, 64, 3, padding=5, dilation=(1, 5))  # reach 10 > 72 - 64
    with pytest.raises(ValueError, match="tile_w \\+ \\(S-1\\)\\*dilation_w <= halo_w"):
        check_config_fits(pitched, far)
    with pytest.raises(ValueError, match="need stride 1"):
        check_config_fits(pitched, problem(2, 150, 64, 64, 3, padding=1, stride=2))


@pytest.mark.parametrize(
    "cluster, launched",
    [((1, 1), None), ((2, 1), (2, 1, 1)), ((1, 2), (1, 2, 1)), ((2, 2), (2, 2, 1))],
)
def test_single_cta_clusters_launch_as_a_plain_grid(cluster, launched):
    config = cute_conv.Conv2dConfig(cluster_m=cluster[0], cluster_n=cluster[1])
    assert config.launch_cluster == launched


def test_dynamic_schedule_workspace_size():
    from cute_conv.workspace import DYNAMIC_SCHEDULE_COUNTERS, workspace_size_sm90

    config = Conv2dConfig(dynamic_schedule=True)
    sizes = workspace_size_sm90(problem(128, 28, 512, 128, 1), config, 132)
    assert sizes == (0, DYNAMIC_SCHEDULE_COUNTERS)


def test_kernel_workspace_size():
    from cute_conv.workspace import workspace_size_sm90

    prob = problem(128, 7, 512, 512, 3, padding=1)  # 49 x 2 tiles of 128x256: 49 clusters
    config = Conv2dConfig(tile_n=256, cluster_n=2, stream_k=True)
    assert workspace_size_sm90(prob, config, 66) == (66 * 2 * 128 * 256, 49 * 2)
    assert workspace_size_sm90(prob, Conv2dConfig(tile_n=256, cluster_n=2), 66) is None


def test_launch_clusters_bounds_a_stream_k_split():

    prob = problem(1, 7, 2048, 512, 1)  # 1 x 8 tiles of 128x64
    whole = Conv2dConfig(tile_n=64, stream_k=True)
    assert launch_clusters(prob, whole, 132) == 132
    assert launch_clusters(prob, replace(whole, stream_k_split=6), 132) == 48
    assert launch_clusters(prob, replace(whole, stream_k_split=32), 132) == 132  # SMs bound it
    pairs = Conv2dConfig(tile_n=64, cluster_n=2, stream_k=True, stream_k_split=3)
    assert launch_clusters(prob, pairs, 132) == 12  # 4 cluster tiles of 1x2
    assert launch_clusters(prob, Conv2dConfig(cluster_n=2), 132) == 66


def test_launch_clusters_keeps_to_the_clusters_resident_at_once():
    prob = problem(8, 56, 64, 256, 1)
    quads = Conv2dConfig(tile_n=64, cluster_m=2, cluster_n=2)
    assert launch_clusters(prob, quads, 132) == 33
    assert launch_clusters(prob, quads, 132, resident=30) == 30
    assert launch_clusters(prob, quads, 132, resident=40) == 33  # one CTA per SM at most
    split = Conv2dConfig(tile_n=64, cluster_n=2, stream_k=True, stream_k_split=3)
    assert launch_clusters(problem(1, 7, 2048, 512, 1), split, 132, resident=10) == 10


def test_stream_k_schedule_keeps_k_tiles_per_cta_within_the_sms():

    assert stream_k_schedule(8, 32, 132, 12.0) == (True, 2)  # 3 ways would leave 10.7 each
    assert stream_k_schedule(8, 72, 132, 12.0) == (True, 6)
    assert stream_k_schedule(8, 1000, 132, 12.0) == (True, 16)  # the widest of the choices
    assert stream_k_schedule(40, 1000, 132, 12.0) == (True, 3)  # 4 ways: 160 clusters
    assert stream_k_schedule(8, 23, 132, 12.0) == (False, 0)  # data-parallel
    # No room for two CTAs per tile: the whole grid, for long mainloops under 0.6 of a wave.
    assert stream_k_schedule(70, 1000, 132, 12.0) == (True, 0)
    assert stream_k_schedule(70, 63, 132, 12.0) == (False, 0)
    assert stream_k_schedule(80, 1000, 132, 12.0) == (False, 0)


@pytest.mark.parametrize(
    "prob,plain_n,residual_n",
    [
        pytest.param(problem(128, 56, 64, 256, 1), 256, 128, id="1x1-short-mainloop"),
        pytest.param(problem(20, 14, 128, 1024, 1), 256, 128, id="1x1-k128"),
        # GEMM K 256: past RESIDUAL_NARROW_MAX_GEMM_K (128), within the pointwise bound (inf;
        # both fitted on the corpus).
        pytest.param(problem(20, 14, 256, 1024, 1), 256, 128, id="1x1-k256"),
        pytest.param(problem(128, 64, 256, 256, 3, padding=1), 256, 256, id="3x3-long-mainloop"),
        pytest.param(problem(128, 64, 384, 384, 3, padding=1), 192, 192, id="k384-fits-192"),
    ],
)  # fmt: skip
def test_default_config_for_residual_epilogues(prob, plain_n, residual_n):
    assert default_config(prob).tile_n == plain_n
    assert default_config(prob, has_residual=True).tile_n == residual_n


def test_wide_residual_tiles_with_tiles_to_come_keep_a_whole_tile_of_c():
    """``WHOLE_SOURCE_MIN_TILES_PER_SM`` and ``WHOLE_SOURCE_MIN_GEMM_K``: 16-bit residual convs
    on 128-row tiles wider than 192, with that many output tiles per SM and that GEMM K,
    take three A/B stages, which leave SMEM for the tile's whole C."""
    import cutlass

    from cute_conv.config import WHOLE_SOURCE_MIN_GEMM_K, WHOLE_SOURCE_MIN_TILES_PER_SM

    sd = problem(8, 64, 512, 512, 3, padding=1)  # 512 tiles of 128x256: 3.9 per SM
    fused = default_config(sd, has_residual=True)
    assert (fused.tile_m, fused.tile_n, fused.stages) == (128, 256, 3)
    assert default_config(sd).stages == 0  # no residual
    assert default_config(sd, has_residual=True, element_bytes=1).stages == 0  # not measured
    assert default_config(sd, has_residual=True, whole_source_min_k=math.inf).stages == 0
    plan = fused.plan(cutlass.BFloat16, cutlass.BFloat16, True)
    assert plan.source_stages * plan.epi_n == fused.tile_n  # the whole tile of C
    # Half the SMs' worth of tiles fewer: no next tile to prefetch C for on most SMs.
    few = default_config(sd, 132 * 2, has_residual=True)
    assert 512 / (132 * 2) < WHOLE_SOURCE_MIN_TILES_PER_SM
    assert (few.tile_m, few.tile_n, few.stages) == (128, 256, 0)
    assert default_config(sd, has_residual=True, whole_source_min_tiles_per_sm=4).stages == 0
    # C=16 3x3 (GEMM K 144) stays at the plan's four stages.
    short = default_config(problem(8, 64, 16, 512, 3, padding=1), has_residual=True)
    assert short.tile_n == 256 and short.stages == 0
    assert problem(8, 64, 16, 512, 3, padding=1).gemm_k < WHOLE_SOURCE_MIN_GEMM_K
    with pytest.raises(TypeError, match="whole_source_min_k must be None or a number"):
        default_config(sd, has_residual=True, whole_source_min_k="1152")
    with pytest.raises(TypeError, match="whole_source_min_tiles_per_sm must be None or a number"):
        default_config(sd, has_residual=True, whole_source_min_tiles_per_sm=True)


def test_a_configs_epilogue_width_sets_the_plans():
    """``Conv2dConfig.epi_n``: the plain epilogue's subtile width as given (0: 32, or 16 for
    half-step tiles); a residual kernel takes it with as many C buffers as fit."""
    import cutlass

    bf16 = cutlass.BFloat16

    def plan(has_residual=False, **kwargs):
        p = Conv2dConfig(**kwargs).plan(bf16, bf16, has_residual)
        return p.epi_n, p.epi_stages, p.source_stages, p.ab_stages

    assert plan() == (32, 4, 0, 6)
    assert plan(epi_n=64) == (64, 4, 0, 5)  # 4 buffers of 16 KB: one A/B stage fewer
    assert plan(tile_n=80, tile_k=64) == (16, 4, 0, plan(tile_n=80, tile_k=64, epi_n=16)[3])
    assert plan(tile_n=256, epi_n=64)[:3] == (64, 4, 0)
    assert plan(True) == (64, 2, 2, 5)  # the residual kernel's own choice: a tile of C
    assert plan(True, epi_n=64) == plan(True)
    assert plan(True, epi_n=32) == (32, 2, 4, 5)  # a whole tile of 32-wide C
    # 128x256 in 64-wide subtiles: 2 of 4 C subtiles buffered (the least), 3 stages of 48 KB.
    assert plan(True, tile_n=256, epi_n=64) == (64, 2, 2, 3)
    for kwargs in (dict(epi_n=64), dict(tile_n=256, epi_n=64), dict(tile_m=256, epi_n=64)):
        assert Conv2dConfig(**kwargs).plan(bf16, bf16, False).smem_bytes <= 232448


def test_plain_192_row_tiles_take_two_output_buffers_where_that_deepens_the_ring():
    import cutlass

    bf16, e4m3 = cutlass.BFloat16, cutlass.Float8E4M3FN

    def plan(act=bf16, has_residual=False, **kwargs):
        p = Conv2dConfig(**kwargs).plan(act, bf16, has_residual)
        return p.epi_stages, p.ab_stages

    assert plan(tile_m=192) == (2, 5)  # 12 KB subtiles: 5 stages of 40 KB instead of 4
    assert plan(tile_m=192, cluster_n=2) == (2, 5)
    assert plan(tile_m=128, tile_n=192) == (4, 4)  # other tiles keep four buffers
    assert plan(tile_m=256, tile_n=128) == (4, 3)
    assert plan(tile_m=192, stages=4) == (4, 4)  # a set ring depth is left as it is
    assert plan(e4m3, tile_m=192) == (4, 8)  # fp8 was not measured, nor fp32 outputs
    fp32_out = Conv2dConfig(tile_m=192).plan(bf16, cutlass.Float32, False)
    assert (fp32_out.epi_stages, fp32_out.ab_stages) == (4, 3)
    assert plan(tile_m=192, has_residual=True)[0] == 2  # the residual kernel's own choice
    assert plan(tile_m=192, tile_k=32) == (2, 10)  # 8 stages of 20 KB with four
    assert plan(tile_m=192, epi_n=64)[0] == 4  # 64-wide subtiles were not measured
    # Where two buffers buy no stage (4.0 or 4.5 stages of 44 KB), four are kept.
    assert plan(tile_m=192, tile_n=160) == (4, 4)


def test_residual_tuning_also_times_wide_tiles_with_a_whole_tile_of_c():
    import cutlass

    from cute_conv.config import WHOLE_SOURCE_AB_STAGES

    sd = problem(8, 64, 512, 512, 3, padding=1)
    plain = tuning.candidate_configs(sd)
    fused = tuning.candidate_configs(sd, has_residual=True)
    whole = [c for c in fused if c.stages]
    assert not any(c.stages for c in plain) and whole
    assert {replace(c, stages=0) for c in whole} == {
        c for c in plain if c.tile_m == 128 and c.tile_n > 192 and not c.tile_w
    }  # a halo leaves no room for a whole tile of C
    for c in whole:
        assert c.stages == WHOLE_SOURCE_AB_STAGES
        plan = c.plan(cutlass.BFloat16, cutlass.BFloat16, True)
        assert plan.source_stages * plan.epi_n >= c.tile_n  # the whole tile of C
    assert default_config(sd, has_residual=True) in fused
    assert not any(c.stages for c in tuning.candidate_configs(sd, 132, 1, has_residual=True))
    with pytest.raises(TypeError, match="has_residual must be a bool"):
        tuning.candidate_configs(sd, has_residual=1)


def test_residual_narrowed_pointwise_tiles_run_alone_and_dynamic():
    # ResNet-50's 1x1 64 -> 256 conv: plain 128x256; with a residual 128 wide, and the two N
    # tiles not paired in a cluster, so that tiles are taken dynamically.
    prob = problem(128, 56, 64, 256, 1)
    fused = default_config(prob, has_residual=True)
    assert (fused.tile_n, fused.cluster_m, fused.cluster_n) == (128, 1, 1)
    assert fused.dynamic_schedule and not fused.pingpong


def test_residual_short_k_tiles_run_alone():
    stem_view = kernel_problem_for(problem(128, 224, 8, 64, 7, stride=2, padding=3))
    fused = default_config(stem_view, has_residual=True)
    assert (fused.tile_m, fused.tile_n, fused.cluster_m, fused.cluster_n) == (256, 128, 1, 1)


def test_plain_candidates_also_take_64_wide_subtiles_where_the_ring_keeps_its_depth():
    import cutlass

    regnet = problem(32, 56, 48, 120, 1)
    plain = tuning.candidate_configs(regnet)
    wide = [c for c in plain if c.epi_n]
    assert wide and {replace(c, epi_n=0) for c in wide} <= set(plain)
    assert {(c.tile_m, c.tile_n) for c in wide} >= {(128, 128)}
    for c in wide:  # every one runs a 16-bit or a float32 output
        assert c.plan(cutlass.BFloat16, cutlass.BFloat16, False).ab_stages >= 4
        c.plan(cutlass.BFloat16, cutlass.Float32, False)
    assert not any(c.epi_n for c in tuning.candidate_configs(regnet, has_residual=True))
    assert not any(c.epi_n for c in tuning.candidate_configs(regnet, element_bytes=1))
    assert default_config(regnet) != heuristic_config(regnet, 132)  # the rule's choice...
    assert heuristic_config(regnet, 132) in plain  # ... is among them


def test_candidates_are_valid_and_fit_k():
    prob = problem(2, 8, 64, 64, 3)
    candidates = tuning.candidate_configs(prob)
    assert candidates and all(isinstance(c, Conv2dConfig) for c in candidates)
    assert {c.tile_n for c in candidates} == {64}
    assert len(set(candidates)) == len(candidates)
    # The tuning table keys timings by these ids: every field that tells configs apart shows.
    pingpong = Conv2dConfig(pingpong=True)
    halo = Conv2dConfig(tile_w=32, halo_h=6, pingpong=True)
    assert tuning._config_id(halo) != tuning._config_id(pingpong)
    ids = [tuning._config_id(c) for c in candidates]
    assert len(set(ids)) == len(ids)
    # The stem's super-pixel view has 32 channels per tap; the folded stem (odd Q) 64.
    stem = Conv2dProblemShape.from_shapes((1, 32, 32, 8), (64, 7, 7, 8), stride=2, padding=3)
    assert {c.tile_k for c in tuning.candidate_configs(stem)} == {32}
    folded = Conv2dProblemShape.from_shapes((1, 30, 30, 8), (64, 7, 7, 8), stride=2, padding=3)
    assert {c.tile_k for c in tuning.candidate_configs(folded)} == {64}


@pytest.mark.parametrize(
    "prob,tile_w,halo_h",
    [
        pytest.param(problem(128, 28, 128, 128, 3, padding=1), 32, 6, id="r50-c3-3x3"),
        pytest.param(problem(128, 28, 128, 128, 5, padding=2), 32, 8, id="5x5"),
        pytest.param(problem(32, 28, 128, 128, 3, padding=1), 0, 0, id="under-two-tiles-per-sm"),
        pytest.param(problem(128, 14, 128, 128, 3, padding=1), 0, 0, id="rows-too-narrow"),
        pytest.param(problem(128, 28, 128, 128, 3, padding=1, stride=2), 0, 0, id="stride-2"),
        pytest.param(problem(128, 28, 128, 128, 1), 0, 0, id="1x1"),
    ],
)  # fmt: skip
def test_pingpong_halo_tiles_are_autotuning_candidates_where_they_fit(prob, tile_w, halo_h):
    assert pingpong_halo_tile(prob) == (tile_w, halo_h)
    halo_candidates = [c for c in tuning.candidate_configs(prob) if c.tile_w and c.pingpong]
    assert halo_candidates == (
        [Conv2dConfig(tile_w=tile_w, halo_h=halo_h, pingpong=True)] if tile_w else []
    )
    for config in halo_candidates:
        check_config_fits(config, prob)
    default = default_config(prob)
    assert not (default.pingpong and default.tile_w)  # not a default


def test_candidates_take_pingpong_where_it_pays():
    # Ping-pong by default with a residual (4 k-tiles); tried for plain calls too.
    prob = problem(128, 14, 256, 1024, 1)
    assert pingpong_pays(prob, 64) and not pingpong_pays(problem(128, 14, 256, 1024, 3), 64)
    candidates = tuning.candidate_configs(prob)
    assert default_config(prob) in candidates
    assert {c.pingpong for c in candidates} == {True, False}
    assert all(c.pingpong == (c.tile_m == 128 and c.tile_n <= 128) for c in candidates)
    assert any(c.tile_m == 192 for c in candidates)


def test_candidates_try_pingpong_and_dynamic_scheduling_each_alone():
    """Where the heuristic takes dynamic scheduling and ping-pong pays, the kernel cannot
    combine the two: the autotuner tries each alone (it used to raise building them)."""
    prob = problem(128, 56, 256, 128, 1)
    default = default_config(prob)
    assert default.dynamic_schedule and pingpong_pays(prob, default.tile_k)
    candidates = tuning.candidate_configs(prob)
    assert default in candidates
    assert not any(c.pingpong and c.dynamic_schedule for c in candidates)
    # (64-wide epilogue subtiles leave a ping-pong tile 3 A/B stages: no ping-pong twin.)
    single_cta = [
        c for c in candidates
        if c.tile_m == 128 and c.cluster_m * c.cluster_n == 1 and not c.epi_n
    ]  # fmt: skip
    for c in single_cta:
        twin = replace(c, pingpong=not c.pingpong, dynamic_schedule=not c.dynamic_schedule)
        assert c.pingpong != c.dynamic_schedule and twin in candidates


@pytest.mark.parametrize(
    "k,widths",
    [(64, [64]), (320, [96, 128, 160]), (384, [96, 128, 192]), (1024, [128, 160, 192, 224, 256])],
)
def test_candidate_widths_cover_k_without_needless_padding(k, widths):
    assert tuning.candidate_widths(k) == widths


def test_tuning_keeps_the_heuristic_within_the_noise():
    heuristic, other = Conv2dConfig(tile_n=256, cluster_m=2), Conv2dConfig(tile_n=128)
    assert tuning.pick_fastest([heuristic, other], [1.00, 0.96], heuristic) == heuristic
    assert tuning.pick_fastest([heuristic, other], [1.00, 0.94], heuristic) == other
    assert tuning.pick_fastest([heuristic, other], [0.90, 0.96], heuristic) == heuristic
    assert tuning.pick_fastest([other], [0.96], heuristic) == other


def test_finalists_are_the_fastest_screened_and_the_heuristic(monkeypatch):
    monkeypatch.setattr(tuning, "_FINALISTS", 3)
    configs = [Conv2dConfig(tile_n=n) for n in (64, 96, 128, 160, 192, 256)]
    screen = [0.5, 0.1, 0.4, 0.2, 0.3, 0.6]
    assert tuning.pick_finalists(configs, screen, configs[5]) == [1, 3, 4, 5]
    assert tuning.pick_finalists(configs, screen, configs[3]) == [1, 3, 4]
    assert tuning.pick_finalists(configs, screen, Conv2dConfig(tile_n=224)) == [1, 3, 4]


@pytest.mark.parametrize(
    "x_shape, filter_shape",
    [((1, 7, 7, 2048), (512, 1, 1, 2048)), ((8, 1, 1, 222), (888, 1, 1, 222))],
    ids=["small-M", "gathered-small-M"],
)
def test_autotune_times_the_config_an_untuned_call_runs(tmp_path, monkeypatch, x_shape, filter_shape):
    """The autotuner's baseline is what a call without a config runs (here the small-M
    rule's narrow tiles, gathered for an odd C), none of its own candidates: it is timed
    beside them, and stands unless one beats it by _MIN_GAIN."""
    from types import SimpleNamespace

    from cute_conv.untuned import heuristic_config

    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "_device_name", lambda index: "Fake H100")
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: SimpleNamespace(multi_processor_count=132))  # fmt: skip
    prob = Conv2dProblemShape.from_shapes(x_shape, filter_shape)
    untuned = heuristic_config(prob, 132, cuda_cores=False)  # what autotune times
    assert untuned.tile_n == 32 and untuned not in tuning.candidate_configs(prob)
    timed = []  # the configs of each timing round

    def fake_times(fns, *args, **kwargs) -> list[float]:
        """The untuned config runs in 1.0 ms, the candidates in 1.02 ms and up."""
        configs = [fn.args[0] for fn in fns]
        timed.append(configs)
        return [1.0 if c == untuned else 1.02 + 0.001 * i for i, c in enumerate(configs)]

    monkeypatch.setattr(tuning, "_time_candidates", fake_times)
    device = torch.device("cuda", 0)
    bf16 = torch.bfloat16
    best = tuning._autotune(prob, bf16, bf16, device, None, False, lambda config: None)
    assert best == untuned and all(untuned in configs for configs in timed)
    key = tuning.problem_key(prob, bf16, bf16)
    assert tuning.lookup(device, key) == untuned
    table = json.loads((tmp_path / "autotune.json").read_text())["Fake H100"][key]["ms"]
    assert tuning._config_id(untuned) in table["final"]
    assert len(set(table["screen"])) == len(timed[0])  # one id per timed config


def test_problem_key_separates_what_matters():
    a = problem(2, 8, 64, 64, 3, padding=1)
    b = problem(2, 8, 64, 64, 3, padding=1, stride=2)
    key = tuning.problem_key(a, torch.bfloat16, torch.bfloat16)
    assert key != tuning.problem_key(b, torch.bfloat16, torch.bfloat16)
    assert key != tuning.problem_key(a, torch.float16, torch.float16)
    assert key != tuning.problem_key(a, torch.bfloat16, torch.bfloat16, has_residual=True)
    assert key.startswith(f"m{a.gemm_m}-k64-c64-r3s3")
    # Two C=8 stems of one N*P*Q: a super-pixel view (Q even) and a fold (Q odd) run apart.
    view = Conv2dProblemShape.from_shapes((1, 30, 32, 8), (64, 7, 7, 8), stride=2, padding=3)
    fold = Conv2dProblemShape.from_shapes((1, 32, 30, 8), (64, 7, 7, 8), stride=2, padding=3)
    assert view.gemm_m == fold.gemm_m
    view_key = tuning.problem_key(view, torch.bfloat16, torch.bfloat16)
    assert view_key.startswith("m120-k128-c32-r7s3")  # Q/2 GEMM rows, 2K channels
    assert view_key != tuning.problem_key(fold, torch.bfloat16, torch.bfloat16)


def _no_runs(*args):
    raise AssertionError("nothing is tuned here")


def test_residual_calls_take_the_choice_tuned_with_a_residual(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "_device_name", lambda index: "Fake H200")
    prob = problem(2, 8, 64, 64, 3, padding=1)
    x = torch.empty(2, 8, 8, 64, dtype=torch.bfloat16, device="meta")
    device = torch.device("cuda", 0)
    plain, fused = Conv2dConfig(tile_n=64), Conv2dConfig(tile_n=128, swizzle=1)
    bf16 = torch.bfloat16

    def choose(has_residual):
        return tuning.stored_or_tuned_config(
            prob, prob, x, (64, 3, 3, 64), bf16, has_residual, make_runner=_no_runs
        )

    tuning._store(device, tuning.problem_key(prob, bf16, bf16), plain, {})
    assert choose(False) == plain
    # A plain choice does not serve residual calls: they keep the heuristic.
    assert choose(True) is None
    tuning._store(device, tuning.problem_key(prob, bf16, bf16, has_residual=True), fused, {})
    assert (choose(False), choose(True)) == (plain, fused)


def test_stored_choice_round_trips(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tuning, "_device_name", lambda index: "Fake H200")
    device = torch.device("cuda", 0)
    config = Conv2dConfig(tile_n=192, cluster_n=2, swizzle=1)
    assert tuning.lookup(device, "some-key") is None
    tuning._store(device, "some-key", config, {"n192": 0.1})
    assert tuning.lookup(device, "some-key") == config
    table = json.loads((tmp_path / "autotune.json").read_text())
    assert table["Fake H200"]["some-key"]["ms"] == {"n192": 0.1}
    assert cute_conv.autotune is cute_conv.api.autotune


@pytest.mark.gpu
def test_autotune_stores_its_choice_for_later_calls(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    x_shape, filter_shape = (2, 10, 10, 64), (64, 3, 3, 64)
    best = cute_conv.autotune(x_shape, filter_shape, padding=1)
    problem = Conv2dProblemShape.from_shapes(x_shape, filter_shape, padding=1)
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    from cute_conv.untuned import heuristic_config

    untuned = heuristic_config(problem, sm_count)  # what a call without a config runs
    assert best in [*tuning.candidate_configs(problem), untuned]
    key = tuning.problem_key(problem, torch.bfloat16, torch.bfloat16)
    assert tuning.lookup(torch.device("cuda", 0), key) == best
    timings = next(iter(json.loads((tmp_path / "autotune.json").read_text()).values()))[key]["ms"]
    assert len(timings["screen"]) >= len(tuning.candidate_configs(problem))
    assert tuning._config_id(best) in timings["final"]
    assert tuning._config_id(untuned) in timings["final"]


@pytest.mark.gpu
def test_autotune_tells_apart_configs_that_differ_only_in_their_epilogue_width(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    x_shape, filter_shape = (8, 28, 28, 48), (120, 1, 1, 48)
    configs = [Conv2dConfig(), Conv2dConfig(epi_n=64)]
    best = cute_conv.autotune(x_shape, filter_shape, configs=configs)
    assert best in configs
    problem = Conv2dProblemShape.from_shapes(x_shape, filter_shape)
    key = tuning.problem_key(problem, torch.bfloat16, torch.bfloat16)
    assert tuning.lookup(torch.device("cuda", 0), key) == best
    timings = next(iter(json.loads((tmp_path / "autotune.json").read_text()).values()))[key]["ms"]
    assert {tuning._config_id(c) for c in configs} <= set(timings["screen"])


@pytest.mark.gpu
def test_autotune_with_a_residual_stores_apart_from_the_plain_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    x_shape, filter_shape = (2, 10, 10, 64), (128, 1, 1, 64)
    configs = [Conv2dConfig(tile_n=128), Conv2dConfig(tile_n=64, swizzle=1)]
    best = cute_conv.autotune(x_shape, filter_shape, configs=configs, has_residual=True)
    assert best in configs
    problem = Conv2dProblemShape.from_shapes(x_shape, filter_shape)
    device = torch.device("cuda", 0)
    bf16 = torch.bfloat16
    assert tuning.lookup(device, tuning.problem_key(problem, bf16, bf16, True)) == best
    assert tuning.lookup(device, tuning.problem_key(problem, bf16, bf16)) is None


@pytest.mark.gpu
@pytest.mark.parametrize(
    "out_dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16-out", "fp8-out"]
)
def test_autotune_tunes_fp8_convs_and_calls_take_the_choice(tmp_path, monkeypatch, out_dtype):
    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    e4m3 = torch.float8_e4m3fn
    x_shape, filter_shape = (2, 10, 10, 64), (64, 3, 3, 64)
    configs = [Conv2dConfig(tile_k=64, swizzle=1), Conv2dConfig(tile_k=128)]
    best = cute_conv.autotune(x_shape, filter_shape, padding=1, dtype=e4m3, out_dtype=out_dtype,
                              configs=configs)  # fmt: skip
    assert best in configs
    problem = Conv2dProblemShape.from_shapes(x_shape, filter_shape, padding=1)
    key = tuning.problem_key(problem, e4m3, out_dtype)
    assert tuning.lookup(torch.device("cuda", 0), key) == best
    x, flt = (torch.randn(s, device="cuda") for s in (x_shape, filter_shape))
    (qx, sx), (qf, sf) = cute_conv.quantize_fp8(x), cute_conv.quantize_fp8(flt)
    chosen = tuning.stored_or_tuned_config(
        problem, problem, qx, filter_shape, out_dtype,
        make_runner=cute_conv.dispatch.config_runner,
    )  # fmt: skip
    assert chosen == best  # what a call with config=None runs
    out_scale = torch.ones((), device="cuda") if out_dtype == e4m3 else None
    y = cute_conv.conv2d_fprop(qx, qf, padding=1, x_scale=sx, w_scale=sf, out_dtype=out_dtype,
                               out_scale=out_scale)  # fmt: skip
    assert y.dtype == out_dtype and not y.float().isnan().any()


def test_small_m_convs_take_narrow_unsplit_tiles():
    """``small_m_config``: a conv of a few 128-row tiles along M (ResNet-50's 1x1 at batch 1,
    7x7, C=2048, K=512) runs 32-wide tiles on single CTAs without a split, where the
    heuristic alone splits 64-wide tiles, plain, fused or fp8; calls without a config take it
    for unstaged and gathered convs (``heuristic_config``, then with 64-row tiles:
    ``single_warpgroup_config``), not for channel-padded ones."""
    from cute_conv.small_grid_rules import single_warpgroup_config, small_m_config
    from cute_conv.untuned import heuristic_config

    problem = Conv2dProblemShape.from_shapes((1, 7, 7, 2048), (512, 1, 1, 2048))
    heuristic = default_config(problem)
    assert heuristic.tile_n == 64 and heuristic.stream_k
    narrow = small_m_config(heuristic, problem)
    assert (narrow.tile_m, narrow.tile_n, narrow.cluster_m, narrow.cluster_n) == (128, 32, 1, 1)
    assert not narrow.stream_k and narrow.stream_k_split == 0 and not narrow.pingpong
    assert heuristic_config(problem, 132) == single_warpgroup_config(narrow, problem)
    fused = heuristic_config(problem, 132, has_residual=True)
    assert (fused.tile_n, fused.stream_k, fused.pingpong) == (32, False, False)
    fp8 = heuristic_config(problem, 132, element_bytes=1)
    assert (fp8.tile_n, fp8.tile_k, fp8.cluster_n, fp8.stream_k) == (32, 128, 1, False)
    # Where it lost (more than a wave) or was not measured (fp8 with a residual): the
    # heuristic's config stands.
    assert small_m_config(heuristic, problem, num_sms=8) == heuristic
    fp8_fused = default_config(problem, has_residual=True, element_bytes=1)
    assert small_m_config(fp8_fused, problem, has_residual=True, element_bytes=1) == fp8_fused
    others = {
        "4 M tiles": Conv2dProblemShape.from_shapes((8, 7, 7, 2048), (512, 1, 1, 2048)),
        "deep 3x3": Conv2dProblemShape.from_shapes((1, 7, 7, 512), (512, 3, 3, 512), padding=1),
        "K < 128": Conv2dProblemShape.from_shapes((1, 7, 7, 512), (96, 1, 1, 512)),
    }
    for name, other in others.items():
        config = default_config(other)
        assert small_m_config(config, other) == config, name
    # Odd C: gathered (RegNet's SE conv at batch 8), narrow with its gather kept (on tensor
    # cores: a call takes the CUDA-core kernel there, gemv_rule).
    odd = Conv2dProblemShape.from_shapes((8, 1, 1, 222), (888, 1, 1, 222))
    gathered = heuristic_config(odd, 132, cuda_cores=False)
    assert gathered.gather and gathered.gather_vector == 2 and gathered.tile_n == 32
    # Channel-padded (too many gather loads): not measured, so the heuristic's config, which
    # the rule would have narrowed.
    padded = Conv2dProblemShape.from_shapes(
        (1, 21, 46, 114), (266, 3, 3, 114), padding=((1, 1), (0, 1)), stride=3
    )
    staged = heuristic_config(padded, 132)
    kernel_problem = channels_padded(padded)
    heuristic_staged = default_config(kernel_problem)
    assert not staged.gather
    assert staged == single_warpgroup_config(heuristic_staged, kernel_problem)
    assert small_m_config(heuristic_staged, padded).tile_n == 32 != heuristic_staged.tile_n
    with pytest.raises(TypeError, match="config must be a Conv2dConfig"):
        small_m_config("128x32", problem)
    with pytest.raises(ValueError, match="num_sms"):
        small_m_config(heuristic, problem, num_sms=0)


# ---- wide split tiles (default_config, wide_split_shape) ----


@pytest.mark.parametrize(
    "prob,wide,shape",
    [
        # SDXL's batch-1 3x3 at 32x32: 112 data-parallel tiles of 128x96 before; 20 clusters of
        # 2x1 128x256 tiles, 360 k-tiles each, split 3 ways on 66 clusters. 40 128x128 tiles
        # split 3 ways would not fit 132 SMs, 2 ways leave a CTA fewer k-tiles than a split
        # needs: the wide tiles stay.
        pytest.param(
            problem(1, 32, 2560, 1280, 3, padding=1), (128, 256, 3), (128, 256, 3), id="sdxl-3x3"
        ),
        pytest.param(
            problem(1, 65, 2048, 256, 3, padding=12, dilation=12), (128, 256, 3), (128, 256, 3),
            id="dilated",
        ),
        # 128x128 tiles split too: they run, split fewer ways (benchmarks/sweep_square_split.py).
        pytest.param(
            problem(8, 8, 2560, 1280, 3, padding=1), (128, 256, 6), (128, 128, 3), id="batch-8"
        ),
        pytest.param(
            problem(1, 32, 1280, 640, 3, padding=1), (128, 256, 4), (128, 128, 3), id="sd-k640"
        ),
        # K=320 pads a 256-wide tile by 60%, a 128-wide one by 20%.
        pytest.param(
            problem(1, 48, 1280, 320, 3, padding=1), (256, 128, 4), (128, 128, 2), id="k320"
        ),
    ],
)
def test_wide_split_tiles_for_long_data_parallel_mainloops(prob, wide, shape):
    assert wide_split_shape(prob, square_min_k_tiles=math.inf) == wide
    assert wide_split_shape(prob) == shape
    config = default_config(prob)
    tile_m, tile_n, split = shape
    assert (config.tile_m, config.tile_n, config.stream_k, config.stream_k_split) == (
        tile_m, tile_n, True, split,
    )  # fmt: skip
    assert config == split_tile_config(prob, *shape)
    unsquared = default_config(prob, square_split_min_k_tiles=math.inf)
    assert unsquared == split_tile_config(prob, *wide)
    rule_free = default_config(prob, wide_split=False)
    assert not rule_free.stream_k and rule_free.tile_n < 256
    # Fused 16-bit calls take it too (benchmarks/sweep_fused_wide_split.py); fp8 calls were
    # not measured and keep the wave-cost choice, as fused calls without the switch do.
    assert default_config(prob, has_residual=True) == config
    for other in (
        default_config(prob, has_residual=True, wide_split_residual=False),
        default_config(prob, element_bytes=1),
    ):
        assert (other.tile_m, other.tile_n) != (tile_m, tile_n) or not other.stream_k


def test_square_split_tiles_from_their_fitted_bound():
    # SD's batch-1 32x32 3x3 of C=960: 135 k-tiles, below the wide split's bound; 40 tiles of
    # 128x128 split 3 ways fit the SMs.
    prob = problem(1, 32, 960, 640, 3, padding=1)
    assert wide_split_shape(prob, square_min_k_tiles=math.inf) is None
    assert wide_split_shape(prob) == (128, 128, 3)
    assert default_config(prob) == split_tile_config(prob, 128, 128, 3)
    assert not default_config(prob, square_split_min_k_tiles=136).stream_k
    # C=512: 72 k-tiles, below the bound (they lost there).
    assert wide_split_shape(problem(1, 32, 512, 640, 3, padding=1)) is None


@pytest.mark.parametrize(
    "prob,splits_already",
    [
        pytest.param(problem(1, 32, 512, 640, 3, padding=1), False, id="72-k-tiles"),
        pytest.param(problem(1, 32, 2560, 1280, 1), False, id="pointwise"),
        pytest.param(problem(64, 32, 2560, 1280, 3, padding=1), False, id="no-split-fits"),
        # The heuristic splits 64-wide tiles already: the wide tiles lost there.
        pytest.param(problem(1, 16, 2560, 1280, 3, padding=1), True, id="split-already"),
    ],
)
def test_no_wide_split_below_the_fitted_mainloop_or_where_no_split_fits(prob, splits_already):
    assert (wide_split_shape(prob) is not None) == splits_already
    config = default_config(prob)
    assert config == default_config(prob, wide_split=False)
    assert config.stream_k == splits_already


def test_wide_split_shape_checks_its_arguments():
    with pytest.raises(TypeError, match="problem must be a Conv2dProblemShape"):
        wide_split_shape("3x3")
    with pytest.raises(ValueError, match="num_sms must be >= 1"):
        wide_split_shape(problem(1, 32, 2560, 1280, 3, padding=1), 0)
    with pytest.raises(TypeError, match="problem must be a Conv2dProblemShape"):
        split_tile_config(None, 128, 256)
    with pytest.raises(TypeError, match="min_k_tiles must be a number"):
        wide_split_shape(problem(1, 32, 2560, 1280, 3, padding=1), min_k_tiles="180")
    with pytest.raises(TypeError, match="wide_split must be a bool"):
        default_config(problem(1, 32, 2560, 1280, 3, padding=1), wide_split=1)
    with pytest.raises(TypeError, match="square_min_k_tiles must be a number"):
        wide_split_shape(problem(8, 8, 2560, 1280, 3, padding=1), square_min_k_tiles="90")
    with pytest.raises(TypeError, match="square_split_min_k_tiles must be None or a number"):
        default_config(problem(8, 8, 2560, 1280, 3, padding=1), square_split_min_k_tiles=True)


# ---- half-step tile widths (default_config, half_step_widths) ----


def test_half_step_widths_pad_k_less_than_the_whole_step():
    assert half_step_widths(1280, 96) == (48, 80, 144)  # 1344 columns at 96 wide; 80 fits 1280
    assert half_step_widths(320, 96) == (48, 80, 112, 176)  # 384 columns at 96 wide
    assert half_step_widths(819, 224) == (48, 80, 144, 176, 208)  # 896 at 224 wide
    assert half_step_widths(1024, 128) == ()  # 128 divides K: nothing pads less
    with pytest.raises(ValueError, match="whole_width must be a positive int"):
        half_step_widths(1280, 0)
    with pytest.raises(ValueError, match="k must be a positive int"):
        half_step_widths(True, 96)


@pytest.mark.parametrize(
    "prob,whole,half",
    [
        # SDXL's 1x1 C=2560 at 32x32 (40 k-tiles): 112 tiles of 128x96 -> 128 of 128x80.
        pytest.param(problem(1, 32, 2560, 1280, 1), 96, 80, id="sdxl-1x1"),
        # SD's 3x3 K=320 at 64x64: 4 N tiles either way, 80 wide without padding.
        pytest.param(problem(1, 64, 320, 320, 3, padding=1), 96, 80, id="sd-3x3-k320"),
        # K=819 (FPN-like): 208 pads 1.6%, 224 9%.
        pytest.param(problem(8, 50, 256, 819, 3, padding=1), 224, 208, id="k819"),
    ],
)
def test_16_bit_convs_take_half_steps_on_long_mainloops(prob, whole, half):
    assert default_config(prob).tile_n == half
    assert default_config(prob, has_residual=True).tile_n == half  # 18+ k-tiles
    assert default_config(prob, half_step_min_k_tiles=math.inf).tile_n == whole
    assert default_config(prob, element_bytes=1).tile_n == half  # 12+ fp8 k-tiles
    # fp8 with a residual and 8-bit outputs were not measured with half steps.
    assert default_config(prob, element_bytes=1, has_residual=True).tile_n % 32 == 0
    assert default_config(prob, element_bytes=1, out_bytes=1).tile_n == whole


def test_no_half_steps_below_the_fitted_mainloop_or_on_short_k_tiles():
    # C=320 1x1: 5 k-tiles, under HALF_STEP_MIN_K_TILES; a half step only past the bound.
    short = problem(1, 64, 320, 320, 1)
    assert default_config(short).tile_n == 96
    assert default_config(short, half_step_min_k_tiles=0).tile_n == 80
    # C=640 1x1 (10 k-tiles) at K=320: a half step plain, a whole step with a residual.
    between = problem(1, 64, 640, 320, 1)
    assert default_config(between).tile_n == 80
    assert default_config(between, has_residual=True).tile_n == 96
    # C=16 3x3: 9 k-tiles of 16 channels (32 bytes) leave the filter ring unaligned.
    narrow_k = problem(8, 64, 16, 320, 3, padding=1)
    assert default_config(narrow_k, half_step_min_k_tiles=0).tile_n % 32 == 0
    with pytest.raises(TypeError, match="half_step_min_k_tiles must be None or a number"):
        default_config(short, half_step_min_k_tiles="9")


def test_half_step_tiles_reject_what_they_cannot_run():
    import cutlass

    with pytest.raises(ValueError, match="needs k-tiles of at least 64 bytes"):
        Conv2dConfig(tile_n=80, tile_k=16).plan(cutlass.BFloat16, cutlass.BFloat16, False)
    plan = Conv2dConfig(tile_n=80).plan(cutlass.BFloat16, cutlass.BFloat16, False)
    assert plan.epi_n == 16
    # 8-bit outputs too (tests/test_epilogue_r2s_copy.py, test_half_step_tiles_sm90.py).
    e4m3 = cutlass.Float8E4M3FN
    assert Conv2dConfig(tile_n=80, tile_k=128).plan(e4m3, e4m3, False).epi_n == 16


def test_calls_with_8_bit_outputs_keep_whole_steps():
    from cute_conv.untuned import heuristic_config

    sdxl = problem(1, 32, 2560, 1280, 1)
    assert heuristic_config(sdxl, 132).tile_n == 80
    assert heuristic_config(sdxl, 132, out_bytes=4).tile_n == 80  # float32 output
    assert heuristic_config(sdxl, 132, out_bytes=1).tile_n == 96  # e4m3 output
    assert default_config(sdxl, out_bytes=1).tile_n == 96
    with pytest.raises(ValueError, match="out_bytes must be one of"):
        default_config(sdxl, out_bytes=3)


def test_sub_wave_convs_take_64_row_tiles():
    """``single_warpgroup_config``: where 128-row tiles fill less than a wave and 64-row ones
    of the same width still fit one, with at most ``SINGLE_WARPGROUP_MAX_K_TILES`` k-tiles,
    a call without a config runs 64-row tiles; a stream-K split is dropped for them."""
    from cute_conv.small_grid_rules import SINGLE_WARPGROUP_MAX_K_TILES, single_warpgroup_config
    from cute_conv.untuned import heuristic_config

    # Batch 8 at 14x14, 3x3 s2, C=256 -> K=512 (ResNet's stride-2 3x3): the heuristic splits
    # 32 tiles of 128x64 four ways (36 k-tiles each).
    problem = Conv2dProblemShape.from_shapes((8, 14, 14, 256), (512, 3, 3, 256), padding=1,
                                             stride=2)  # fmt: skip
    heuristic = default_config(problem)
    assert (heuristic.tile_m, heuristic.tile_n, heuristic.stream_k_split) == (128, 64, 4)
    single = single_warpgroup_config(heuristic, problem)
    assert (single.tile_m, single.tile_n, single.cluster_m, single.cluster_n) == (64, 64, 1, 1)
    assert not single.stream_k and single.stream_k_split == 0 and not single.dynamic_schedule
    # A plain call then shares each activation tile among 4 CTAs (56 tiles of 64x64: 14 1x4
    # clusters on 42% of the SMs, wide_cluster_config); a fused one keeps single CTAs.
    assert heuristic_config(problem, 132) == replace(single, cluster_n=4)
    assert heuristic_config(problem, 132, has_residual=True).cluster_shape_mn == (1, 1)
    # Unsplit: only the rows change, its cluster kept.
    unsplit = replace(heuristic, stream_k=False, stream_k_split=0, cluster_n=2)
    assert single_warpgroup_config(unsplit, problem) == replace(unsplit, tile_m=64)
    # Declined: past the bound, with 64-row tiles over a wave, and for other tile heights.
    assert single_warpgroup_config(heuristic, problem, max_k_tiles=35) == heuristic
    assert single_warpgroup_config(heuristic, problem, max_k_tiles=0) == heuristic
    assert single_warpgroup_config(heuristic, problem, num_sms=55, widen_max_k_tiles=0) == heuristic
    tall = replace(heuristic, tile_m=256)
    assert single_warpgroup_config(tall, problem) == tall
    deep = Conv2dProblemShape.from_shapes((1, 8, 8, 2560), (1280, 3, 3, 2560), padding=1)
    deep_config = default_config(deep)
    _, k_tiles = schedule_shape(deep, deep_config.tile_m, deep_config.tile_n, deep_config.tile_k)
    assert k_tiles > SINGLE_WARPGROUP_MAX_K_TILES
    assert single_warpgroup_config(deep_config, deep) == deep_config
    with pytest.raises(TypeError, match="config must be a Conv2dConfig"):
        single_warpgroup_config("128x64", problem)
    for bad in (-1, "72", True, float("nan")):
        with pytest.raises(ValueError, match="max_k_tiles must be a number >= 0"):
            single_warpgroup_config(heuristic, problem, max_k_tiles=bad)
    with pytest.raises(ValueError, match="num_sms"):
        single_warpgroup_config(heuristic, problem, num_sms=0)


def test_sub_wave_convs_take_wider_64_row_tiles_where_their_own_width_overfills():
    """Where 64-row tiles of the config's width are more than a wave, a plain 16-bit conv
    of at most ``widen_max_k_tiles`` k-tiles takes 64-row tiles of the narrowest wider width
    (below twice it, half steps included) that fit one; not with a residual, 8-bit inputs,
    past the bound or where no width fits."""
    from cute_conv.small_grid_rules import single_warpgroup_config, widened_single_warpgroup_width
    from cute_conv.untuned import heuristic_config

    # SDXL's batch-1 1x1 of C=960 -> K=640 at 32x32: 80 tiles of 128x64 (1x2), 160 at 64 rows.
    problem = Conv2dProblemShape.from_shapes((1, 32, 32, 960), (640, 1, 1, 960))
    config = default_config(problem)
    assert (config.tile_m, config.tile_n, config.cluster_n, config.stream_k) == (128, 64, 2, False)
    assert widened_single_warpgroup_width(problem, 64, config.tile_k) == 80  # 128 tiles
    assert widened_single_warpgroup_width(problem, 64, config.tile_k, num_sms=100) == 112  # 96
    assert widened_single_warpgroup_width(problem, 64, config.tile_k, num_sms=80) is None  # 80 fill it
    # 16-channel k-tiles take no half steps: 96 (112 tiles).
    assert widened_single_warpgroup_width(problem, 64, 16) == 96
    wide = single_warpgroup_config(config, problem, widen_max_k_tiles=math.inf)
    assert (wide.tile_m, wide.tile_n, wide.cluster_m, wide.cluster_n) == (64, 80, 1, 2)
    assert not wide.stream_k and not wide.pingpong and wide.tile_w == 0
    assert single_warpgroup_config(config, problem, widen_max_k_tiles=14) == config  # 15 k-tiles
    assert single_warpgroup_config(config, problem, widen_max_k_tiles=15) == wide
    # The fitted bounds take it, on single CTAs: 128 tiles fill one wave (the lone-CTA rule).
    assert heuristic_config(problem, 132) == replace(wide, cluster_n=1)
    assert single_warpgroup_config(config, problem, widen_max_share=0.6) == config  # 80/128
    for form in (dict(has_residual=True), dict(element_bytes=1)):
        assert single_warpgroup_config(config, problem, widen_max_k_tiles=math.inf, **form) == config
    # A gathered config keeps single CTAs; the 64-row rule's own bound still applies.
    gathered = replace(config, cluster_n=1, gather=True, gather_vector=4)
    wide_gathered = single_warpgroup_config(gathered, problem, widen_max_k_tiles=math.inf)
    assert (wide_gathered.tile_n, wide_gathered.cluster_n) == (80, 1)
    assert single_warpgroup_config(config, problem, max_k_tiles=14, widen_max_k_tiles=math.inf) == config
    for bad in (-1, "8", True):
        with pytest.raises(ValueError, match="widen_max_k_tiles must be a number >= 0"):
            single_warpgroup_config(config, problem, widen_max_k_tiles=bad)
    with pytest.raises(TypeError, match="widen_max_share must be None or a number"):
        single_warpgroup_config(config, problem, widen_max_share="0.8")


def test_64_row_autotuning_candidates_only_where_they_fit_a_wave():
    """The autotuner times 64-row tiles, unsplit, where they fit one wave (as
    ``single_warpgroup_config`` takes them), and none on a conv of many tiles."""
    small = Conv2dProblemShape.from_shapes((8, 14, 14, 256), (512, 3, 3, 256), padding=1,
                                           stride=2)  # fmt: skip
    candidates = tuning.candidate_configs(small)
    single = [c for c in candidates if c.tile_m == 64]
    assert single and not any(c.stream_k for c in single)
    for c in single:
        assert schedule_shape(small, 64, c.tile_n, c.tile_k)[0] <= 132
    assert any(c.stream_k for c in candidates if c.tile_m == 128)  # the heuristic's split kept
    large = Conv2dProblemShape.from_shapes((32, 56, 56, 64), (64, 3, 3, 64), padding=1)
    assert not any(c.tile_m == 64 for c in tuning.candidate_configs(large))
