"""The gather sweep's CPU parts (benchmarks/sweep_gather.py): the problems it measures, the
variant pair it times, and the fit behind ``config.MAX_GATHER_ELEMS_PER_SM``."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import sweep_gather  # noqa: E402
from bench_corpus import load_corpus, problem_shape  # noqa: E402

from cute_conv.config import MAX_GATHER_ELEMS_PER_SM  # noqa: E402
from cute_conv.staging import kernel_problem_for  # noqa: E402


def test_the_selection_pads_c_only_and_is_what_was_measured():
    chosen = sweep_gather.gather_problems(load_corpus())
    for p in chosen:
        problem = problem_shape(p)
        assert problem.C % 8 and kernel_problem_for(problem).C == -(-problem.C // 8) * 8
    measured = {r["key"] for r in sweep_gather.measured_rows()}
    assert measured == {p["key"] for p in chosen}


def test_the_bound_is_the_fit_of_the_committed_sweep():
    train = [r for r in sweep_gather.measured_rows() if r["split"] == "train"]
    assert sweep_gather.fit_bound(train) == MAX_GATHER_ELEMS_PER_SM


def test_the_rule_picks_by_the_bound():
    row = {"elems_per_sm": 100, "ms": {"padded": 2.0, "gathered": 1.0}}
    assert sweep_gather.chosen_ms(row, 100) == 1.0 and sweep_gather.chosen_ms(row, 99) == 2.0
    assert sweep_gather.score([row], 99) == 0.5 and sweep_gather.score([row], 100) == 1.0
