"""The pointwise residual-width sweep's CPU parts (benchmarks/sweep_residual_pointwise_width.py):
which problems and configs it measures, that the committed rows (an H200's) are all of them
and every config passed its check, that the fit on them gives the rule's bound, and that the
heuristic narrows residual 1x1 convs only."""

from __future__ import annotations

import dataclasses
import json

import sweep_residual_pointwise_width as sweep
from bench_corpus import load_corpus, problem_shape

from cute_conv import Conv2dProblemShape, config
from tests.bound_sweep_rows import check_committed_rows


def test_the_selection_is_residual_1x1_convs_past_the_general_bound():
    chosen = sweep.residual_pointwise_width_problems(load_corpus(), "fused")
    assert chosen
    for p in chosen:
        problem = problem_shape(p)
        assert problem.R == problem.S == 1
        assert problem.gemm_k > config.RESIDUAL_NARROW_MAX_GEMM_K
        configs = sweep.configs_of(problem, "fused")
        narrow = configs["narrow"]
        assert narrow.tile_n == 128 and narrow.cluster_shape_mn == (1, 1)
    assert not sweep.residual_pointwise_width_problems(load_corpus(), "plain")


def test_committed_rows_are_the_whole_selection_and_every_config_passed():
    path = sweep.RESULTS_PATHS["fused"]
    selected = sweep.residual_pointwise_width_problems(load_corpus(), "fused")
    check_committed_rows(sweep.SWEEP, selected, json.loads(path.read_text())["rows"], "fused")


def test_the_committed_rows_fit_the_bound():
    fitted = sweep.SWEEP.fit("fused", sweep.RESULTS_PATHS["fused"])
    assert fitted == config.RESIDUAL_NARROW_POINTWISE_MAX_GEMM_K


def test_a_deep_residual_1x1_takes_128_wide_tiles_and_a_3x3_or_fp8_one_keeps_them_wide():
    pointwise = Conv2dProblemShape(N=8, H=65, W=65, C=1024, K=512, R=1, S=1)
    plain = config.default_config(pointwise)
    fused = config.default_config(pointwise, has_residual=True)
    off = config.default_config(pointwise, has_residual=True, residual_narrow_pointwise_max_k=0)
    assert (plain.tile_n, off.tile_n, fused.tile_n) == (256, 256, 128)
    three = dataclasses.replace(pointwise, R=3, S=3, padding=((1, 1), (1, 1)))
    assert config.default_config(three, has_residual=True).tile_n == 256
    # fp8 was not measured: its residual 1x1s keep the general bound.
    fp8 = config.default_config(pointwise, has_residual=True, element_bytes=1)
    assert fp8 == config.default_config(
        pointwise, has_residual=True, element_bytes=1, residual_narrow_pointwise_max_k=0
    )
    wide_fp8 = Conv2dProblemShape(N=8, H=65, W=65, C=2048, K=512, R=1, S=1)
    assert config.default_config(wide_fp8, has_residual=True, element_bytes=1).tile_n == 256
