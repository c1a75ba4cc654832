"""The narrow halo sweep's CPU parts (benchmarks/sweep_halo_narrow.py): which problems and
configs it measures, that the committed rows are that selection with every config passed its
check, and that each GPU's joint fit gives the halo rule's narrow bounds."""

from __future__ import annotations

import json

import pytest
import sweep_halo_narrow as sweep
from bench_corpus import load_corpus, problem_shape
from bound_sweep_rows import check_committed_rows

from cute_conv import Conv2dProblemShape, halo_rule
from cute_conv.untuned import heuristic_config


@pytest.mark.parametrize("form", sweep.FORMS)
def test_the_selection_is_narrow_halo_tiles_of_3x3_like_convs(form):
    chosen = sweep.narrow_problems(load_corpus(), form)
    assert len(chosen) >= 10
    for p in chosen:
        problem = problem_shape(p)
        assert problem.S > 1 and problem.dilation == (1, 1) and problem.stride == (1, 1)
        configs = sweep.configs_of(problem, form)
        base, halo = configs[sweep.SWEEP.baseline], configs[sweep.SWEEP.variant]
        assert not base.tile_w and (halo.tile_m, halo.tile_w) == (256, 64)
        assert halo.tile_n <= halo_rule.HALO_NARROW_TILE_N


@pytest.mark.parametrize("gpu", sweep.GPUS)
@pytest.mark.parametrize("form", sweep.FORMS)
def test_committed_rows_are_the_selection_and_every_config_passed(form, gpu):
    rows = json.loads(sweep.results_path(form, gpu).read_text())["rows"]
    check_committed_rows(sweep.SWEEP, sweep.narrow_problems(load_corpus(), form), rows, form)


@pytest.mark.parametrize("gpu", sweep.GPUS)
def test_each_gpus_joint_fit_gives_the_narrow_bounds(gpu):
    bounds = (halo_rule.HALO_NARROW_MIN_COLUMN_FILL, halo_rule.HALO_NARROW_MIN_WAVES)
    assert sweep.joint_fit(gpu) == bounds


def test_vggs_224_column_3x3_takes_narrow_halo_tiles_but_not_in_fp8():
    # Q=224: 4 tiles of 64 columns per row, 0.875 of them real; 13.6 waves at batch 8.
    problem = Conv2dProblemShape.from_shapes((8, 224, 224, 64), (64, 3, 3, 64), padding=1)
    plain = heuristic_config(problem, 132)
    assert (plain.tile_m, plain.tile_n, plain.tile_w) == (256, 64, 64)
    assert heuristic_config(problem, 132, has_residual=True).tile_w == 64
    assert not heuristic_config(problem, 132, element_bytes=1).tile_w
    # Batch 1: 1.7 waves of halo tiles, below the bound.
    single = Conv2dProblemShape.from_shapes((1, 224, 224, 64), (64, 3, 3, 64), padding=1)
    assert not heuristic_config(single, 132).tile_w
