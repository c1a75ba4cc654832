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


def test_candidate_bound_falls_with_the_width_where_cudnn_is_native():
    rule = fit.candidate_rule(native_at_8=2**26, width_power=3, transformed=2**29, few_groups=5)
    row = lambda c, groups, macs: {"c": c, "groups": groups, "macs": macs}  # noqa: E731
    assert rule(row(104, 13, 2**26)) and not rule(row(104, 13, 2**26 + 1))  # 8 per group
    assert rule(row(320, 20, 2**23)) and not rule(row(320, 20, 2**23 + 1))  # 16: 2**26 / 8
    assert rule(row(96, 2, 2**26 / 217)) and not rule(
        row(96, 2, 2**26 / 215)
    )  # 48, 2 groups: native
    assert rule(row(432, 9, 2**29)) and not rule(row(432, 9, 2**29 + 1))  # 48, 9 groups


def test_per_forward_sums_the_calls_as_the_rule_runs_them():
    rows = [
        {**_row("m", 8, 48, 2, 1, 10.0, 4.0, calls=3), "c": 48, "k": 48, "groups": 2},
        {**_row("m", 8, 48, 2, 1, 6.0, 9.0), "c": 48, "k": 48, "groups": 2},
    ]
    sums = fit.per_forward(rows, lambda row: row["graph_us"]["cudnn"] == 10.0)
    assert sums == {("m", 8): (36.0, 18.0)}
