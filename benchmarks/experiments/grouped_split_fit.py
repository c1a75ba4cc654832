"""``cute_conv.grouped_rule.FITTED_SPLIT`` judged and fitted on rows of
``grouped_split_sweep.py`` (no GPU):

    python benchmarks/experiments/grouped_split_fit.py FILES...           # judge the rule
    python benchmarks/experiments/grouped_split_fit.py FILES... --search  # fit max_threads

Per (model, batch) forward the rows' kernel times are summed (each call weighed by its count)
at one thread per output vector (``s1``), at the split the rule picks and at the best swept
split of each call, over every swept call (the split sets the kernel's speed whoever calls
it) and, beside them, over the calls ``cute_conv.nn.Conv2d`` runs on the kernel
(``runs_grouped_kernel``). ``--search`` walks ``max_threads`` over multiples of 1,024 and
prints the range of least summed time; ``max_split`` stays the package's (the most ways any
call ran fastest at).

How the package's ``FITTED_SPLIT`` came about (H200): fitted on
``grouped_split_sweep_fit_H200.json`` (RegNetX-8GF, RegNetY-8GF, RegNetX-3.2GF at batch 1 and
8), judged on ``..._heldout_H200.json`` (RegNetY-16GF, RegNetX-16GF, RegNetY-32GF,
RegNetX-32GF, named before they were measured); narrower groups then swept in
``..._resnext_H200.json``, ``..._narrow_heldout_H200.json`` and ``..._24_H200.json``. See the
comment on ``FITTED_SPLIT``.
"""

from __future__ import annotations

import collections
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from grouped_pixels_fit import fit_args, sweep_rows  # noqa: E402

from cute_conv.grouped_rule import FITTED_SPLIT, ChannelSplitRule, pixels_per_thread  # noqa: E402


def split_rows(paths: list[Path]) -> list[dict]:
    """The sweep's rows (``sweep_rows``), each config at the pixels rule's pixels."""
    rows = sweep_rows(paths)
    for row in rows:
        config = row["config"]
        row["config"] = dataclasses.replace(config, pixels=pixels_per_thread(row["problem"], config))
    return rows


def forward_sums(rows: list[dict], rule: ChannelSplitRule) -> dict[tuple[str, int], collections.Counter]:
    """Per (model, batch): microseconds at one thread per vector, at ``rule``'s split and at
    the best swept split, over every row and (``kernel_*``) over the kernel's calls."""
    sums: dict = collections.defaultdict(collections.Counter)
    for row in rows:
        us, calls = row["graph_us"], row["calls"]
        times = {"one": us["s1"], "rule": us[f"s{rule.split(row['problem'], row['config'])}"],
                 "best": min(t for name, t in us.items() if name != "cudnn")}  # fmt: skip
        for name, t in times.items():
            sums[row["model"], row["batch"]][name] += t * calls
            if row["kernel_takes"]:
                sums[row["model"], row["batch"]][f"kernel_{name}"] += t * calls
    return sums


def report(rows: list[dict], rule: ChannelSplitRule) -> None:
    sums = forward_sums(rows, rule)
    for (model, batch), s in sorted(sums.items()):
        print(f"{model:16} batch {batch:2}: one {s['one']:8.1f} us, rule {s['rule']:8.1f} "
              f"({s['one'] / s['rule']:.3f}x), best {s['best']:8.1f}; the kernel's calls: one "
              f"{s['kernel_one']:7.1f}, rule {s['kernel_rule']:7.1f}, best {s['kernel_best']:7.1f}")  # fmt: skip
    total = sum(sums.values(), collections.Counter())
    worst = min(s["one"] / s["rule"] for s in sums.values())
    print(f"{rule}: summed one {total['one']:.0f} us, rule {total['rule']:.0f} "
          f"({total['one'] / total['rule']:.3f}x), best {total['best']:.0f}; worst forward "
          f"{worst:.3f}x; the kernel's calls one {total['kernel_one']:.0f}, rule "
          f"{total['kernel_rule']:.0f}, best {total['kernel_best']:.0f}")  # fmt: skip


def search(rows: list[dict]) -> ChannelSplitRule:
    """The middle of the ``max_threads`` range of least summed time."""
    grid = [dataclasses.replace(FITTED_SPLIT, max_threads=t) for t in range(1024, 2**18, 1024)]
    summed = [sum(s["rule"] for s in forward_sums(rows, rule).values()) for rule in grid]
    best = [rule.max_threads for rule, t in zip(grid, summed, strict=True) if t == min(summed)]
    print(f"least summed time from max_threads {best[0]} to {best[-1]}")
    return dataclasses.replace(FITTED_SPLIT, max_threads=best[len(best) // 2])


def main() -> None:
    args = fit_args(__doc__.splitlines()[0])
    rows = split_rows(args.files)
    report(rows, search(rows) if args.search else FITTED_SPLIT)


if __name__ == "__main__":
    main()
