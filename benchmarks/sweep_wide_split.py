"""Wide tiles split by stream-K: 128x256 or 256x128 tiles whose k-tiles a few CTAs share,
against the heuristic's narrower data-parallel tiles, replayed from CUDA graphs; the fit of
``cute_conv.config.WIDE_SPLIT_MIN_K_TILES``.

    python benchmarks/sweep_wide_split.py [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_wide_split.py --fit                 # no GPU

Why: the heuristic picks the tile width by wave quantization alone (``_wave_cost``), so a
conv of 8 M tiles and K=1280 (SDXL's batch-1 convs at 32x32) runs 112 tiles of 128x96 on 132
SMs, each streaming 224 operand rows per 128x96 MMA, where a 128x256 tile moves 384 rows per
128x256 MMA (43% fewer bytes per flop); split three ways, 40 such tiles fill 120 SMs.

The problems: the corpus's unstaged convs (C whole TMA rows, not gathered) of at least
``MIN_K_TILES`` 64-channel k-tiles, where a wide tile shape pads K by at most a quarter
(``config.wide_tile_shapes``) and a split of two of its cluster tiles fits the SMs; every
``TRAIN_STRIDE``-th train problem. Per problem, in one process: the config a call without one
runs, the wide-split rule taken out (``heuristic``, ``rule_free_config``), and for each wide
shape that fits, each stream-K split of ``SPLITS`` that fits the SMs and leaves every CTA at
least ``MIN_K_TILES_PER_CTA`` k-tiles (``SHAPE/s``), clusters as the heuristic sets them for
that tile (``config.split_tile_config``); each checked against the float32 reference from a
NaN-poisoned output, then replayed from CUDA graphs (eager calls of these 10-100 us convs
time the host too), cuDNN's replay beside them. Rows go to ``wide_split_sweep.json``; a
rerun skips the problems already there.

``--fit`` scores the rule (``config.wide_split_shape``: a data-parallel conv of at least T
k-tiles per tile takes the wide split that ``stream_k_schedule`` picks) over a grid of T on
the train problems, picks the best (the middle of ties), and reports the same on the held-out
problems, which the fit never sees.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean  # noqa: E402
from sweep_rows import (  # noqa: E402
    by_split,
    corpus_problem,
    load_results,
    middle_of_best,
    passed_rows,
    precompile,
    replayed_row,
    sweep_main,
    sweep_new_problems,
    untuned_with,
)

RESULTS_PATH = HERE / "wide_split_sweep.json"
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit use the same count
MIN_K_TILES = 12
MIN_K_TILES_PER_CTA = 4
SPLITS = (2, 3, 4, 6, 8)
HEURISTIC = "heuristic"
# Every second train problem (in corpus order): the whole selection takes longer than a
# session's device time.
TRAIN_STRIDE = 2


def shape_name(tile_m: int, tile_n: int, split: int = 0) -> str:
    return f"{tile_m}x{tile_n}" + (f"/{split}" if split else "")


def wide_variants(problem, num_sms: int = NUM_SMS) -> dict:
    """The wide configs timed on ``problem``, by name (``shape_name``): each split of each
    wide tile shape (``config.wide_tile_shapes``) that fits (see the module docstring)."""
    from cute_conv.config import split_tile_config, wide_tile_shapes
    from cute_conv.schedule import cluster_tile_count, schedule_shape

    variants = {}
    for tile_m, tile_n in wide_tile_shapes(problem):
        base = split_tile_config(problem, tile_m, tile_n)
        clusters = cluster_tile_count(problem, base)
        max_clusters = num_sms // (base.cluster_m * base.cluster_n)
        _, k_tiles = schedule_shape(problem, tile_m, tile_n, base.tile_k)
        splits = [
            s for s in SPLITS
            if clusters * s <= max_clusters and k_tiles >= s * MIN_K_TILES_PER_CTA
        ]  # fmt: skip
        for s in splits:
            variants[shape_name(tile_m, tile_n, s)] = split_tile_config(problem, tile_m, tile_n, s)
    return variants


def wide_split_problems(problems: list[dict]) -> list[dict]:
    """The corpus problems the sweep measures (see the module docstring)."""
    from bench_corpus import problem_shape

    from cute_conv.schedule import schedule_shape
    from cute_conv.staging import kernel_problem_for
    from cute_conv.untuned import heuristic_config

    chosen = []
    for p in problems:
        problem = problem_shape(p)
        if kernel_problem_for(problem) != problem or heuristic_config(problem, NUM_SMS, cuda_cores=False).gather:
            continue
        if schedule_shape(problem, 128, 128, 64)[1] >= MIN_K_TILES and wide_variants(problem):
            chosen.append(p)
    train = [p for p in chosen if p["split"] == "train"][::TRAIN_STRIDE]
    return [p for p in chosen if p["split"] != "train" or p in train]


def rule_free_config(problem):
    """The config a call without one runs on the unstaged ``problem`` with the wide-split rule
    taken out of the heuristic (``default_config(..., wide_split=False)``), and the half-step
    widths, which the sweep predates (``half_step_min_k_tiles=math.inf``): the baseline."""
    return untuned_with(problem, NUM_SMS, wide_split=False, half_step_min_k_tiles=math.inf)


def configs_of(p: dict) -> dict:
    """The configs timed on corpus problem ``p``, by name."""
    from bench_corpus import problem_shape

    problem = problem_shape(p)
    return {HEURISTIC: rule_free_config(problem)} | wide_variants(problem)


def measure(p: dict) -> dict:
    return replayed_row(p, "plain", configs_of(p))


def sweep(max_seconds: float) -> None:
    from bench_corpus import load_corpus

    # Splits are launch choices: one compiled kernel serves every split of a shape.
    done = {r["key"] for r in load_results(RESULTS_PATH)["rows"]}
    todo = [p for p in wide_split_problems(load_corpus()) if p["key"] not in done]
    precompile({c.compiled_form() for p in todo for c in configs_of(p).values()})
    sweep_new_problems(RESULTS_PATH, wide_split_problems, measure, max_seconds, ("key", "ms"))


# ---- the fit (no GPU) ----


def chosen_name(row: dict, min_k_tiles: float) -> str | None:
    """The variant the wide-split rule with ``min_k_tiles`` picks on ``row``'s problem: the
    heuristic's where the heuristic splits already or ``wide_split_shape`` declines, else the
    wide split's (None where the sweep did not time that split)."""
    from cute_conv.config import wide_split_shape

    if "stream_k=True" in row["configs"][HEURISTIC]:
        return HEURISTIC
    problem = corpus_problem(row["key"])
    # The sweep predates the 128x128 split tiles (sweep_square_split.py): it timed wide ones.
    shape = wide_split_shape(problem, NUM_SMS, min_k_tiles, square_min_k_tiles=math.inf)
    if shape is None:
        return HEURISTIC
    name = shape_name(*shape)
    return name if name in row["ms"] else None


