"""The 64-row tile sweep's CPU parts (benchmarks/sweep_tile_m64.py): which problems and configs
it measures in each form (plain, fused, fp8), that the committed rows are those (the whole
selection, or a prefix of its sample order where the sweep ran out of time), and the fits on
them, tied to the rule's bound (the H200's rows, and an H100's sample beside them)."""

from __future__ import annotations

import json

import pytest
import sweep_tile_m64 as sweep
from bench_corpus import load_corpus, problem_shape
from sweep_rows import by_split, middle_of_best, passed_rows

from cute_conv import small_grid_rules
from tests.bound_sweep_rows import check_committed_rows

FORMS = pytest.mark.parametrize("form", sweep.FORMS)


def _rows(form: str, gpu: str = "") -> list[dict]:
    path = sweep.RESULTS_PATHS[form]
    return json.loads(path.with_name(path.stem + gpu + path.suffix).read_text())["rows"]


@FORMS
def test_the_selection_is_where_the_rule_changes_the_config(form):
    chosen = sweep.tile_m64_problems(load_corpus(), form)
    assert chosen
    for p in chosen:
        configs = sweep.configs_of(problem_shape(p), form)
        whole, single = configs[sweep.HEURISTIC], configs[sweep.SINGLE]
        assert (whole.tile_m, single.tile_m) == (128, 64)
        assert single.tile_n == whole.tile_n and not single.stream_k


@pytest.mark.parametrize(
    "form,gpu", [("plain", ""), ("fused", ""), ("fp8", ""), ("plain", "_H100")],
    ids=["plain-H200", "fused-H200", "fp8-H200", "plain-H100"],
)  # fmt: skip
def test_committed_rows_are_a_prefix_of_the_selection_and_every_config_passed(form, gpu):
    rows = _rows(form, gpu)
    selected = sweep.tile_m64_problems(load_corpus(), form)
    if (form, gpu) == ("plain", ""):
        assert len(rows) == len(selected)
    check_committed_rows(sweep.SWEEP, selected[: len(rows)], rows, form)


@FORMS
def test_the_fit_on_each_forms_rows_gives_the_rules_bound(form):
    train, _ = by_split(passed_rows({"rows": _rows(form)}))
    fitted = middle_of_best(list(sweep.MAX_K_TILES_GRID), lambda b: sweep.score(train, b, form))
    assert fitted == small_grid_rules.SINGLE_WARPGROUP_MAX_K_TILES


def test_on_the_h100_rows_the_bound_scores_as_their_own_fit():
    # The H100's sample fits 54 k-tiles; 72 takes four more train problems at the same score.
    train, _ = by_split(passed_rows({"rows": _rows("plain", "_H100")}))
    fitted = middle_of_best(list(sweep.MAX_K_TILES_GRID), lambda b: sweep.score(train, b))
    assert fitted == 54
    assert sweep.score(train, small_grid_rules.SINGLE_WARPGROUP_MAX_K_TILES) > sweep.score(train, fitted) - 1e-3


def test_the_rule_takes_the_timed_64_row_tiles_only_within_the_bound():
    key = "n8_h14_w14_c256_k512_r3_s3_pad1.1.1.1_str2.2_dil1.1"
    row = next(r for r in _rows("plain") if r["key"] == key)
    assert sweep.chosen_name(row, 36) == sweep.SINGLE  # 36 k-tiles
    assert sweep.chosen_name(row, 35) == sweep.HEURISTIC
