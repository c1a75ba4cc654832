"""Half-step tile widths: 48, 80, ..., 240-wide tiles (between the multiples of 32) where they
pad K less than the heuristic's width, against the heuristic's tiles, replayed from CUDA
graphs; the fit of ``cute_conv.config.HALF_STEP_MIN_K_TILES`` (``--form fused``:
``HALF_STEP_MIN_K_TILES_FUSED``, ``--form fp8``: ``HALF_STEP_MIN_K_TILES_FP8``).

    python benchmarks/sweep_tile_width.py [--form F] [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_tile_width.py [--form F] --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than the form's, e.g. a second
GPU's rows (``tile_width_sweep_H100.json``).

Why: the heuristic picks the tile width that minimizes rounds of tiles x (width + 64)
(``_wave_cost``) among multiples of 32. SDXL's batch-1 1x1 conv of C=2560, K=1280 on a 32x32
map runs 112 tiles of 128x96 on 132 SMs, 5% of them padding; cuDNN runs it as a GEMM of 128
tiles 80 wide (ncu on an H200: 12.7 us against our 14.7). A half-step width that pads K less
(``config.half_step_widths``) does less MMA work per useful column, but stores in 16-wide
subtiles (twice the epilogue's rounds), which a short mainloop may not repay.

The problems: every corpus conv on which the call's config without one changes when the
heuristic weighs half-step widths at any mainloop length (``half_step_min_k_tiles=0``
against ``math.inf``), staged and gathered ones included. Per problem, in one process: both
configs (``untuned.untuned_config``, the call's config without one, staging and the
gather and small-M rules included), each checked against the float32 reference from a
NaN-poisoned output, then replayed from CUDA graphs, cuDNN's replay beside them. Forms
(``--form``): ``plain`` bf16 convs (rows in ``tile_width_sweep.json``), ``fused``
``relu(conv + b) + r`` (the residual configs; ``tile_width_fused_sweep.json``), ``fp8``
plain convs of e4m3 inputs with bf16 output (checked on the dequantized inputs, cuDNN's bf16
conv beside them; ``tile_width_fp8_sweep.json``); a rerun skips the problems already
there.

``--fit`` scores each threshold of ``MIN_K_TILES_GRID`` on the train problems (geomean of
the heuristic's time over the time of the config that threshold gives), picks the best (the
middle of ties), and reports the same on the held-out problems, which the fit never sees.
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
    "plain": HERE / "tile_width_sweep.json",
    "fused": HERE / "tile_width_fused_sweep.json",
    "fp8": HERE / "tile_width_fp8_sweep.json",
}
CONSTANTS = {
    "plain": "HALF_STEP_MIN_K_TILES",
    "fused": "HALF_STEP_MIN_K_TILES_FUSED",
    "fp8": "HALF_STEP_MIN_K_TILES_FP8",
}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
HEURISTIC, HALF_STEP = "heuristic", "half_step"
MIN_K_TILES_GRID = (0, 2, 4, 6, 9, 12, 18, 27, 36, 54, math.inf)

SWEEP = BoundSweep(
    rule_bound_config("half_step_min_k_tiles", NUM_SMS), off=math.inf, on=0, baseline=HEURISTIC, variant=HALF_STEP,
    grid=MIN_K_TILES_GRID, constants=CONSTANTS,
)  # fmt: skip
configs_of, tile_width_problems = SWEEP.configs_of, SWEEP.problems
chosen_name, score = SWEEP.chosen_name, SWEEP.score


if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS)
