"""128x128 split tiles for the wide split's convs (``default_config``'s ``square_split``) and
their sweep (benchmarks/sweep_square_split.py): which problems and configs it measures, that
the committed rows are them, passed and show the gain the switch was set on, and the report."""

from __future__ import annotations

import json

import pytest
import sweep_square_split as sweep
from bench import geomean

FORMS = tuple(sweep.RESULTS_PATHS)


def _rows(form: str) -> list[dict]:
    return json.loads(sweep.RESULTS_PATHS[form].read_text())["rows"]


@pytest.mark.parametrize("form", FORMS)
def test_the_selection_is_wide_splits_that_128x128_tiles_split_too(form):
    chosen = sweep.square_split_problems(form)
    assert {p["split"] for p in chosen} == {"train", "heldout", "family"}
    for p in chosen:
        configs = sweep.configs_of(p, form)
        wide, square = configs[sweep.WIDE], configs[sweep.SQUARE]
        assert wide.tile_m * wide.tile_n == 128 * 256 and wide.stream_k
        assert (square.tile_m, square.tile_n, square.stream_k) == (128, 128, True)
        assert 2 <= square.stream_k_split < wide.stream_k_split


def test_the_family_is_seeded_and_leaves_the_corpus_shapes_out():
    assert sweep.family_problems() == sweep.family_problems()
    keys = [p["key"] for p in sweep.square_split_problems("plain") if p["split"] == "family"]
    assert len(keys) == len(set(keys)) >= 10
    assert all(key.startswith("family_") for key in keys)


@pytest.mark.parametrize("form", FORMS)
def test_committed_rows_are_the_selection_and_every_config_passed(form):
    rows = _rows(form)
    assert [r["key"] for r in rows] == [p["key"] for p in sweep.square_split_problems(form)]
    for row in rows:
        p = next(p for p in sweep.square_split_problems(form) if p["key"] == row["key"])
        configs = sweep.configs_of(p, form)
        assert row["configs"] == {name: repr(c) for name, c in configs.items()}
        assert all(check["ok"] for check in row["checks"].values())
        assert {sweep.WIDE, sweep.SQUARE, "cudnn"} <= set(row["ms"])


@pytest.mark.parametrize("form", FORMS)
def test_the_committed_rows_gain_on_every_part(form):
    rows = _rows(form)
    for part in sweep.PARTS:
        gains = [r["ms"][sweep.WIDE] / r["ms"][sweep.SQUARE] for r in rows if r["split"] == part]
        assert gains and geomean(gains) > 1.05


@pytest.mark.parametrize("form", FORMS)
def test_the_report_prints_each_part(form, capsys):
    sweep.report(form, sweep.RESULTS_PATHS[form])
    out = capsys.readouterr().out
    for part in sweep.PARTS:
        assert f"| {part} |" in out


def test_the_report_without_measured_rows_says_so(tmp_path):
    with pytest.raises(SystemExit, match="no measured rows"):
        sweep.report("plain", tmp_path / "none.json")
