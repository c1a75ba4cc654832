"""The epilogue-width sweep's CPU parts (benchmarks/sweep_epi_width.py): which problems and
configs it measures, that each GPU's committed rows are a prefix of them with every config
passed its check, and that the joint fit over both GPUs gives ``epilogue_rule``'s bounds."""

from __future__ import annotations

import json

import pytest
import sweep_epi_width as sweep
from bench_corpus import load_corpus, problem_shape
from bound_sweep_rows import check_committed_rows

from cute_conv import epilogue_rule


def test_the_selection_is_plain_tiles_of_a_multiple_of_64_at_least_128_wide():
    chosen = sweep.epi_width_problems(load_corpus())
    assert len(chosen) > 200
    for p in chosen:
        configs = sweep.configs_of(problem_shape(p))
        narrow, wide = configs[sweep.SWEEP.baseline], configs[sweep.SWEEP.variant]
        assert narrow.epi_n == 0 and wide.epi_n == epilogue_rule.WIDE_EPI_N
        assert wide == type(wide)(**{**vars(narrow), "epi_n": wide.epi_n})
        assert narrow.tile_n >= 128 and narrow.tile_n % 64 == 0


@pytest.mark.parametrize("path", sweep.JOINT_PATHS, ids=["H200", "H100"])
def test_committed_rows_are_a_prefix_of_the_selection_and_every_config_passed(path):
    rows = json.loads(path.read_text())["rows"]
    selected = sweep.epi_width_problems(load_corpus())
    assert len(rows) > len(selected) * 0.9
    check_committed_rows(sweep.SWEEP, selected[: len(rows)], rows, "plain")


def test_the_joint_fit_gives_the_rules_bounds():
    bounds = (epilogue_rule.WIDE_EPILOGUE_MAX_K_TILES, epilogue_rule.WIDE_EPILOGUE_MIN_AB_STAGES)
    assert sweep.SWEEP.joint_fit("plain", sweep.JOINT_PATHS) == bounds
