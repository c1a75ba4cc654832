"""Wide split tiles for fused calls against their own config (CUDA graphs), and the rule's fit.

The variant: ``relu(conv + b) + r`` on the 128x256 / 256x128 tiles split by stream-K that plain
calls of long mainloops take (``default_config``'s ``wide_split_residual``, on since this
sweep); the fit is of its k-tile bound for residual calls (``WIDE_SPLIT_MIN_K_TILES``, which
plain calls share: the fit gave the same bound).

    python benchmarks/sweep_fused_wide_split.py [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_fused_wide_split.py --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than the H200's
(``wide_split_fused_sweep_H200.json``), e.g. an H100's (``*_H100.json``); ``--joint`` fits
both GPUs' train rows together.

Why: ``default_config`` gives plain 16-bit convs of at least ``WIDE_SPLIT_MIN_K_TILES``
k-tiles per tile wide tiles split by stream-K (``config.wide_split_shape``), fitted on plain
calls only; a fused call of the same conv keeps its narrower data-parallel tiles. On the
H200's corpus rows (2026-11-28) that left SD's 3x3s of C=1280..2560 on 8x8..32x32 maps
among the fused calls furthest behind the cuDNN frontend (0.75-0.79x under CUDA graphs),
e.g. n8_h8_w8_c2560_k1280: plain 57 us on the wide split, fused 89 us on 128x64 tiles.
On the H200's 18 rows (2026-11-28) the bound fitted on train is 180 (1.151x over the own
tiles; held-out 1.142x).

The problems: every corpus conv whose fused call's config (``untuned.untuned_config``, every
other rule at its fitted bound) changes when the rule takes residual calls at any bound from
``SELECTED`` k-tiles up. Per problem, in one process: both configs, each checked against the
float32 reference from a NaN-poisoned output, then replayed from CUDA graphs, cuDNN's plain
replay beside them; a rerun skips the problems already there. ``--fit`` scores each bound of
``MIN_K_TILES_GRID`` on the train problems (geomean of the own config's time over the time
of the config the bound gives), picks the best (the middle of ties), and reports the same on
the held-out problems, which the fit never sees.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import (  # noqa: E402
    BEFORE_LAST_WAVE,
    BEFORE_SQUARE_SPLIT,
    BoundSweep,
    fitted_before,
    gpu_results_paths,
    rule_bound_config,
)

JOINT_PATHS = gpu_results_paths("wide_split_fused_sweep")
RESULTS_PATHS = {"fused": JOINT_PATHS[0]}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
OFF = math.inf
# From 90 k-tiles: on plain calls every wide split of fewer than ~180 lost (sweep_wide_split.py),
# and below 90 the other rules make most of the rule's wide tiles 64-row data-parallel ones.
SELECTED = 90
MIN_K_TILES_GRID = (OFF, 90, 135, 180, 270, 360)

SWEEP = BoundSweep(
    rule_bound_config(
        "wide_split_min_k_tiles", NUM_SMS,
        **(fitted_before("lone_cta_max_k_tiles") | BEFORE_SQUARE_SPLIT | BEFORE_LAST_WAVE),
    ),
    off=OFF, on=SELECTED, baseline="own_tiles", variant="wide_split", grid=MIN_K_TILES_GRID,
    constants={"fused": "WIDE_SPLIT_MIN_K_TILES"},
)  # fmt: skip
configs_of, fused_wide_split_problems = SWEEP.configs_of, SWEEP.problems


if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS, JOINT_PATHS)
