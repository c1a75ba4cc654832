"""The 1x4-cluster rule (``small_grid_rules.wide_cluster_config``) and its sweep's CPU parts
(benchmarks/sweep_wide_cluster.py): which problems and configs it measures, that the
committed rows are that selection with every config passed its check, that the joint fit
over both GPUs (and the H100's alone) gives the rule's bounds, and that the fused rows fit
none (the rule leaves fused calls alone)."""

from __future__ import annotations

import json

import pytest
import sweep_wide_cluster as sweep
from bench_corpus import load_corpus, problem_shape
from bound_sweep_rows import check_committed_rows

from cute_conv import Conv2dConfig, Conv2dProblemShape, small_grid_rules
from cute_conv.untuned import heuristic_config

# VGG-16's 3x3 at batch 1, 28x28, C=K=512: 13 M tiles x 8 N tiles of 64x64, 26 clusters of
# 1x4 on 104 of 132 SMs, 72 k-tiles.
VGG_3X3 = Conv2dProblemShape.from_shapes((1, 28, 28, 512), (512, 3, 3, 512), padding=1)


def test_the_selection_is_64_wide_tiles_made_1x4_clusters():
    chosen = sweep.wide_cluster_problems(load_corpus())
    assert len(chosen) >= 30
    for p in chosen:
        configs = sweep.configs_of(problem_shape(p))
        own, wide = configs[sweep.SWEEP.baseline], configs[sweep.SWEEP.variant]
        assert own.tile_n == wide.tile_n == 64 and wide.cluster_shape_mn == (1, 4)
        assert own.cluster_shape_mn != (1, 4) and not wide.stream_k


@pytest.mark.parametrize("form", sweep.FORMS)
@pytest.mark.parametrize("gpu", [0, 1], ids=["H100", "H200"])
def test_committed_rows_are_the_selection_and_every_config_passed(form, gpu):
    rows = json.loads(sweep.JOINT_PATHS[form][gpu].read_text())["rows"]
    selected = sweep.wide_cluster_problems(load_corpus(), form)
    check_committed_rows(sweep.SWEEP, selected, rows, form)


def test_the_fits_give_the_rules_bounds():
    bounds = (small_grid_rules.WIDE_CLUSTER_MIN_SHARE, small_grid_rules.WIDE_CLUSTER_MAX_SHARE)
    assert sweep.SWEEP.joint_fit("plain", sweep.JOINT_PATHS["plain"]) == bounds
    assert sweep.SWEEP.fit("plain", sweep.RESULTS_PATHS["plain"]) == bounds


def test_the_fused_rows_fit_no_bounds():
    # Why the rule ships take_residual off: no pair of bounds gains on both GPUs' fused rows.
    assert sweep.SWEEP.joint_fit("fused", sweep.JOINT_PATHS["fused"]) == sweep.OFF


def test_a_plain_call_of_the_vgg_3x3_takes_1x4_clusters():
    config = heuristic_config(VGG_3X3, 132)
    assert config.tile_n == 64 and config.cluster_shape_mn == (1, 4) and not config.stream_k
    assert small_grid_rules.wide_cluster_share(VGG_3X3, config.tile_m, 64) == 104 / 132


@pytest.mark.parametrize(
    "call", [dict(has_residual=True), dict(element_bytes=1)], ids=["fused", "fp8"]
)
def test_fused_and_fp8_calls_keep_their_clusters(call):
    assert heuristic_config(VGG_3X3, 132, **call).cluster_n != 4


def test_take_residual_gives_fused_calls_the_clusters():
    config = Conv2dConfig(tile_m=64, tile_n=64)
    taken = small_grid_rules.wide_cluster_config(
        config, VGG_3X3, has_residual=True, take_residual=True
    )
    assert taken.cluster_shape_mn == (1, 4)
    assert small_grid_rules.wide_cluster_config(config, VGG_3X3, has_residual=True) == config


def test_a_1x1_and_a_whole_gpu_of_clusters_keep_their_clusters():
    pointwise = Conv2dProblemShape.from_shapes((1, 28, 28, 512), (512, 1, 1, 512))
    base = Conv2dConfig(tile_m=64, tile_n=64)
    assert small_grid_rules.wide_cluster_config(base, pointwise) == base
    # 25 x 8 tiles of 64x64: 50 clusters, more than 132 SMs hold.
    big = Conv2dProblemShape.from_shapes((2, 28, 28, 512), (512, 3, 3, 512), padding=1)
    assert small_grid_rules.wide_cluster_config(base, big) == base
    assert small_grid_rules.wide_cluster_config(base, VGG_3X3).cluster_n == 4


def test_bounds_are_checked():
    with pytest.raises(TypeError, match="min_share must be None or a number of SM shares"):
        small_grid_rules.wide_cluster_config(Conv2dConfig(tile_n=64), VGG_3X3, min_share="0.5")
