"""Stream-K over the whole grid for data-parallel tiles past one wave whose last wave leaves
SMs idle, against their data-parallel config (CUDA graphs), and the fit of the rule's two
bounds (``cute_conv.small_grid_rules.last_wave_config``: the fullest waves it takes and the
least k-tiles per CTA), per form.

    python benchmarks/sweep_last_wave.py --form plain|fused [--max-seconds 500]  # H100/H200
    python benchmarks/sweep_last_wave.py --form plain|fused --fit                # no GPU

``--results PATH`` measures into (or fits from) another file than the H200's
(``last_wave_{form}_sweep_H200.json``), e.g. an H100's (``*_H100.json``); ``--joint`` fits
both GPUs' train rows together; ``--shard I/N`` and ``--merge`` spread it over N GPUs.

Why: the H200's corpus rows of DeepLab's 65x65 maps at batch 8 run data-parallel grids of
4.02 waves (128x256 tiles in 1x2 clusters: 265 cluster tiles on 66 clusters), five rounds
of which the last holds one tile, at 0.88-0.94x cuDNN (plain, CUDA graphs); 2.68 waves of
192x128 tiles, 0.87-0.90x. The kernel's stream-K over the whole grid spreads every tile's
k-tiles evenly over the SMs (``kernels/sm90/stream_k.py``); the rules so far took it only
below 0.6 of a wave (``schedule.stream_k_schedule``), where it was swept.

The problems: every corpus conv whose call of the form (``untuned.untuned_config``, every
other rule at its fitted bound) changes when the rule takes every grid it may at
``ON``: waves at most 0.95 full, 16 k-tiles per CTA; and a family of convs drawn at random
after the fit (``family_problems``: batch 2-32, 14x14-96x96 maps, C=128-2048, K=128-1024,
1x1 or 3x3; split ``family``; the corpus's shapes left out), those the rule at its fitted
bounds takes in either form: a check on convs the fit never saw, of the rule's choice where
it makes one. Per problem, in one process: both
configs, each checked against the float32 reference from a NaN-poisoned output, then
replayed from CUDA graphs, cuDNN's plain replay beside them; a rerun skips the problems
already there. ``--fit`` scores each pair of bounds of ``GRID`` on the train problems
(geomean of the data-parallel time over the time of the config the bounds give), picks the
best (the middle of ties), and reports the same on the held-out problems, which the fit
never sees.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import (  # noqa: E402
    BoundSweep,
    family_problem,
    fitted_before,
    gpu_results_paths,
    rule_bound_config,
)

FORMS = ("plain", "fused")
JOINT_PATHS = {form: gpu_results_paths(f"last_wave_{form}_sweep") for form in FORMS}
RESULTS_PATHS = {form: paths[0] for form, paths in JOINT_PATHS.items()}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
# (largest wave fill taken, least k-tiles per CTA); a fill of 0 takes none.
OFF, ON = (0.0, 16), (0.95, 16)
GRID = (OFF, *itertools.product((0.7, 0.8, 0.85, 0.9, 0.95), (16, 32, 64, 128)))
FAMILY_SEED, FAMILY_DRAWS = 2026_11_28, 600


@functools.cache
def family_problems() -> list[dict]:
    """Convs drawn at random (seeded), in the corpus's problem format, split ``family``, the
    corpus's shapes left out, that the rule at its fitted bounds takes in either form; drawn
    after the fit, not part of the corpus."""
    from bench_corpus import load_corpus, problem_shape

    module = importlib.import_module(SWEEP.constants_module)
    fitted = {
        form: tuple(getattr(module, name) for name in SWEEP.constants[form]) for form in FORMS
    }

    def taken(p: dict) -> bool:
        shape = problem_shape(p)
        return any(
            SWEEP.config_for(shape, fitted[form], form) != SWEEP.config_for(shape, OFF, form)
            for form in FORMS
        )

    corpus = {tuple(p[d] for d in "NHWCKRS") for p in load_corpus()}
    rng, drawn = random.Random(FAMILY_SEED), {}
    for _ in range(FAMILY_DRAWS):
        n, h, w = rng.choice((2, 4, 8, 16, 32)), rng.randint(14, 96), rng.randint(14, 96)
        c = rng.choice((128, 256, 384, 512, 768, 1024, 1536, 2048))
        k = rng.choice((128, 192, 256, 384, 512, 768, 1024))
        r = rng.choice((1, 3))
        if (n, h, w, c, k, r, r) not in corpus:
            p = family_problem(n, h, w, c, k, r)
            drawn[p["key"]] = p
    return [p for p in drawn.values() if taken(p)]


SWEEP = BoundSweep(
    rule_bound_config(
        ("last_wave_max_fill", "last_wave_min_k_tiles"), NUM_SMS,
        **fitted_before("lone_cta_max_k_tiles"),
    ),
    off=OFF, on=ON, baseline="data_parallel", variant="stream_k", grid=GRID,
    constants={
        "plain": ("LAST_WAVE_MAX_FILL", "LAST_WAVE_MIN_K_TILES"),
        "fused": ("LAST_WAVE_MAX_FILL_FUSED", "LAST_WAVE_MIN_K_TILES_FUSED"),
    },
    constants_module="cute_conv.small_grid_rules", family=family_problems,
)  # fmt: skip
configs_of, last_wave_problems = SWEEP.configs_of, SWEEP.problems

if __name__ == "__main__":
    SWEEP.main(__doc__, RESULTS_PATHS, JOINT_PATHS)
