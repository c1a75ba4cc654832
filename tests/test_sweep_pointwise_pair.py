"""2x1 clusters for 1x1s on 1x2 clusters whose few k-tiles are partly empty
(``small_grid_rules.pointwise_pair_config``) and their sweep (benchmarks/sweep_pointwise_pair.py):
which convs the rule takes and leaves, that the committed rows are the sweep's selection with
every config passed, that the fit on the train rows gives the rule's bound, and bad input."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import sweep_pointwise_pair as sweep
from bench_corpus import load_corpus
from bound_sweep_rows import check_committed_rows, selected_configs

from cute_conv import Conv2dConfig, Conv2dProblemShape
from cute_conv.small_grid_rules import POINTWISE_PAIR_MAX_K_TILES, pointwise_pair_config
from cute_conv.untuned import heuristic_config

# RegNet's 1x1 of C=120, K=336 at batch 128 on 28x28 maps: 128x192 tiles in 1x2 clusters,
# two 64-wide k-tiles, the second 56/64 full.
REGNET_120 = Conv2dProblemShape.from_shapes((128, 28, 28, 120), (336, 1, 1, 120))
ON_1X2 = Conv2dConfig(tile_n=192, cluster_n=2)


def test_a_short_partly_empty_1x1_takes_2x1_clusters():
    assert pointwise_pair_config(ON_1X2, REGNET_120) == dataclasses.replace(
        ON_1X2, cluster_m=2, cluster_n=1
    )
    call = heuristic_config(REGNET_120, 132)
    assert call.cluster_shape_mn == (2, 1)
    assert heuristic_config(REGNET_120, 132, has_residual=True).cluster_shape_mn == (2, 1)


@pytest.mark.parametrize(
    "config, problem, kwargs",
    [
        # full k-tiles: C=128
        (ON_1X2, Conv2dProblemShape.from_shapes((128, 28, 28, 128), (336, 1, 1, 128)), {}),
        # a long mainloop: C=888, 14 k-tiles
        (ON_1X2, Conv2dProblemShape.from_shapes((32, 7, 7, 888), (888, 1, 1, 888)), {}),
        # not a 1x1
        (ON_1X2, Conv2dProblemShape.from_shapes((8, 28, 28, 120), (336, 3, 3, 120)), {}),
        # other clusters and schedules, fp8, the rule off
        (Conv2dConfig(tile_n=192), REGNET_120, {}),
        (Conv2dConfig(tile_n=192, cluster_m=2), REGNET_120, {}),
        (dataclasses.replace(ON_1X2, stream_k=True), REGNET_120, {}),
        (ON_1X2, REGNET_120, {"element_bytes": 1}),
        (ON_1X2, REGNET_120, {"max_k_tiles": 0}),
    ],
    ids=["full", "long", "3x3", "single", "2x1", "stream-k", "fp8", "off"],
)
def test_the_rule_leaves_other_calls(config, problem, kwargs):
    assert pointwise_pair_config(config, problem, **kwargs) == config


@pytest.mark.parametrize(
    "kwargs, error",
    [({"max_k_tiles": -1}, ValueError), ({"max_k_tiles": "5"}, ValueError),
     ({"num_sms": 0}, ValueError)],
)  # fmt: skip
def test_bad_input_is_rejected(kwargs, error):
    with pytest.raises(error):
        pointwise_pair_config(ON_1X2, REGNET_120, **kwargs)


def test_residual_calls_are_taken_as_plain_ones():
    assert pointwise_pair_config(
        ON_1X2, REGNET_120, has_residual=True
    ) == dataclasses.replace(ON_1X2, cluster_m=2, cluster_n=1)


@pytest.mark.parametrize("form, count", [("plain", 33), ("fused", 34)])
def test_the_selection_is_1x2_1x1s_that_differ_in_their_cluster_only(form, count):
    chosen = sweep.pointwise_pair_problems(load_corpus(), form)
    assert len(chosen) == count
    for problem, own, paired in selected_configs(sweep.SWEEP, chosen, form):
        assert problem.R == problem.S == 1 and problem.C % own.tile_k
        assert own.cluster_shape_mn == (1, 2) and paired.cluster_shape_mn == (2, 1)
        assert dataclasses.replace(own, cluster_m=2, cluster_n=1) == paired


@pytest.mark.parametrize("form", sweep.FORMS)
def test_committed_rows_are_the_selection_and_every_config_passed(form):
    rows = json.loads(sweep.RESULTS_PATHS[form].read_text())["rows"]
    check_committed_rows(
        sweep.SWEEP, sweep.pointwise_pair_problems(load_corpus(), form), rows, form
    )


@pytest.mark.parametrize("form", sweep.FORMS)
def test_the_committed_rows_fit_the_bound(form):
    assert sweep.SWEEP.fit(form, sweep.RESULTS_PATHS[form]) == POINTWISE_PAIR_MAX_K_TILES
    assert sweep.SWEEP.on == math.inf
