"""Per-forward times as a rule runs a model's calls, shared by the rule fits
(``grouped_rule_fit.py``, ``depthwise_rule_fit.py``): each row is one distinct conv of a
(model, batch) forward with its count (``calls``) and its CUDA-graph times (``graph_us``)."""

from __future__ import annotations

import collections
from collections.abc import Callable

Sums = dict[tuple[str, int], tuple[float, float]]


def cudnn_and_ruled(rows: list[dict], kernel_us: Callable[[dict], float | None]) -> Sums:
    """``{(model, batch): (cuDNN's us, the rule's us)}``: every call on cuDNN, against each on
    the kernel where ``kernel_us(row)`` gives its time (None: the rule leaves it to cuDNN),
    each weighed by its count."""
    sums: dict = collections.defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        cudnn = row["graph_us"]["cudnn"]
        ruled = kernel_us(row)
        sums[row["model"], row["batch"]][0] += cudnn * row["calls"]
        sums[row["model"], row["batch"]][1] += (cudnn if ruled is None else ruled) * row["calls"]
    return {key: (cudnn, ruled) for key, (cudnn, ruled) in sums.items()}
