"""A whole tile of C in SMEM for residual convs on tiles wider than 192 (three A/B stages)
against the plan's default (four A/B stages, 2-4 of the tile's 8 C subtiles), replayed from
CUDA graphs; the fit of ``cute_conv.config.WHOLE_SOURCE_MIN_TILES_PER_SM`` and
``WHOLE_SOURCE_MIN_GEMM_K`` together.

    python benchmarks/sweep_residual_source.py [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_residual_source.py --fit                 # no GPU
    python benchmarks/sweep_residual_source.py --joint               # no GPU, both GPUs

``--results PATH`` measures into (or fits from) another file than
``residual_source_sweep.json`` (the H200's rows), e.g. ``residual_source_sweep_H100.json``;
``--joint`` fits both files' rows at once (the geomean of their train scores).

Why: the epilogue's source-load warp prefetches the next tile's C during the mainloop into a
ring of source subtiles. Beside four A/B stages of a 128x256 tile (48 KB each) the ring holds
2 of its eight 128x32 subtiles, so most of C is loaded during the epilogue, 2 deep. On the
corpus (H100) the fused 3x3 convs at 128x256 ran 1.16-1.35x their plain conv's time against
the cuDNN frontend's 1.10-1.23x. With ``stages=3`` the ring holds the whole tile.

The problems: every corpus conv whose fused config (``relu(conv + b) + r``, the call's config
without one, every rule included) changes when the rule takes any conv (both bounds 0
against inf). Per problem, in one process: both configs, each
checked against the float32 reference from a NaN-poisoned output, then replayed from CUDA
graphs, cuDNN's plain replay beside them; in an order that makes any prefix a sample.
``--fit`` scores each pair of bounds (``MIN_TILES_PER_SM_GRID`` x ``MIN_GEMM_K_GRID``) on the
train problems and reports the best (the middle of ties) on the held-out problems, which the
fit never sees. The rule first bounded GEMM K alone (1152, fitted on the H100's train rows);
the tiles-per-SM bound was added on the H100's train rows and then checked on the H200's
rows, measured before and not looked at for it.
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import BoundSweep, rule_bound_config  # noqa: E402

RESULTS_PATHS = {"fused": HERE / "residual_source_sweep.json"}
GPU_RESULTS = (RESULTS_PATHS["fused"], HERE / "residual_source_sweep_H100.json")
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
PART, WHOLE = "part", "whole"
MIN_TILES_PER_SM_GRID = (0, 1, 2, 2.5, 3, 4, 8, 16, math.inf)
MIN_GEMM_K_GRID = (0, 192, 576, 1152, 2304, 4608)


SWEEP = BoundSweep(
    rule_bound_config(
        ("whole_source_min_tiles_per_sm", "whole_source_min_k"), NUM_SMS,
        single_warpgroup_max_k_tiles=None,
    ),
    off=(math.inf, math.inf), on=(0, 0), baseline=PART, variant=WHOLE,
    grid=tuple(itertools.product(MIN_TILES_PER_SM_GRID, MIN_GEMM_K_GRID)),
    constants={"fused": ("WHOLE_SOURCE_MIN_TILES_PER_SM", "WHOLE_SOURCE_MIN_GEMM_K")},
)  # fmt: skip
configs_of, residual_source_problems = SWEEP.configs_of, SWEEP.problems


if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS, joint_paths=GPU_RESULTS)
