"""2x1 clusters for 1x1 convs on 1x2 clusters whose channels leave their few k-tiles partly
empty, against their 1x2 config (CUDA graphs), and the fit of the rule's k-tile bound
(``cute_conv.small_grid_rules.pointwise_pair_config``, ``POINTWISE_PAIR_MAX_K_TILES``).

    python benchmarks/sweep_pointwise_pair.py [--form plain|fused] [--max-seconds 500]  # H100/H200
    python benchmarks/sweep_pointwise_pair.py [--form plain|fused] --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than the H200's
(``pointwise_pair{,_fused}_sweep_H200.json``), e.g. an H100's; ``--shard I/N`` and ``--merge``
spread it over N GPUs.

Why: ncu on the H200's store-bound RegNet 1x1 n128 28x28 C=120 K=336 (0.84x cuDNN under
CUDA graphs, session 51) and ``cute_conv.autotune`` on it (session 48: 2x1 clusters of the
same 128x192 tile, 1.18x, eager) pointed at the cluster shape. ``default_config`` gives 1x1s
with partly empty k-tiles 2x1 clusters only where they would otherwise run on single CTAs
(``paired_m_max_channel_fill``, ``sweep_paired_m.py``); those it pairs along N share the
activation tile instead.

The problems: every corpus conv whose call of the form (``untuned.untuned_config``, every
other rule at its fitted bound) the rule changes at any bound (``ON``: every k-tile count);
``fused`` is ``relu(conv + b) + r``. Per problem, in one process: both configs (``own``: the
1x2 cluster; ``paired``: 2x1), each checked against the float32 reference from a
NaN-poisoned output, then replayed from CUDA graphs, cuDNN's plain replay beside them
(``sweep_rows.BoundSweep``).

The H200's plain rows (2026-11-28) were measured by a scratch probe of the same selection
and configs (plain ``heuristic_config``, 1x2 clusters, partly empty k-tiles, no gather or
stream-K; the other rules as they stand), converted to this sweep's row format; its fused
rows by this sweep (session 52). ``--fit`` scores each bound of ``GRID`` on the train
problems (geomean of the 1x2 time over the time of the config the bound gives), picks the
best (the middle of ties), and reports the same on the held-out problems, which the fit
never sees. Both forms fit 5: plain 1.014x train over 8 convs, 1.016x held-out over 4;
fused 1.008x over 9, 1.016x over 4. From 6 up the C=336..1008 convs are taken, which lose
up to 25% (plain) and 0.985x over the fused train rows.
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
    "plain": HERE / "pointwise_pair_sweep_H200.json",
    "fused": HERE / "pointwise_pair_fused_sweep_H200.json",
}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
OFF, ON = 0, math.inf
GRID = (OFF, 1, 2, 4, 5, 6, 8, 16, ON)

SWEEP = BoundSweep(
    rule_bound_config(
        "pointwise_pair_max_k_tiles", NUM_SMS, **fitted_before("lone_cta_max_k_tiles")
    ),
    off=OFF, on=ON, baseline="own", variant="paired", grid=GRID,
    constants={"plain": "POINTWISE_PAIR_MAX_K_TILES", "fused": "POINTWISE_PAIR_MAX_K_TILES"},
    constants_module="cute_conv.small_grid_rules",
)  # fmt: skip
configs_of, pointwise_pair_problems = SWEEP.configs_of, SWEEP.problems

if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS)
