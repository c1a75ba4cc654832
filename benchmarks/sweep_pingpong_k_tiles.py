"""Ping-pong tiles for fused 1x1s against their config without them (CUDA graphs), and a fit.

The fit is of an upper bound on the k-tiles of the convs that take them, on today's configs.

    python benchmarks/sweep_pingpong_k_tiles.py [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_pingpong_k_tiles.py --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than the H200's
(``pingpong_k_tiles_fused_sweep_H200.json``), e.g. an H100's (``*_H100.json``); ``--joint``
fits both GPUs' train rows together.

Why: a fused pointwise conv of at least 4 k-tiles and two 128x128 tiles per SM takes
ping-pong tiles (``config.pingpong_pays``), fitted without an upper bound on session 24's
configs (``sweep_pingpong.py``, H100). On the H200's corpus rows of 2026-11-28, 19 of the
72 fused calls on ping-pong tiles run behind the cuDNN frontend (0.86-0.98x under CUDA
graphs), every one of them a conv of C >= 640 (10-40 k-tiles), where the plain call of the
same conv takes 128x160..256 tiles; none of C <= 512 (4-8 k-tiles) is behind. In the H100's
older rows ping-pong lost on long mainloops (C=960 K=320 0.76-0.87x) and won on short ones
of wide K (C <= 512, K >= 1024: 1.1-1.3x).

The problems: every corpus conv whose fused call (``untuned.untuned_config``, every other rule
at its fitted bound) takes ping-pong today. Per problem, in one process: that config and the
one without ping-pong (the bound 0), each checked against the float32 reference from a
NaN-poisoned output, then replayed from CUDA graphs, cuDNN's plain replay beside them; a
rerun skips the problems already there. ``--fit`` scores each bound of ``MAX_K_TILES_GRID``
on the train problems (geomean of the time without ping-pong over the time of the config
the bound gives), picks the best (the middle of ties), and reports the same on the held-out
problems, which the fit never sees.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import (  # noqa: E402
    BEFORE_LAST_WAVE,
    BEFORE_PAIRED_M,
    BoundSweep,
    fitted_before,
    gpu_results_paths,
    rule_bound_config,
)

JOINT_PATHS = gpu_results_paths("pingpong_k_tiles_fused_sweep")
RESULTS_PATHS = {"fused": JOINT_PATHS[0]}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
MAX_K_TILES_GRID = (0, 4, 6, 8, 10, 12, 16, 20, 32, math.inf)

SWEEP = BoundSweep(
    # The 2x1 clusters of sweep_paired_m.py and the last-wave rule came after this sweep.
    rule_bound_config(
        "pingpong_max_k_tiles", NUM_SMS,
        **(fitted_before("lone_cta_max_k_tiles") | BEFORE_PAIRED_M | BEFORE_LAST_WAVE),
    ),
    off=0, on=math.inf, baseline="no_pingpong", variant="pingpong", grid=MAX_K_TILES_GRID,
    constants={"fused": "PINGPONG_MAX_K_TILES"},
)  # fmt: skip
configs_of, pingpong_problems = SWEEP.configs_of, SWEEP.problems


if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS, JOINT_PATHS)
