"""The ping-pong sweep's CPU parts (benchmarks/sweep_pingpong.py): which problems and forms it
measures, and the default's choice per form tied to the committed measurements' train part."""

from __future__ import annotations

import math

import pytest
import sweep_pingpong
from bench_corpus import load_corpus, problem_shape
from sweep_rows import by_split

from cute_conv.config import PINGPONG_MAX_K_TILES, default_config


def test_selection_matches_the_committed_results():
    chosen = sweep_pingpong.pingpong_problems(load_corpus())
    committed = {(r["key"], r["form"]) for form in sweep_pingpong.FORMS
                 for r in sweep_pingpong.measured_rows(form)}  # fmt: skip
    assert committed == {(p["key"], p["form"]) for p in chosen}


def test_the_variants_differ_in_ping_pong_and_its_tile_only():
    p = next(p for p in load_corpus() if p["key"].startswith("n128_h14_w14_c256_k1024_r1_s1"))
    default, pingpong = sweep_pingpong.form_configs(problem_shape(p), "plain")
    assert not default.pingpong and pingpong.pingpong
    assert pingpong.tile_shape_mnk == (128, 128, default.tile_k)
    assert pingpong.cluster_shape_mn == (1, 1) and not pingpong.dynamic_schedule
    # With a residual the default is the ping-pong variant itself.
    fused_pingpong = sweep_pingpong.form_configs(problem_shape(p), "fused")[1]
    assert fused_pingpong == default_config(problem_shape(p), 132, has_residual=True)


@pytest.mark.parametrize("form", sweep_pingpong.FORMS)
def test_the_default_takes_ping_pong_where_the_train_part_measured_it_faster(form):
    rows = sweep_pingpong.measured_rows(form)
    train, _ = by_split(rows)
    assert train and all(
        r["checks"]["default"]["ok"] and r["checks"]["pingpong"]["ok"] for r in rows
    )
    takes = sweep_pingpong.pingpong_over_default(train, "_graph") < 1.0
    assert takes == (form == "fused")
    corpus = {p["key"]: p for p in load_corpus()}
    for r in rows:
        problem = problem_shape(corpus[r["key"]])
        config = default_config(
            problem, 132, has_residual=form == "fused", element_bytes=1 if form == "fp8" else 2
        )  # fmt: skip
        # Within the upper k-tile bound fitted after (benchmarks/sweep_pingpong_k_tiles.py),
        # unless fused calls' 256-row tiles, fitted after too (sweep_tall_tiles.py), take it.
        short = math.ceil(problem.C / config.tile_k) <= PINGPONG_MAX_K_TILES
        tall = config.tile_m == 256
        assert config.pingpong == (takes and short and not tall), r["key"]
