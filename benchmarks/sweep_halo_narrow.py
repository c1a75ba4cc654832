"""Narrow halo tiles where a fifth or less of their columns pad Q, against the call's config
without them (CUDA graphs): the fit of ``cute_conv.halo_rule``'s narrow bounds
(``HALO_NARROW_MIN_COLUMN_FILL``, ``HALO_NARROW_MIN_WAVES``).

    python benchmarks/sweep_halo_narrow.py [--form F] [--results PATH]   # H100/H200
    python benchmarks/sweep_halo_narrow.py --fit [--gpu H100]             # no GPU

Why: the halo rule takes halo tiles where at least 0.95 of their columns are real
(``sweep_pitched_halo.py``, fitted on plain, fused and fp8 rows together), which leaves out
the maps of 56, 112 and 224 columns (0.875 real). There, on an H200, the 16-bit narrow ones
of 3x3 convs gained with several waves of tiles (VGG's 224x224 C=64 3x3 at batch 8-128 and
ResNet-18's 56x56 at batch 32: 1.06-1.19x plain, 1.08-1.11x fused) while the fp8 forms (C=64
padded to a 128-wide k-tile) and the folded stems (one tap along W) lost.

The problems: every corpus conv whose call's config in ``form`` (``plain`` or ``fused``; the
rule leaves fp8 alone) changes when the narrow bounds are ``SELECTED`` (against none), the
other rules at their fitted bounds. Per problem, in one process: both configs, each checked
against the float32 reference from a NaN-poisoned output, then replayed from CUDA graphs
beside cuDNN; a rerun skips the problems already there. Rows: ``halo_narrow_sweep.json``
(plain) and ``halo_narrow_fused_sweep.json``, an H200's; ``--results`` or ``--gpu H100``
for another GPU's (``*_H100.json``).

``--fit`` scores each (column fill, waves) pair of the grid on one GPU's train problems of
both forms together (the geomean of the forms' scores), picks the best (the middle of ties)
and reports the held-out problems beside it, which the fit never sees.
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import FUSED_TALL_BEFORE_FIT, BoundSweep, rule_bound_config  # noqa: E402

FORMS = ("plain", "fused")
GPUS = ("H200", "H100")


def results_path(form: str, gpu: str = "H200") -> Path:
    """The results file of ``form``'s rows measured on ``gpu``."""
    name = "halo_narrow_sweep" if form == "plain" else f"halo_narrow_{form}_sweep"
    return HERE / (f"{name}.json" if gpu == "H200" else f"{name}_{gpu}.json")


NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
SELECTED = (0.8, 0)  # fewer real columns were not measured
FILL_GRID = (0.8, 0.85, 0.9, 0.95, math.inf)
WAVES_GRID = (0, 1, 2, 3, 4, 6, 8, math.inf)
BOUNDS = ("halo_narrow_min_column_fill", "halo_narrow_min_waves")
FITTED = dict(
    single_warpgroup_max_k_tiles=None, single_warpgroup_widen_max_k_tiles=None,
    whole_source_min_k=None, halo_min_column_fill=None, wide_epilogue_max_k_tiles=None,
    min_waves_tall=FUSED_TALL_BEFORE_FIT, min_waves_tall_wide=None,
)  # fmt: skip

SWEEP = BoundSweep(
    rule_bound_config(BOUNDS, NUM_SMS, **FITTED), off=(math.inf, math.inf), on=SELECTED,
    baseline="default", variant="halo_narrow", grid=tuple(itertools.product(FILL_GRID, WAVES_GRID)),
    constants=dict.fromkeys(FORMS, ("HALO_NARROW_MIN_COLUMN_FILL", "HALO_NARROW_MIN_WAVES")),
    constants_module="cute_conv.halo_rule",
)  # fmt: skip
configs_of, narrow_problems = SWEEP.configs_of, SWEEP.problems


def joint_fit(gpu: str = "H200") -> tuple[float, float]:
    """The (column fill, waves) pair fitted on ``gpu``'s train rows of both forms."""
    sources = tuple((form, results_path(form, gpu)) for form in FORMS)
    return SWEEP.joint_fit_over(sources, f"{gpu}: plain and fused rows")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=FORMS, default="plain")
    parser.add_argument("--gpu", choices=GPUS, default="H200")
    parser.add_argument("--max-seconds", type=float, default=500.0)
    parser.add_argument("--results", type=Path, help="default: the form's file of --gpu")
    parser.add_argument("--fit", action="store_true", help="no GPU: both forms of --gpu")
    args = parser.parse_args()
    if args.fit:
        joint_fit(args.gpu)
    else:
        path = args.results or results_path(args.form, args.gpu)
        SWEEP.sweep(args.max_seconds, args.form, path)


if __name__ == "__main__":
    main()
