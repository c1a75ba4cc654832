"""The upper k-tile bound of ping-pong tiles (``default_config``'s ``pingpong_max_k_tiles``,
``PINGPONG_MAX_K_TILES``) and its sweep (benchmarks/sweep_pingpong_k_tiles.py): which problems
and configs it measures, that the committed rows are them and fit the bound, and that without
measured rows the fit says so."""

from __future__ import annotations

import json
import math

import pytest
import sweep_pingpong_k_tiles as sweep
from bench_corpus import load_corpus
from bound_sweep_rows import check_committed_rows, selected_configs

from cute_conv import Conv2dProblemShape
from cute_conv.config import PINGPONG_MAX_K_TILES, default_config, pingpong_pays

# A 1x1 of C=1024 (16 k-tiles of 64 channels) at batch 128 on 14x14 maps, K=512.
LONG_1X1 = Conv2dProblemShape.from_shapes((128, 14, 14, 1024), (512, 1, 1, 1024))


def test_the_selection_is_every_fused_call_on_unbounded_pingpong_tiles():
    chosen = sweep.pingpong_problems(load_corpus(), "fused")
    assert len(chosen) >= 50
    for problem, without, unbounded in selected_configs(sweep.SWEEP, chosen, "fused"):
        assert unbounded.pingpong and not without.pingpong
        # What a fused call without a config runs: ping-pong up to the fitted bound.
        k_tiles = math.ceil(problem.C / unbounded.tile_k)
        today = without if k_tiles > PINGPONG_MAX_K_TILES else unbounded
        assert sweep.SWEEP.config_for(problem, PINGPONG_MAX_K_TILES, "fused") == today


def test_committed_rows_are_the_selection_and_every_config_passed():
    rows = json.loads(sweep.RESULTS_PATHS["fused"].read_text())["rows"]
    check_committed_rows(sweep.SWEEP, sweep.pingpong_problems(load_corpus(), "fused"), rows, "fused")


def test_the_committed_rows_fit_the_bound():
    assert sweep.SWEEP.fit("fused", sweep.RESULTS_PATHS["fused"]) == PINGPONG_MAX_K_TILES


def test_the_bound_keeps_pingpong_to_short_mainloops():
    assert not default_config(LONG_1X1, 132, has_residual=True).pingpong  # 16 k-tiles
    assert default_config(LONG_1X1, 132, has_residual=True, pingpong_max_k_tiles=16).pingpong
    assert pingpong_pays(LONG_1X1, 64, 132, max_k_tiles=16)
    assert not pingpong_pays(LONG_1X1, 64, 132, max_k_tiles=15)
    bounded = default_config(LONG_1X1, 132, has_residual=True, pingpong_max_k_tiles=15)
    assert not bounded.pingpong
    assert bounded == default_config(LONG_1X1, 132, has_residual=True, pingpong_max_k_tiles=0)
    # C=512: 8 k-tiles, at the bound.
    short = Conv2dProblemShape.from_shapes((128, 14, 14, 512), (512, 1, 1, 512))
    assert default_config(short, 132, has_residual=True).pingpong


def test_the_fit_without_measured_rows_says_so(tmp_path):
    with pytest.raises(SystemExit, match="no measured train rows"):
        sweep.SWEEP.fit("fused", tmp_path / "none.json")


def test_the_bound_is_checked():
    with pytest.raises(TypeError, match="pingpong_max_k_tiles must be None or a number"):
        default_config(LONG_1X1, 132, has_residual=True, pingpong_max_k_tiles="16")


def test_the_tuner_still_times_pingpong_past_the_bound():
    from cute_conv.tuning import candidate_configs

    assert any(c.pingpong for c in candidate_configs(LONG_1X1, 132, has_residual=True))
