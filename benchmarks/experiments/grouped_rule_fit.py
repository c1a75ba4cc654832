"""``cute_conv.grouped_rule``'s bounds for grouped (not depthwise) convs, judged and fitted on
rows of ``grouped_direct_ab.py`` (no GPU):

    python benchmarks/experiments/grouped_rule_fit.py FILES...           # judge the rule
    python benchmarks/experiments/grouped_rule_fit.py FILES... --search  # fit its constants

Each (model, batch) forward sums its grouped convs' times (each call weighed by its count)
as a rule runs them: the kernel where it takes the call, cuDNN elsewhere; the ratio is cuDNN
everywhere over that.

``--search`` walks a grid of ``GroupedBounds`` (powers of two, half steps for the transformed
bound) and picks, of the settings within ``NEAR_BEST`` of the least summed time, the one of
the best worst forward. How the package's ``FITTED`` came about (H200):

- fitted on ``FIRST_FIT`` with a constant transformed bound, it was judged on ``HELD_OUT``
  (named before they were measured): 0.991x summed, worst forward 0.44x (RegNetX-8GF's
  120-wide groups at batch 1). Not adopted.
- refitted on those ten models with a transformed bound that falls with the width (1.126x,
  worst 0.92x), it was judged on ``HELD_OUT_NEXT`` (named before they were measured, in the
  commit before their rows): 1.048x summed, worst 0.95x; the rule before it 0.957x, worst
  0.34x. Adopted.
- refitted on the same ten with the kernel at the rule's pixels and its one-CTA schedule on
  every group width (``grouped_direct_ab_all_widths_fit_H200.json``: 1.215x, no forward
  slower; those bounds gave 1.199x), it was judged on ``HELD_OUT_NEXT`` re-measured and
  ``UNSEEN``, named before they were measured (``..._all_widths_heldout_H200.json``): 1.078x
  summed, no forward slower; the bounds before 1.073x. Adopted.
- refitted with the channel split rule (``FITTED_SPLIT``) on: the batch-1 forwards it changes
  re-measured (``grouped_direct_ab_split_fit_b1_H200.json``, given after the fit file, whose
  forwards it replaces): 1.220x -> 1.225x, no forward slower. Judged on ``HELD_OUT_NEXT`` and
  ``UNSEEN`` with their split batch-1 forwards (``..._split_heldout_b1_H200.json``): 1.078x
  -> 1.082x, one forward 0.99x (RegNetX-32GF at batch 1). Adopted. A further refit needs
  models named before they are measured.

Several files: a (model, batch) forward in a later file replaces an earlier file's.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from forward_sums import Sums, cudnn_and_ruled  # noqa: E402

from cute_conv.grouped_rule import GroupedBounds, runs_grouped_kernel  # noqa: E402

FIRST_FIT = (
    "regnet_y_1_6gf",
    "resnext50_32x4d",
    "regnet_y_400mf",
    "regnet_y_800mf",
    "regnet_x_3_2gf",
)
HELD_OUT = ("regnet_x_400mf", "regnet_x_1_6gf", "regnet_y_8gf", "regnet_x_8gf", "resnext101_32x8d")
HELD_OUT_NEXT = (
    "regnet_x_800mf",
    "regnet_y_3_2gf",
    "resnext101_64x4d",
    "regnet_y_16gf",
    "regnet_x_16gf",
)
UNSEEN = ("regnet_y_32gf", "regnet_x_32gf")
NEAR_BEST = 0.002

_MODULE = re.compile(r"Conv2d\((\d+), (\d+), kernel_size=\((\d+), (\d+)\).*groups=(\d+)")

Rule = Callable[[dict], bool]


def grouped_rows(paths: list[Path]) -> list[dict]:
    """The A/B rows of grouped convs (depthwise ones left out), with ``c``, ``k``, ``taps``
    (``R * S``) and ``groups``; a (model, batch) forward in several files is the last one's
    (a re-measured forward replaces its old rows)."""
    forwards: dict[tuple[str, int], list[dict]] = {}
    for path in paths:
        measured = collections.defaultdict(list)
        for row in json.loads(path.read_text())["rows"]:
            c, k, r, s, groups = map(int, _MODULE.search(row["module"]).groups())
            if c != groups:
                measured[row["model"], row["batch"]].append(
                    {**row, "c": c, "k": k, "taps": r * s, "groups": groups}
                )
        forwards.update(measured)
    return [row for rows in forwards.values() for row in rows]


def package_rule(row: dict) -> bool:
    g = row["groups"]
    return runs_grouped_kernel(row["macs"], row["c"] // g, row["k"] // g, g, row["taps"])


def bounds_rule(bounds: GroupedBounds) -> Rule:
    return lambda row: bounds.takes(row["macs"], row["c"] // row["groups"], row["groups"])


def per_forward(rows: list[dict], rule: Rule) -> Sums:
    """``{(model, batch): (cuDNN us, the rule's us)}`` per forward."""
    return cudnn_and_ruled(rows, lambda row: row["graph_us"]["grouped"] if rule(row) else None)


def summed_and_worst(sums: Sums) -> tuple[float, float]:
    """The rule's summed us over all forwards, and its worst forward's speedup over cuDNN."""
    return sum(r for _, r in sums.values()), min(c / r for c, r in sums.values())


def report(name: str, sums: Sums) -> None:
    cudnn = sum(c for c, _ in sums.values())
    ruled, worst = summed_and_worst(sums)
    print(
        f"{name}: {cudnn:.0f} -> {ruled:.0f} us summed ({cudnn / ruled:.3f}x), worst forward {worst:.2f}x"
    )
    for (model, batch), (c, r) in sorted(sums.items()):
        print(f"  {model} batch {batch}: {c:.0f} -> {r:.0f} us ({c / r:.2f}x)")


def choose(
    scored: list[tuple[float, float, GroupedBounds]],
) -> list[tuple[float, float, GroupedBounds]]:
    """``(summed us, worst speedup, bounds)`` within ``NEAR_BEST`` of the least summed time,
    best worst forward first (ties: less summed time)."""
    least = min(total for total, _, _ in scored)
    near = [entry for entry in scored if entry[0] <= least * (1 + NEAR_BEST)]
    return sorted(near, key=lambda entry: (-entry[1], entry[0]))


def search(rows: list[dict]) -> GroupedBounds:
    """The grid's chosen bounds (``choose``); prints the five first."""
    grid = itertools.product(
        range(20, 32), (1, 1.5, 2, 2.5, 3), range(48, 66), (0, 1, 2, 3, 4), (2, 3, 4, 5, 6)
    )
    scored = []
    for log_native, native_power, half_log_transformed, transformed_power, few in grid:
        bounds = GroupedBounds(
            native_max_macs_at_8=2**log_native,
            native_width_power=native_power,
            transformed_max_macs_at_24=2 ** (half_log_transformed / 2),
            transformed_width_power=transformed_power,
            few_groups=few,
        )
        scored.append((*summed_and_worst(per_forward(rows, bounds_rule(bounds))), bounds))
    chosen = choose(scored)
    for total, worst, bounds in chosen[:5]:
        print(f"{total:.0f} us, worst {worst:.2f}x: {bounds}")
    return chosen[0][2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="grouped_direct_ab.py results")
    parser.add_argument("--search", action="store_true", help="fit the rule's constants")
    args = parser.parse_args()
    rows = grouped_rows(args.files)
    report("cute_conv.grouped_rule", per_forward(rows, package_rule))
    if args.search:
        report("fitted", per_forward(rows, bounds_rule(search(rows))))
    oracle = sum(min(r["graph_us"]["cudnn"], r["graph_us"]["grouped"]) * r["calls"] for r in rows)
    print(f"the faster of the two on every conv: {oracle:.0f} us summed")


if __name__ == "__main__":
    main()
