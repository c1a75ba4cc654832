"""The latency sweep's CPU parts (benchmarks/sweep_latency.py): which problems it measures,
the single changes of a config it times, and the report of the results."""

from __future__ import annotations

import json

import sweep_latency
from bench_corpus import load_corpus

import cute_conv


def test_selection_is_the_small_unstaged_problems_and_matches_the_committed_results():
    problems = load_corpus()
    chosen = sweep_latency.latency_bound(problems)
    assert chosen and all(p["gflop"] <= sweep_latency.MAX_GFLOP for p in chosen)
    assert all(p["C"] % 8 == 0 and "stem" not in p["tags"] for p in chosen)
    results = json.loads(sweep_latency.RESULTS_PATH.read_text())
    assert {r["key"] for r in results["rows"]} == {p["key"] for p in chosen}


def test_variants_change_one_thing_that_applies():
    clustered = cute_conv.Conv2dConfig(tile_n=64, cluster_n=2)
    variants = sweep_latency.variants(clustered)
    assert set(variants) == {"no_cluster", "no_pdl", "tile_k32", "stream_k", "tile_n128"}
    assert variants["no_cluster"] == cute_conv.Conv2dConfig(tile_n=64)
    assert not variants["no_pdl"].programmatic_launch
    assert variants["tile_k32"].tile_k == 32 and variants["stream_k"].stream_k
    assert variants["tile_n128"].tile_n == 128 and variants["tile_n128"].cluster_n == 2
    # Nothing to take away or widen: no cluster, a 32-wide k-tile, a 128-wide tile.
    plain = cute_conv.Conv2dConfig(tile_k=32)
    assert set(sweep_latency.variants(plain)) == {"no_pdl", "stream_k"}


def test_fit_reports_each_variant_per_split():
    def row(split, ms):
        return {"split": split, "ms": ms}

    results = {
        "device": "H100",
        "rows": [
            row("train", {"heuristic": 1.0, "no_pdl": 2.0, "cudnn": 2.0}),
            row("train", {"heuristic": 1.0, "no_pdl": 0.5, "cudnn": 0.5}),
            row("heldout", {"heuristic": 2.0, "no_pdl": 1.0}),
        ],
    }
    text = sweep_latency.fit(results)
    assert "| no_pdl | 1.000 (2) | 2.000 (1) |" in text  # geomeans of 0.5, 2.0 and of 2.0
    assert "| heuristic vs cuDNN (cuDNN's time over ours) | 1.000 (2) | - |" in text
