"""The whole-source sweep's CPU parts (benchmarks/sweep_residual_source.py): which problems and
configs it measures, that each GPU's committed rows are all of them and every config passed its
check, and that the fit on the GPUs' rows together gives the rule's bound."""

from __future__ import annotations

import json

import pytest
import sweep_residual_source as sweep
from bench_corpus import load_corpus, problem_shape

from cute_conv import config
from tests.bound_sweep_rows import check_committed_rows


def test_the_selection_is_where_a_wide_residual_tile_keeps_three_stages():
    chosen = sweep.residual_source_problems(load_corpus(), "fused")
    assert chosen
    for p in chosen:
        configs = sweep.configs_of(problem_shape(p), "fused")
        part, whole = configs[sweep.PART], configs[sweep.WHOLE]
        assert part.stages == 0 and whole.stages == 3
        assert part.tile_m == whole.tile_m == 128 and part.tile_n == whole.tile_n > 192
    assert not sweep.residual_source_problems(load_corpus(), "plain")


@pytest.mark.parametrize("path", sweep.GPU_RESULTS, ids=["H200", "H100"])
def test_committed_rows_are_the_whole_selection_and_every_config_passed(path):
    selected = sweep.residual_source_problems(load_corpus(), "fused")
    check_committed_rows(sweep.SWEEP, selected, json.loads(path.read_text())["rows"], "fused")


RULE_BOUNDS = (config.WHOLE_SOURCE_MIN_TILES_PER_SM, config.WHOLE_SOURCE_MIN_GEMM_K)


def test_the_fit_on_the_h100_train_rows_gives_the_rules_bounds():
    """The bounds were fitted on the H100's train rows (the H200's checked them)."""
    assert sweep.SWEEP.fit("fused", sweep.GPU_RESULTS[1]) == RULE_BOUNDS


def test_the_joint_fit_gives_the_same_bounds():
    assert sweep.SWEEP.joint_fit("fused", sweep.GPU_RESULTS) == RULE_BOUNDS
