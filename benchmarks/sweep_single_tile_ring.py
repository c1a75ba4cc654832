"""An A/B ring as deep as the one tile each CTA runs, against the ring SMEM fits, for convs of
at most a wave of tiles (CUDA graphs), and the fit of the rule's k-tile bound
(``cute_conv.ring_rule.single_tile_ring_config``, ``SINGLE_TILE_RING_MAX_K_TILES``).

    python benchmarks/sweep_single_tile_ring.py [--form plain|fused] [--max-seconds 500]  # GPU
    python benchmarks/sweep_single_tile_ring.py [--form plain|fused] --fit                 # no GPU
    python benchmarks/sweep_single_tile_ring.py --joint                                    # no GPU

``--results PATH`` measures into (or fits from) another file than the H200's
(``single_tile_ring{,_fused}_sweep_H200.json``), e.g. an H100's; ``--shard I/N`` and
``--merge`` spread it over N GPUs.

Why: one thread initializes each ring stage's two barriers before the first load (session
59's ablation on an H200: a 2-stage ring's prologue 0.13 us shorter than a 16-stage one's),
and a CTA that runs one tile of k k-tiles never uses more than k stages.

The problems: every corpus conv whose call of the form (``untuned.untuned_config``, every
other rule at its fitted bound) the rule changes at any bound (``ON``: every k-tile count);
``fused`` is ``relu(conv + b) + r``. Per problem, in one process: both configs (``own``: the
ring SMEM fits; ``short``: one tile's k-tiles), each checked against the float32 reference
from a NaN-poisoned output, then replayed from CUDA graphs, cuDNN's plain replay beside them
(``sweep_rows.BoundSweep``). ``--fit`` scores each bound of ``GRID`` on the train problems
(geomean of the full ring's time over the time of the config the bound gives), picks the best
(the middle of ties), and reports the same on the held-out problems, which the fit never sees;
``--joint`` fits the one bound both forms share on their train problems together.
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
    "plain": HERE / "single_tile_ring_sweep_H200.json",
    "fused": HERE / "single_tile_ring_fused_sweep_H200.json",
}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
OFF, ON = 0, math.inf
GRID = (OFF, 1, 2, 4, 6, 8, 12, ON)

SWEEP = BoundSweep(
    rule_bound_config(
        "single_tile_ring_max_k_tiles", NUM_SMS,
        **fitted_before("residual_narrow_pointwise_max_k"),
    ),
    off=OFF, on=ON, baseline="own", variant="short", grid=GRID,
    constants={
        "plain": "SINGLE_TILE_RING_MAX_K_TILES", "fused": "SINGLE_TILE_RING_MAX_K_TILES"
    },
    constants_module="cute_conv.ring_rule",
)  # fmt: skip
configs_of, single_tile_ring_problems = SWEEP.configs_of, SWEEP.problems

if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS, joint_forms=True)
