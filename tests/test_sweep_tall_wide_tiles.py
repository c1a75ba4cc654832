"""The 128-wide tall-tile sweep's CPU parts (benchmarks/sweep_tall_wide_tiles.py): which
problems and configs it measures, that the committed rows are that selection with every
config passed its check, and that each GPU's fit gives ``default_config``'s bound."""

from __future__ import annotations

import json
import math

import pytest
import sweep_tall_wide_tiles as sweep
from bench_corpus import load_corpus, problem_shape
from bound_sweep_rows import check_committed_rows
from sweep_rows import passed_rows

from cute_conv import Conv2dProblemShape, config


def test_the_selection_is_128x128_tiles_of_stride_1_multi_tap_convs_made_256_rows():
    chosen = sweep.tall_wide_problems(load_corpus())
    assert len(chosen) >= 9
    for p in chosen:
        problem = problem_shape(p)
        assert problem.stride == (1, 1) and problem.R * problem.S > 1
        configs = sweep.configs_of(problem)
        base, tall = configs[sweep.SWEEP.baseline], configs[sweep.SWEEP.variant]
        assert (base.tile_m, tall.tile_m, base.tile_n, tall.tile_n) == (128, 256, 128, 128)


def test_the_fused_selection_is_the_plain_one_with_a_residual():
    """Calls with a residual keep 128 rows (``_MIN_WAVES_TALL_WIDE_FUSED``): the fused form
    measures the same convs at 256 rows."""
    corpus = load_corpus()
    plain = sweep.tall_wide_problems(corpus)
    fused = sweep.tall_wide_problems(corpus, "fused")
    assert [p["key"] for p in fused] == [p["key"] for p in plain]
    for p in fused:
        configs = sweep.configs_of(problem_shape(p), "fused")
        base, tall = configs[sweep.SWEEP.baseline], configs[sweep.SWEEP.variant]
        assert (base.tile_m, tall.tile_m, base.tile_n, tall.tile_n) == (128, 256, 128, 128)
        assert config.default_config(problem_shape(p), has_residual=True) == base


@pytest.mark.parametrize("path", sweep.GPU_PATHS, ids=["H200", "H100"])
def test_committed_rows_are_the_selection_and_every_config_passed(path):
    rows = json.loads(path.read_text())["rows"]
    check_committed_rows(sweep.SWEEP, sweep.tall_wide_problems(load_corpus()), rows, "plain")


@pytest.mark.parametrize("path", sweep.GPU_PATHS, ids=["H200", "H100"])
def test_each_gpus_fit_gives_the_plain_bound(path):
    assert sweep.SWEEP.fit("plain", path) == config._MIN_WAVES_TALL_WIDE


def test_committed_fused_rows_are_the_selection_and_no_bound_gains_on_train():
    """The fit's bound (the middle of the grid's ties) takes no train conv: every bound that
    takes one scores below 1, so calls with a residual keep 128 rows (math.inf)."""
    path = sweep.RESULTS_PATHS["fused"]
    results = json.loads(path.read_text())
    check_committed_rows(sweep.SWEEP, sweep.tall_wide_problems(load_corpus(), "fused"),
                         results["rows"], "fused")  # fmt: skip
    train = [r for r in passed_rows(results) if r["split"] == "train"]
    fitted = sweep.SWEEP.fit("fused", path)
    assert all(sweep.SWEEP.chosen_name(r, fitted, "fused") == sweep.SWEEP.baseline for r in train)
    assert config._MIN_WAVES_TALL_WIDE_FUSED == math.inf


def test_committed_fp8_rows_are_the_selection_and_the_fit_gives_the_fp8_bound():
    path = sweep.RESULTS_PATHS["fp8"]
    rows = json.loads(path.read_text())["rows"]
    check_committed_rows(sweep.SWEEP, sweep.tall_wide_problems(load_corpus(), "fp8"), rows, "fp8")
    assert sweep.SWEEP.fit("fp8", path) == config._MIN_WAVES_TALL_WIDE_FP8


def test_only_plain_stride_1_multi_tap_convs_take_256_rows_at_128_wide():
    # VGG's batch-128 112x112 3x3, C=64 -> K=128: 47.5 waves of 256-row tiles.
    problem = Conv2dProblemShape.from_shapes((128, 112, 112, 64), (128, 3, 3, 64), padding=1)
    plain = config.default_config(problem)
    assert (plain.tile_m, plain.tile_n) == (256, 128)
    assert config.default_config(problem, has_residual=True).tile_m == 128
    # fp8 at C=128 (full 128-byte k-tiles; at C=64 its short ones take 256 rows anyway): 256
    # rows from 6 waves (47.5 here), not with a residual, not at 2.97 waves (r50-c3-3x3).
    wide_c = Conv2dProblemShape.from_shapes((128, 112, 112, 128), (128, 3, 3, 128), padding=1)
    assert config.default_config(wide_c).tile_m == 256
    assert config.default_config(wide_c, element_bytes=1).tile_m == 256
    assert config.default_config(wide_c, element_bytes=1, has_residual=True).tile_m == 128
    r50_c3 = Conv2dProblemShape.from_shapes((128, 28, 28, 128), (128, 3, 3, 128), padding=1)
    assert config.default_config(r50_c3, element_bytes=1).tile_m == 128
    assert config.default_config(problem, min_waves_tall_wide=48).tile_m == 128
    strided = Conv2dProblemShape.from_shapes(
        (128, 224, 224, 64), (128, 3, 3, 64), padding=1, stride=2
    )
    assert config.default_config(strided).tile_m == 128
    pointwise = Conv2dProblemShape.from_shapes((128, 112, 112, 64), (128, 1, 1, 64))
    assert config.default_config(pointwise).tile_m == 128
    with pytest.raises(TypeError, match="min_waves_tall_wide must be None or a number of waves"):
        config.default_config(problem, min_waves_tall_wide="6")
