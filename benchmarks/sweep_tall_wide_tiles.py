"""256-row tiles for 128-wide tiles of many waves against 128-row ones (CUDA graphs).

The variant: ``default_config`` gives plain 16-bit convs' 128-wide tiles of 128-byte k-tiles
256 rows from ``min_waves_tall_wide`` waves of 256-row M tiles (by default never); the fit of
``cute_conv.config._MIN_WAVES_TALL_WIDE``.

    python benchmarks/sweep_tall_wide_tiles.py [--form plain|fused|fp8] [--max-seconds 500]  # H100/H200
    python benchmarks/sweep_tall_wide_tiles.py [--form plain|fused|fp8] --fit                # no GPU

``--results PATH`` measures into (or fits from) another file than
``tall_wide_tiles_sweep.json`` (the H200's rows), e.g. ``tall_wide_tiles_sweep_H100.json``
(an H100's: measured when the rule took strided and 1x1 convs too, 36 of them, and cut to
this selection; the 27 left out lost at 256 rows, see ``default_config``). ``--form fused``
times the same convs with a residual (``tall_wide_tiles_fused_sweep_H200.json``): no bound
gained on the train part, so those calls keep 128 rows (``_MIN_WAVES_TALL_WIDE_FUSED``, never).
``--form fp8`` times them on e4m3 inputs (bf16 out, ``tall_wide_tiles_fp8_sweep_H200.json``),
the fit of ``_MIN_WAVES_TALL_WIDE_FP8``.

Why: a 128x128 tile loads 32 KB of A and filter per 64 channels for 1M MACs, which on a
3x3 conv of K=128 (VGG's 112x112 layers, the VAE decoders) binds on L2 traffic; a 256x128
tile loads 48 KB for 2M. The autotuner's candidates on large K=128 3x3 convs (H200) ran
VGG's batch-128 112x112 C=128 conv at 256x128 in 756 us against 822 at 128x128 (cuDNN 800),
its batch-32 form 191 against 204; at 6 waves of 128-row tiles (batch-8) 256x128 was no faster.

The problems: every stride-1 corpus conv of several taps whose plain call's config
(``untuned.untuned_config``, the other rules at their fitted bounds) changes when the bound
is ``MIN_WAVES_SELECTED`` (against never). Per problem, in one process: both configs, each checked against the float32
reference from a NaN-poisoned output, then replayed from CUDA graphs, cuDNN's replay beside
them; a rerun skips the problems already there.

``--fit`` scores each bound of ``MIN_WAVES_GRID`` on the train problems (geomean of the
128-row config's time over the time of the config the bound gives), picks the best (the
middle of ties), and reports the same on the held-out problems, which the fit never sees.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import FUSED_TALL_BEFORE_FIT, BoundSweep, rule_bound_config  # noqa: E402

RESULTS_PATHS = {
    "plain": HERE / "tall_wide_tiles_sweep.json",
    "fused": HERE / "tall_wide_tiles_fused_sweep_H200.json",
    "fp8": HERE / "tall_wide_tiles_fp8_sweep_H200.json",
}
# Each GPU's rows, fitted apart: both give the same bound.
GPU_PATHS = (RESULTS_PATHS["plain"], HERE / "tall_wide_tiles_sweep_H100.json")
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
MIN_WAVES_SELECTED = 1  # fewer waves were not measured
MIN_WAVES_GRID = (1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, math.inf)
FITTED = dict(
    single_warpgroup_max_k_tiles=None, single_warpgroup_widen_max_k_tiles=None,
    whole_source_min_k=None, halo_min_column_fill=None, wide_epilogue_max_k_tiles=None,
    min_waves_tall=FUSED_TALL_BEFORE_FIT,
)  # fmt: skip

SWEEP = BoundSweep(
    rule_bound_config("min_waves_tall_wide", NUM_SMS, **FITTED), off=math.inf,
    on=MIN_WAVES_SELECTED, baseline="rows_128", variant="rows_256", grid=MIN_WAVES_GRID,
    constants={
        "plain": "_MIN_WAVES_TALL_WIDE", "fused": "_MIN_WAVES_TALL_WIDE_FUSED",
        "fp8": "_MIN_WAVES_TALL_WIDE_FP8",
    },
)  # fmt: skip
configs_of, tall_wide_problems = SWEEP.configs_of, SWEEP.problems


if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS)
