"""128x128 tiles split by stream-K against the call's config without them (CUDA graphs), and the
fit of their k-tile bounds (``cute_conv.config.SQUARE_SPLIT_MIN_K_TILES``, ``_FUSED``).

    python benchmarks/sweep_square_split.py [--form plain|fused] [--max-seconds 500]  # H100/H200
    python benchmarks/sweep_square_split.py [--form plain|fused] --report              # no GPU
    python benchmarks/sweep_square_split.py [--form plain|fused] --fit                 # no GPU

On the H200's rows (2026-11-28) the fit gives plain calls 90 k-tiles (1.080x on train and
family, held-out 1.069x; 72: 1.077x, 1.064x; 180: 1.062x, 1.060x) and fused calls 72 (1.128x,
held-out 1.142x; 90: 1.117x, 1.108x). At 72 (C=512 3x3s) the config that runs is not the
split: the single-warpgroup rule turns it into 64x128 data-parallel tiles.

``--results PATH`` measures into (or reports from) another file than the form's H200 file
(``square_split*_sweep_H200.json``), e.g. an H100's.

Why: the wide split (``config.wide_split_shape``, ``benchmarks/sweep_wide_split.py``) gave
convs of at least ``WIDE_SPLIT_MIN_K_TILES`` k-tiles per tile 128x256 (or 256x128) tiles split
by stream-K, and its sweep timed only those two shapes. ``cute_conv.autotune`` on the H200's
slowest corpus rows (session 48, ``experiments/autotune_headroom_H200.json``) picked 128x128
tiles split the same way for SD's batch-1 32x32 3x3s of K=640, 1.41-1.42x faster. A wide tile
split 4-6 ways writes and reads a 128x256 fp32 partial per way; 128x128 tiles, twice as many,
split fewer ways (2-3) and move half the partial each. Below the wide split's bound the same
tiles replace 64-wide data-parallel ones, which stream more operand rows per MMA.

The problems: the corpus convs whose config (``untuned.untuned_config``, every other rule at
its fitted bound) the rule changes at any bound from ``SELECTED`` k-tiles, in the form
measured (plain bf16, or ``relu(conv + b) + r``), and, since the corpus holds few of them, a
family of SD-like convs drawn at random for this sweep (``family_problems``: batch 1-8,
8x8-48x48 maps, C=512-2560, K=320-1280, 1x1 or 3x3; split ``family``), the corpus's shapes
left out. Per problem, in one process: both configs (``OWN``: the rule left out, the wide
split where it applies; ``SQUARE``: the 128x128 split), each checked against the float32
reference from a NaN-poisoned output, then replayed from CUDA graphs, cuDNN's plain replay
beside them; a rerun skips the problems already there.

``--report`` prints, per part (corpus train, corpus held-out, family), the geomean of the own
config's time over the 128x128 tiles' (> 1: they gain), the worst row, and cuDNN's time over
ours with each. ``--fit`` scores, per form, each bound of ``MIN_K_TILES_GRID`` on the
corpus's train rows and the family's (geomean of the own config's time over the time of the
config the bound gives), picks the best (the middle of ties) and reports the same on the
corpus's held-out rows, which the fit never sees.
"""

from __future__ import annotations

import argparse
import functools
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean  # noqa: E402
from sweep_rows import (  # noqa: E402
    BEFORE_LAST_WAVE,
    EVERY_RULE_FITTED,
    family_problem,
    load_results,
    measure_into,
    middle_of_best,
    passed_rows,
    precompile,
    replayed_row,
    rule_bound_config,
)

RESULTS_PATHS = {
    "plain": HERE / "square_split_sweep_H200.json",
    "fused": HERE / "square_split_fused_sweep_H200.json",
}
NUM_SMS = 132  # H100 SXM and H200: the selection and the report use the same count
OWN, SQUARE = "own", "square"
PARTS = ("train", "heldout", "family")
OFF = math.inf
# From 72 k-tiles (C=512 3x3s): fewer leave a 128x128 tile too short a mainloop to split.
SELECTED = 72
MIN_K_TILES_GRID = (OFF, 72, 90, 135, 180)
CONSTANTS = {"plain": "SQUARE_SPLIT_MIN_K_TILES", "fused": "SQUARE_SPLIT_MIN_K_TILES_FUSED"}
FAMILY_SEED = 49
FAMILY_DRAWS = 400


def family_problems() -> list[dict]:
    """SD-like convs drawn at random (seeded), in the corpus's problem format, split
    ``family``; drawn for this sweep, not part of the corpus."""
    rng, drawn = random.Random(FAMILY_SEED), {}
    for _ in range(FAMILY_DRAWS):
        n, hw = rng.choice((1, 2, 4, 8)), rng.choice((8, 12, 16, 24, 32, 40, 48))
        c = rng.choice((512, 640, 960, 1280, 1920, 2560))
        k = rng.choice((320, 384, 512, 640, 960, 1280))
        r = rng.choice((1, 3, 3, 3))
        p = family_problem(n, hw, hw, c, k, r)
        drawn[p["key"]] = p
    return list(drawn.values())


_RULE_AT = rule_bound_config(
    "square_split_min_k_tiles", NUM_SMS, **(EVERY_RULE_FITTED | BEFORE_LAST_WAVE)
)


