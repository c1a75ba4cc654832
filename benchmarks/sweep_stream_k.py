"""Stream-K splits: measure data-parallel, whole-grid and bounded splits on the corpus's
sub-wave problems, and fit the heuristic's rule.

    python benchmarks/sweep_stream_k.py --split train [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_stream_k.py --split heldout                     # the judged part
    python benchmarks/sweep_stream_k.py --fit                               # no GPU

The problems: every corpus problem whose default (ungathered) tiles fill less than one wave of
the SMs and whose mainloop has at least ``MIN_K_TILES`` k-tiles (elsewhere stream-K has
nothing to balance). Per problem, in one process: the heuristic's config with ``stream_k``
off, with it on over the whole grid (``stream_k_split=0``), and with it on at each split of
``SPLITS`` that fits the SMs and leaves each CTA ``MIN_K_TILES_PER_CTA`` k-tiles or more
(everything else as the heuristic chose it; the schedule options stream-K excludes turned
off); and cuDNN's ``F.conv2d``. Each is checked against the float32 reference first, then
timed as ``bench.py`` times (interleaved rounds of ``do_bench`` medians). Rows are appended to
``stream_k_sweep.json`` as they are measured; a rerun skips the problems already there.

``--fit`` chooses ``schedule.K_TILES_PER_SPLIT`` (the rule ``stream_k_schedule``: split each
tile as many ways of ``SPLITS`` as the SMs allow while every CTA keeps that many k-tiles,
else the whole-grid rule) to maximize the training problems' geomean of (fastest variant) /
(chosen), over the unstaged problems (``fitted_rows``), and reports the same on the held-out
problems, which the fit never sees, with the default config's ratio to cuDNN under the rule
the sweep ran with and the fitted one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean, time_interleaved  # noqa: E402
from bench_corpus import load_corpus, problem_shape  # noqa: E402
from sweep_rows import (  # noqa: E402
    bf16_problem,
    by_split,
    checked_runs,
    cudnn_run,
    load_results,
    measure_into,
    middle_of_best,
    untuned_with,
)
from sweep_rows import precompile as precompile_configs  # noqa: E402

from cute_conv.schedule import STREAM_K_SPLITS as SPLITS  # noqa: E402
from cute_conv.schedule import stream_k_schedule  # noqa: E402

RESULTS_PATH = HERE / "stream_k_sweep.json"
MIN_K_TILES = 12
MIN_K_TILES_PER_CTA = 3  # a shorter share is all fixup
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit's model use the same count
DATA_PARALLEL, WHOLE_GRID = "data_parallel", "whole_grid"


def sub_wave(problems: list[dict], num_sms: int = NUM_SMS) -> list[dict]:
    """The problems where the schedule choice matters (see the module docstring), each with
    its default config's cluster tiles, k-tiles, clusters per wave and the splits to time."""
    from cute_conv.schedule import cluster_tile_count, schedule_shape
    from cute_conv.staging import kernel_problem_for

    chosen = []
    for p in problems:
        problem = problem_shape(p)
        config = untuned_with(problem, num_sms)  # as measured: before 64-row tiles
        if config.gather:  # gathered operands exclude stream-K
            continue
        kernel_problem = kernel_problem_for(problem)
        tiles, k_tiles = schedule_shape(kernel_problem, config.tile_m, config.tile_n, config.tile_k)
        cluster_tiles = cluster_tile_count(kernel_problem, config)
        max_clusters = num_sms // (config.cluster_m * config.cluster_n)
        if tiles < num_sms and k_tiles >= MIN_K_TILES:
            splits = [
                s for s in SPLITS
                if cluster_tiles * s <= max_clusters and k_tiles / s >= MIN_K_TILES_PER_CTA
            ]  # fmt: skip
            chosen.append(
                p | {"tiles": cluster_tiles, "k_tiles": k_tiles, "max_clusters": max_clusters,
                     "splits": splits}
            )  # fmt: skip
    return chosen


def with_stream_k(config, stream_k: bool, split: int = 0):
    """``config`` with ``stream_k`` (and ``stream_k_split``) set and the options stream-K
    excludes turned off."""
    if not stream_k:
        return dataclasses.replace(config, stream_k=False, stream_k_split=0)
    return dataclasses.replace(
        config, stream_k=True, stream_k_split=split, dynamic_schedule=False, pingpong=False,
        tile_w=0, halo_h=0, halo_w=0,
    )  # fmt: skip


def variants(default, splits: list[int]) -> dict:
    """The configs a problem is timed with, by name: data-parallel, the whole grid, each
    split."""
    configs = {
        DATA_PARALLEL: with_stream_k(default, False),
        WHOLE_GRID: with_stream_k(default, True),
    }
    return configs | {str(s): with_stream_k(default, True, s) for s in splits}


