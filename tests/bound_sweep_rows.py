"""Checks shared by the tests of ``sweep_rows.BoundSweep`` sweeps' committed rows."""

from __future__ import annotations


def check_committed_rows(sweep, selected: list[dict], rows: list[dict], form: str) -> None:
    """``rows`` are ``selected`` (a sweep's problems) in order, each measured with the configs
    the sweep gives its problem, every check passed and both variants and cuDNN timed."""
    from bench_corpus import problem_shape

    assert [r["key"] for r in rows] == [p["key"] for p in selected]
    for r, p in zip(rows, selected, strict=True):
        configs = sweep.configs_of(problem_shape(p), form)
        assert r["configs"] == {name: repr(c) for name, c in configs.items()}
        assert all(check["ok"] for check in r["checks"].values())
        assert {sweep.baseline, sweep.variant, "cudnn"} <= set(r["ms"])


def selected_configs(sweep, selected: list[dict], form: str):
    """``(problem, baseline config, variant config)`` of each of ``selected`` (a sweep's
    problems), as the sweep measures them in ``form``."""
    from bench_corpus import problem_shape

    for p in selected:
        problem = problem_shape(p)
        configs = sweep.configs_of(problem, form)
        yield problem, configs[sweep.baseline], configs[sweep.variant]
