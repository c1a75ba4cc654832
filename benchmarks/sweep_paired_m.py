"""2x1 clusters for 1x1 convs against their single-CTA config (CUDA graphs), and a fit.

The fit is of an upper bound on the fraction of their k-tiles that the channels of the 1x1
convs that take them fill (``default_config``'s ``paired_m_max_channel_fill``), per form,
on today's configs.

    python benchmarks/sweep_paired_m.py --form plain|fused [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_paired_m.py --form plain|fused --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than the H200's
(``paired_m_{form}_sweep_H200.json``), e.g. an H100's (``*_H100.json``); ``--joint`` fits
both GPUs' train rows together; ``--shard I/N`` and ``--merge`` spread it over N GPUs.

Why: the H200's plain corpus rows furthest behind cuDNN include the store-bound 1x1s of
C=48/120 (one or two k-tiles per tile, 0.83-0.87x under CUDA graphs), which sessions of
deeper output buffers, 64-row tiles, two CTAs per SM and thread stores did not move.
``cute_conv.autotune`` on those rows (H200, eager, L2 flushed) picked 2x1 clusters of the
heuristic's tile for five of them, 1.08-1.28x over its single-CTA config (n128_h28_w28
C=K=120: 1.28x).

History: the sweep first ran (H200, 2026-11-28) for a bound on k-tiles, measuring every
problem below; no k-tile bound paid (plain 1.004x at best, fused 0.989x), the rows showing
the gains on C=48/120 and the losses on C=64/128. The variable was then changed to the
channel fill (C over the k-tiles' channels: 48 fills 0.75 of one 64-wide k-tile, 120 0.94 of
two, 64 and 128 fill theirs), chosen on the same rows, so their held-out part was seen
before the choice; every bound's selection is the same problems with the same configs.

The problems: every corpus conv whose call of the form (``untuned.untuned_config``, every
other rule at its fitted bound) changes when 16-bit 1x1 convs with at least a wave of
single-CTA data-parallel tiles take 2x1 clusters at any fill (bound 1). Per problem, in one
process: both configs, each checked against the float32 reference from a NaN-poisoned
output, then replayed from CUDA graphs, cuDNN's plain replay beside them; a rerun skips the
problems already there. ``--fit`` scores each bound of ``MAX_FILL_GRID`` on the train
problems (geomean of the single-CTA time over the time of the config the bound gives),
picks the best (the middle of ties), and reports the same on the held-out problems, which
the fit never sees.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import (  # noqa: E402
    BEFORE_LAST_WAVE,
    BoundSweep,
    fitted_before,
    gpu_results_paths,
    rule_bound_config,
)

FORMS = ("plain", "fused")
JOINT_PATHS = {form: gpu_results_paths(f"paired_m_{form}_sweep") for form in FORMS}
RESULTS_PATHS = {form: paths[0] for form, paths in JOINT_PATHS.items()}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
# 0: none; 0.99: every conv whose channels leave a k-tile partly empty; 1: all.
MAX_FILL_GRID = (0, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1)

SWEEP = BoundSweep(
    rule_bound_config(
        "paired_m_max_channel_fill", NUM_SMS,
        **(fitted_before("lone_cta_max_k_tiles") | BEFORE_LAST_WAVE),
    ),
    off=0, on=1, baseline="single_cta", variant="paired_m", grid=MAX_FILL_GRID,
    constants={"plain": "PAIRED_M_MAX_CHANNEL_FILL", "fused": "PAIRED_M_MAX_CHANNEL_FILL_FUSED"},
)  # fmt: skip
configs_of, paired_m_problems = SWEEP.configs_of, SWEEP.problems


if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS, JOINT_PATHS)