def score(rows: list[dict], min_k_tiles: float) -> float:
    """Geomean of the heuristic's time over the rule's choice's (> 1: the rule gains), over
    the rows where the sweep timed that choice."""
    chosen = [(r, chosen_name(r, min_k_tiles)) for r in rows]
    return geomean(r["ms"][HEURISTIC] / r["ms"][name] for r, name in chosen if name)


MIN_K_TILES_GRID = (36, 72, 90, 135, 180, 270, 360, 10**6)


def fit() -> None:
    from cute_conv.config import WIDE_SPLIT_MIN_K_TILES

    results = load_results(RESULTS_PATH)
    train, held = by_split(passed_rows(results))
    print(f"{results.get('device', '?')}: {len(train)} train, {len(held)} held-out problems")
    for name, part in (("train", train), ("held-out", held)):
        best = geomean(r["ms"][HEURISTIC] / min(r["ms"][n] for n in r["checks"]) for r in part)
        print(f"  {name}: the fastest variant per problem over the heuristic: {best:.3f}")
    print("| min k-tiles | train | held-out | problems taking the wide split (train, held-out) |")
    print("|---|---|---|---|")
    for t in MIN_K_TILES_GRID:
        takes = [sum(chosen_name(r, t) not in (HEURISTIC, None) for r in part)
                 for part in (train, held)]  # fmt: skip
        print(f"| {t} | {score(train, t):.3f} | {score(held, t):.3f} | {takes[0]}, {takes[1]} |")
    best = middle_of_best(list(MIN_K_TILES_GRID), lambda t: score(train, t))
    print(f"fitted on train: {best} (config.WIDE_SPLIT_MIN_K_TILES = {WIDE_SPLIT_MIN_K_TILES})")
    untimed = [r["key"] for r in train + held if chosen_name(r, best) is None]
    print(f"rows whose choice was not timed (left out of the scores): {untimed}")
    for name, part in (("train", train), ("held-out", held)):
        before = geomean(r["ms"]["cudnn"] / r["ms"][HEURISTIC] for r in part)
        after = geomean(
            r["ms"]["cudnn"] / r["ms"][chosen_name(r, best) or HEURISTIC] for r in part
        )
        print(f"  {name}: cuDNN / ours {before:.3f} -> {after:.3f}")


def main() -> None:
    sweep_main(__doc__, sweep, fit, "--fit")


if __name__ == "__main__":
    main()
