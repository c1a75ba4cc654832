"""The tall-tile sweep's CPU parts (benchmarks/sweep_tall_tiles.py): which problems and
configs it measures, that the committed rows are that selection with every config passed its
check, and that the fit gives ``default_config``'s bound of each form (plain and fused 16-bit
calls, fp8 calls)."""

from __future__ import annotations

import json

import pytest
import sweep_tall_tiles as sweep
from bench_corpus import load_corpus, problem_shape
from bound_sweep_rows import check_committed_rows

from cute_conv import Conv2dProblemShape, config


def test_the_selection_is_narrow_128_row_tiles_made_256_rows():
    chosen = sweep.tall_problems(load_corpus())
    assert len(chosen) >= 30
    for p in chosen:
        configs = sweep.configs_of(problem_shape(p))
        base, tall = configs[sweep.SWEEP.baseline], configs[sweep.SWEEP.variant]
        assert (base.tile_m, tall.tile_m) == (128, 256) and base.tile_n == tall.tile_n <= 128


def test_the_fused_selection_is_todays_residual_calls_made_256_rows():
    """The convs whose residual call takes 256 rows from 0.5 waves but not from 4; a
    ping-pong call (128x128) leaves ping-pong at 256 rows."""
    chosen = sweep.tall_problems(load_corpus(), "fused")
    assert len(chosen) >= 30
    for p in chosen:
        configs = sweep.configs_of(problem_shape(p), "fused")
        base, tall = configs[sweep.SWEEP.baseline], configs[sweep.SWEEP.variant]
        assert (base.tile_m, tall.tile_m) == (128, 256) and tall.tile_n <= 128
        assert base.tile_n == tall.tile_n or base.pingpong


def test_the_fused_fp8_selection_is_fp8_residual_calls_made_256_rows():
    """fp8 calls with a residual: the fp8 form's e4m3 K tiles, not the bf16 residual call's."""
    chosen = sweep.tall_problems(load_corpus(), "fused_fp8")
    assert len(chosen) >= 30
    k_tiles_differ = False
    for p in chosen:
        problem = problem_shape(p)
        configs = sweep.configs_of(problem, "fused_fp8")
        base, tall = configs[sweep.SWEEP.baseline], configs[sweep.SWEEP.variant]
        assert (base.tile_m, tall.tile_m) == (128, 256) and tall.tile_n <= 128
        bf16 = sweep.configs_of(problem, "fused")[sweep.SWEEP.baseline]
        fp8 = sweep.configs_of(problem, "fp8")[sweep.SWEEP.baseline]
        assert base.tile_k == fp8.tile_k
        k_tiles_differ |= base.tile_k != bf16.tile_k
    assert k_tiles_differ


@pytest.mark.parametrize("path", sweep.GPU_PATHS, ids=["H200", "H100"])
def test_committed_rows_are_the_selection_and_every_config_passed(path):
    rows = json.loads(path.read_text())["rows"]
    check_committed_rows(sweep.SWEEP, sweep.tall_problems(load_corpus()), rows, "plain")


@pytest.mark.parametrize("path", sweep.GPU_PATHS, ids=["H200", "H100"])
def test_each_gpus_fit_gives_the_plain_bound(path):
    assert sweep.SWEEP.fit("plain", path) == config._MIN_WAVES_TALL


@pytest.mark.parametrize("form", ["fused", "fp8", "fused_fp8"])
def test_committed_rows_of_each_form_are_the_selection_and_the_fit_gives_its_bound(form):
    """Each form's H200 rows fitted apart give the constant ``default_config`` takes for it
    (fp8 calls with a residual share the plain fp8 calls' ``_MIN_WAVES_TALL_FP8``)."""
    path = sweep.RESULTS_PATHS[form]
    rows = json.loads(path.read_text())["rows"]
    check_committed_rows(sweep.SWEEP, sweep.tall_problems(load_corpus(), form), rows, form)
    assert sweep.SWEEP.fit(form, path) == getattr(config, sweep.SWEEP.constants[form])


def test_each_form_takes_its_own_bound():
    # RegNet's batch-8 112x112 1x1, C=32 -> K=96: 2.97 waves of 256-row tiles.
    problem = Conv2dProblemShape.from_shapes((8, 112, 112, 32), (96, 1, 1, 32))
    assert config.default_config(problem).tile_m == 256
    assert config.default_config(problem, has_residual=True).tile_m == 256
    assert config.default_config(problem, element_bytes=1).tile_m == 256
    assert config.default_config(problem, min_waves_tall=4).tile_m == 128
    assert config.default_config(problem, element_bytes=1, min_waves_tall=4).tile_m == 128
    # ResNet's batch-1 224x224 3x3 at C=64: 1.48 waves, 256 rows with a residual or on fp8.
    stem_stage = Conv2dProblemShape.from_shapes((1, 224, 224, 64), (64, 3, 3, 64), padding=1)
    assert config.default_config(stem_stage).tile_m == 128
    assert config.default_config(stem_stage, has_residual=True).tile_m == 256
    assert config.default_config(stem_stage, element_bytes=1).tile_m == 256
    with pytest.raises(TypeError, match="min_waves_tall must be None or a number of waves"):
        config.default_config(problem, min_waves_tall="4")
