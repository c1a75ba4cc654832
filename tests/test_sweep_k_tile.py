"""The k-tile sweep's CPU parts (benchmarks/sweep_k_tile.py): which problems it measures, the
widths it times, and the one-parameter fit, against the committed results."""

from __future__ import annotations

import json

import pytest
import sweep_k_tile as sweep
from bench_corpus import load_corpus

from cute_conv.config import _K_TILE_COST_CHANNELS, k_tile_width

FP8, BF16 = sweep.PRECISIONS["fp8"], sweep.PRECISIONS["bf16"]


@pytest.mark.parametrize("precision,row,align", [(FP8, 128, 16), (BF16, 64, 8)], ids=["fp8", "bf16"])
def test_selection_is_where_the_width_is_a_choice_and_matches_the_committed_results(
    precision, row, align
):
    chosen = sweep.k_tile_problems(load_corpus(), precision)
    assert chosen and all(p["C"] > row // 2 and p["C"] % row and p["C"] % align == 0 for p in chosen)
    measured = json.loads(precision.results_path.read_text())["rows"]
    assert {r["key"] for r in measured} == {p["key"] for p in chosen}


def test_the_fp8_heuristic_uses_the_cost_fitted_on_the_committed_train_part():
    train = [r for r in sweep.measured_rows(FP8) if r["split"] == "train"]
    assert sweep.fit_cost(train, FP8) == _K_TILE_COST_CHANNELS[1]


def test_the_bf16_cost_of_equal_bytes_is_among_the_best_fitted_on_the_committed_train_part():
    # 16 channels, the bytes of fp8's 32, ties the fitted cost on train: it stays.
    train = [r for r in sweep.measured_rows(BF16) if r["split"] == "train"]
    fitted = sweep.fit_cost(train, BF16)
    assert sweep.score(train, None, BF16) >= sweep.score(train, fitted, BF16) - 1e-12


def test_the_fp8_cost_beats_equal_bytes_held_out():
    heldout = [r for r in sweep.measured_rows(FP8) if r["split"] == "heldout"]
    assert sweep.score(heldout, None, FP8) >= sweep.score(heldout, 32.0, FP8)


def test_widths_per_precision():
    assert FP8.widths == (32, 64, 128) and BF16.widths == (16, 32, 64)
    assert sweep.widths_for(192, FP8) == (32, 64, 128) and sweep.widths_for(208, FP8) == (64, 128)
    assert sweep.widths_for(96, BF16) == (16, 32, 64) and sweep.widths_for(104, BF16) == (32, 64)


def _row(channels: int, fastest: int) -> dict:
    ms = {str(w): (1.0 if w == fastest else 2.0) for w in sweep.widths_for(channels, FP8)}
    return {"C": channels, "split": "train", "ms": ms}


def test_fit_finds_a_cost_between_what_the_rows_demand():
    # C=320 fastest at 64 needs a cost below 32; C=432 fastest at 128 one above 21.3.
    cost = sweep.fit_cost([_row(320, 64), _row(432, 128)], FP8)
    assert 21.3 < cost < 32
    assert k_tile_width(320, 1, cost) == 64 and k_tile_width(432, 1, cost) == 128


@pytest.mark.parametrize(
    "channels,element_bytes,expected",
    [(96, 2, 32), (320, 2, 64), (96, 1, 128), (320, 1, 64), (960, 1, 128), (3, 1, 32)],
)
def test_k_tile_width(channels, element_bytes, expected):
    assert k_tile_width(channels, element_bytes) == expected


def test_k_tile_width_rejects_bad_arguments():
    with pytest.raises(ValueError, match="channels must be a positive int"):
        k_tile_width(0, 1)
    with pytest.raises(ValueError, match="element_bytes must be 2"):
        k_tile_width(64, 4)
    with pytest.raises(ValueError, match="k_tile_cost must be >= 0"):
        k_tile_width(64, 1, -1.0)
