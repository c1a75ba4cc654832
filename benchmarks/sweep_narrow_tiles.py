"""32-wide tiles for convs of at most 32 output channels: measure them against 64-wide ones.

    python benchmarks/sweep_narrow_tiles.py [--max-seconds 500]   # H100/H200, both splits
    python benchmarks/sweep_narrow_tiles.py --report              # no GPU

The problems: every corpus problem with K <= 32 of at least ``MIN_GFLOP``. Per problem, in one
process: the heuristic's config at 64 wide (what it chose before 32-wide tiles existed), the
32-wide tiles ``NARROW`` (tile_m x cluster_m), and cuDNN's ``F.conv2d``, each checked against
the float32 reference, then timed as ``bench.py`` times. Rows go to ``narrow_tile_sweep.json``;
a rerun skips the problems already there. ``--report`` prints, per split, the geomean of each
32-wide tile over the 64-wide one and of the heuristic's choice over cuDNN.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean, time_interleaved  # noqa: E402
from sweep_rows import (  # noqa: E402
    bf16_problem,
    by_split,
    checked_runs,
    cudnn_run,
    sweep_main,
    sweep_new_problems,
)

RESULTS_PATH = HERE / "narrow_tile_sweep.json"
MAX_K, MIN_GFLOP = 32, 0.05
NARROW = {"128x32": (128, 1), "256x32": (256, 1), "256x32-2x1": (256, 2)}


def narrow_problems(problems: list[dict]) -> list[dict]:
    return [p for p in problems if p["K"] <= MAX_K and p["gflop"] >= MIN_GFLOP]


def variants(default) -> dict:
    """The configs timed per problem: the heuristic's at 64 wide, and the ``NARROW`` tiles
    (ping-pong and halo tiles off, dynamic scheduling on single-CTA clusters only: the
    heuristic's other choices kept)."""
    wide = dataclasses.replace(default, tile_n=64) if default.tile_n < 64 else default
    out = {"wide": wide}
    for name, (tile_m, cluster_m) in NARROW.items():
        out[name] = dataclasses.replace(
            wide, tile_m=tile_m, tile_n=32, cluster_m=cluster_m, cluster_n=1, pingpong=False,
            tile_w=0, halo_h=0, halo_w=0, dynamic_schedule=wide.dynamic_schedule and cluster_m == 1,
        )  # fmt: skip
    return out


def measure(p: dict) -> dict:
    from cute_conv.reference import conv2d_reference

    problem, geom, x, flt, default = bf16_problem(p)
    checks, fns = checked_runs(x, flt, conv2d_reference(x, flt, **geom), geom, variants(default))
    fns["cudnn"] = cudnn_run(x, flt, problem)
    row = {k: p[k] for k in ("key", "split", "gflop")} | {"default": repr(default)}
    return row | {"checks": checks, "ms": time_interleaved(fns)}


def sweep(max_seconds: float) -> None:
    sweep_new_problems(RESULTS_PATH, narrow_problems, measure, max_seconds, ("key", "ms"))


def report() -> None:
    rows = [r for r in json.loads(RESULTS_PATH.read_text())["rows"] if "ms" in r]
    for name, part in zip(("train", "held-out"), by_split(rows), strict=True):
        print(f"{name} ({len(part)} problems):")
        for variant in (*NARROW, "cudnn"):
            ratio = geomean(r["ms"]["wide"] / r["ms"][variant] for r in part)
            print(f"  64-wide time / {variant} time: {ratio:.3f}")


def main() -> None:
    sweep_main(__doc__, sweep, report, "--report")


if __name__ == "__main__":
    main()