def measure(p: dict) -> dict:
    from cute_conv.reference import conv2d_reference

    problem, geom, x, flt, default = bf16_problem(p)
    configs = variants(default, p["splits"])
    checks, fns = checked_runs(x, flt, conv2d_reference(x, flt, **geom), geom, configs)
    fns["cudnn_ms"] = cudnn_run(x, flt, problem)
    times = time_interleaved(fns)
    row = {k: p[k] for k in ("key", "split", "tags", "gflop", "tiles", "k_tiles", "max_clusters")}
    row |= {"default": _schedule_name(default), "checks": checks}
    return row | {"cudnn_ms": times.pop("cudnn_ms"), "times": times}


def _schedule_name(config) -> str:
    if not config.stream_k:
        return DATA_PARALLEL
    return str(config.stream_k_split) if config.stream_k_split else WHOLE_GRID


def precompile(problems: list[dict]) -> None:
    """Compile the data-parallel and stream-K kernels of every problem
    (``sweep_rows.precompile``); splits are launch choices of the one stream-K kernel."""
    configs = set()
    for p in problems:
        default = untuned_with(problem_shape(p), NUM_SMS)
        configs |= {with_stream_k(default, False), with_stream_k(default, True)}
    precompile_configs(configs)


def sweep(split: str, max_seconds: float) -> None:
    import torch

    torch.backends.cudnn.benchmark = True
    results = load_results(RESULTS_PATH)
    done = {r["key"] for r in results["rows"]}
    todo = [p for p in sub_wave(load_corpus()) if p["split"] == split and p["key"] not in done]
    precompile(todo)
    results["device"] = torch.cuda.get_device_name()
    shown = ("key", "default", "times", "cudnn_ms")
    measure_into(RESULTS_PATH, results, todo, measure, max_seconds, shown)


def chosen_name(row: dict, k_tiles_per_split: float | None) -> str:
    """The variant a rule picks for a measured ``row``: the heuristic's when
    ``k_tiles_per_split`` is None, else ``stream_k_schedule``'s with it."""
    if k_tiles_per_split is None:
        return row["default"]
    stream_k, split = stream_k_schedule(
        row["tiles"], row["k_tiles"], row["max_clusters"], k_tiles_per_split
    )
    if not stream_k:
        return DATA_PARALLEL
    return str(split) if split else WHOLE_GRID


def score(rows: list[dict], k_tiles_per_split: float | None) -> float:
    """Geomean over ``rows`` of (the fastest variant's time) / (the chosen one's): 1 is
    always choosing right."""
    return geomean(
        min(r["times"].values()) / r["times"][chosen_name(r, k_tiles_per_split)] for r in rows
    )


def fit_k_tiles_per_split(train: list[dict]) -> float:
    """The ``stream_k_split_for`` constant with the best ``score`` on ``train``: candidates
    every half k-tile from the shortest share the sweep times (so every split a candidate
    picks was timed) up to past the longest mainloop (nothing splits); among equal scores
    the middle one."""
    longest = max(r["k_tiles"] for r in train)
    candidates = [MIN_K_TILES_PER_CTA + i / 2 for i in range(2 * longest)]
    return middle_of_best(candidates, lambda c: score(train, c))


def fitted_rows(rows: list[dict]) -> list[dict]:
    """The rows the fit uses: every variant checked and timed (a variant the rule could pick
    but that failed its check would leave the score undefined), of unstaged problems. A staged
    call (C padded by a copy) spends more host time than its kernels take, so its eager
    times move with the host's pace (2-3x between runs, session 17), not with the split."""
    from cute_conv.staging import kernel_problem_for

    corpus = {p["key"]: problem_shape(p) for p in load_corpus()}
    return [
        r for r in rows
        if "times" in r and all(c["ok"] for c in r["checks"].values())
        and r["default"] in r["times"]
        and kernel_problem_for(corpus[r["key"]]) == corpus[r["key"]]
    ]  # fmt: skip


def fit() -> None:
    rows = fitted_rows(json.loads(RESULTS_PATH.read_text())["rows"])
    train, heldout = by_split(rows)
    fitted = fit_k_tiles_per_split(train)
    print(f"{len(train)} train, {len(heldout)} held-out problems")
    print(f"fitted: {fitted:.1f} k-tiles per CTA of a split")
    print("| part | rule | fastest / chosen (geomean) | default vs cuDNN (geomean) |")
    print("|---|---|---|---|")
    for name, part in (("train", train), ("held-out", heldout)):
        for rule, c in (("as swept", None), ("fitted", fitted)):
            vs = geomean(r["cudnn_ms"] / r["times"][chosen_name(r, c)] for r in part)
            print(f"| {name} | {rule} | {score(part, c):.3f} | {vs:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("train", "heldout"), default="train")
    parser.add_argument("--max-seconds", type=float, default=500.0)
    parser.add_argument("--fit", action="store_true", help="fit and report, no GPU")
    args = parser.parse_args()
    if args.fit:
        fit()
    else:
        sweep(args.split, args.max_seconds)


if __name__ == "__main__":
    main()
