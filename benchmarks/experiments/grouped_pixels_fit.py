"""``cute_conv.grouped_rule.FITTED_PIXELS`` judged and fitted on rows of
``grouped_pixels_sweep.py`` (no GPU):

    python benchmarks/experiments/grouped_pixels_fit.py FILES...           # judge the rule
    python benchmarks/experiments/grouped_pixels_fit.py FILES... --search  # fit its constants

Only the calls ``cute_conv.nn.Conv2d`` runs on the grouped kernel (``runs_grouped_kernel``)
count. Per (model, batch) forward their times are summed (each call weighed by its count) as
a rule picks the pixels, beside one pixel per thread (the kernel before it took more) and the
best swept pixels of each call. ``--search`` walks a grid of ``PixelsRule`` (powers of two for
the depthwise thresholds, powers of two and three times them for the grouped two-pixel
threshold, every swept count for the grouped pixels, the package's widest group) and takes the
least summed time.

How the package's ``FITTED_PIXELS`` came about (H200, ``grouped_pixels_sweep_*_H200.json``):
fitted on the sweep's ``FIT_MODELS`` (6,328 us summed against 7,951 at one pixel, 1.256x; the
best pixels per call 6,310), judged on ``HELD_OUT_MODELS`` (named in the commit before their
rows; RegNetX-3.2GF's did not fit in the call's time): 5,541 us against 6,922 (1.249x), no
forward slower, the best pixels per call 5,479; the search on the held-out rows alone picks
the same rule. Its depthwise thresholds were refitted on the row window's sweep
(``grouped_pixels_sweep_window_H200.json``) and judged on ``..._window_heldout_H200.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from grouped_pixels_sweep import PIXELS as SWEPT  # noqa: E402 - the sweep's columns

from cute_conv.grouped import grouped_limits  # noqa: E402
from cute_conv.grouped_rule import FITTED_PIXELS, PixelsRule, runs_grouped_kernel  # noqa: E402
from cute_conv.problem import Conv2dProblemShape  # noqa: E402

# What torch's Conv2d repr leaves out where it is the default.
_DEFAULT_PAIRS = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1)}
_GROUPS = re.compile(r"groups=(\d+)")


def _pair(module: str, name: str) -> tuple[int, int]:
    """The ``name=(a, b)`` attribute of a Conv2d repr."""
    match = re.search(rf"{name}=\((\d+), (\d+)\)", module)
    return (int(match[1]), int(match[2])) if match else _DEFAULT_PAIRS[name]


def sweep_rows(paths: list[Path]) -> list[dict]:
    """The sweep's rows, each with its ``problem``, ``config`` (one pixel), ``macs`` and
    whether ``cute_conv.nn.Conv2d`` runs it on the kernel (``kernel_takes``)."""
    rows = []
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            n, c, h, w = row["input"]
            k, module = row["output"][1], row["module"]
            groups = int(_GROUPS.search(module).group(1))
            r, s = _pair(module, "kernel_size")
            geometry = {name: _pair(module, name) for name in _DEFAULT_PAIRS}
            problem = Conv2dProblemShape(N=n, H=h, W=w, C=c, K=k, R=r, S=s, **geometry)
            macs = problem.gemm_m * k * r * s * c // groups
            rows.append({**row, "problem": problem, "config": grouped_limits(c, k, groups),
                         "macs": macs,
                         "kernel_takes": runs_grouped_kernel(macs, c // groups, k // groups, groups, r * s)})  # fmt: skip
    return rows


def kernel_rows(paths: list[Path]) -> list[dict]:
    """The sweep's rows of calls the kernel runs (``sweep_rows``)."""
    return [row for row in sweep_rows(paths) if row["kernel_takes"]]


def forward_sums(rows: list[dict], rule: PixelsRule) -> dict[tuple[str, int], dict[str, float]]:
    """Per (model, batch): microseconds of the kernel's calls at one pixel, as ``rule``
    picks, and at the best swept pixels."""
    sums: dict = collections.defaultdict(lambda: collections.Counter())
    for row in rows:
        us, calls = row["graph_us"], row["calls"]
        picked = rule.pixels(row["problem"], row["config"])
        sums[row["model"], row["batch"]].update(
            {"one": us["p1"] * calls, "rule": us[f"p{picked}"] * calls,
             "best": min(us[f"p{p}"] for p in SWEPT) * calls}
        )  # fmt: skip
    return sums


def report(rows: list[dict], rule: PixelsRule) -> None:
    sums = forward_sums(rows, rule)
    for (model, batch), s in sorted(sums.items()):
        print(f"{model:20} batch {batch:3}: one pixel {s['one']:8.1f} us, rule {s['rule']:8.1f} "
              f"us ({s['one'] / s['rule']:.3f}x), best {s['best']:8.1f} us")  # fmt: skip
    total = sum(sums.values(), collections.Counter())
    worst = min(s["one"] / s["rule"] for s in sums.values())
    print(f"{rule}: summed one pixel {total['one']:.0f} us, rule {total['rule']:.0f} us "
          f"({total['one'] / total['rule']:.3f}x), best {total['best']:.0f} us; worst forward "
          f"{worst:.3f}x")  # fmt: skip


def search(rows: list[dict]) -> PixelsRule:
    """The grid's rule of the least summed time (ties keep the package's grouped pixels: rows
    of depthwise calls alone do not move them)."""
    width = FITTED_PIXELS.grouped_max_width  # the rows' grouped calls are 8 or 24 wide
    grouped_counts = sorted(SWEPT, key=lambda p: p != FITTED_PIXELS.grouped_pixels)
    never = 2**40
    grid = [PixelsRule(2**two, four, grouped, width, grouped_two, two_width, one)
            for grouped in grouped_counts for two in range(10, 25)
            for four in (never, *(2**e for e in range(two, 25)))
            for grouped_two in (0, *(m * 2**e for e in range(12, 22) for m in (1, 3)))
            for two_width in ((0, 16, 24) if grouped_two else (0,))
            for one in ((0, 2**14, 2**15, 2**16) if grouped_two else (0,))]  # fmt: skip
    return min(grid, key=lambda rule: sum(s["rule"] for s in forward_sums(rows, rule).values()))


def fit_args(description: str) -> argparse.Namespace:
    """The command line of a fit over sweep files: ``files`` and ``--search``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("files", nargs="+", type=Path, help="grouped_pixels_sweep.py results")
    parser.add_argument("--search", action="store_true", help="fit the rule's constants")
    return parser.parse_args()


def main() -> None:
    args = fit_args(__doc__.splitlines()[0])
    rows = kernel_rows(args.files)
    report(rows, search(rows) if args.search else FITTED_PIXELS)


if __name__ == "__main__":
    main()
