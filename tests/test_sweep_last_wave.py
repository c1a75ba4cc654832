"""The last-wave rule (``small_grid_rules.last_wave_config``) and its sweep's CPU parts
(benchmarks/sweep_last_wave.py): which convs it takes, that the committed rows are the
sweep's selection (the corpus's and the family's) with every config passed its check, that
the fit on the train rows gives the rule's bounds, and that the rule gains on the family it
never saw."""

from __future__ import annotations

import json
import math

import pytest
import sweep_last_wave as sweep
from bench_corpus import problem_shape
from bound_sweep_rows import check_committed_rows

from cute_conv import Conv2dConfig, Conv2dProblemShape, small_grid_rules
from cute_conv.config import default_config
from cute_conv.untuned import heuristic_config

# DeepLab's 1x1 at batch 8, 65x65, C=2048, K=512: 265 cluster tiles of 128x256 in 1x2
# clusters on 66 clusters, 4.02 waves, 32 k-tiles per tile.
DEEPLAB_1X1 = Conv2dProblemShape.from_shapes((8, 65, 65, 2048), (512, 1, 1, 2048))


def test_the_rule_takes_a_mostly_empty_last_wave_of_long_tiles():
    base = Conv2dConfig(tile_n=256, cluster_n=2)
    taken = small_grid_rules.last_wave_config(base, DEEPLAB_1X1)
    assert taken == Conv2dConfig(tile_n=256, cluster_n=2, stream_k=True)
    assert small_grid_rules.last_wave_fill(265 / 66) == pytest.approx(265 / 330)


@pytest.mark.parametrize(
    "config, problem",
    [
        # a CTA's share too short: 4.02 waves of 8 k-tiles (C=512), 32 k-tiles
        (
            Conv2dConfig(tile_n=256, cluster_n=2),
            Conv2dProblemShape.from_shapes((8, 65, 65, 512), (512, 1, 1, 512)),
        ),
        # whole waves: 4 waves of 128x128 tiles
        (Conv2dConfig(), Conv2dProblemShape.from_shapes((8, 64, 66, 2048), (128, 1, 1, 2048))),
        # below one wave, gathered, halo tiles, 4-CTA clusters, already split
        (Conv2dConfig(), Conv2dProblemShape.from_shapes((1, 65, 65, 2048), (128, 1, 1, 2048))),
        (Conv2dConfig(gather=True), DEEPLAB_1X1),
        (Conv2dConfig(tile_n=256, cluster_n=4), DEEPLAB_1X1),
        (Conv2dConfig(tile_n=256, stream_k=True, stream_k_split=2), DEEPLAB_1X1),
    ],
    ids=["short-share", "whole-waves", "sub-wave", "gathered", "4-cta", "split"],
)
def test_the_rule_leaves_other_configs(config, problem):
    assert small_grid_rules.last_wave_config(config, problem) == config


def test_fp8_calls_are_not_taken():
    base = Conv2dConfig(tile_n=256, tile_k=128, cluster_n=2)
    assert small_grid_rules.last_wave_config(base, DEEPLAB_1X1, element_bytes=1) == base


def test_a_call_of_the_deeplab_1x1_takes_stream_k():
    config = heuristic_config(DEEPLAB_1X1, 132)
    assert config.stream_k and config.stream_k_split == 0
    assert heuristic_config(DEEPLAB_1X1, 132, element_bytes=1).stream_k is False


def test_the_fused_deeplab_1x1_takes_stream_k_at_256_wide_tiles_only():
    """Fused, the rule took it at 128x256 tiles; the residual 1x1 narrowing fitted since
    (``RESIDUAL_NARROW_POINTWISE_MAX_GEMM_K``) gives it 128x128 tiles, ~8 waves of them,
    which the rule leaves data-parallel (measured faster than the stream-K 128x256 config:
    ``benchmarks/residual_pointwise_width_sweep_H200.json``)."""
    wide = default_config(DEEPLAB_1X1, has_residual=True, residual_narrow_pointwise_max_k=0)
    taken = small_grid_rules.last_wave_config(wide, DEEPLAB_1X1, has_residual=True)
    assert taken.stream_k and taken.stream_k_split == 0
    config = heuristic_config(DEEPLAB_1X1, 132, has_residual=True)
    assert config.tile_n == 128 and not config.stream_k


@pytest.mark.parametrize("form", sweep.FORMS)
def test_committed_rows_are_the_selection_and_every_config_passed(form):
    rows = json.loads(sweep.RESULTS_PATHS[form].read_text())["rows"]
    selected = sweep.last_wave_problems(sweep.SWEEP.all_problems(), form)
    check_committed_rows(sweep.SWEEP, selected, rows, form)
    assert sum(r["split"] == "family" for r in rows) == len(sweep.family_problems()) == 39


def test_the_family_is_drawn_outside_the_corpus_and_the_rule_takes_it():
    for p in sweep.family_problems():
        assert p["split"] == "family" and p["key"].startswith("family_")
        calls = [heuristic_config(problem_shape(p), 132, has_residual=r) for r in (False, True)]
        assert any(c.stream_k and not c.stream_k_split for c in calls)


@pytest.mark.parametrize("form", sweep.FORMS)
def test_the_fit_gives_the_rules_bounds_and_gains_on_the_family(form, capsys):
    names = sweep.SWEEP.constants[form]
    bounds = tuple(getattr(small_grid_rules, name) for name in names)
    assert sweep.SWEEP.fit(form, sweep.RESULTS_PATHS[form]) == bounds
    family = [r for r in json.loads(sweep.RESULTS_PATHS[form].read_text())["rows"]
              if r["split"] == "family"]  # fmt: skip
    assert sweep.SWEEP.score(family, bounds, form) > 1.04
    assert "family (39, never fitted on)" in capsys.readouterr().out


def test_bounds_are_checked():
    with pytest.raises(TypeError, match="max_fill must be None or a number of wave fills"):
        small_grid_rules.last_wave_config(Conv2dConfig(), DEEPLAB_1X1, max_fill="0.8")
    with pytest.raises(TypeError, match="min_k_tiles must be None or a number of k-tiles"):
        small_grid_rules.last_wave_config(Conv2dConfig(), DEEPLAB_1X1, min_k_tiles="x")
    with pytest.raises(TypeError, match="config must be a Conv2dConfig"):
        small_grid_rules.last_wave_config(None, DEEPLAB_1X1)
    # 128x128 tiles: 8.03 waves, 0.89 full, taken without an upper bound on the fill
    assert small_grid_rules.last_wave_config(
        Conv2dConfig(), DEEPLAB_1X1, max_fill=math.inf
    ).stream_k
    assert not small_grid_rules.last_wave_config(Conv2dConfig(), DEEPLAB_1X1).stream_k
