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

import argparse
import functools
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean  # noqa: E402
from sweep_rows import (  # noqa: E402
    corpus_problem,
    fit_bound,
    load_results,
    passed_rows,
    precompile,
    replayed_row,
    sweep_new_problems,
    timed_name,
    untuned_with,
)

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


def config_for(problem, min_k_tiles: float, form: str = "plain"):
    """The config a call of ``form`` without one runs on ``problem`` when the heuristic weighs
    half-step widths for mainloops of at least ``min_k_tiles`` k-tiles."""
    return untuned_with(problem, NUM_SMS, form, half_step_min_k_tiles=min_k_tiles)


def configs_of(problem, form: str = "plain") -> dict:
    """``{HEURISTIC: without half steps, HALF_STEP: with them at any mainloop length}``."""
    return {
        HEURISTIC: config_for(problem, math.inf, form), HALF_STEP: config_for(problem, 0, form)
    }


def tile_width_problems(problems: list[dict], form: str = "plain") -> list[dict]:
    """The corpus problems the sweep measures (see the module docstring)."""
    from bench_corpus import problem_shape

    chosen = []
    for p in problems:
        configs = configs_of(problem_shape(p), form)
        if configs[HEURISTIC] != configs[HALF_STEP]:
            chosen.append(p)
    return chosen


def measure(p: dict, form: str = "plain") -> dict:
    from bench_corpus import problem_shape

    return replayed_row(p, form, configs_of(problem_shape(p), form))


def sweep(max_seconds: float, form: str, path: Path) -> None:
    from bench_corpus import load_corpus, problem_shape

    done = {r["key"] for r in load_results(path)["rows"]}
    todo = [p for p in tile_width_problems(load_corpus(), form) if p["key"] not in done]
    precompile(
        {c.compiled_form() for p in todo for c in configs_of(problem_shape(p), form).values()},
        "float8_e4m3fn" if form == "fp8" else "bfloat16",
    )
    sweep_new_problems(
        path, functools.partial(tile_width_problems, form=form),
        functools.partial(measure, form=form), max_seconds, ("key", "ms"),
    )  # fmt: skip


# ---- the fit (no GPU) ----


def chosen_name(row: dict, min_k_tiles: float, form: str = "plain") -> str:
    """The variant the rule with ``min_k_tiles`` gives ``row``'s problem (its config compared
    with the two the sweep timed)."""
    return timed_name(row, config_for(corpus_problem(row["key"]), min_k_tiles, form))


def score(rows: list[dict], min_k_tiles: float, form: str = "plain") -> float:
    """Geomean of the heuristic's time over the rule's choice's (> 1: the rule gains)."""
    return geomean(
        r["ms"][HEURISTIC] / r["ms"][chosen_name(r, min_k_tiles, form)] for r in rows
    )


def fit(form: str, path: Path) -> None:
    from cute_conv import config

    constant = CONSTANTS[form]
    results = load_results(path)
    print(results.get("device", "?"))
    fit_bound(
        passed_rows(results), MIN_K_TILES_GRID,
        functools.partial(chosen_name, form=form), HEURISTIC, HALF_STEP,
        f"config.{constant}", getattr(config, constant),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=FORMS, default="plain")
    parser.add_argument("--max-seconds", type=float, default=500.0)
    parser.add_argument("--fit", action="store_true", help="no GPU: from the results file")
    parser.add_argument("--results", type=Path, help="default: the form's file in benchmarks/")
    args = parser.parse_args()
    path = args.results or RESULTS_PATHS[args.form]
    if args.fit:
        fit(args.form, path)
    else:
        sweep(args.max_seconds, args.form, path)


if __name__ == "__main__":
    main()
