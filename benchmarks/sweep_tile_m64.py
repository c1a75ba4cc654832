"""64-row tiles (one consumer warpgroup) where the call's 128-row tiles fill less than a wave
and 64-row ones still fit one, against the config without them, replayed from CUDA graphs;
the fit of ``cute_conv.config.SINGLE_WARPGROUP_MAX_K_TILES`` (one bound for every form).

    python benchmarks/sweep_tile_m64.py [--form F] [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_tile_m64.py [--form F] --fit                 # no GPU

``--results PATH`` measures into (or fits from) another file than the form's, e.g. a second
GPU's rows.

Why: cuDNN runs small convs as 64-row tiles (CUTLASS 2.x 64x64, cuBLAS's nvjet 64x8 and
64x40) on many CTAs with the whole K per CTA; ours were at least 128 rows (two consumer
warpgroups), so a conv of few 128-row tiles leaves SMs idle or splits K by stream-K and sums
the partials. An exploratory sweep (``tile_m64_explore.json``, made by this script's first
version: 133 sub-wave corpus convs on an H200, the untuned config against 64-row variants)
gave the rule's form (``config.single_warpgroup_config``); this sweep fits its bound.

The problems: every corpus conv on which the call's config without one changes when the
rule takes any mainloop length (``max_k_tiles`` inf against 0), staged and gathered ones
included. Per problem, in one process: both configs, each checked against the float32
reference from a NaN-poisoned output, then replayed from CUDA graphs, cuDNN's replay beside
them. Forms (``--form``), as ``sweep_tile_width.py``'s: ``plain`` bf16 convs
(``tile_m64_sweep.json``), ``fused`` ``relu(conv + b) + r`` (``tile_m64_fused_sweep.json``),
``fp8`` plain convs of e4m3 inputs with bf16 output (``tile_m64_fp8_sweep.json``), in an
order that makes any prefix a sample of them; a rerun skips the problems already there.

``--fit`` scores each bound of ``MAX_K_TILES_GRID`` on the train problems and reports the
best (the middle of ties) on the held-out problems, which the fit never sees.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

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
    "plain": HERE / "tile_m64_sweep.json",
    "fused": HERE / "tile_m64_fused_sweep.json",
    "fp8": HERE / "tile_m64_fp8_sweep.json",
}
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
HEURISTIC, SINGLE = "heuristic", "single_warpgroup"
MAX_K_TILES_GRID = (0, 9, 18, 27, 36, 45, 54, 72, 100, 144, math.inf)


def config_for(problem, max_k_tiles: float, form: str = "plain"):
    """The config a call of ``form`` without one runs on ``problem`` when the rule takes
    mainloops of at most ``max_k_tiles`` k-tiles."""
    return untuned_with(problem, NUM_SMS, form, single_warpgroup_max_k_tiles=max_k_tiles)


def configs_of(problem, form: str = "plain") -> dict:
    """``{HEURISTIC: without the rule, SINGLE: with it at any mainloop length}``."""
    return {HEURISTIC: config_for(problem, 0, form), SINGLE: config_for(problem, math.inf, form)}


def tile_m64_problems(problems: list[dict], form: str = "plain") -> list[dict]:
    """The corpus problems the sweep measures (see the module docstring), in sample order."""
    from bench_corpus import problem_shape

    chosen = []
    for p in problems:
        configs = configs_of(problem_shape(p), form)
        if configs[HEURISTIC] != configs[SINGLE]:
            chosen.append(p)
    return sorted(chosen, key=lambda p: hashlib.sha256(p["key"].encode()).hexdigest())


def measure(p: dict, form: str = "plain") -> dict:
    from bench_corpus import problem_shape

    return replayed_row(p, form, configs_of(problem_shape(p), form))


def sweep(max_seconds: float, form: str, path: Path) -> None:
    from bench_corpus import load_corpus, problem_shape

    done = {r["key"] for r in load_results(path)["rows"]}
    todo = [p for p in tile_m64_problems(load_corpus(), form) if p["key"] not in done]
    precompile(
        {c.compiled_form() for p in todo for c in configs_of(problem_shape(p), form).values()},
        "float8_e4m3fn" if form == "fp8" else "bfloat16",
    )
    sweep_new_problems(
        path, functools.partial(tile_m64_problems, form=form),
        functools.partial(measure, form=form), max_seconds, ("key", "ms"),
    )  # fmt: skip


def chosen_name(row: dict, max_k_tiles: float, form: str = "plain") -> str:
    """The variant the rule with ``max_k_tiles`` gives ``row``'s problem."""
    return timed_name(row, config_for(corpus_problem(row["key"]), max_k_tiles, form))


def fit(form: str, path: Path) -> float:
    from cute_conv import config

    results = load_results(path)
    print(f"{results.get('device', '?')}, {form}")
    return fit_bound(
        passed_rows(results), MAX_K_TILES_GRID,
        functools.partial(chosen_name, form=form), HEURISTIC, SINGLE,
        "config.SINGLE_WARPGROUP_MAX_K_TILES", config.SINGLE_WARPGROUP_MAX_K_TILES,
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
