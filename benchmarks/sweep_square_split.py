"""128x128 tiles split by stream-K against the call's config without them (CUDA graphs), and the
fit of their k-tile bounds (``cute_conv.config.SQUARE_SPLIT_MIN_K_TILES``, ``_FUSED``).

    python benchmarks/sweep_square_split.py [--form plain|fused] [--max-seconds 500]  # H100/H200
    python benchmarks/sweep_square_split.py [--form plain|fused] --fit                 # no GPU

On the H200's rows (2026-11-28) the fit gives plain calls 90 k-tiles (1.080x on train and
family, held-out 1.069x; 72: 1.077x, 1.064x; 180: 1.062x, 1.060x) and fused calls 72 (1.128x,
held-out 1.142x; 90: 1.117x, 1.108x). At 72 (C=512 3x3s) the config that runs is not the
split: the single-warpgroup rule turns it into 64x128 data-parallel tiles.

``--results PATH`` measures into (or fits from) another file than the form's H200 file
(``square_split*_sweep_H200.json``), e.g. an H100's; ``--shard I/N`` and ``--merge`` spread it
over N GPUs.

Why: the wide split (``config.wide_split_shape``, ``benchmarks/sweep_wide_split.py``) gave
convs of at least ``WIDE_SPLIT_MIN_K_TILES`` k-tiles per tile 128x256 (or 256x128) tiles split
by stream-K, and its sweep timed only those two shapes. ``cute_conv.autotune`` on the H200's
slowest corpus rows (session 48, ``experiments/autotune_headroom_H200.json``) picked 128x128
tiles split the same way for SD's batch-1 32x32 3x3s of K=640, 1.41-1.42x faster. A wide tile
split 4-6 ways writes and reads a 128x256 fp32 partial per way; 128x128 tiles, twice as many,
split fewer ways (2-3) and move half the partial each. Below the wide split's bound the same
tiles replace 64-wide data-parallel ones, which stream more operand rows per MMA.

The problems: the corpus convs whose config (``untuned.untuned_config``, every other rule at
its fitted bound) the rule changes at any bound from ``ON`` k-tiles, in the form measured
(plain bf16, or ``relu(conv + b) + r``), and, since the corpus holds few of them, a family of
SD-like convs drawn at random for this sweep (``family_problems``: batch 1-8, 8x8-48x48 maps,
C=512-2560, K=320-1280, 1x1 or 3x3; split ``family``), the corpus's shapes left out. Per
problem, in one process: both configs (``own``: the rule left out, the wide split where it
applies; ``square``: the 128x128 split), each checked against the float32 reference from a
NaN-poisoned output, then replayed from CUDA graphs, cuDNN's plain replay beside them; a rerun
skips the problems already there (``sweep_rows.BoundSweep``).

``--fit`` scores, per form, each bound of ``GRID`` on the corpus's train rows and the
family's together (geomean of the own config's time over the time of the config the bound
gives; the corpus alone holds too few such convs), picks the best (the middle of ties) and
reports the same on the corpus's held-out rows, which the fit never sees, with cuDNN's time
over ours before and after.
"""

from __future__ import annotations

import functools
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import (  # noqa: E402
    BEFORE_LAST_WAVE,
    BoundSweep,
    family_problem,
    fitted_before,
    rule_bound_config,
)

RESULTS_PATHS = {
    "plain": HERE / "square_split_sweep_H200.json",
    "fused": HERE / "square_split_fused_sweep_H200.json",
}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
# From 72 k-tiles (C=512 3x3s): fewer leave a 128x128 tile too short a mainloop to split.
OFF, ON = math.inf, 72
GRID = (OFF, 72, 90, 135, 180)
FAMILY_SEED = 49
FAMILY_DRAWS = 400


@functools.cache
def family_problems() -> list[dict]:
    """SD-like convs drawn at random (seeded), in the corpus's problem format, split
    ``family``, the corpus's shapes left out; drawn for this sweep, not part of the corpus."""
    from bench_corpus import load_corpus

    def shape(p: dict) -> tuple:
        return tuple(p[d] for d in "NHWCKRS") + (str(p["padding"]), str(p["stride"]))

    in_corpus = {shape(p) for p in load_corpus()}
    rng, drawn = random.Random(FAMILY_SEED), {}
    for _ in range(FAMILY_DRAWS):
        n, hw = rng.choice((1, 2, 4, 8)), rng.choice((8, 12, 16, 24, 32, 40, 48))
        c = rng.choice((512, 640, 960, 1280, 1920, 2560))
        k = rng.choice((320, 384, 512, 640, 960, 1280))
        r = rng.choice((1, 3, 3, 3))
        p = family_problem(n, hw, hw, c, k, r)
        if shape(p) not in in_corpus:
            drawn[p["key"]] = p
    return list(drawn.values())


SWEEP = BoundSweep(
    rule_bound_config(
        "square_split_min_k_tiles", NUM_SMS,
        **(fitted_before("lone_cta_max_k_tiles") | BEFORE_LAST_WAVE),
    ),
    off=OFF, on=ON, baseline="own", variant="square", grid=GRID,
    constants={"plain": "SQUARE_SPLIT_MIN_K_TILES", "fused": "SQUARE_SPLIT_MIN_K_TILES_FUSED"},
    family=family_problems, fit_on_family=True,
)  # fmt: skip
configs_of, square_split_problems = SWEEP.configs_of, SWEEP.problems

if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS)
