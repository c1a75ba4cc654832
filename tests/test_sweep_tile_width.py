"""The half-step sweep's CPU parts (benchmarks/sweep_tile_width.py): which problems and
configs it measures in each form (plain, fused, fp8), and the fits on each GPU's rows, tied
to the heuristic's constants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sweep_tile_width as sweep
from bench_corpus import load_corpus, problem_shape
from sweep_rows import by_split, middle_of_best, passed_rows

from cute_conv import config

FORMS = pytest.mark.parametrize("form", sweep.FORMS)


def _rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"]


def _committed_rows(form: str) -> list[dict]:
    return _rows(sweep.RESULTS_PATHS[form])


@FORMS
def test_the_selection_is_where_half_steps_change_the_config(form):
    chosen = sweep.tile_width_problems(load_corpus(), form)
    assert chosen
    for p in chosen:
        configs = sweep.configs_of(problem_shape(p), form)
        whole, half = configs[sweep.HEURISTIC], configs[sweep.HALF_STEP]
        assert whole.tile_n % 32 == 0 and half.tile_n % 32 == 16
        k = p["K"]
        assert -(-k // half.tile_n) * half.tile_n < -(-k // whole.tile_n) * whole.tile_n


@pytest.mark.parametrize("gpu", ["", "_H100"], ids=["H200", "H100"])
@FORMS
def test_committed_rows_cover_the_selection_and_every_config_passed_its_check(form, gpu):
    path = sweep.RESULTS_PATHS[form]
    rows = _rows(path.with_name(path.stem + gpu + path.suffix))
    by_key = {p["key"]: p for p in load_corpus()}
    selected = {p["key"] for p in sweep.tile_width_problems(load_corpus(), form)}
    assert {r["key"] for r in rows} == selected
    for r in rows:
        # The configs each row timed are what the script computes now.
        configs = sweep.configs_of(problem_shape(by_key[r["key"]]), form)
        assert r["configs"] == {name: repr(c) for name, c in configs.items()}
        assert all(check["ok"] for check in r["checks"].values())
        assert {sweep.HEURISTIC, sweep.HALF_STEP, "cudnn"} <= set(r["ms"])


@pytest.mark.parametrize("gpu", ["", "_H100"], ids=["H200", "H100"])
@FORMS
def test_the_fit_on_each_gpus_rows_gives_the_heuristics_constant(form, gpu):
    path = sweep.RESULTS_PATHS[form]
    rows = _rows(path.with_name(path.stem + gpu + path.suffix))
    train, _ = by_split(passed_rows({"rows": rows}))
    fitted = middle_of_best(list(sweep.MIN_K_TILES_GRID), lambda t: sweep.score(train, t, form))
    assert fitted == getattr(config, sweep.CONSTANTS[form])


def test_the_rule_takes_the_timed_half_step_only_past_the_bound():
    rows = _committed_rows("plain")
    row = next(r for r in rows if r["key"].startswith("n1_h32_w32_c2560_k1280_r1"))
    assert sweep.chosen_name(row, 0) == sweep.HALF_STEP  # 40 k-tiles
    assert sweep.chosen_name(row, 41) == sweep.HEURISTIC
