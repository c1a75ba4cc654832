"""The pixels-per-thread judge (benchmarks/experiments/grouped_pixels_fit.py), on synthetic
sweep rows."""

from __future__ import annotations

import json

import grouped_pixels_fit as fit

from cute_conv.grouped_rule import PixelsRule


def _row(model, batch, c, groups, size, times, calls=1):
    module = (f"Conv2d({c}, {c}, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), "
              f"groups={groups}, bias=False)")  # fmt: skip
    return {"model": model, "batch": batch, "module": module, "calls": calls,
            "input": [batch, c, size, size], "output": [batch, c, size, size],
            "graph_us": {"cudnn": 99.0, **{f"p{p}": t for p, t in zip(fit.SWEPT, times, strict=True)}}}  # fmt: skip


def _write(tmp_path, rows):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"device": "x", "rows": rows}))
    return [path]


def test_rows_keep_only_the_calls_the_kernel_runs_with_their_problem(tmp_path):
    small = _row("m", 1, 96, 96, 14, (4.0, 3.0, 2.0, 5.0))
    large = _row("m", 32, 96, 96, 224, (4.0, 3.0, 2.0, 5.0))  # 1.4G multiply-adds: cuDNN
    (only,) = fit.kernel_rows(_write(tmp_path, [small, large]))
    assert (only["problem"].N, only["problem"].P, only["problem"].Q) == (1, 14, 14)
    assert only["config"].depthwise


def test_sums_weigh_calls_and_search_takes_the_least_time(tmp_path):
    rows = fit.kernel_rows(_write(tmp_path, [
        _row("m", 1, 96, 96, 14, (4.0, 3.0, 2.0, 5.0), calls=2),  # depthwise: 2,352 threads
        _row("m", 1, 48, 2, 14, (9.0, 8.0, 6.0, 7.0)),  # 24 per group
    ]))  # fmt: skip
    one_each = PixelsRule(
        depthwise_two_pixels_threads=2**30, depthwise_four_pixels_threads=2**30,
        grouped_pixels=1, grouped_max_width=24,
    )  # fmt: skip
    assert fit.forward_sums(rows, one_each) == {("m", 1): {"one": 17.0, "rule": 17.0, "best": 10.0}}
    best = fit.search(rows)
    # four pixels on the depthwise call (2.0 us) from at most its 2,352 threads
    assert best.grouped_pixels == 4 and best.depthwise_four_pixels_threads <= 2352
