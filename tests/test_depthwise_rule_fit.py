"""The depthwise-bound judge (benchmarks/experiments/depthwise_rule_fit.py), on synthetic
sweep rows."""

from __future__ import annotations

import json

import depthwise_rule_fit as fit


def _row(model, batch, c, taps_side, size, kernel_us, cudnn_us, groups=None):
    module = (f"Conv2d({c}, {c}, kernel_size=({taps_side}, {taps_side}), stride=(1, 1), "
              f"padding=({taps_side // 2}, {taps_side // 2}), groups={groups or c}, bias=False)")  # fmt: skip
    times = {f"p{p}": kernel_us for p in (1, 2, 4, 8)}
    return {"model": model, "batch": batch, "module": module, "calls": 2,
            "input": [batch, c, size, size], "output": [batch, c, size, size],
            "graph_us": {"cudnn": cudnn_us, **times}}  # fmt: skip


def test_the_bound_falls_with_the_taps():
    bound = fit.DepthwiseBound(2**29, 1)
    assert bound.takes(2**29, 9) and not bound.takes(2**29 + 1, 9)
    assert bound.takes(2**29 * 9 // 49, 49) and not bound.takes(2**29 * 9 // 49 + 1, 49)
    assert fit.PREVIOUS.takes(2**27, 49) and not fit.PREVIOUS.takes(2**27 + 1, 9)


def test_rows_sums_and_search(tmp_path):
    rows = [
        _row("m", 32, 96, 3, 112, 60.0, 90.0),  # 2**28.3 multiply-adds: the kernel wins
        _row("m", 32, 96, 7, 56, 120.0, 100.0),  # 2**28.8: cuDNN wins
        _row("m", 32, 48, 3, 8, 5.0, 9.0, groups=2),  # grouped: left out
    ]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"device": "x", "rows": rows}))
    found = fit.depthwise_rows([path])
    assert [row["taps"] for row in found] == [9, 49]
    # the previous 2**27 sends both to cuDNN: 2 * (90 + 100) either way
    assert fit.forward_sums(found, fit.PREVIOUS) == {("m", 32): (380.0, 380.0)}
    best = fit.search(found)
    assert [best.takes(row["macs"], row["taps"]) for row in found] == [True, False]
    assert fit.summary(found, best) == (380.0 / 320.0, 380.0 / 320.0)
