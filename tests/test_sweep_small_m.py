"""The small-M sweep's CPU parts (benchmarks/sweep_small_m.py): which problems it measures,
the configs it times, and that ``small_m_config``'s bounds are its fit's."""

from __future__ import annotations

import json
import re

import sweep_small_m
from bench_corpus import load_corpus, problem_shape
from sweep_rows import by_split

import cute_conv
from cute_conv import small_grid_rules

RULE = (small_grid_rules.SMALL_M_MAX_TILES_M, small_grid_rules.SMALL_M_MAX_GEMM_K)


def committed_results() -> dict:
    return json.loads(sweep_small_m.RESULTS_PATH.read_text())


def test_selection_is_the_small_m_unstaged_and_gathered_problems_and_matches_the_results():
    chosen = sweep_small_m.small_m_problems(load_corpus())
    groups = {(p["form"], p["path"]) for p in chosen}
    assert groups == set(sweep_small_m.GROUPS)
    for p in chosen:
        assert p["K"] >= sweep_small_m.MIN_K and "stem" not in p["tags"]
        heuristic = sweep_small_m.heuristic_of(problem_shape(p), p["form"])
        assert heuristic.gather == (p["path"] == "gathered")
        assert (p["C"] % 8 == 0) == (p["path"] == "unstaged")
    results = committed_results()
    measured = {(r["key"], sweep_small_m.group_of(r)) for r in results["rows"]}
    assert measured == {(p["key"], (p["form"], p["path"])) for p in chosen}
    assert all(all(c["ok"] for c in r["checks"].values()) for r in results["rows"])


def test_variants_are_narrow_unsplit_and_keep_the_gather():
    heuristic = cute_conv.Conv2dConfig(tile_n=64, cluster_n=2, stream_k=True, stream_k_split=3)
    variants = sweep_small_m.variants(heuristic)
    assert variants["heuristic"] is heuristic
    assert variants["n32"] == cute_conv.Conv2dConfig(tile_n=32)
    assert variants["n64"] == cute_conv.Conv2dConfig(tile_n=64)
    for other in (dict(pingpong=True), dict(dynamic_schedule=True)):
        config = cute_conv.Conv2dConfig(tile_n=128, **other)
        assert sweep_small_m.variants(config)["n32"] == cute_conv.Conv2dConfig(tile_n=32)
    gathered = cute_conv.Conv2dConfig(tile_n=128, gather=True, gather_vector=2)
    assert sweep_small_m.variants(gathered)["n32"] == cute_conv.Conv2dConfig(
        tile_n=32, gather=True, gather_vector=2
    )


def test_the_rule_bounds_are_the_fit_on_the_committed_results():
    """Fitted on plain unstaged convs; fused ones fit the same bounds; on every group the
    rule is faster than the config it replaces on the train and the held-out part."""
    results = committed_results()
    for group in sweep_small_m.GROUPS[:2]:
        text = sweep_small_m.fit(results, group)
        assert tuple(map(int, re.search(r"best: T=(\d+), G=(\d+)", text).groups())) == RULE
    for group in sweep_small_m.GROUPS:
        rows = [r for r in results["rows"] if sweep_small_m.group_of(r) == group]
        for part in by_split(rows):
            assert part and sweep_small_m.score(part, *RULE) > 1.0, group
