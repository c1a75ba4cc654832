"""The ring rule (``ring_rule.single_tile_ring_config``): which calls take a ring of their one
tile's k-tiles and which keep theirs, that such a kernel initializes only those stages'
barriers, bad input, and the sweep (benchmarks/sweep_single_tile_ring.py): its selection, that
the committed rows are that selection with every config passed, and that the joint fit on
their train rows gives the rule's bound."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import sweep_single_tile_ring as sweep
from bench_corpus import load_corpus
from bound_sweep_rows import check_committed_rows, selected_configs

from cute_conv import Conv2dConfig, Conv2dProblemShape
from cute_conv.ring_rule import SINGLE_TILE_RING_MAX_K_TILES, single_tile_ring_config
from cute_conv.schedule import schedule_shape
from cute_conv.staging import kernel_problem_for
from cute_conv.untuned import heuristic_config

# RegNet's 1x1 of C=120, K=30 at batch 1 on one pixel: one 64x32 tile of 2 k-tiles, a
# 16-stage ring.
REGNET_1PX = Conv2dProblemShape.from_shapes((1, 1, 1, 120), (30, 1, 1, 120))
SMALL = Conv2dConfig(tile_m=64, tile_n=32, tile_k=64)
# ResNet-50's 1x1 of C=512, K=256 at batch 32 on 28x28 maps: 392 tiles of 64x64.
R50_28_N32 = Conv2dProblemShape.from_shapes((32, 28, 28, 512), (256, 1, 1, 512))


def test_a_one_tile_cta_takes_a_ring_of_its_k_tiles():
    on = {"max_k_tiles": math.inf}
    assert single_tile_ring_config(SMALL, REGNET_1PX, **on) == dataclasses.replace(SMALL, stages=2)
    c336 = Conv2dProblemShape.from_shapes((1, 1, 1, 336), (30, 1, 1, 336))  # 6 k-tiles
    assert single_tile_ring_config(SMALL, c336, **on).stages == 6
    assert single_tile_ring_config(SMALL, c336, has_residual=True, **on).stages == 6
    assert single_tile_ring_config(SMALL, c336, max_k_tiles=5) == SMALL


@pytest.mark.parametrize(
    "config, problem",
    [
        (SMALL, R50_28_N32),  # past one wave
        (dataclasses.replace(SMALL, stages=4), REGNET_1PX),  # a depth of its own
        (dataclasses.replace(SMALL, stream_k=True), REGNET_1PX),
        (Conv2dConfig(tile_n=128, pingpong=True), REGNET_1PX),
        (Conv2dConfig(tile_m=256, tile_n=64, tile_w=64, halo_h=6),
         Conv2dProblemShape.from_shapes((1, 8, 8, 64), (64, 3, 3, 64), padding=1)),
        # 18 k-tiles: deeper than the ring SMEM fits, so no shallower
        (SMALL, Conv2dProblemShape.from_shapes((1, 7, 7, 128), (32, 3, 3, 128), padding=1)),
    ],
    ids=["waves", "set-depth", "stream-k", "pingpong", "halo", "long"],
)  # fmt: skip
def test_the_rule_leaves_other_calls(config, problem):
    assert single_tile_ring_config(config, problem, max_k_tiles=math.inf) == config


def test_fp8_keeps_its_ring():
    assert single_tile_ring_config(SMALL, REGNET_1PX, element_bytes=1, max_k_tiles=math.inf) == (
        SMALL
    )


def test_a_call_without_a_config_takes_the_fitted_rule():
    assert single_tile_ring_config(SMALL, REGNET_1PX) == dataclasses.replace(SMALL, stages=2)
    for has_residual in (False, True):
        config = heuristic_config(REGNET_1PX, 132, has_residual=has_residual, cuda_cores=False)
        assert config.stages == 2  # on tensor cores: the call itself runs a gemv (gemv_rule)
    # 13 k-tiles: past the fitted bound
    c832 = Conv2dProblemShape.from_shapes((1, 1, 1, 832), (30, 1, 1, 832))
    assert single_tile_ring_config(SMALL, c832) == SMALL


@pytest.mark.parametrize(
    "kwargs, error",
    [({"max_k_tiles": -1}, ValueError), ({"out_bytes": 3}, ValueError),
     ({"num_sms": 0}, ValueError), ({"element_bytes": 3}, ValueError)],
)  # fmt: skip
def test_bad_input_is_rejected(kwargs, error):
    with pytest.raises(error):
        single_tile_ring_config(SMALL, REGNET_1PX, **kwargs)


def test_a_short_ring_initializes_only_its_stages_barriers():
    """Each A/B stage has a full and an empty barrier, initialized before the first load:
    a 2-stage ring's kernel initializes 28 fewer than the 16-stage one SMEM fits."""
    from cute_conv.compile import compile_kernel
    from tests.sass import sass_of

    inits = {
        stages: sass_of(
            compile_kernel("sm_90a", config=dataclasses.replace(SMALL, stages=stages)).cubin
        ).count("SYNCS.EXCH.64")
        for stages in (0, 2)
    }
    assert inits[0] - inits[2] == 2 * (16 - 2)


@pytest.mark.parametrize("form", sweep.FORMS)
def test_the_selection_is_one_tile_ctas_that_differ_in_their_ring_only(form):
    chosen = sweep.single_tile_ring_problems(load_corpus(), form)
    assert len(chosen) > 100
    for problem, own, short in selected_configs(sweep.SWEEP, chosen, form):
        # The conv the kernel runs: a staged one's, else the call's (gathered included).
        runs = {problem, kernel_problem_for(problem, 2)}
        shapes = {schedule_shape(p, own.tile_m, own.tile_n, own.tile_k) for p in runs}
        assert own.stages == 0 and dataclasses.replace(own, stages=short.stages) == short
        assert any(t <= sweep.NUM_SMS and short.stages == max(k, 2) for t, k in shapes)


@pytest.mark.parametrize("form", sweep.FORMS)
def test_committed_rows_are_the_selection_and_every_config_passed(form):
    rows = json.loads(sweep.RESULTS_PATHS[form].read_text())["rows"]
    check_committed_rows(
        sweep.SWEEP, sweep.single_tile_ring_problems(load_corpus(), form), rows, form
    )


def test_the_committed_rows_fit_the_bound():
    assert sweep.SWEEP.joint_forms_fit(sweep.RESULTS_PATHS) == SINGLE_TILE_RING_MAX_K_TILES
