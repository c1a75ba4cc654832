"""128-wide tiles for residual convs the heuristic would give 256-wide ones, against those,
replayed from CUDA graphs; the fit of ``cute_conv.config.RESIDUAL_NARROW_MAX_GEMM_K`` (the
GEMM K up to which a fused conv narrows its tiles).

    python benchmarks/sweep_residual_width.py [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_residual_width.py --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than ``residual_width_sweep.json``
(the H200's rows), e.g. ``residual_width_sweep_H100.json``. ``--joint`` fits both GPUs' rows
at once (the geomean of their train scores): the constant's fit, since each GPU alone fits a
bound the other scores worse.

Why: a residual kernel keeps a whole tile of C in SMEM so that its loads hide behind the
mainloop; a 256-wide tile's C (64 KB of bf16) leaves fewer A/B stages. The bound (512) came
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

from sweep_rows import BoundSweep, by_split, middle_of_best, passed_rows, untuned_with  # noqa: E402

RESULTS_PATHS = {"fused": HERE / "residual_width_sweep.json"}
GPU_RESULTS = (RESULTS_PATHS["fused"], HERE / "residual_width_sweep_H100.json")
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
WIDE, NARROW = "wide", "narrow"
MAX_GEMM_K_GRID = (0, 128, 256, 512, 1152, 2304, 4608, math.inf)


def config_for(problem, max_k: float, form: str = "fused"):
    """The config a call of ``form`` without one runs on ``problem`` when residual convs of
    at most ``max_k`` GEMM K narrow 256-wide tiles to 128 (the 64-row rule at its bound)."""
    return untuned_with(
        problem, NUM_SMS, form, single_warpgroup_max_k_tiles=None, residual_narrow_max_k=max_k
    )


SWEEP = BoundSweep(
    config_for, off=0, on=math.inf, baseline=WIDE, variant=NARROW, grid=MAX_GEMM_K_GRID,
    constants={"fused": "RESIDUAL_NARROW_MAX_GEMM_K"},
)  # fmt: skip
configs_of, residual_width_problems = SWEEP.configs_of, SWEEP.problems
chosen_name, score = SWEEP.chosen_name, SWEEP.score


def joint_fit(paths=GPU_RESULTS) -> float:
    """The bound of ``MAX_GEMM_K_GRID`` with the best geomean of the GPUs' train scores (the
    middle of ties); prints each bound's joint train and held-out scores."""
    from bench import geomean
    from sweep_rows import load_results

    parts = [by_split(passed_rows(load_results(path))) for path in paths]

    def joint(bound: float, split: int) -> float:
        return geomean(score(part[split], bound, "fused") for part in parts)

    print("| bound | train, both GPUs | held-out, both GPUs |\n|---|---|---|")
    for bound in MAX_GEMM_K_GRID:
        print(f"| {bound} | {joint(bound, 0):.4f} | {joint(bound, 1):.4f} |")
    best = middle_of_best(list(MAX_GEMM_K_GRID), lambda bound: joint(bound, 0))
    print(f"fitted on both GPUs' train rows: {best}")
    return best


if __name__ == "__main__":
    if "--joint" in sys.argv:
        joint_fit()
    else:
        SWEEP.main(__doc__, RESULTS_PATHS)
