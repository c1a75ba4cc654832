"""256-row tiles for narrow-tile convs of fewer waves against 128-row ones (CUDA graphs).

The variant: ``default_config`` gives 64-wide tiles (and narrower ones on short k-tiles)
256 rows from ``min_waves_tall`` waves of 256-row M tiles instead of 4; the fit of
``cute_conv.config._MIN_WAVES_TALL``.

    python benchmarks/sweep_tall_tiles.py [--form FORM] [--max-seconds 500]  # H100/H200
    python benchmarks/sweep_tall_tiles.py [--form FORM] --fit                # no GPU

``--results PATH`` measures into (or fits from) another file than ``tall_tiles_sweep.json``
(the H200's rows), e.g. ``tall_tiles_sweep_H100.json``, an H100's. ``--form fused`` times the
same rule on calls with a residual (``tall_tiles_fused_sweep_H200.json``), the fit of
``_MIN_WAVES_TALL_FUSED``; ``--form fp8`` on e4m3 inputs (bf16 out,
``tall_tiles_fp8_sweep_H200.json``), the fit of ``_MIN_WAVES_TALL_FP8``, and ``--form
fused_fp8`` both (``tall_tiles_fused_fp8_sweep_H200.json``), fp8 calls with a residual.

Why: the bound of 4 waves was measured on the suite's shapes (ResNet-50's 56x56 3x3 and
the stem). The autotuner's candidates on the corpus's worst rows (H100) ran RegNet's batch-8
112x112 1x1 of C=32, K=48 (2.97 waves of 256-row tiles) at 256x64 on 2x1 clusters in 12.9
us against 14.2 at the default 128x64 (cuDNN 12.4).

The problems: every corpus conv whose plain call's config (``untuned.untuned_config``, the
other rules at their fitted bounds) changes when the bound is ``MIN_WAVES_SELECTED``
(against 4). Per problem, in one process: both configs, each checked against the float32
reference from a NaN-poisoned output, then replayed from CUDA graphs, cuDNN's replay beside
them; a rerun skips the problems already there.

``--fit`` scores each bound of ``MIN_WAVES_GRID`` on the train problems (geomean of the
4-wave config's time over the time of the config the bound gives), picks the best (the
middle of ties), and reports the same on the held-out problems, which the fit never sees.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import BoundSweep, rule_bound_config  # noqa: E402

RESULTS_PATHS = {
    "plain": HERE / "tall_tiles_sweep.json",
    "fused": HERE / "tall_tiles_fused_sweep_H200.json",
    "fp8": HERE / "tall_tiles_fp8_sweep_H200.json",
    "fused_fp8": HERE / "tall_tiles_fused_fp8_sweep_H200.json",
}
# Each GPU's rows, fitted apart: both give the same bound.
GPU_PATHS = (RESULTS_PATHS["plain"], HERE / "tall_tiles_sweep_H100.json")
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
MIN_WAVES_SELECTED = 0.5  # fewer waves were not measured
MIN_WAVES_GRID = (0.5, 0.75, 1, 1.5, 2, 3, 4)
FITTED = dict(
    single_warpgroup_max_k_tiles=None, single_warpgroup_widen_max_k_tiles=None,
    whole_source_min_k=None, halo_min_column_fill=None, wide_epilogue_max_k_tiles=None,
)  # fmt: skip

SWEEP = BoundSweep(
    rule_bound_config("min_waves_tall", NUM_SMS, **FITTED), off=4, on=MIN_WAVES_SELECTED,
    baseline="four_waves", variant="tall", grid=MIN_WAVES_GRID,
    constants={
        "plain": "_MIN_WAVES_TALL", "fused": "_MIN_WAVES_TALL_FUSED", "fp8": "_MIN_WAVES_TALL_FP8",
        "fused_fp8": "_MIN_WAVES_TALL_FP8",
    },
)  # fmt: skip
configs_of, tall_problems = SWEEP.configs_of, SWEEP.problems


if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS)
