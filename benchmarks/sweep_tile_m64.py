"""64-row tiles (one consumer warpgroup) on convs whose tiles fill less than a wave, against
the heuristic's config, replayed from CUDA graphs; the data behind
``cute_conv.config.single_warpgroup_config``.

    python benchmarks/sweep_tile_m64.py [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_tile_m64.py --fit                 # no GPU
    python benchmarks/sweep_tile_m64.py --results PATH ...    # another GPU's rows

Why: cuDNN runs small convs as 64-row tiles (CUTLASS 2.x 64x64, cuBLAS's nvjet 64x8 and
64x40) on many CTAs with the whole K per CTA; ours were at least 128 rows (two consumer
warpgroups), so a conv of few 128-row tiles either leaves SMs idle or splits K by stream-K
and sums the partials. A 64-row tile doubles the tiles without a split, at twice the filter
traffic per MMA.

The problems: the corpus convs of 0.05 to 8 GFLOP whose call config without one
(``untuned.untuned_config``, staging, the gather and small-M rules included) has fewer
output tiles than SMs, plain bf16 convs, in an order that makes any prefix a sample of
them. Per problem, in one process: ``heuristic`` (that config), ``m64`` (it with 64-row
tiles, schedule kept), and ``m64_nW`` for W in ``WIDTHS`` up to K rounded to 32 (64-row
tiles W wide, unsplit, single CTAs), each checked against the float32 reference from a
NaN-poisoned output, then replayed from CUDA graphs beside cuDNN's replay. Rows go to
``tile_m64_sweep.json``; a rerun skips the problems already there.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean  # noqa: E402
from sweep_rows import (  # noqa: E402
    by_split,
    load_results,
    passed_rows,
    precompile,
    replayed_row,
    sweep_new_problems,
    untuned_with,
)

RESULTS_PATH = HERE / "tile_m64_sweep.json"
NUM_SMS = 132  # H100 SXM and H200: the selection uses this count
MIN_GFLOP, MAX_GFLOP = 0.05, 8.0
WIDTHS = (32, 64, 128)
HEURISTIC = "heuristic"
_UNSPLIT = dict(
    cluster_m=1, cluster_n=1, stream_k=False, stream_k_split=0, dynamic_schedule=False,
    pingpong=False, tile_w=0, halo_h=0,
)  # fmt: skip


def configs_of(problem) -> dict:
    """The variants timed on ``problem`` (see the module docstring), distinct configs only."""
    heuristic = untuned_with(problem, NUM_SMS)
    variants = {
        HEURISTIC: heuristic,
        "m64": dataclasses.replace(heuristic, tile_m=64, pingpong=False, tile_w=0, halo_h=0),
    }
    widest = max(32, -(-problem.K // 32) * 32)
    for width in WIDTHS:
        if width <= widest:
            variants[f"m64_n{width}"] = dataclasses.replace(
                heuristic, tile_m=64, tile_n=width, **_UNSPLIT
            )
    distinct: dict = {}
    for name, config in variants.items():
        if config not in distinct.values():
            distinct[name] = config
    return distinct


def _sample_order(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def tile_m64_problems(problems: list[dict]) -> list[dict]:
    """The corpus problems the sweep measures (see the module docstring)."""
    from bench_corpus import problem_shape

    from cute_conv.config import schedule_shape

    chosen = []
    for p in problems:
        if not MIN_GFLOP <= p["gflop"] <= MAX_GFLOP:
            continue
        problem = problem_shape(p)
        config = untuned_with(problem, NUM_SMS)
        tiles, _ = schedule_shape(problem, config.tile_m, config.tile_n, config.tile_k)
        if tiles < NUM_SMS:
            chosen.append(p)
    return sorted(chosen, key=lambda p: _sample_order(p["key"]))


def measure(p: dict) -> dict:
    from bench_corpus import problem_shape

    return replayed_row(p, "plain", configs_of(problem_shape(p)))


def sweep(max_seconds: float, path: Path) -> None:
    from bench_corpus import load_corpus, problem_shape

    done = {r["key"] for r in load_results(path)["rows"]}
    todo = [p for p in tile_m64_problems(load_corpus()) if p["key"] not in done]
    precompile({c.compiled_form() for p in todo for c in configs_of(problem_shape(p)).values()})
    sweep_new_problems(path, tile_m64_problems, measure, max_seconds, ("key", "ms"))


def report(path: Path) -> None:
    """Per variant, the geomean of the heuristic's time over its, train and held-out; and
    the best of all variants per problem."""
    results = load_results(path)
    train, held = by_split(passed_rows(results))
    print(f"{results.get('device', '?')}: {len(train)} train, {len(held)} held-out problems")
    names = sorted({n for r in train + held for n in r["ms"]} - {"cudnn"})
    for name in names:
        cells = []
        for part in (train, held):
            rows = [r for r in part if name in r["ms"]]
            ratio = geomean(r["ms"][HEURISTIC] / r["ms"][name] for r in rows) if rows else 0
            cells.append(f"{ratio:.3f} ({len(rows)})")
        print(f"  {name}: train {cells[0]}, held-out {cells[1]}")
    for label, part in (("train", train), ("held-out", held)):
        best = geomean(
            r["ms"][HEURISTIC] / min(t for n, t in r["ms"].items() if n != "cudnn") for r in part
        )
        print(f"  best per problem, {label}: {best:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-seconds", type=float, default=500.0)
    parser.add_argument("--fit", action="store_true", help="no GPU: from the results file")
    parser.add_argument("--results", type=Path, default=RESULTS_PATH)
    args = parser.parse_args()
    if args.fit:
        report(args.results)
    else:
        sweep(args.max_seconds, args.results)


if __name__ == "__main__":
    main()
