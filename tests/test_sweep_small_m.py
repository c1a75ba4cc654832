"""The small-M sweep's CPU parts (benchmarks/sweep_small_m.py): which problems it measures,
the configs it times, and that ``small_m_config``'s bounds are its fit's."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import sweep_small_m  # noqa: E402
from bench_corpus import load_corpus  # noqa: E402

import cute_conv  # noqa: E402
from cute_conv import config as config_module  # noqa: E402


def test_selection_is_the_small_m_unstaged_problems_and_matches_the_committed_results():
    chosen = sweep_small_m.small_m_problems(load_corpus())
    assert chosen and all(p["C"] % 8 == 0 and "stem" not in p["tags"] for p in chosen)
    assert all(p["K"] >= sweep_small_m.MIN_K for p in chosen)
    results = json.loads(sweep_small_m.RESULTS_PATH.read_text())
    assert {r["key"] for r in results["rows"]} == {p["key"] for p in chosen}
    assert all(all(c["ok"] for c in r["checks"].values()) for r in results["rows"])


def test_variants_are_narrow_and_unsplit():
    heuristic = cute_conv.Conv2dConfig(tile_n=64, cluster_n=2, stream_k=True, stream_k_split=3)
    variants = sweep_small_m.variants(heuristic)
    assert variants["heuristic"] is heuristic
    assert variants["n32"] == cute_conv.Conv2dConfig(tile_n=32)
    assert variants["n64"] == cute_conv.Conv2dConfig(tile_n=64)


def test_the_rule_bounds_are_the_fit_on_the_committed_results():
    text = sweep_small_m.fit(json.loads(sweep_small_m.RESULTS_PATH.read_text()))
    t, g = map(int, re.search(r"best: T=(\d+), G=(\d+)", text).groups())
    assert (t, g) == (config_module._SMALL_M_MAX_TILES_M, config_module._SMALL_M_MAX_GEMM_K)
    train, held = map(float, re.search(r"train ([\d.]+), held-out ([\d.]+);", text).groups())
    assert train > 1.0 and held > 1.0
