"""The stream-K sweep's CPU parts (benchmarks/sweep_stream_k.py): which problems and variants
it measures, the rows it fits on, and the one-parameter fit, tied to the heuristic's
constant."""

from __future__ import annotations

import json

import pytest
import sweep_stream_k
from bench_corpus import load_corpus

import cute_conv
from cute_conv.schedule import K_TILES_PER_SPLIT


def _committed_rows() -> list[dict]:
    return json.loads(sweep_stream_k.RESULTS_PATH.read_text())["rows"]


def test_selection_is_the_sub_wave_problems_and_matches_the_committed_results():
    chosen = sweep_stream_k.sub_wave(load_corpus())
    assert chosen
    for p in chosen:
        assert p["k_tiles"] >= sweep_stream_k.MIN_K_TILES
        for split in p["splits"]:
            assert p["tiles"] * split <= p["max_clusters"]
            assert p["k_tiles"] / split >= sweep_stream_k.MIN_K_TILES_PER_CTA
    assert {r["key"] for r in _committed_rows()} == {p["key"] for p in chosen}


def test_variants_turn_off_what_stream_k_excludes():
    config = cute_conv.Conv2dConfig(
        tile_m=256, tile_n=64, dynamic_schedule=True, tile_w=64, halo_h=6
    )
    configs = sweep_stream_k.variants(config, [2, 6])
    assert list(configs) == ["data_parallel", "whole_grid", "2", "6"]
    assert configs["data_parallel"] == config
    assert configs["whole_grid"].stream_k and not configs["whole_grid"].dynamic_schedule
    assert (configs["whole_grid"].tile_w, configs["whole_grid"].stream_k_split) == (0, 0)
    assert configs["6"].stream_k_split == 6 and (configs["6"].tile_m, configs["6"].tile_n) == (
        256,
        64,
    )
    pingpong = cute_conv.Conv2dConfig(pingpong=True)
    assert not sweep_stream_k.with_stream_k(pingpong, True, 3).pingpong


def _row(tiles: int, k_tiles: int, fastest: str) -> dict:
    times = {"data_parallel": 2.0, "whole_grid": 2.0}
    times |= {str(s): 2.0 for s in (2, 3, 4, 6, 8, 12, 16) if k_tiles / s >= 3}
    times[fastest] = 1.0
    return {
        "tiles": tiles, "k_tiles": k_tiles, "max_clusters": 132, "default": "data_parallel",
        "times": times, "cudnn_ms": 1.5,
    }  # fmt: skip


def test_fit_finds_the_k_tiles_a_split_needs():
    # Splits pay where each CTA keeps 10 k-tiles or more (8 tiles: up to 16 ways fit).
    rows = [_row(8, 40, "4"), _row(8, 60, "6"), _row(8, 24, "2"), _row(8, 18, "data_parallel")]
    fitted = sweep_stream_k.fit_k_tiles_per_split(rows)
    assert 9 < fitted <= 10  # 60 / 6 = 10 each; 18 / 2 = 9 must not split
    assert sweep_stream_k.score(rows, fitted) == 1.0
    assert sweep_stream_k.score(rows, None) < 1.0  # the recorded default never splits
    assert sweep_stream_k.chosen_name(_row(8, 200, "16"), fitted) == "16"


def test_fitted_rows_leave_out_staged_problems_and_failed_checks():
    rows = _committed_rows()
    kept = sweep_stream_k.fitted_rows(rows)
    assert 0 < len(kept) < len(rows)
    keys = {r["key"] for r in kept}
    assert "n1_h13_w43_c513_k300_r3_s1_pad0.0.0.0_str2.1_dil1.1" not in keys  # C=513: padded


@pytest.mark.skipif(
    not sweep_stream_k.RESULTS_PATH.exists(), reason="no committed stream-K sweep results"
)
def test_heuristic_constant_is_the_committed_sweeps_fit():
    train, _ = sweep_stream_k.by_split(sweep_stream_k.fitted_rows(_committed_rows()))
    assert sweep_stream_k.fit_k_tiles_per_split(train) == K_TILES_PER_SPLIT
