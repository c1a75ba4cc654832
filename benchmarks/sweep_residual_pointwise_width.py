"""128-wide tiles for residual 1x1 convs past ``RESIDUAL_NARROW_MAX_GEMM_K`` that the
heuristic gives 256-wide ones, against those, replayed from CUDA graphs; the fit of
``cute_conv.config.RESIDUAL_NARROW_POINTWISE_MAX_GEMM_K`` (the GEMM K up to which a fused 1x1
conv narrows its tiles all the same).

    python benchmarks/sweep_residual_pointwise_width.py [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_residual_pointwise_width.py --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than the H200's
(``residual_pointwise_width_sweep_H200.json``); ``--shard I/N`` and ``--merge`` spread it
over N GPUs.

Why: the residual narrowing bound (``sweep_residual_width.py``) was fitted on 1x1 and 3x3
convs together, before wide residual tiles took three A/B stages for a whole tile of C. In
its rows every 1x1 conv ran faster at 128 wide (0.85-1.0x the time) while 3x3 convs of few
channels lost up to 23%, so one GEMM K bound could not serve both. Session 65 timed four
deep residual 1x1s (C=1024) on an H200: 128x128 tiles of five stages took 0.87-0.92x the
time of 128x256 tiles of three stages beside a whole tile of C.

The problems: every corpus conv whose fused call (``relu(conv + b) + r``, every other rule at
its fitted bound) the pointwise bound changes at any GEMM K (``ON``). Per problem, in one
process: both configs (``wide``: the rule off; ``narrow``: 128-wide tiles), each checked
against the float32 reference from a NaN-poisoned output, then replayed from CUDA graphs,
cuDNN's plain replay beside them (``sweep_rows.BoundSweep``). ``--fit`` scores each bound
of ``GRID`` on the train problems and reports the best (the middle of ties) on the held-out
problems, which the fit never sees.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import BoundSweep, fitted_before, rule_bound_config  # noqa: E402

RESULTS_PATHS = {"fused": HERE / "residual_pointwise_width_sweep_H200.json"}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
OFF, ON = 0, math.inf
GRID = (OFF, 256, 512, 1024, 2048, ON)

SWEEP = BoundSweep(
    rule_bound_config("residual_narrow_pointwise_max_k", NUM_SMS, **fitted_before("min_waves_tall")),
    off=OFF, on=ON, baseline="wide", variant="narrow", grid=GRID,
    constants={"fused": "RESIDUAL_NARROW_POINTWISE_MAX_GEMM_K"},
)  # fmt: skip
configs_of, residual_pointwise_width_problems = SWEEP.configs_of, SWEEP.problems

if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS)
