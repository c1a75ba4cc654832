"""64-wide epilogue subtiles for plain convs: against the 32-wide ones, replayed from CUDA
graphs; the fit of ``cute_conv.epilogue_rule``'s bounds (``WIDE_EPILOGUE_MAX_K_TILES``,
``WIDE_EPILOGUE_MIN_AB_STAGES``).

    python benchmarks/sweep_epi_width.py [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_epi_width.py --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than ``epi_width_sweep.json``,
e.g. a second GPU's rows (``epi_width_sweep_H100.json``); ``--joint`` fits both GPUs' train
rows together.

Why: a plain kernel stores its output tile in 32-wide subtiles, each a barrier round of the
consumer warps and a TMA store of 64-byte rows. On RegNet's 1x1 convs of C=48 and C=120 (one
or two k-tiles per tile) that loop is most of a tile's time; an H200 ran
n32_h56_w56_c48_k120 at 23.7 us in 32-wide subtiles and 21.2 us in 64-wide ones (cuDNN 17.5).
A 64-wide buffer takes twice the SMEM, so the A/B ring is a stage or two shallower, which a
long mainloop may feel.

The problems: every corpus conv whose plain call's config (``untuned.untuned_config``, the
other rules at their fitted bounds) changes when the rule takes every mainloop length
(``wide_epilogue_max_k_tiles=inf``, ``wide_epilogue_min_ab_stages=2``, against a bound of
0 k-tiles). Per problem, in one process: both configs,
each checked against the float32 reference from a NaN-poisoned output, then replayed from
CUDA graphs, cuDNN's replay beside them; a rerun skips the problems already there.

``--fit`` scores each pair of bounds (``MAX_K_TILES_GRID`` x ``MIN_AB_STAGES_GRID``) on the
train problems (geomean of the 32-wide time over the time of the config those bounds give),
picks the best (the middle of ties), and reports the same on the held-out problems, which
the fit never sees.
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import BoundSweep, rule_bound_config  # noqa: E402

RESULTS_PATHS = {"plain": HERE / "epi_width_sweep.json"}
JOINT_PATHS = (HERE / "epi_width_sweep.json", HERE / "epi_width_sweep_H100.json")
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
MAX_K_TILES_GRID = (0, 1, 2, 3, 4, 6, 9, 12, 18, 36, math.inf)
MIN_AB_STAGES_GRID = (2, 3, 4, 5, 6)
BOUNDS = ("wide_epilogue_max_k_tiles", "wide_epilogue_min_ab_stages")
FITTED = dict(single_warpgroup_max_k_tiles=None, whole_source_min_k=None, halo_min_column_fill=None)

SWEEP = BoundSweep(
    rule_bound_config(BOUNDS, NUM_SMS, **FITTED), off=(0, 2), on=(math.inf, 2),
    baseline="epi32", variant="epi64", grid=tuple(itertools.product(MAX_K_TILES_GRID, MIN_AB_STAGES_GRID)),
    constants={"plain": ("WIDE_EPILOGUE_MAX_K_TILES", "WIDE_EPILOGUE_MIN_AB_STAGES")},
    constants_module="cute_conv.epilogue_rule",
)  # fmt: skip
configs_of, epi_width_problems = SWEEP.configs_of, SWEEP.problems


if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS, JOINT_PATHS)
