"""64-row tiles (one consumer warpgroup) where the call's 128-row tiles fill less than a wave
and 64-row ones still fit one, against the config without them, replayed from CUDA graphs;
the fit of ``cute_conv.small_grid_rules.SINGLE_WARPGROUP_MAX_K_TILES`` (one bound for every form).

    python benchmarks/sweep_tile_m64.py [--form F] [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_tile_m64.py [--form F] --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than the form's, e.g. a second
GPU's rows.

Why: cuDNN runs small convs as 64-row tiles (CUTLASS 2.x 64x64, cuBLAS's nvjet 64x8 and
64x40) on many CTAs with the whole K per CTA; ours were at least 128 rows (two consumer
warpgroups), so a conv of few 128-row tiles leaves SMs idle or splits K by stream-K and sums
the partials. An exploratory sweep (``tile_m64_explore.json``, made by this script's first
version: 133 sub-wave corpus convs on an H200, the untuned config against 64-row variants)
gave the rule's form (``small_grid_rules.single_warpgroup_config``); this sweep fits its bound.

The problems: every corpus conv on which the call's config without one changes when the
rule takes any mainloop length (``max_k_tiles`` inf against 0), staged and gathered ones
included. Per problem, in one process: both configs, each checked against the float32
reference from a NaN-poisoned output, then replayed from CUDA graphs, cuDNN's replay beside
them. Forms (``--form``), as ``sweep_tile_width.py``'s: ``plain`` bf16 convs
(``tile_m64_sweep.json``), ``fused`` ``relu(conv + b) + r`` (``tile_m64_fused_sweep.json``),
``fp8`` plain convs of e4m3 inputs with bf16 output (``tile_m64_fp8_sweep.json``), in an
order that makes any prefix a sample of them; a rerun skips the problems already there.

``--fit`` scores each bound of ``MAX_K_TILES_GRID`` on the train problems and reports the
best (the middle of ties) on the held-out problems, which the fit never sees.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import BoundSweep, rule_bound_config  # noqa: E402

FORMS = ("plain", "fused", "fp8")
RESULTS_PATHS = {
    "plain": HERE / "tile_m64_sweep.json",
    "fused": HERE / "tile_m64_fused_sweep.json",
    "fp8": HERE / "tile_m64_fp8_sweep.json",
}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
HEURISTIC, SINGLE = "heuristic", "single_warpgroup"
MAX_K_TILES_GRID = (0, 9, 18, 27, 36, 45, 54, 72, 100, 144, math.inf)

SWEEP = BoundSweep(
    rule_bound_config("single_warpgroup_max_k_tiles", NUM_SMS), off=0, on=math.inf, baseline=HEURISTIC, variant=SINGLE,
    grid=MAX_K_TILES_GRID, constants=dict.fromkeys(FORMS, "SINGLE_WARPGROUP_MAX_K_TILES"),
    constants_module="cute_conv.small_grid_rules",
)  # fmt: skip
configs_of, tile_m64_problems = SWEEP.configs_of, SWEEP.problems
chosen_name, score = SWEEP.chosen_name, SWEEP.score


if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS)
