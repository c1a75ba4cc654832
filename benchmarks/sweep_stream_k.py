"""Stream-K or data-parallel: measure both on the corpus's sub-wave problems, fit the rule.

    python benchmarks/sweep_stream_k.py --split train [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_stream_k.py --split heldout                     # the judged part
    python benchmarks/sweep_stream_k.py --fit                               # no GPU

The problems: every corpus problem whose default tiles fill less than one wave of the SMs and
whose mainloop has at least ``MIN_K_TILES`` k-tiles (elsewhere stream-K has nothing to
balance). Per problem, in one process: the heuristic's config with ``stream_k`` on and off
(everything else as the heuristic chose it; the schedule options stream-K excludes turned
off), and cuDNN's ``F.conv2d``, each checked against the float32 reference first, then timed
as ``bench.py`` times (interleaved rounds of ``do_bench`` medians). Rows are appended to
``stream_k_sweep.json`` as they are measured; a rerun skips the problems already there.

``--fit`` chooses the threshold of ``config.stream_k_pays`` (k-tiles a stream-K split saves
per SM) that maximizes the training problems' geomean of (best of the two) / (chosen), and
reports the same geomean on the held-out problems, which the fit never sees, together with
the default config's ratio to cuDNN under the old and the fitted rule.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
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
)

RESULTS_PATH = HERE / "stream_k_sweep.json"
MIN_K_TILES = 8
NUM_SMS = 132  # H100 SXM and H200: the selection and the fit's model use the same count


def sub_wave(problems: list[dict], num_sms: int = NUM_SMS) -> list[dict]:
    """The problems where the schedule choice matters (see the module docstring), each with
    its default config's tile count and k-tiles."""
    import cute_conv
    from cute_conv.config import schedule_shape
    from cute_conv.staging import kernel_problem_for

    chosen = []
    for p in problems:
        kernel_problem = kernel_problem_for(problem_shape(p))
        config = cute_conv.default_config(kernel_problem, num_sms)
        tiles, k_tiles = schedule_shape(
            kernel_problem, config.tile_m, config.tile_n, config.tile_k
        )
        if tiles < num_sms and k_tiles >= MIN_K_TILES:
            chosen.append(p | {"tiles": tiles, "k_tiles": k_tiles})
    return chosen


def stream_k_pays(tiles: int, k_tiles: int, num_sms: int, threshold: float) -> bool:
    """The one-parameter rule the fit tries: split the k-tiles of ``tiles`` output tiles
    evenly over ``num_sms`` SMs when that saves each SM at least ``threshold`` k-tiles (a
    data-parallel wave takes ``k_tiles``, the split ``tiles * k_tiles / num_sms`` plus its
    fixed cost, the partials' fixup)."""
    return tiles < num_sms and k_tiles * (1 - tiles / num_sms) >= threshold


def with_stream_k(config, stream_k: bool):
    """``config`` with ``stream_k`` set and the options stream-K excludes turned off."""
    if not stream_k:
        return dataclasses.replace(config, stream_k=False)
    return dataclasses.replace(
        config, stream_k=True, dynamic_schedule=False, pingpong=False, tile_w=0, halo_h=0
    )


def measure(p: dict) -> dict:
    from cute_conv.reference import conv2d_reference

    problem, geom, x, flt, default = bf16_problem(p)
    schedules = {
        ("stream_k_ms" if stream_k else "data_parallel_ms"): with_stream_k(default, stream_k)
        for stream_k in (False, True)
    }
    checks, fns = checked_runs(x, flt, conv2d_reference(x, flt, **geom), geom, schedules)
    fns["cudnn_ms"] = cudnn_run(x, flt, problem)
    row = {k: p[k] for k in ("key", "split", "tags", "gflop", "tiles", "k_tiles")}
    row |= {"default_stream_k": default.stream_k, "checks": checks}
    return row | time_interleaved(fns)


def _compile(config) -> None:
    import cute_conv

    cute_conv.compile_kernel("sm_90a", config=config)


def precompile(problems: list[dict]) -> None:
    """Compile both configs of every problem in a process per CPU (through the disk cache),
    before the timed loop loads them: compiles take seconds each, on one core."""
    import os
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    import cute_conv
    from cute_conv.staging import kernel_problem_for

    configs = set()
    for p in problems:
        default = cute_conv.default_config(kernel_problem_for(problem_shape(p)), NUM_SMS)
        configs |= {with_stream_k(default, False), with_stream_k(default, True)}
    with ProcessPoolExecutor(os.cpu_count(), mp_context=get_context("spawn")) as pool:
        list(pool.map(_compile, configs))
    print(f"{len(configs)} kernels compiled")


def sweep(split: str, max_seconds: float) -> None:
    import torch

    torch.backends.cudnn.benchmark = True
    results = load_results(RESULTS_PATH)
    done = {r["key"] for r in results["rows"]}
    todo = [p for p in sub_wave(load_corpus()) if p["split"] == split and p["key"] not in done]
    precompile(todo)
    results["device"] = torch.cuda.get_device_name()
    shown = ("key", "data_parallel_ms", "stream_k_ms", "cudnn_ms")
    measure_into(RESULTS_PATH, results, todo, measure, max_seconds, shown)


def chosen_ms(row: dict, threshold: float | None) -> float:
    """The time of the schedule a rule picks for a measured ``row``: the heuristic's when
    ``threshold`` is None, else ``stream_k_pays`` at ``threshold``."""
    if threshold is None:
        stream_k = row["default_stream_k"]
    else:
        stream_k = stream_k_pays(row["tiles"], row["k_tiles"], NUM_SMS, threshold)
    return row["stream_k_ms"] if stream_k else row["data_parallel_ms"]


def score(rows: list[dict], threshold: float | None) -> float:
    """Geomean over ``rows`` of (the faster schedule's time) / (the chosen one's): 1 is
    always choosing right."""
    return geomean(
        min(r["stream_k_ms"], r["data_parallel_ms"]) / chosen_ms(r, threshold) for r in rows
    )


def fit_threshold(train: list[dict]) -> float:
    """The ``stream_k_pays`` threshold with the best ``score`` on ``train``: candidates halfway
    between the problems' savings (and infinity: never split); among equal scores the middle
    one, the farthest from the data on both sides."""
    saved = sorted({r["k_tiles"] * (1 - r["tiles"] / NUM_SMS) for r in train})
    candidates = [(a + b) / 2 for a, b in zip(saved, saved[1:], strict=False)] + [math.inf]
    return middle_of_best(candidates, lambda threshold: score(train, threshold))


def fit() -> None:
    rows = json.loads(RESULTS_PATH.read_text())["rows"]
    rows = [r for r in rows if "stream_k_ms" in r and "data_parallel_ms" in r]
    train, heldout = by_split(rows)
    fitted = fit_threshold(train)
    print(f"{len(train)} train, {len(heldout)} held-out problems")
    print(f"fitted threshold: {fitted:.1f} k-tiles saved per SM")
    print("| part | rule | best / chosen (geomean) | default vs cuDNN (geomean) |")
    print("|---|---|---|---|")
    for name, part in (("train", train), ("held-out", heldout)):
        for rule, t in (("old", None), ("fitted", fitted)):
            vs = geomean(r["cudnn_ms"] / chosen_ms(r, t) for r in part)
            print(f"| {name} | {rule} | {score(part, t):.3f} | {vs:.3f} |")


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
