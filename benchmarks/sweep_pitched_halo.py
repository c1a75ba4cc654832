"""Halo tiles (whole-row or pitched: ``Conv2dConfig.halo_w``, tiles side by side along Q,
each with its own halo) against the call's config without them, for the stride-1 convs with
several taps; the fit of ``cute_conv.halo_rule`` (``HALO_MIN_COLUMN_FILL``,
``HALO_MIN_WAVES``, one pair for every form).

    python benchmarks/sweep_pitched_halo.py [--form F] [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_pitched_halo.py [--form F] --report               # no GPU
    python benchmarks/sweep_pitched_halo.py [--form F] --fit                  # no GPU
    python benchmarks/sweep_pitched_halo.py --joint                           # no GPU

Why: an im2col tile loads its A rows once per filter tap (9x for a 3x3), and on the large
3x3 convs of 128 channels (VAE decoders at 256..1024 pixels, ResNet's 112x112 layers) that
traffic binds: a probe with A's loads left out ran bf16 r50-c3-3x3 25-37% faster. Halo
tiles load each input pixel of a tile's footprint once per 64 channels, but only where an
output row fits a tile (Q <= 64 - reach). A pitched halo lifts that: a 128x128 tile of two
64-column output rows reads a 4 x 72 halo, 288 rows per c-block instead of 9 x 128.

The problems: every corpus conv whose kernel problem (staging included) is stride 1 with
R*S > 1 and Q >= 48, in sha256-of-key order (any prefix is a sample). Per problem, in one
process: the call's config without the halo rule (``untuned_with``, the other fitted rules
on) and halo tiles of 128 x N (two rows of 64 columns), 256 x min(N, 128) (four rows: the
rule's) and 128 x N (one row of 128 columns, whole rows only: pitched 128-column halos do not
trace), N the default's width, each pitched or whole-row as the problem needs
(``halo_rule.halo_tile_config``), those that fit the SMEM; each checked against a float32
reference from a NaN-poisoned output, then replayed from CUDA graphs beside cuDNN. Forms as
``sweep_tile_width.py``'s: ``plain`` (rows in ``pitched_halo_sweep.json``), ``fused``
(``pitched_halo_fused_sweep.json``), ``fp8`` (``pitched_halo_fp8_sweep.json``).

``--report`` prints, per split, each variant's geomean speedup over the default, the best
variant's, and the default's and the best's against cuDNN. ``--fit`` scores each (column
fill, waves) pair of the grid on the train problems and reports the best (the middle of ties)
on the held-out problems, which the fit never sees; ``--joint`` fits one pair on the three
forms' train problems together (what ``halo_rule`` holds).
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean  # noqa: E402
from bench_corpus import problem_shape  # noqa: E402
from sweep_rows import (  # noqa: E402
    BoundSweep,
    by_split,
    load_results,
    precompile,
    replayed_row,
    rule_bound_config,
    sample_rank,
    sweep_new_problems,
    untuned_with,
)

FORMS = ("plain", "fused", "fp8")
RESULTS_PATHS = {
    "plain": HERE / "pitched_halo_sweep.json",
    "fused": HERE / "pitched_halo_fused_sweep.json",
    "fp8": HERE / "pitched_halo_fp8_sweep.json",
}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
DEFAULT, RULE = "default", "halo_256x64"
# Variant name -> (tile_m, tile_w): halo tiles of tile_m / tile_w output rows.
SHAPES = {"halo_128x64": (128, 64), RULE: (256, 64), "halo_128x128": (128, 128)}
MIN_Q = 48
FILL_GRID = (0.5, 0.8, 0.85, 0.9, 0.95, 1.0, math.inf)
WAVES_GRID = (0, 1, 2, 3, 4, 6, 8, 12, 16, math.inf)
BOUNDS = ("halo_min_column_fill", "halo_min_waves")
FITTED = dict(single_warpgroup_max_k_tiles=None, whole_source_min_k=None)

SWEEP = BoundSweep(
    rule_bound_config(BOUNDS, NUM_SMS, **FITTED), off=(math.inf, math.inf), on=(0, 0),
    baseline=DEFAULT, variant=RULE, grid=tuple(itertools.product(FILL_GRID, WAVES_GRID)),
    constants=dict.fromkeys(FORMS, ("HALO_MIN_COLUMN_FILL", "HALO_MIN_WAVES")),
    constants_module="cute_conv.halo_rule",
)  # fmt: skip


def form_configs(problem, form: str) -> dict:
    """Name -> config of ``problem`` called in ``form``: the default and the halo variants
    that run it and fit the SMEM; empty where the problem takes none (see the module)."""
    from cute_conv.halo_rule import halo_tile_config
    from cute_conv.staging import kernel_problem_for

    element_bytes = 1 if form == "fp8" else 2
    kernel_problem = kernel_problem_for(problem, element_bytes)
    if kernel_problem.stride != (1, 1) or kernel_problem.R * kernel_problem.S == 1:
        return {}
    if kernel_problem.Q < MIN_Q:
        return {}
    default = untuned_with(problem, NUM_SMS, form, **FITTED)
    configs = {DEFAULT: default}
    for name, (tile_m, tile_w) in SHAPES.items():
        halo = halo_tile_config(
            default, kernel_problem, tile_m, tile_w, element_bytes, has_residual=form == "fused"
        )
        if halo is not None and halo != default:
            configs[name] = halo
    return configs if len(configs) > 1 else {}


def pitched_problems(problems: list[dict], form: str) -> list[dict]:
    """The corpus problems the sweep measures in ``form``, in sample order."""
    chosen = [p | {"form": form} for p in problems if form_configs(problem_shape(p), form)]
    return sorted(chosen, key=lambda p: sample_rank(p["key"]))


def measure(p: dict) -> dict:
    row = replayed_row(p, p["form"], form_configs(problem_shape(p), p["form"]))
    return row | {"form": p["form"]}


def sweep(max_seconds: float, form: str) -> None:
    from bench_corpus import load_corpus

    todo = pitched_problems(load_corpus(), form)
    configs = {
        c.compiled_form() for p in todo for c in form_configs(problem_shape(p), form).values()
    }
    precompile(configs, "float8_e4m3fn" if form == "fp8" else "bfloat16")
    sweep_new_problems(
        RESULTS_PATHS[form], lambda problems: pitched_problems(problems, form), measure,
        max_seconds, ("key", "ms"),
    )  # fmt: skip


def report(form: str) -> None:
    rows = [r for r in load_results(RESULTS_PATHS[form])["rows"] if "ms" in r]
    for name, part in zip(("train", "held-out"), by_split(rows), strict=True):
        print(f"{form}, {name} ({len(part)} problems):")
        if not part:
            continue
        for variant in SHAPES:
            timed = [r for r in part if variant in r["ms"]]
            if timed:
                gain = geomean(r["ms"][DEFAULT] / r["ms"][variant] for r in timed)
                print(f"  {variant}: {gain:.3f}x the default ({len(timed)})")
        best = [min(t for n, t in r["ms"].items() if n != "cudnn") for r in part]
        gain = geomean(r["ms"][DEFAULT] / b for r, b in zip(part, best, strict=True))
        cudnn = [r["ms"]["cudnn"] for r in part]
        before = geomean(c / r["ms"][DEFAULT] for c, r in zip(cudnn, part, strict=True))
        after = geomean(c / b for c, b in zip(cudnn, best, strict=True))
        print(f"  best of all: {gain:.3f}x the default")
        print(f"  vs cuDNN: default {before:.3f}x, best {after:.3f}x")


def joint_fit() -> tuple[float, float]:
    """The (column fill, waves) pair of the grid with the best geomean of the three forms'
    train scores (the middle of ties): one rule serves every form."""
    return SWEEP.joint_forms_fit(RESULTS_PATHS)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=FORMS, default="plain")
    parser.add_argument("--max-seconds", type=float, default=500.0)
    offline = parser.add_mutually_exclusive_group()
    offline.add_argument("--report", action="store_true", help="no GPU: from the results file")
    offline.add_argument("--fit", action="store_true", help="no GPU: from the results file")
    offline.add_argument("--joint", action="store_true", help="no GPU: every form's rows")
    args = parser.parse_args()
    if args.report:
        report(args.form)
    elif args.joint:
        joint_fit()
    elif args.fit:
        SWEEP.fit(args.form, RESULTS_PATHS[args.form])
    else:
        sweep(args.max_seconds, args.form)


if __name__ == "__main__":
    main()
