"""The upper k-tile bound of ping-pong tiles (``default_config``'s ``pingpong_max_k_tiles``, no
bound by default) and the CPU parts of its sweep (benchmarks/sweep_pingpong_k_tiles.py):
which problems and configs it measures, and that without measured rows the fit says so."""

from __future__ import annotations

import math

import pytest
import sweep_pingpong_k_tiles as sweep
from bench_corpus import load_corpus
from bound_sweep_rows import selected_configs

from cute_conv import Conv2dProblemShape
from cute_conv.config import PINGPONG_MAX_K_TILES, default_config, pingpong_pays
from cute_conv.untuned import heuristic_config

# A 1x1 of C=1024 (16 k-tiles of 64 channels) at batch 128 on 14x14 maps, K=512.
LONG_1X1 = Conv2dProblemShape.from_shapes((128, 14, 14, 1024), (512, 1, 1, 1024))


def test_the_selection_is_every_fused_call_on_pingpong_tiles():
    chosen = sweep.pingpong_problems(load_corpus(), "fused")
    assert len(chosen) >= 50
    for problem, without, today in selected_configs(sweep.SWEEP, chosen, "fused"):
        # The variant is what a fused call without a config runs today.
        assert today == heuristic_config(problem, 132, has_residual=True) and today.pingpong
        assert not without.pingpong


def test_the_bound_keeps_pingpong_to_short_mainloops():
    assert PINGPONG_MAX_K_TILES == math.inf  # no bound until the sweep fits one
    assert default_config(LONG_1X1, 132, has_residual=True).pingpong
    assert pingpong_pays(LONG_1X1, 64, 132, max_k_tiles=16)
    assert not pingpong_pays(LONG_1X1, 64, 132, max_k_tiles=15)
    bounded = default_config(LONG_1X1, 132, has_residual=True, pingpong_max_k_tiles=15)
    assert not bounded.pingpong
    assert bounded == default_config(LONG_1X1, 132, has_residual=True, pingpong_max_k_tiles=0)


def test_the_fit_without_measured_rows_says_so(tmp_path):
    with pytest.raises(SystemExit, match="no measured train rows"):
        sweep.SWEEP.fit("fused", tmp_path / "none.json")


def test_the_bound_is_checked():
    with pytest.raises(TypeError, match="pingpong_max_k_tiles must be None or a number"):
        default_config(LONG_1X1, 132, has_residual=True, pingpong_max_k_tiles="16")
