"""Single CTAs instead of 2-CTA clusters for convs of at most a wave of tiles
(``small_grid_rules.lone_cta_config``) and their sweep (benchmarks/sweep_lone_cta.py): which
convs the rule takes and leaves, that the committed rows are the sweep's selection with every
config passed, that the fit on the train rows gives the rule's bound, and bad input."""

from __future__ import annotations

import dataclasses
import json

import pytest
import sweep_lone_cta as sweep
from bench_corpus import load_corpus
from bound_sweep_rows import check_committed_rows, selected_configs
from sweep_rows import EVERY_RULE_FITTED, fitted_before

from cute_conv import Conv2dConfig, Conv2dProblemShape
from cute_conv.schedule import schedule_shape
from cute_conv.small_grid_rules import LONE_CTA_MAX_K_TILES, lone_cta_config
from cute_conv.untuned import heuristic_config

# ResNet-50's 1x1 of C=512, K=256 at batch 1 on 28x28 maps: 13 x 4 tiles of 64x64, 8 k-tiles.
R50_28 = Conv2dProblemShape.from_shapes((1, 28, 28, 512), (256, 1, 1, 512))
ON_1X2 = Conv2dConfig(tile_m=64, tile_n=64, cluster_n=2)
# The same conv at batch 32: 392 such tiles, three waves.
R50_28_N32 = Conv2dProblemShape.from_shapes((32, 28, 28, 512), (256, 1, 1, 512))


def test_a_sub_wave_conv_runs_on_single_ctas():
    assert lone_cta_config(ON_1X2, R50_28) == dataclasses.replace(ON_1X2, cluster_n=1)
    assert lone_cta_config(dataclasses.replace(ON_1X2, cluster_m=2, cluster_n=1), R50_28) == (
        dataclasses.replace(ON_1X2, cluster_n=1)
    )
    for has_residual in (False, True):
        call = heuristic_config(R50_28, 132, has_residual=has_residual)
        assert call.cluster_shape_mn == (1, 1), call


@pytest.mark.parametrize(
    "config, problem, kwargs",
    [
        (ON_1X2, R50_28_N32, {}),  # three waves
        (ON_1X2, R50_28, {"num_sms": 40}),  # 52 tiles: past one wave of 40 SMs
        (Conv2dConfig(tile_m=64, tile_n=64, cluster_n=4), R50_28, {}),  # a 4-CTA cluster
        (dataclasses.replace(ON_1X2, stream_k=True), R50_28, {}),
        (ON_1X2, R50_28, {"element_bytes": 1}),  # fp8: not measured
        (ON_1X2, R50_28, {"max_k_tiles": 7}),  # 8 k-tiles
        (ON_1X2, R50_28, {"max_k_tiles": 0}),  # off
    ],
    ids=["waves", "few-sms", "4-ctas", "stream-k", "fp8", "bound", "off"],
)
def test_the_rule_leaves_other_calls(config, problem, kwargs):
    assert lone_cta_config(config, problem, **kwargs) == config


@pytest.mark.parametrize(
    "kwargs, error",
    [({"max_k_tiles": -1}, ValueError), ({"max_k_tiles": "5"}, ValueError),
     ({"num_sms": 0}, ValueError), ({"element_bytes": 3}, ValueError)],
)  # fmt: skip
def test_bad_input_is_rejected(kwargs, error):
    with pytest.raises(error):
        lone_cta_config(ON_1X2, R50_28, **kwargs)


def test_a_config_of_another_type_is_rejected():
    with pytest.raises(TypeError):
        lone_cta_config({"tile_m": 64}, R50_28)


@pytest.mark.parametrize("form, count", [("plain", 155), ("fused", 163)])
def test_the_selection_is_sub_wave_2_cta_clusters_that_differ_in_their_cluster_only(form, count):
    chosen = sweep.lone_cta_problems(load_corpus(), form)
    assert len(chosen) == count
    for problem, own, lone in selected_configs(sweep.SWEEP, chosen, form):
        assert own.cluster_m * own.cluster_n == 2 and lone.cluster_shape_mn == (1, 1)
        assert schedule_shape(problem, own.tile_m, own.tile_n, own.tile_k)[0] <= sweep.NUM_SMS
        assert dataclasses.replace(own, cluster_m=1, cluster_n=1) == lone


@pytest.mark.parametrize("form", sweep.FORMS)
def test_committed_rows_are_the_selection_and_every_config_passed(form):
    rows = json.loads(sweep.RESULTS_PATHS[form].read_text())["rows"]
    check_committed_rows(sweep.SWEEP, sweep.lone_cta_problems(load_corpus(), form), rows, form)


@pytest.mark.parametrize("form", sweep.FORMS)
def test_the_committed_rows_fit_the_bound(form):
    assert sweep.SWEEP.fit(form, sweep.RESULTS_PATHS[form]) == LONE_CTA_MAX_K_TILES


def test_sweeps_run_before_a_rule_take_it_and_the_rules_after_it_off():
    lone, ring = {"lone_cta_max_k_tiles": 0}, {"single_tile_ring_max_k_tiles": 0}
    pointwise = {"residual_narrow_pointwise_max_k": 0}
    tall = {"min_waves_tall": {"plain": None, "fused": 4}}  # fused calls' bound
    gather = {"gather_max_loads_per_sm": {"pad": 50176, "im2col": 28672}}  # the H100 fit
    packed = {"gather_pack_taps": False}  # fitted last
    later = pointwise | tall | gather | packed
    assert fitted_before("lone_cta_max_k_tiles") == EVERY_RULE_FITTED | lone | ring | later
    assert fitted_before("single_tile_ring_max_k_tiles") == EVERY_RULE_FITTED | ring | later
    assert fitted_before("residual_narrow_pointwise_max_k") == EVERY_RULE_FITTED | later
    assert fitted_before("min_waves_tall") == EVERY_RULE_FITTED | tall | gather | packed
    assert fitted_before("gather_pack_taps") == EVERY_RULE_FITTED | packed
    with pytest.raises(ValueError):
        fitted_before("no_such_rule")
