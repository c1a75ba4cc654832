"""Wide split tiles for residual calls (``default_config``'s ``wide_split_residual``) and their
sweep (benchmarks/sweep_fused_wide_split.py): which problems and configs it measures, that the
committed rows are them and fit the plain calls' bound, and that without measured rows the fit
says so."""

from __future__ import annotations

import json
import math

import pytest
import sweep_fused_wide_split as sweep
from bench_corpus import load_corpus
from bound_sweep_rows import check_committed_rows, selected_configs

from cute_conv import Conv2dProblemShape
from cute_conv.config import (
    WIDE_SPLIT_MIN_K_TILES,
    default_config,
    split_tile_config,
    wide_split_shape,
)
from cute_conv.schedule import schedule_shape
from cute_conv.small_grid_rules import lone_cta_config
from cute_conv.untuned import heuristic_config

# SD 1.5's UNet 3x3 at batch 8 on 8x8 maps, C=2560, K=1280: 360 k-tiles per tile.
SD_8X8 = Conv2dProblemShape.from_shapes((8, 8, 8, 2560), (1280, 3, 3, 2560), padding=1)


def test_the_selection_is_fused_calls_made_wide_splits():
    chosen = sweep.fused_wide_split_problems(load_corpus(), "fused")
    assert len(chosen) >= 10
    for problem, own, wide in selected_configs(sweep.SWEEP, chosen, "fused"):
        # What a fused call without a config runs: the wide split from the fitted bound.
        k_tiles = schedule_shape(problem, wide.tile_m, wide.tile_n, wide.tile_k)[1]
        today = wide if k_tiles >= WIDE_SPLIT_MIN_K_TILES else own
        square = wide_split_shape(problem, 132)
        if square is not None and square[:2] == (128, 128):
            # Since the sweep: 128x128 tiles where they split (sweep_square_split.py).
            today = split_tile_config(problem, *square)
        # Since the sweep too: single CTAs for a wave or less (sweep_lone_cta.py).
        today = lone_cta_config(today, problem, has_residual=True)
        assert today == heuristic_config(problem, 132, has_residual=True) and not own.stream_k
        assert (wide.tile_m, wide.tile_n) in ((128, 256), (256, 128))
        assert wide.stream_k and wide.stream_k_split >= 2
        assert wide_split_shape(problem, 132, sweep.SELECTED, math.inf) == (
            wide.tile_m, wide.tile_n, wide.stream_k_split,
        )  # fmt: skip
        assert schedule_shape(problem, wide.tile_m, wide.tile_n, wide.tile_k)[1] >= sweep.SELECTED


def test_committed_rows_are_the_selection_and_every_config_passed():
    rows = json.loads(sweep.RESULTS_PATHS["fused"].read_text())["rows"]
    chosen = sweep.fused_wide_split_problems(load_corpus(), "fused")
    check_committed_rows(sweep.SWEEP, chosen, rows, "fused")


def test_the_committed_rows_fit_the_plain_calls_bound():
    assert sweep.SWEEP.fit("fused", sweep.RESULTS_PATHS["fused"]) == WIDE_SPLIT_MIN_K_TILES


def test_fused_calls_take_the_wide_split_unless_the_switch_is_off():
    unsquared = {"square_split_min_k_tiles": math.inf}  # as the sweep measured it
    plain = default_config(SD_8X8, 132, **unsquared)
    assert (plain.tile_m, plain.tile_n, plain.stream_k) == (128, 256, True)
    assert default_config(SD_8X8, 132, has_residual=True, **unsquared) == plain
    own = default_config(SD_8X8, 132, has_residual=True, wide_split_residual=False)
    assert own.tile_n < 256 and not own.stream_k
    # The bound: past the tile's 360 k-tiles neither form takes the wide split.
    assert not default_config(SD_8X8, 132, wide_split_min_k_tiles=361, **unsquared).stream_k
    assert WIDE_SPLIT_MIN_K_TILES <= 360


def test_the_fit_without_measured_rows_says_so(tmp_path):
    with pytest.raises(SystemExit, match="no measured train rows"):
        sweep.SWEEP.fit("fused", tmp_path / "none.json")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(wide_split_residual=1), "wide_split_residual must be a bool, got 1"),
        (dict(wide_split_min_k_tiles="180"), "wide_split_min_k_tiles must be None or a number"),
    ],
)
def test_the_switch_and_the_bound_are_checked(kwargs, message):
    with pytest.raises(TypeError, match=message):
        default_config(SD_8X8, 132, **kwargs)
