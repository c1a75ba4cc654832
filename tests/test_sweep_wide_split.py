"""The wide-split sweep's CPU parts (benchmarks/sweep_wide_split.py): which problems and
variants it measures, and the fit, tied to the heuristic's constant."""

from __future__ import annotations

import json

import sweep_wide_split as sweep
from bench_corpus import load_corpus, problem_shape
from sweep_rows import by_split, middle_of_best, passed_rows

from cute_conv.config import WIDE_SPLIT_MIN_K_TILES
from cute_conv.schedule import cluster_tile_count


def _committed_rows() -> list[dict]:
    return json.loads(sweep.RESULTS_PATH.read_text())["rows"]


def test_the_variants_are_splits_that_fit_and_keep_enough_k_tiles():
    chosen = sweep.wide_split_problems(load_corpus())
    assert chosen
    for p in chosen:
        problem = problem_shape(p)
        variants = sweep.wide_variants(problem)
        assert variants
        for name, config in variants.items():
            assert name == sweep.shape_name(config.tile_m, config.tile_n, config.stream_k_split)
            clusters = sweep.NUM_SMS // (config.cluster_m * config.cluster_n)
            assert cluster_tile_count(problem, config) * config.stream_k_split <= clusters
            assert -(-problem.K // config.tile_n) * config.tile_n <= 1.25 * problem.K


def test_committed_rows_cover_the_selection_and_every_variant_passed_its_check():
    rows = _committed_rows()
    assert {r["key"] for r in rows} == {p["key"] for p in sweep.wide_split_problems(load_corpus())}
    by_key = {p["key"]: p for p in load_corpus()}
    for r in rows:
        # The baseline each row timed is what the script computes now.
        baseline = sweep.configs_of(by_key[r["key"]])[sweep.HEURISTIC]
        assert r["configs"][sweep.HEURISTIC] == repr(baseline)
        assert all(check["ok"] for check in r["checks"].values())
        assert set(r["checks"]) <= set(r["ms"]) and "cudnn" in r["ms"]


def test_the_fit_on_the_committed_rows_gives_the_heuristics_constant():
    train, _ = by_split(passed_rows({"rows": _committed_rows()}))
    fitted = middle_of_best(list(sweep.MIN_K_TILES_GRID), lambda t: sweep.score(train, t))
    assert fitted == WIDE_SPLIT_MIN_K_TILES


def test_the_rule_keeps_the_heuristic_where_it_splits_already():
    row = {
        "key": "n1_h16_w16_c2560_k1280_r3_s3_pad1.1.1.1_str1.1_dil1.1",
        "configs": {sweep.HEURISTIC: "Conv2dConfig(tile_m=128, stream_k=True)"},
        "ms": {sweep.HEURISTIC: 1.0, "128x256/8": 2.0},
    }
    assert sweep.chosen_name(row, 1) == sweep.HEURISTIC
    row["configs"][sweep.HEURISTIC] = "Conv2dConfig(tile_m=128, stream_k=False)"
    assert sweep.chosen_name(row, 1) is None  # its split (12) was not timed
    assert sweep.score([row | {"ms": {sweep.HEURISTIC: 1.0, "128x256/12": 0.5}}], 1) == 2.0
