"""Wider 64-row tiles for sub-wave plain convs against the config without them (CUDA graphs).

The variant: where 64-row tiles of the config's own width are more than a wave, those of a
wider one; the fit of ``cute_conv.small_grid_rules``'s ``SINGLE_WARPGROUP_WIDEN_MAX_K_TILES`` and
``SINGLE_WARPGROUP_WIDEN_MAX_SHARE``.

    python benchmarks/sweep_widened_m64.py [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_widened_m64.py --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than ``widened_m64_sweep.json``,
e.g. a second GPU's rows (``widened_m64_sweep_H100.json``); ``--joint`` fits both GPUs' train
rows together.

Why: the single-warpgroup rule (``sweep_tile_m64.py``) gives a conv of fewer 128-row tiles
than SMs 64-row tiles of the same width where twice as many still fit one wave. Where they do
not, the conv kept its 128-row tiles and idle SMs: SDXL's batch-1 1x1 of C=960, K=640 at
32x32 runs 80 tiles of 128x64 on 132 SMs (H100: 9.8 us, cuDNN 8.4), where 128 tiles of 64x80
would give each SM 0.62 of the work. The variant takes the narrowest width below twice the
config's whose 64-row tiles fit a wave (``small_grid_rules.widened_single_warpgroup_width``).

The problems: every corpus conv whose plain call's config (``untuned.untuned_config``, the
other rules at their fitted bounds) changes when the widening takes every mainloop length
the single-warpgroup rule takes and every width (``single_warpgroup_widen_max_k_tiles=inf``,
``single_warpgroup_widen_max_share=1``, against a bound of 0 k-tiles). Per
problem, in one process: both configs, each checked against the float32 reference from a
NaN-poisoned output, then replayed from CUDA graphs, cuDNN's replay beside them; a rerun
skips the problems already there.

``--fit`` scores each pair of bounds (``MAX_K_TILES_GRID`` x ``MAX_SHARE_GRID``: the most
k-tiles, and the most of the 128-row tile's output a 64-row tile may hold) on the train
problems (geomean of the unwidened time over the time of the config the bounds give), picks
the best (the middle of ties), and reports the same on the held-out problems, which the fit
never sees.
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import BoundSweep, rule_bound_config  # noqa: E402

RESULTS_PATHS = {"plain": HERE / "widened_m64_sweep.json"}
JOINT_PATHS = (HERE / "widened_m64_sweep.json", HERE / "widened_m64_sweep_H100.json")
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
MAX_K_TILES_GRID = (0, 4, 8, 12, 16, 20, 30, 40, 72)
MAX_SHARE_GRID = (0.625, 0.7, 0.75, 0.8, 0.85, 0.9, 1.0)
BOUNDS = ("single_warpgroup_widen_max_k_tiles", "single_warpgroup_widen_max_share")
FITTED = dict(
    single_warpgroup_max_k_tiles=None, whole_source_min_k=None, halo_min_column_fill=None,
    wide_epilogue_max_k_tiles=None,
)  # fmt: skip

SWEEP = BoundSweep(
    rule_bound_config(BOUNDS, NUM_SMS, **FITTED), off=(0, 1.0), on=(math.inf, 1.0),
    baseline="unwidened", variant="widened",
    grid=tuple(itertools.product(MAX_K_TILES_GRID, MAX_SHARE_GRID)),
    constants={"plain": ("SINGLE_WARPGROUP_WIDEN_MAX_K_TILES", "SINGLE_WARPGROUP_WIDEN_MAX_SHARE")},
    constants_module="cute_conv.small_grid_rules",
)  # fmt: skip
configs_of, widened_problems = SWEEP.configs_of, SWEEP.problems


if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS, JOINT_PATHS)
