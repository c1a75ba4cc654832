"""The grouped-rule judge (benchmarks/experiments/grouped_rule_fit.py), on synthetic A/B rows."""

from __future__ import annotations

import json

import grouped_rule_fit as fit


def _row(model, batch, c, groups, macs, cudnn, grouped, calls=1):
    module = f"Conv2d({c}, {c}, kernel_size=(3, 3), stride=(1, 1), groups={groups}, bias=False)"
    return {"model": model, "batch": batch, "module": module, "macs": macs, "calls": calls,
            "graph_us": {"cudnn": cudnn, "grouped": grouped}}  # fmt: skip


def test_rows_leave_out_depthwise_convs_and_read_the_groups(tmp_path):
    rows = [_row("m", 1, 96, 96, 10, 5.0, 4.0), _row("m", 1, 96, 4, 10, 5.0, 4.0)]
    path = tmp_path / "ab.json"
    path.write_text(json.dumps({"device": "x", "rows": rows}))
    (only,) = fit.grouped_rows([path])
    assert (only["c"], only["k"], only["groups"]) == (96, 96, 4)


def test_a_forward_measured_again_replaces_its_rows(tmp_path):
    """A (model, batch) forward in a later file is that file's rows only; others stay."""
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps({"rows": [_row("m", 1, 96, 4, 10, 5.0, 4.0, calls=2),
                                        _row("m", 1, 96, 2, 10, 5.0, 4.0),
                                        _row("m", 8, 96, 4, 10, 7.0, 6.0)]}))  # fmt: skip
    new.write_text(json.dumps({"rows": [_row("m", 1, 96, 4, 10, 5.0, 3.0, calls=2)]}))
    rows = fit.grouped_rows([old, new])
    assert sorted((r["batch"], r["groups"], r["graph_us"]["grouped"]) for r in rows) == [
        (1, 4, 3.0), (8, 4, 6.0)
    ]


def test_choose_takes_the_best_worst_forward_near_the_least_summed_time():
    a, b, c = (fit.GroupedBounds(2**k, 3, 2**29, 2, 4) for k in (24, 25, 26))
    scored = [(1000.0, 0.90, a), (1001.0, 0.95, b), (1010.0, 0.99, c)]  # c: 1% slower
    assert [bounds for _, _, bounds in fit.choose(scored)] == [b, a]


def test_bounds_rule_reads_the_width_and_groups_of_a_row():
    bounds = fit.GroupedBounds(2**26, 3, 2**30, 2, 4)
    rule = fit.bounds_rule(bounds)
    assert rule({"c": 96, "groups": 4, "macs": 2**30 / 16})  # 24 wide at 4 groups: transformed
    assert not rule({"c": 96, "groups": 2, "macs": 2**30 / 16})  # 48 wide at 2 groups: native


def test_per_forward_sums_the_calls_as_the_rule_runs_them():
    rows = [
        {**_row("m", 8, 48, 2, 1, 10.0, 4.0, calls=3), "c": 48, "k": 48, "groups": 2},
        {**_row("m", 8, 48, 2, 1, 6.0, 9.0), "c": 48, "k": 48, "groups": 2},
    ]
    sums = fit.per_forward(rows, lambda row: row["graph_us"]["cudnn"] == 10.0)
    assert sums == {("m", 8): (36.0, 18.0)}
