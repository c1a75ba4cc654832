"""The channel-split judge (benchmarks/experiments/grouped_split_fit.py), on synthetic sweep
rows."""

from __future__ import annotations

import json

import grouped_split_fit as fit

from cute_conv.grouped_rule import FITTED_SPLIT


def _row(batch, c, groups, size, times, calls=1):
    module = (f"Conv2d({c}, {c}, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), "
              f"groups={groups}, bias=False)")  # fmt: skip
    return {"model": "m", "batch": batch, "module": module, "calls": calls,
            "input": [batch, c, size, size], "output": [batch, c, size, size],
            "graph_us": {"cudnn": 99.0, **{f"s{2**i}": t for i, t in enumerate(times)}}}  # fmt: skip


def _rows(tmp_path, rows):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"device": "x", "rows": rows}))
    return fit.split_rows([path])


def test_forward_sums_weigh_the_rules_split_against_one_and_the_best(tmp_path):
    # 48 wide, 1 * 49 * 24 = 1,176 threads: the rule splits 4 ways
    rows = _rows(tmp_path, [_row(1, 192, 4, 7, (10.0, 8.0, 6.0), calls=3),
                            _row(8, 192, 4, 7, (10.0, 8.0, 9.0))])  # fmt: skip
    assert [FITTED_SPLIT.split(r["problem"], r["config"]) for r in rows] == [4, 4]
    sums = fit.forward_sums(rows, FITTED_SPLIT)
    assert (sums["m", 1]["one"], sums["m", 1]["rule"], sums["m", 1]["best"]) == (30.0, 18.0, 18.0)
    assert (sums["m", 8]["rule"], sums["m", 8]["best"]) == (9.0, 8.0)


def test_search_takes_the_middle_of_the_least_time(tmp_path):
    # 48 wide at 7x7, 1,176 threads: two ways pays, four ways does not
    rows = _rows(tmp_path, [_row(1, 192, 4, 7, (10.0, 8.0, 12.0))])
    rule = fit.search(rows)
    assert 1_176 * 2 <= rule.max_threads < 1_176 * 4
    assert FITTED_SPLIT.max_threads > 1_176 * 4  # the package's splits it four ways
