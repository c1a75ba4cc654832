"""2x1 clusters for 1x1 convs whose channels leave a k-tile partly empty (``default_config``'s
``paired_m_max_channel_fill``) and their sweep (benchmarks/sweep_paired_m.py): which problems
and configs it measures, that the committed rows are them and fit the bounds, and bad
bounds."""

from __future__ import annotations

import dataclasses
import json

import pytest
import sweep_paired_m as sweep
from bench_corpus import load_corpus
from bound_sweep_rows import check_committed_rows, selected_configs

from cute_conv import Conv2dProblemShape
from cute_conv.config import (
    PAIRED_M_MAX_CHANNEL_FILL,
    PAIRED_M_MAX_CHANNEL_FILL_FUSED,
    default_config,
)
from cute_conv.staging import kernel_problem_for

# RegNet's 1x1 of C=K=120 at batch 128 on 28x28 maps: two 64-wide k-tiles, the second 56/64.
REGNET_120 = Conv2dProblemShape.from_shapes((128, 28, 28, 120), (120, 1, 1, 120))
# The same with C=128: its k-tiles full.
FULL_128 = Conv2dProblemShape.from_shapes((128, 28, 28, 128), (120, 1, 1, 128))
BOUNDS = {"plain": PAIRED_M_MAX_CHANNEL_FILL, "fused": PAIRED_M_MAX_CHANNEL_FILL_FUSED}


@pytest.mark.parametrize("form", sweep.FORMS)
def test_the_selection_is_single_cta_1x1s_that_differ_in_their_cluster_only(form):
    chosen = sweep.paired_m_problems(load_corpus(), form)
    assert len(chosen) >= 50
    for problem, single, paired in selected_configs(sweep.SWEEP, chosen, form):
        kernel_problem = kernel_problem_for(problem, 2)  # a staged stem runs as a 1x1
        assert kernel_problem.R == kernel_problem.S == 1
        assert single.cluster_shape_mn == (1, 1) and paired.cluster_shape_mn == (2, 1)
        assert not single.stream_k and not paired.dynamic_schedule
        assert dataclasses.replace(single, cluster_m=2, dynamic_schedule=False) == paired


@pytest.mark.parametrize("form", sweep.FORMS)
def test_committed_rows_are_the_selection_and_every_config_passed(form):
    rows = json.loads(sweep.RESULTS_PATHS[form].read_text())["rows"]
    check_committed_rows(sweep.SWEEP, sweep.paired_m_problems(load_corpus(), form), rows, form)


@pytest.mark.parametrize("form", sweep.FORMS)
def test_the_committed_rows_fit_the_bound(form):
    assert sweep.SWEEP.fit(form, sweep.RESULTS_PATHS[form]) == BOUNDS[form]


@pytest.mark.parametrize("has_residual", [False, True])
def test_partly_empty_k_tiles_take_2x1_clusters(has_residual):
    paired = default_config(REGNET_120, 132, has_residual=has_residual)
    assert paired.cluster_shape_mn == (2, 1) and not paired.dynamic_schedule
    single = default_config(
        REGNET_120, 132, has_residual=has_residual, paired_m_max_channel_fill=0
    )
    assert single.cluster_shape_mn == (1, 1)
    assert default_config(FULL_128, 132, has_residual=has_residual).cluster_shape_mn == (1, 1)
    # fp8 calls were not measured: C=120 of 128-wide fp8 k-tiles keeps its cluster.
    fp8 = default_config(REGNET_120, 132, has_residual=has_residual, element_bytes=1)
    assert fp8.cluster_shape_mn == (1, 1)


def test_the_bound_is_checked():
    with pytest.raises(TypeError, match="paired_m_max_channel_fill must be None or a number"):
        default_config(REGNET_120, 132, paired_m_max_channel_fill="0.99")
