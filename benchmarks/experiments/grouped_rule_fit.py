"""``cute_conv.grouped_rule`` and a candidate rule for grouped (not depthwise) convs, judged
on rows of ``grouped_direct_ab.py`` (no GPU):

    python benchmarks/experiments/grouped_rule_fit.py FILES...           # judge both rules
    python benchmarks/experiments/grouped_rule_fit.py FILES... --search  # fit the candidate

Each (model, batch) forward sums its grouped convs' times (each call weighed by its count)
as a rule runs them: the kernel where it takes the call, cuDNN elsewhere; the ratio is cuDNN
everywhere over that.

The candidate: cuDNN's grouped convs run natively where the group width ``w = C / groups`` is
a power of two or the groups are few (``groups < FEW_GROUPS``), at a rate that grows with the
width (its tensor-core tiles fill), so the kernel's bound on the multiply-adds falls with it:
``NATIVE_MACS_AT_8 * (8 / w) ** WIDTH_POWER``; elsewhere cuDNN transforms the layouts
(tens of us a conv) and the bound is ``TRANSFORMED_MACS``. Its constants were fitted with
``--search`` on the rows of RegNetY-1.6GF, ResNeXt-50 32x4d, RegNetY-400MF, RegNetY-800MF
and RegNetX-3.2GF (H200): of the settings within 0.2% of the least summed time, the one of
the best worst forward. The models it is to be judged on, named before any of their rows was
measured: ``HELD_OUT``.
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
from cute_conv.grouped_rule import runs_grouped_kernel  # noqa: E402

HELD_OUT = ("regnet_x_400mf", "regnet_x_1_6gf", "regnet_y_8gf", "regnet_x_8gf", "resnext101_32x8d")
# Named before any of their rows was measured, for a rule refitted on the models above and
# the five fitted ones: widths 16, 24, 112 and 128 per group, and ResNeXt's 64x4d.
HELD_OUT_NEXT = (
    "regnet_x_800mf",
    "regnet_y_3_2gf",
    "resnext101_64x4d",
    "regnet_y_16gf",
    "regnet_x_16gf",
)

NATIVE_MACS_AT_8 = 2**26
WIDTH_POWER = 3
TRANSFORMED_MACS = 2**29
FEW_GROUPS = 5

_MODULE = re.compile(r"Conv2d\((\d+), (\d+),.*groups=(\d+)")

Rule = Callable[[dict], bool]


def grouped_rows(paths: list[Path]) -> list[dict]:
    """The A/B rows of grouped convs (depthwise ones left out), with ``c``, ``k``, ``groups``."""
    rows = []
    for path in paths:
        for row in json.loads(path.read_text())["rows"]:
            c, k, groups = map(int, _MODULE.search(row["module"]).groups())
            if c != groups:
                rows.append({**row, "c": c, "k": k, "groups": groups})
    return rows


def package_rule(row: dict) -> bool:
    g = row["groups"]
    return runs_grouped_kernel(row["macs"], row["c"] // g, row["k"] // g)


def candidate_rule(
    native_at_8: float = NATIVE_MACS_AT_8,
    width_power: float = WIDTH_POWER,
    transformed: float = TRANSFORMED_MACS,
    few_groups: int = FEW_GROUPS,
) -> Rule:
    def takes(row: dict) -> bool:
        width = row["c"] // row["groups"]
        if width & (width - 1) == 0 or row["groups"] < few_groups:
            return row["macs"] <= native_at_8 * (8 / width) ** width_power
        return row["macs"] <= transformed

    return takes


def per_forward(rows: list[dict], rule: Rule) -> dict[tuple[str, int], tuple[float, float]]:
    """``{(model, batch): (cuDNN us, the rule's us)}`` per forward."""
    sums: dict = collections.defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        us = row["graph_us"]
        sums[row["model"], row["batch"]][0] += us["cudnn"] * row["calls"]
        sums[row["model"], row["batch"]][1] += (
            us["grouped" if rule(row) else "cudnn"] * row["calls"]
        )
    return {key: (cudnn, ruled) for key, (cudnn, ruled) in sums.items()}


def report(name: str, sums: dict) -> None:
    cudnn = sum(c for c, _ in sums.values())
    ruled = sum(r for _, r in sums.values())
    worst = min(c / r for c, r in sums.values())
    print(
        f"{name}: {cudnn:.0f} -> {ruled:.0f} us summed ({cudnn / ruled:.3f}x), worst forward {worst:.2f}x"
    )
    for (model, batch), (c, r) in sorted(sums.items()):
        print(f"  {model} batch {batch}: {c:.0f} -> {r:.0f} us ({c / r:.2f}x)")


def search(rows: list[dict]) -> None:
    """The candidate's constants of least summed time (powers of two, half steps for the
    transformed bound), the ten best."""
    grid = itertools.product(range(20, 32), (1, 1.5, 2, 2.5, 3), range(48, 62), (2, 3, 4, 5, 6))
    scored = []
    for log_native, power, half_log_transformed, few in grid:
        rule = candidate_rule(2**log_native, power, 2 ** (half_log_transformed / 2), few)
        sums = per_forward(rows, rule)
        total = sum(r for _, r in sums.values())
        worst = min(c / r for c, r in sums.values())
        scored.append((total, -worst, log_native, power, half_log_transformed / 2, few))
    for total, worst, log_native, power, log_transformed, few in sorted(scored)[:10]:
        print(
            f"{total:.0f} us, worst {-worst:.2f}x: NATIVE_MACS_AT_8=2**{log_native} "
            f"WIDTH_POWER={power} TRANSFORMED_MACS=2**{log_transformed} FEW_GROUPS={few}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="grouped_direct_ab.py results")
    parser.add_argument("--search", action="store_true", help="fit the candidate's constants")
    args = parser.parse_args()
    rows = grouped_rows(args.files)
    if args.search:
        search(rows)
        return
    report("cute_conv.grouped_rule", per_forward(rows, package_rule))
    report("candidate", per_forward(rows, candidate_rule()))
    oracle = sum(min(r["graph_us"]["cudnn"], r["graph_us"]["grouped"]) * r["calls"] for r in rows)
    print(f"the faster of the two on every conv: {oracle:.0f} us summed")


if __name__ == "__main__":
    main()
