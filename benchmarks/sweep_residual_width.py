"""128-wide tiles for residual convs the heuristic would give 256-wide ones, against those,
replayed from CUDA graphs; the fit of ``cute_conv.config.RESIDUAL_NARROW_MAX_GEMM_K`` (the
GEMM K up to which a fused conv narrows its tiles).

    python benchmarks/sweep_residual_width.py [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_residual_width.py --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than ``residual_width_sweep.json``
(the H200's rows), e.g. ``residual_width_sweep_H100.json``. ``--joint`` fits both GPUs' rows
at once (the geomean of their train scores): the constant's fit, since each GPU alone fits a
bound the other scores worse.

Why: a residual kernel keeps as much of a tile of C in SMEM as fits beside the A/B stages,
so that its loads hide behind the mainloop; a 256-wide tile's C (64 KB of bf16) does not fit
whole beside four. The bound (512) came
from four H200 shapes, and on the corpus (H100) the fused 3x3 convs of C=128 at 128x256
(GEMM K 1152) ran 1.23-1.35x their plain conv's time and 0.89-0.92x the cuDNN frontend's
fused graph, against 1.06-1.08x and ~1.02x at C=512.

The problems: every corpus conv whose fused config (``relu(conv + b) + r``, the call's
config without one: staging and the gather, small-M and 64-row rules included) changes when
the narrowing takes any GEMM K (``residual_narrow_max_k`` inf against 0). Per problem, in one
process: both configs, each checked against the float32 reference from a NaN-poisoned
output, then replayed from CUDA graphs, cuDNN's plain replay beside them; in an order that
makes any prefix a sample. ``--fit`` scores each bound of ``MAX_GEMM_K_GRID`` on the train
problems and reports the best (the middle of ties) on the held-out problems, which the fit
never sees.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import BoundSweep, rule_bound_config  # noqa: E402

RESULTS_PATHS = {"fused": HERE / "residual_width_sweep.json"}
GPU_RESULTS = (RESULTS_PATHS["fused"], HERE / "residual_width_sweep_H100.json")
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
WIDE, NARROW = "wide", "narrow"
MAX_GEMM_K_GRID = (0, 128, 256, 512, 1152, 2304, 4608, math.inf)

SWEEP = BoundSweep(
    rule_bound_config("residual_narrow_max_k", NUM_SMS, single_warpgroup_max_k_tiles=None), off=0, on=math.inf, baseline=WIDE,
    variant=NARROW, grid=MAX_GEMM_K_GRID, constants={"fused": "RESIDUAL_NARROW_MAX_GEMM_K"},
)  # fmt: skip
configs_of, residual_width_problems = SWEEP.configs_of, SWEEP.problems
chosen_name, score = SWEEP.chosen_name, SWEEP.score


if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS, joint_paths=GPU_RESULTS)