def config_for(p: dict, form: str, bound: float):
    """The config a call of ``form`` without one runs on problem ``p`` with the rule at
    ``bound`` k-tiles, every other rule at its fitted bound."""
    from bench_corpus import problem_shape

    return _RULE_AT(problem_shape(p), bound, form)


def configs_of(p: dict, form: str) -> dict:
    """``{OWN: the rule left out, SQUARE: the rule from SELECTED k-tiles}``."""
    return {OWN: config_for(p, form, OFF), SQUARE: config_for(p, form, SELECTED)}


def square_split_problems(form: str) -> list[dict]:
    """The problems the sweep measures in ``form``: corpus then family ones (those of a
    corpus conv's shape left out) whose configs the rule changes from SELECTED k-tiles."""
    from bench_corpus import load_corpus

    def shape(p: dict) -> tuple:
        return tuple(p[d] for d in "NHWCKRS") + (str(p["padding"]), str(p["stride"]))

    corpus = load_corpus()
    in_corpus = {shape(p) for p in corpus}
    family = [p for p in family_problems() if shape(p) not in in_corpus]
    chosen = []
    for p in corpus + family:
        configs = configs_of(p, form)
        if configs[OWN] != configs[SQUARE]:
            chosen.append(p)
    return chosen


def sweep(max_seconds: float, form: str, path: Path) -> None:
    """Measure the problems ``path`` has no row of yet, kernels compiled first."""
    import torch

    torch.backends.cudnn.benchmark = True
    results = load_results(path)
    done = {r["key"] for r in results["rows"]}
    todo = [p for p in square_split_problems(form) if p["key"] not in done]
    precompile({c.compiled_form() for p in todo for c in configs_of(p, form).values()})
    results["device"] = torch.cuda.get_device_name()

    def measure(p: dict) -> dict:
        return replayed_row(p, form, configs_of(p, form))

    measure_into(path, results, todo, measure, max_seconds, ("key", "ms"))


def report(form: str, path: Path) -> None:
    """Per part: rows, the own config's time over the 128x128 tiles' (geomean, worst), and
    cuDNN's time over ours with each."""
    rows = _measured_rows(path)
    print(f"{load_results(path).get('device', '?')}, {form}: {len(rows)} problems")
    print("| part | problems | own / 128x128 | worst | cuDNN / ours, own -> 128x128 |")
    print("|---|---|---|---|---|")
    for part in PARTS:
        in_part = [r for r in rows if r["split"] == part]
        if not in_part:
            continue
        gains = [r["ms"][OWN] / r["ms"][SQUARE] for r in in_part]
        before = geomean(r["ms"]["cudnn"] / r["ms"][OWN] for r in in_part)
        after = geomean(r["ms"]["cudnn"] / r["ms"][SQUARE] for r in in_part)
        print(f"| {part} | {len(in_part)} | {geomean(gains):.3f} | {min(gains):.3f} | "
              f"{before:.3f} -> {after:.3f} |")  # fmt: skip


def _measured_rows(path: Path) -> list[dict]:
    rows = passed_rows(load_results(path))
    if not rows:
        raise SystemExit(f"{path}: no measured rows (run the sweep on a GPU)")
    return rows


@functools.cache
def _problem(key: str) -> dict:
    """The corpus or family problem ``key``."""
    from bench_corpus import load_corpus

    return next(p for p in load_corpus() + family_problems() if p["key"] == key)


def score(rows: list[dict], bound: float, form: str) -> float:
    """Geomean over ``form``'s ``rows`` of the own config's time over the time of the config
    the rule with ``bound`` gives the row's problem (> 1: it gains)."""

    def chosen(row: dict) -> str:
        config = repr(config_for(_problem(row["key"]), form, bound))
        return next(name for name, timed in row["configs"].items() if timed == config)

    return geomean(row["ms"][OWN] / row["ms"][chosen(row)] for row in rows)


def fit(form: str, path: Path) -> float:
    """The bound of ``MIN_K_TILES_GRID`` with the best score on ``form``'s corpus train rows
    and family rows (the middle of ties); prints every bound's score on them and on the
    held-out rows."""
    import cute_conv.config

    rows = _measured_rows(path)
    fitted_on = [r for r in rows if r["split"] in ("train", "family")]
    held = [r for r in rows if r["split"] == "heldout"]
    print(f"{form}: {len(fitted_on)} train and family rows, {len(held)} held-out rows")
    print("| bound | train + family | held-out |\n|---|---|---|")
    for bound in MIN_K_TILES_GRID:
        print(f"| {bound} | {score(fitted_on, bound, form):.4f} | "
              f"{score(held, bound, form):.4f} |")  # fmt: skip
    best = middle_of_best(list(MIN_K_TILES_GRID), lambda bound: score(fitted_on, bound, form))
    name = CONSTANTS[form]
    print(f"fitted: {best} (config.{name} = {getattr(cute_conv.config, name)})")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=tuple(RESULTS_PATHS), default="plain")
    parser.add_argument("--max-seconds", type=float, default=500.0)
    parser.add_argument("--report", action="store_true", help="no GPU: from the results file")
    parser.add_argument("--fit", action="store_true", help="no GPU: from the results file")
    parser.add_argument("--results", type=Path, help="default: the form's H200 file")
    args = parser.parse_args()
    path = args.results or RESULTS_PATHS[args.form]
    if args.fit:
        fit(args.form, path)
    elif args.report:
        report(args.form, path)
    else:
        sweep(args.max_seconds, args.form, path)


if __name__ == "__main__":
    main()
