"""Single CTAs instead of 2-CTA clusters for convs whose tiles fill at most one wave, against
their clustered config (CUDA graphs), and the fit of the rule's k-tile bound
(``cute_conv.small_grid_rules.lone_cta_config``, ``LONE_CTA_MAX_K_TILES``).

    python benchmarks/sweep_lone_cta.py [--form plain|fused] [--max-seconds 500]  # H100/H200
    python benchmarks/sweep_lone_cta.py [--form plain|fused] --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than the H200's
(``lone_cta{,_fused}_sweep_H200.json``), e.g. an H100's; ``--shard I/N`` and ``--merge``
spread it over N GPUs.

Why: the CUPTI kernel times of the H200's corpus rows below 0.95x cuDNN (session 59) showed
2-CTA clusters costing 0.1-0.25 us of 2-4 us kernels against the same tiles on single CTAs
(n1 28x28 C=512 K=256: 3.58 -> 3.33 us), and 31 of the 59 rows still below 0.95x run on
2-CTA clusters, most at under a wave. The heuristic pairs CTAs wherever the N tiles pair up
(``config.cluster_shape``), whatever the grid.

The problems: every corpus conv whose call of the form (``untuned.untuned_config``, every
other rule at its fitted bound) the rule changes at any bound (``ON``: every k-tile count);
``fused`` is ``relu(conv + b) + r``. Per problem, in one process: both configs (``own``: the
2-CTA cluster; ``lone``: single CTAs), each checked against the float32 reference from a
NaN-poisoned output, then replayed from CUDA graphs, cuDNN's plain replay beside them
(``sweep_rows.BoundSweep``). ``--fit`` scores each bound of ``GRID`` on the train problems
(geomean of the clustered time over the time of the config the bound gives), picks the best
(the middle of ties), and reports the same on the held-out problems, which the fit never sees.

Measured on an H200 (session 60; the plain rows in two runs, the first up to 32 k-tiles, put
in the selection's order after): single CTAs won at every bound, most at none. Plain: train
1.010x over 112 convs, held-out 1.011x over 43; fused: 1.017x over 119, 1.023x over 44. Per
conv 0.86x (the deep K=2048 1x1s on 7x7 and 14x14 maps) to 1.21x; both forms fit ``inf``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import BoundSweep, fitted_before, rule_bound_config  # noqa: E402

FORMS = ("plain", "fused")
RESULTS_PATHS = {
    "plain": HERE / "lone_cta_sweep_H200.json",
    "fused": HERE / "lone_cta_fused_sweep_H200.json",
}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
OFF, ON = 0, math.inf
GRID = (OFF, 1, 2, 4, 8, 16, 32, 64, ON)

SWEEP = BoundSweep(
    rule_bound_config(
        "lone_cta_max_k_tiles", NUM_SMS, **fitted_before("single_tile_ring_max_k_tiles")
    ),
    off=OFF, on=ON, baseline="own", variant="lone", grid=GRID,
    constants={"plain": "LONE_CTA_MAX_K_TILES", "fused": "LONE_CTA_MAX_K_TILES"},
    constants_module="cute_conv.small_grid_rules",
)  # fmt: skip
configs_of, lone_cta_problems = SWEEP.configs_of, SWEEP.problems

if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS)
