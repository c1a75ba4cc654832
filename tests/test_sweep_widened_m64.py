"""The widened 64-row tiles' sweep's CPU parts (benchmarks/sweep_widened_m64.py): which
problems and configs it measures, that each GPU's committed rows are that selection with
every config passed its check, and that the joint fit over both GPUs gives the rule's bounds."""

from __future__ import annotations

import json

import pytest
import sweep_widened_m64 as sweep
from bench_corpus import load_corpus, problem_shape
from bound_sweep_rows import check_committed_rows

from cute_conv import small_grid_rules


def test_the_selection_is_128_row_tiles_widened_at_64_rows():
    chosen = sweep.widened_problems(load_corpus())
    assert len(chosen) > 40
    for p in chosen:
        configs = sweep.configs_of(problem_shape(p))
        base, wide = configs[sweep.SWEEP.baseline], configs[sweep.SWEEP.variant]
        assert (base.tile_m, wide.tile_m) == (128, 64)
        assert base.tile_n < wide.tile_n < 2 * base.tile_n
        assert not wide.stream_k and wide.tile_w == 0


@pytest.mark.parametrize("path", sweep.JOINT_PATHS, ids=["H200", "H100"])
def test_committed_rows_are_the_selection_and_every_config_passed(path):
    rows = json.loads(path.read_text())["rows"]
    selected = sweep.widened_problems(load_corpus())
    check_committed_rows(sweep.SWEEP, selected, rows, "plain")


def test_the_joint_fit_gives_the_rules_bounds():
    bounds = (
        small_grid_rules.SINGLE_WARPGROUP_WIDEN_MAX_K_TILES, small_grid_rules.SINGLE_WARPGROUP_WIDEN_MAX_SHARE,
    )  # fmt: skip
    assert sweep.SWEEP.joint_fit("plain", sweep.JOINT_PATHS) == bounds
