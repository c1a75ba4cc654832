"""128x128 split tiles (``default_config``'s ``square_split_min_k_tiles``) and their sweep
(benchmarks/sweep_square_split.py, a ``sweep_rows.BoundSweep`` fitted on train and family rows
together): which problems and configs it measures, that the committed rows are them, passed
and fit the bounds, and the rule on a few convs."""

from __future__ import annotations

import json
import math

import pytest
import sweep_square_split as sweep
from bound_sweep_rows import check_committed_rows, selected_configs

from cute_conv import Conv2dProblemShape
from cute_conv.config import (
    SQUARE_SPLIT_MIN_K_TILES,
    SQUARE_SPLIT_MIN_K_TILES_FUSED,
    default_config,
    split_tile_config,
)

FORMS = tuple(sweep.RESULTS_PATHS)
BOUNDS = {"plain": SQUARE_SPLIT_MIN_K_TILES, "fused": SQUARE_SPLIT_MIN_K_TILES_FUSED}


def _selected(form: str) -> list[dict]:
    return sweep.square_split_problems(sweep.SWEEP.all_problems(), form)


@pytest.mark.parametrize("form", FORMS)
def test_the_selection_is_convs_the_rule_changes(form):
    selected = _selected(form)
    assert {p["split"] for p in selected} == {"train", "heldout", "family"}
    for _, own, square in selected_configs(sweep.SWEEP, selected, form):
        assert own != square
        # The split tiles, or (C=512 3x3s) the 64-row tiles the single-warpgroup rule makes
        # of them.
        assert (square.tile_m, square.tile_n) in ((128, 128), (64, 128))
        assert square.stream_k == (square.tile_m == 128)


def test_the_family_is_seeded_and_leaves_the_corpus_shapes_out():
    from bench_corpus import load_corpus

    family = sweep.family_problems()
    assert family == sweep.family_problems.__wrapped__()
    keys = [p["key"] for p in family]
    assert len(keys) == len(set(keys)) >= 10
    assert all(key.startswith("family_") and p["split"] == "family" for key, p in
               zip(keys, family, strict=True))  # fmt: skip
    corpus = {tuple(p[d] for d in "NHWCKRS") for p in load_corpus()}
    assert not any(tuple(p[d] for d in "NHWCKRS") in corpus for p in family)


@pytest.mark.parametrize("form", FORMS)
def test_committed_rows_are_the_selection_and_every_config_passed(form):
    rows = json.loads(sweep.RESULTS_PATHS[form].read_text())["rows"]
    check_committed_rows(sweep.SWEEP, _selected(form), rows, form)


@pytest.mark.parametrize("form", FORMS)
def test_the_committed_rows_fit_the_bound_on_train_and_family(form, capsys):
    assert sweep.SWEEP.fit(form, sweep.RESULTS_PATHS[form]) == BOUNDS[form]
    out = capsys.readouterr().out
    assert "fitted on train + family" in out
    assert "never fitted on" not in out  # the family is fitted on, not reported apart


def test_the_fit_without_measured_rows_says_so(tmp_path):
    with pytest.raises(SystemExit, match="no measured train rows"):
        sweep.SWEEP.fit("plain", tmp_path / "none.json")


# SD's batch-1 32x32 3x3 of C=640: 90 k-tiles per tile, 40 tiles of 128x128 split 3 ways.
SD_640 = Conv2dProblemShape.from_shapes((1, 32, 32, 640), (640, 3, 3, 640), padding=1)
# C=512: 72 k-tiles.
SD_512 = Conv2dProblemShape.from_shapes((1, 32, 32, 512), (640, 3, 3, 512), padding=1)


def test_the_bounds_by_form():
    square = split_tile_config(SD_640, 128, 128, 3)
    assert default_config(SD_640) == square
    assert default_config(SD_640, has_residual=True) == square
    for has_residual in (False, True):
        off = default_config(SD_640, has_residual=has_residual, square_split_min_k_tiles=math.inf)
        assert not off.stream_k
    # 72 k-tiles: fused calls only.
    assert not default_config(SD_512).stream_k
    assert default_config(SD_512, has_residual=True) == split_tile_config(SD_512, 128, 128, 3)
