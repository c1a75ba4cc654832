"""The gather sweep's CPU parts (benchmarks/sweep_gather.py): the problems it measures, and
the fit behind ``gather_rule.MAX_GATHER_LOADS_PER_SM``."""

from __future__ import annotations

import pytest
import sweep_gather
from bench_corpus import load_corpus, problem_shape

from cute_conv.gather_rule import MAX_GATHER_LOADS_PER_SM
from cute_conv.staging import gather_replaces


def test_the_selection_is_the_staged_c_and_is_what_was_measured():
    chosen = sweep_gather.gather_problems(load_corpus())
    for p in chosen:
        assert problem_shape(p).C % 8 and gather_replaces(problem_shape(p)) in ("pad", "im2col")
    rows = sweep_gather.measured_rows()
    assert {r["key"] for r in rows} == {p["key"] for p in chosen}
    assert all(r["replaces"] == gather_replaces(problem_shape(r)) for r in _with_shapes(rows))


def _with_shapes(rows: list[dict]) -> list[dict]:
    corpus = {p["key"]: p for p in load_corpus()}
    return [corpus[r["key"]] | {"replaces": r["replaces"]} for r in rows]


@pytest.mark.parametrize("replaces", ["pad", "im2col"])
def test_each_bound_is_the_fit_of_the_committed_sweep(replaces):
    train = [r for r in sweep_gather.measured_rows(replaces) if r["split"] == "train"]
    assert sweep_gather.fit_bound(train) == MAX_GATHER_LOADS_PER_SM[replaces]


def test_the_rule_picks_by_the_bound():
    row = {"loads_per_sm": 100, "ms": {"staged": 2.0, "gathered": 1.0}}
    assert sweep_gather.chosen_ms(row, 100) == 1.0 and sweep_gather.chosen_ms(row, 99) == 2.0
    assert sweep_gather.score([row], 99) == 0.5 and sweep_gather.score([row], 100) == 1.0
