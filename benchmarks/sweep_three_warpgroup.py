"""192x128 tiles (three consumer warpgroups) against the call's 128-row tiles where they cost a
little more by the heuristic's wave model (CUDA graphs), and a fit of the model's bound
(``default_config``'s ``three_warpgroup_max_cost``), per form.

    python benchmarks/sweep_three_warpgroup.py --form plain|fused [--max-seconds 500]  # H100/H200
    python benchmarks/sweep_three_warpgroup.py --form plain|fused --fit                # no GPU

``--results PATH`` measures into (or fits from) another file than the H200's
(``three_warpgroup_{form}_sweep_H200.json``), e.g. an H100's (``*_H100.json``); ``--joint``
fits both GPUs' train rows together; ``--shard I/N`` and ``--merge`` spread it over N GPUs.

Why: the heuristic takes 192x128 tiles where at least a wave of them costs at most 0.95 of the
128-row tiles' cost (rounds of tiles x tile_m x (tile_n + 64)), a bound set by hand on the
suite. A probe of the corpus's deep 1x1 convs (H200) found 192x128 1.07-1.17x faster with a
residual where the model calls them equal (1.48 waves of 128x224 or 128x208 against 2.00 of
192x128) or 1.2x dearer (2.97 waves of 128x256 against 4.00), and 0.89-0.93x where it calls
them 1.17-1.33x dearer.

The problems: every corpus conv whose call of the form (``untuned.untuned_config``, every
other rule at its fitted bound) changes when the bound goes from 0.95 (``off``, today's) to the
top of ``MAX_COST_GRID`` (``on``). Per problem, in one process: both configs, each checked
against the float32 reference from a NaN-poisoned output, then replayed from CUDA graphs,
cuDNN's plain replay beside them; a rerun skips the problems already there. ``--fit`` scores
each bound of the grid on the train problems (geomean of today's time over the time of the
config the bound gives), picks the best (the middle of ties), and reports the same on the
held-out problems, which the fit never sees.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import (  # noqa: E402
    BoundSweep,
    fitted_before,
    gpu_results_paths,
    rule_bound_config,
)

FORMS = ("plain", "fused")
JOINT_PATHS = {form: gpu_results_paths(f"three_warpgroup_{form}_sweep") for form in FORMS}
RESULTS_PATHS = {form: paths[0] for form, paths in JOINT_PATHS.items()}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
MAX_COST_GRID = (0.95, 1.0, 1.05, 1.1)

SWEEP = BoundSweep(
    rule_bound_config("three_warpgroup_max_cost", NUM_SMS, **fitted_before("lone_cta_max_k_tiles")),
    off=MAX_COST_GRID[0], on=MAX_COST_GRID[-1], baseline="today", variant="three_warpgroups",
    grid=MAX_COST_GRID,
    constants={"plain": "THREE_WARPGROUP_MAX_COST", "fused": "THREE_WARPGROUP_MAX_COST"},
)  # fmt: skip

if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS, JOINT_PATHS)
