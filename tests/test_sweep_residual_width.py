"""The residual-width sweep's CPU parts (benchmarks/sweep_residual_width.py): which problems and
configs it measures, that the committed rows (an H200's and an H100's) are all of them and
every config passed its check, and that the joint fit on them gives the rule's bound."""

from __future__ import annotations

import json

import pytest
import sweep_residual_width as sweep
from bench_corpus import load_corpus, problem_shape

from cute_conv import config
from tests.bound_sweep_rows import check_committed_rows


def test_the_selection_is_where_a_residual_narrows_256_wide_tiles():
    chosen = sweep.residual_width_problems(load_corpus(), "fused")
    assert chosen
    for p in chosen:
        configs = sweep.configs_of(problem_shape(p), "fused")
        wide, narrow = configs[sweep.WIDE], configs[sweep.NARROW]
        # Narrowed: 128 wide on one CTA. Wide: 256, or the 192-row rule's 192x128 tiles
        # paired in a 1x2 cluster (as it reshapes 128x256 ones).
        assert narrow.tile_n == 128 and narrow.cluster_shape_mn == (1, 1)
        assert wide.tile_n == 256 or (wide.tile_m, wide.cluster_shape_mn) == (192, (1, 2))
    # Plain convs have no residual: nothing changes.
    assert not sweep.residual_width_problems(load_corpus(), "plain")


@pytest.mark.parametrize("path", sweep.GPU_RESULTS, ids=["H200", "H100"])
def test_committed_rows_are_the_whole_selection_and_every_config_passed(path):
    selected = sweep.residual_width_problems(load_corpus(), "fused")
    check_committed_rows(sweep.SWEEP, selected, json.loads(path.read_text())["rows"], "fused")


def test_the_joint_fit_gives_the_rules_bound():
    assert sweep.SWEEP.joint_fit("fused", sweep.GPU_RESULTS) == config.RESIDUAL_NARROW_MAX_GEMM_K


def test_the_rule_narrows_the_timed_tiles_only_within_the_bound():
    key = "n128_h56_w56_c64_k256_r1_s1_pad0.0.0.0_str1.1_dil1.1"  # GEMM K 64
    rows = json.loads(sweep.GPU_RESULTS[0].read_text())["rows"]
    row = next(r for r in rows if r["key"] == key)
    assert sweep.chosen_name(row, 64, "fused") == sweep.NARROW
    assert sweep.chosen_name(row, 63, "fused") == sweep.WIDE
