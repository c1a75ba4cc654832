"""Wide split tiles for residual calls (``default_config``'s ``wide_split_residual``, off) and
the CPU parts of their sweep (benchmarks/sweep_fused_wide_split.py): which problems and
configs it measures, and that without measured rows the fit says so."""

from __future__ import annotations

import pytest
import sweep_fused_wide_split as sweep
from bench_corpus import load_corpus
from bound_sweep_rows import selected_configs

from cute_conv import Conv2dProblemShape
from cute_conv.config import WIDE_SPLIT_MIN_K_TILES, default_config, wide_split_shape
from cute_conv.schedule import schedule_shape
from cute_conv.untuned import heuristic_config

# SD 1.5's UNet 3x3 at batch 8 on 8x8 maps, C=2560, K=1280: 360 k-tiles per tile.
SD_8X8 = Conv2dProblemShape.from_shapes((8, 8, 8, 2560), (1280, 3, 3, 2560), padding=1)


def test_the_selection_is_fused_calls_made_wide_splits():
    chosen = sweep.fused_wide_split_problems(load_corpus(), "fused")
    assert len(chosen) >= 10
    for problem, own, wide in selected_configs(sweep.SWEEP, chosen, "fused"):
        # The baseline is what a fused call without a config runs today.
        assert own == heuristic_config(problem, 132, has_residual=True) and not own.stream_k
        assert (wide.tile_m, wide.tile_n) in ((128, 256), (256, 128))
        assert wide.stream_k and wide.stream_k_split >= 2
        assert wide_split_shape(problem, 132, sweep.SELECTED) == (
            wide.tile_m, wide.tile_n, wide.stream_k_split,
        )  # fmt: skip
        assert schedule_shape(problem, wide.tile_m, wide.tile_n, wide.tile_k)[1] >= sweep.SELECTED


def test_fused_calls_keep_their_tiles_unless_the_switch_is_on():
    plain = default_config(SD_8X8, 132)
    assert (plain.tile_m, plain.tile_n, plain.stream_k) == (128, 256, True)
    fused = default_config(SD_8X8, 132, has_residual=True)
    assert fused.tile_n < 256 and not fused.stream_k
    assert default_config(SD_8X8, 132, has_residual=True, wide_split_residual=True) == plain
    # The bound: past the tile's 360 k-tiles neither form takes the wide split.
    assert default_config(SD_8X8, 132, wide_split_min_k_tiles=361).tile_n < 256
    assert WIDE_SPLIT_MIN_K_TILES <= 360


def test_the_fit_without_measured_rows_says_so(tmp_path):
    with pytest.raises(SystemExit, match="no measured train rows"):
        sweep.SWEEP.fit("fused", tmp_path / "none.json")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(wide_split_residual=1), "wide_split_residual must be a bool, got 1"),
        (dict(wide_split_min_k_tiles="180"), "wide_split_min_k_tiles must be None or a number"),
    ],
)
def test_the_switch_and_the_bound_are_checked(kwargs, message):
    with pytest.raises(TypeError, match=message):
        default_config(SD_8X8, 132, **kwargs)
