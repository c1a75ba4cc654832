"""The dynamic-scheduling sweep's CPU parts (benchmarks/sweep_dynamic.py): which problems it
measures and the fit of the bound, tied to the heuristic's constant."""

from __future__ import annotations

import sweep_dynamic
from bench_corpus import load_corpus, problem_shape
from sweep_rows import by_split

from cute_conv.config import MIN_WAVES_DYNAMIC, default_config


def test_selection_matches_the_committed_results():
    chosen = {p["key"] for p in sweep_dynamic.dynamic_problems(load_corpus())}
    rows = sweep_dynamic.measured_rows()
    assert chosen and chosen == {r["key"] for r in rows}
    assert all(r["checks"]["dynamic"]["ok"] and r["checks"]["static"]["ok"] for r in rows)


def test_the_heuristic_bound_is_the_fit_on_the_train_part():
    train, _ = by_split(sweep_dynamic.measured_rows())
    assert round(sweep_dynamic.fit_bound(train), 1) == MIN_WAVES_DYNAMIC


def test_the_default_schedules_dynamically_from_the_bound_on():
    corpus = {p["key"]: p for p in load_corpus()}
    for row in sweep_dynamic.measured_rows():
        config = default_config(problem_shape(corpus[row["key"]]), sweep_dynamic.NUM_SMS)
        # Single-CTA clusters only: 1x1s with partly empty k-tiles take 2x1 ones since.
        single_cta = config.cluster_shape_mn == (1, 1)
        assert config.dynamic_schedule == (
            single_cta and row["waves"] >= MIN_WAVES_DYNAMIC
        ), row["key"]


def _row(waves: float, dynamic_faster: bool) -> dict:
    fast, slow = 1.0, 2.0
    times = (fast, slow) if dynamic_faster else (slow, fast)
    ms = {"dynamic": times[0], "static": times[1]}
    return {"waves": waves, "ms": ms | {k + "_graph": v for k, v in ms.items()}}


def test_the_fit_separates_where_dynamic_wins():
    rows = [_row(2, False), _row(4, False), _row(30, True), _row(60, True)]
    assert sweep_dynamic.fit_bound(rows) == 17.0  # between 4 and 30 waves
    assert sweep_dynamic.score(rows, 17.0) == 1.0
