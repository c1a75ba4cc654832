"""The stream-K sweep's CPU parts (benchmarks/sweep_stream_k.py): which problems it measures,
the config pair it times, and the one-parameter fit."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import sweep_stream_k  # noqa: E402
from bench_corpus import load_corpus  # noqa: E402

import cute_conv  # noqa: E402


def test_selection_is_the_sub_wave_problems_and_matches_the_committed_results():
    chosen = sweep_stream_k.sub_wave(load_corpus())
    assert chosen and all(
        p["tiles"] < sweep_stream_k.NUM_SMS and p["k_tiles"] >= sweep_stream_k.MIN_K_TILES
        for p in chosen
    )
    measured = {r["key"] for r in json.loads(sweep_stream_k.RESULTS_PATH.read_text())["rows"]}
    selected = {p["key"] for p in chosen}
    assert measured <= selected
    # Two problems became sub-wave with the 32-wide tiles (K=4 and K=8 3x3s on 64x64 maps,
    # now 256x32 tiles) after the sweep ran: not measured yet.
    assert selected - measured == {
        "n8_h64_w64_c320_k4_r3_s3_pad1.1.1.1_str1.1_dil1.1",
        "n8_h64_w64_c512_k8_r3_s3_pad1.1.1.1_str1.1_dil1.1",
    }


def test_the_stream_k_variant_turns_off_what_stream_k_excludes():
    config = cute_conv.Conv2dConfig(
        tile_m=256, tile_n=64, dynamic_schedule=True, tile_w=64, halo_h=6
    )
    on = sweep_stream_k.with_stream_k(config, True)
    assert on.stream_k and not on.dynamic_schedule and (on.tile_w, on.halo_h) == (0, 0)
    assert (on.tile_m, on.tile_n) == (256, 64)
    pingpong = cute_conv.Conv2dConfig(pingpong=True)
    assert not sweep_stream_k.with_stream_k(pingpong, True).pingpong
    assert sweep_stream_k.with_stream_k(on, False) == cute_conv.Conv2dConfig(
        tile_m=256, tile_n=64
    )


def test_stream_k_pays_only_below_a_wave_and_past_the_threshold():
    pays = sweep_stream_k.stream_k_pays
    assert pays(8, 72, 132, 47.0)  # 72 * (1 - 8/132) = 67.6 saved
    assert not pays(8, 36, 132, 47.0)  # 33.8 saved
    assert not pays(132, 1000, 132, 0.0)  # a full wave: nothing to balance


def _row(tiles: int, k_tiles: int, stream_k_wins: bool) -> dict:
    return {
        "tiles": tiles, "k_tiles": k_tiles, "default_stream_k": False,
        "stream_k_ms": 1.0 if stream_k_wins else 2.0, "data_parallel_ms": 1.5, "cudnn_ms": 1.5,
    }  # fmt: skip


def test_fit_separates_the_problems_where_stream_k_wins():
    # Stream-K wins where more than ~40 k-tiles are saved per SM (tiles=12: 0.909 of k_tiles).
    rows = [_row(12, k, k * (1 - 12 / 132) > 40) for k in (20, 30, 40, 50, 60, 80, 100)]
    threshold = sweep_stream_k.fit_threshold(rows)
    assert 40 * (1 - 12 / 132) < threshold < 50 * (1 - 12 / 132)
    assert sweep_stream_k.score(rows, threshold) == 1.0
    # The heuristic's recorded choice (never stream-K here) scores below the fit.
    assert sweep_stream_k.score(rows, None) < 1.0
    # Where stream-K never wins the fit never splits.
    assert sweep_stream_k.fit_threshold([_row(12, k, False) for k in (20, 60)]) == math.inf
