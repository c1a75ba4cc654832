"""Small-M convs: the heuristic's config against 32- and 64-wide tiles without a cluster or a
stream-K split, replayed from CUDA graphs; the fit of ``cute_conv.config.small_m_config``.

    python benchmarks/sweep_small_m.py [--max-seconds 500]   # H100/H200, both splits
    python benchmarks/sweep_small_m.py --fit                 # no GPU

The problems: every unstaged corpus problem (C whole TMA rows, no stem staging) of GEMM M up
to ``MAX_GEMM_M``, K >= ``MIN_K`` and at most ``MAX_GFLOP``, where a few M tiles leave most
SMs idle. Per problem, in one process: the heuristic's config (``default_config``, before
the small-M rule), ``n32`` and ``n64`` (its tiles 32 or 64 wide, single CTAs, no split), and
cuDNN's ``F.conv2d``, each checked against the float32 reference, captured in a CUDA graph
and its replays timed as ``bench.py`` times. Rows go to ``small_m_sweep.json``; a rerun
skips the problems already there.

``--fit`` scores each rule "``n32`` where the conv has at most T 128-row tiles along M and
at most G of GEMM K" by the geomean over the train problems of the heuristic's time over the
rule's choice's; prints the grid, the best bounds (the middle of ties) and the same score
on the held-out problems.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean, time_interleaved  # noqa: E402
from sweep_rows import (  # noqa: E402
    by_split,
    checked_runs,
    cudnn_run,
    load_results,
    middle_of_best,
    problem_inputs,
    sweep_main,
    sweep_new_problems,
)

RESULTS_PATH = HERE / "small_m_sweep.json"
MAX_GEMM_M, MIN_K, MAX_GFLOP = 512, 128, 2.0
TILES_M = (1, 2, 3, 4)
GEMM_K = (1024, 1536, 2048, 2304, 2560, 3456, 4608, 10**9)


def small_m_problems(problems: list[dict]) -> list[dict]:
    """The unstaged corpus problems of GEMM M <= ``MAX_GEMM_M``, K >= ``MIN_K`` and at most
    ``MAX_GFLOP``."""
    from bench_corpus import problem_shape

    from cute_conv.staging import gather_replaces, kernel_problem_for

    chosen = []
    for p in problems:
        problem = problem_shape(p)
        unstaged = kernel_problem_for(problem) == problem and gather_replaces(problem) is None
        small = problem.gemm_m <= MAX_GEMM_M and problem.K >= MIN_K and p["gflop"] <= MAX_GFLOP
        if unstaged and small:
            chosen.append(p)
    return chosen


def variants(heuristic) -> dict:
    """The heuristic's config, and its tiles 32 and 64 wide on single CTAs without a split."""
    unsplit = dict(cluster_m=1, cluster_n=1, stream_k=False, stream_k_split=0)
    return {
        "heuristic": heuristic,
        "n32": dataclasses.replace(heuristic, tile_n=32, **unsplit),
        "n64": dataclasses.replace(heuristic, tile_n=64, **unsplit),
    }


def measure(p: dict) -> dict:
    import torch
    from models import replay_of

    import cute_conv
    from cute_conv.reference import conv2d_reference

    problem, geom, x, flt = problem_inputs(p)
    num_sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    heuristic = cute_conv.default_config(problem, num_sms)
    ref = conv2d_reference(x, flt, **geom)
    checks, fns = checked_runs(x, flt, ref, geom, variants(heuristic))
    graphs = {name: replay_of(fn) for name, fn in fns.items()}
    graphs["cudnn"] = replay_of(cudnn_run(x, flt, problem))
    row = {k: p[k] for k in ("key", "split", "gflop")}
    row |= {"gemm_m": problem.gemm_m, "gemm_k": problem.gemm_k, "heuristic": repr(heuristic)}
    return row | {"checks": checks, "ms": time_interleaved(graphs)}


def sweep(max_seconds: float) -> None:
    sweep_new_problems(RESULTS_PATH, small_m_problems, measure, max_seconds, ("key", "ms"))


def score(rows: list[dict], max_tiles_m: int, max_gemm_k: int) -> float:
    """Geomean of the heuristic's time over the time of the rule's choice."""

    def chosen(r: dict) -> str:
        narrow = -(-r["gemm_m"] // 128) <= max_tiles_m and r["gemm_k"] <= max_gemm_k
        return "n32" if narrow else "heuristic"

    return geomean(r["ms"]["heuristic"] / r["ms"][chosen(r)] for r in rows)


def fit(results: dict) -> str:
    rows = [r for r in results["rows"] if {"heuristic", "n32", "n64"} <= set(r["ms"])]
    train, held = by_split(rows)
    lines = [f"{results.get('device', '?')}: {len(train)} train, {len(held)} held-out problems"]
    lines.append("tiles_m <= T, gemm_k <= G: train score per G")
    for t in TILES_M:
        cells = " ".join(f"{g}:{score(train, t, g):.3f}" for g in GEMM_K)
        lines.append(f"  T={t} {cells}")
    t_best = middle_of_best(list(TILES_M), lambda t: max(score(train, t, g) for g in GEMM_K))
    g_best = middle_of_best(list(GEMM_K), lambda g: score(train, t_best, g))
    lines.append(
        f"best: T={t_best}, G={g_best}: train {score(train, t_best, g_best):.3f}, "
        f"held-out {score(held, t_best, g_best):.3f}; n32 everywhere: train "
        f"{geomean(r['ms']['heuristic'] / r['ms']['n32'] for r in train):.3f}, held-out "
        f"{geomean(r['ms']['heuristic'] / r['ms']['n32'] for r in held):.3f}"
    )
    return "\n".join(lines)


def main() -> None:
    sweep_main(__doc__, sweep, lambda: print(fit(load_results(RESULTS_PATH))), "--fit")


if __name__ == "__main__":
    main()
