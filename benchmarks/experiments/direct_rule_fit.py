"""Fit a bound of ``direct_rule`` on the train rows of ``direct_dense_ab.py --routed`` results
and judge it on the held-out ones (no GPU):

    python benchmarks/experiments/direct_rule_fit.py \\
        benchmarks/experiments/direct_staged_wide_k_ab_H200.json --variable K

Each row is a problem the rule sends to the CUDA-core direct form, timed both ways (CUDA-graph
replays): ``conv`` (the direct form, reading the KRSC filter) against ``tensor`` (the
tensor-core config), and the same with ``relu(conv + b)`` (``conv_fused`` / ``tensor_fused``)
and ``relu(conv + b) + r`` (``direct_residual`` / ``tensor_residual``). A candidate bound
keeps the direct form for rows whose ``--variable`` (K, output pixels, multiply-adds per
output pixel) is at most it and sends the rest to the tensor cores. Per bound and split: the
geomean of the time the bound gives over the time the rule gives now (every row direct), per
form, and over the best of the two forms; the bound fitted is the one with the least geomean
over the three forms on the train rows (ties: the larger bound, the rule's current side).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import geomean  # noqa: E402
from corpus import problem_of_key  # noqa: E402

# The forms compared: (the direct form's column, the tensor cores' column).
FORMS = {
    "plain": ("conv", "tensor"),
    "relu(conv + b)": ("conv_fused", "tensor_fused"),
    "relu(conv + b) + r": ("direct_residual", "tensor_residual"),
}


def variable_of(row: dict, variable: str) -> int:
    """The value of ``variable`` for the row's problem (named by its key): ``K``, ``pixels``
    (output pixels, N * P * Q) or ``pixel_macs`` (R * S * C * K)."""
    problem = problem_of_key(row["key"])
    if variable == "K":
        return problem.K
    if variable == "pixel_macs":
        return problem.R * problem.S * problem.C * problem.K
    if variable == "pixels":
        return problem.gemm_m
    raise ValueError(f"variable must be K, pixels or pixel_macs, got {variable!r}")


def judge(rows: list[dict], variable: str, bound: float) -> dict[str, float]:
    """Per form: the geomean over ``rows`` of (time with ``bound``) / (time with every row
    direct); and ``best``: of (time with ``bound``) / (the faster form's time), all forms."""
    result, best = {}, []
    for form, (direct, tensor) in FORMS.items():
        ratios = []
        for row in rows:
            times = row["graph_us"]
            if direct not in times or tensor not in times:
                continue
            chosen = times[direct] if variable_of(row, variable) <= bound else times[tensor]
            ratios.append(chosen / times[direct])
            best.append(chosen / min(times[direct], times[tensor]))
        result[form] = geomean(ratios)
    result["best"] = geomean(best)
    return result


def fit(rows: list[dict], variable: str) -> float:
    """The bound of least geomean (over the forms) on ``rows``: candidates are the rows'
    values and infinity; ties go to the larger bound."""
    candidates = sorted({variable_of(r, variable) for r in rows} | {math.inf}, reverse=True)

    def score(bound: float) -> float:
        judged = judge(rows, variable, bound)
        return geomean([judged[form] for form in FORMS])

    return min(candidates, key=score)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+", help="direct_dense_ab.py --routed JSON")
    parser.add_argument("--variable", choices=("K", "pixels", "pixel_macs"), default="K")
    args = parser.parse_args()
    rows = [row for path in args.results for row in json.loads(path.read_text())]
    train = [r for r in rows if r["split"] == "train"]
    heldout = [r for r in rows if r["split"] != "train"]
    for row in sorted(rows, key=lambda r: variable_of(r, args.variable)):
        t = row["graph_us"]
        cells = "  ".join(f"{d} {t.get(d, 0):6.1f} / {t.get(n, 0):6.1f}" for d, n in FORMS.values())
        value = variable_of(row, args.variable)
        print(f"{row['split'][:5]:5s} {args.variable}={value:<7d} {row['key'][:44]:44s} {cells}")
    bound = fit(train, args.variable)
    print(f"fitted on {len(train)} train rows: {args.variable} <= {bound}")
    for name, split in (("train", train), ("held-out", heldout)):
        judged = judge(split, args.variable, bound)
        cells = ", ".join(f"{form} {value:.3f}x" for form, value in judged.items())
        print(f"{name} ({len(split)}): time with the bound / now: {cells}")


if __name__ == "__main__":
    main()
