"""The bound of 192x128 tiles (``default_config``'s ``three_warpgroup_max_cost``) and its sweep
(benchmarks/sweep_three_warpgroup.py): which problems and configs it measures, that the
committed rows are them and keep the bound, and bad bounds."""

from __future__ import annotations

import json

import pytest
import sweep_three_warpgroup as sweep
from bench_corpus import load_corpus
from bound_sweep_rows import check_committed_rows, selected_configs
from sweep_rows import by_split, passed_rows

from cute_conv import Conv2dProblemShape
from cute_conv.config import THREE_WARPGROUP_MAX_COST, default_config

# RegNet's n128 7x7 C=K=1008 1x1: 1.86 waves of 128x208 tiles, 2.00 of 192x128, which the wave
# model costs 1.06x dearer (2 x 192 x (128 + 64) against 2 x 128 x (208 + 64)).
EVEN_COST = Conv2dProblemShape.from_shapes((128, 7, 7, 1008), (1008, 1, 1, 1008))


@pytest.mark.parametrize("form", sweep.FORMS)
def test_the_selection_is_convs_that_turn_192x128(form):
    """Today's tiles are 128 rows, or 256 where the halo rule made them so from 128."""
    chosen = sweep.SWEEP.problems(load_corpus(), form)
    assert len(chosen) >= 50
    for _, today, three in selected_configs(sweep.SWEEP, chosen, form):
        assert today.tile_m in (128, 256) and (three.tile_m, three.tile_n) == (192, 128)


@pytest.mark.parametrize("form", sweep.FORMS)
def test_committed_rows_are_the_selection_and_every_config_passed(form):
    rows = json.loads(sweep.RESULTS_PATHS[form].read_text())["rows"]
    check_committed_rows(sweep.SWEEP, sweep.SWEEP.problems(load_corpus(), form), rows, form)


def test_the_committed_fused_rows_fit_todays_bound():
    assert sweep.SWEEP.fit("fused", sweep.RESULTS_PATHS["fused"]) == THREE_WARPGROUP_MAX_COST


def test_no_wider_bound_pays_for_plain_calls():
    """The plain rows' train part scores every bound within 0.5% of today's (the fit's pick,
    1.1, by 0.1%), and the held-out part loses at every wider bound: the bound stays."""
    train, held = by_split(passed_rows(json.loads(sweep.RESULTS_PATHS["plain"].read_text())))
    for bound in sweep.MAX_COST_GRID[1:]:
        assert abs(sweep.SWEEP.score(train, bound, "plain") - 1) < 0.005
        assert sweep.SWEEP.score(held, bound, "plain") < 0.99


def test_the_bound_moves_the_choice():
    assert default_config(EVEN_COST, 132).tile_m == 128
    assert default_config(EVEN_COST, 132, three_warpgroup_max_cost=1.1).tile_m == 192
    with pytest.raises(TypeError, match="three_warpgroup_max_cost must be None or a number"):
        default_config(EVEN_COST, 132, three_warpgroup_max_cost="1.0")
