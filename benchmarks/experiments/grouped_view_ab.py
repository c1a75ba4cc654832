"""The grouped tensor-core kernel against cuDNN on models' grouped convs, for an A/B of two
versions of the package (H100/H200):

    PYTHONPATH=/path/to/other/checkout python benchmarks/experiments/grouped_view_ab.py \
        --models regnet_y_1_6gf resnext101_32x8d --batches 8 --out grouped_view_base.json
    python benchmarks/experiments/grouped_view_ab.py ... --out grouped_view_new.json

Each distinct grouped call whose groups the tensor cores take (``wide_groups``: multiples of
8 channels a group in and out, from ``--min-group-in``, default 8): ``cudnn`` (the grouped
conv with its bias, then the activation) and ``tensor_cores``
(``grouped_conv2d_tensor_cores`` at its default config, both fused), checked against float32
from NaN-poisoned outputs, CUDA-graph replays in interleaved rounds (medians). Run once per
version, each in its own process; cuDNN's times in each are the anchor that says how far
the two processes' clocks moved.
"""

from __future__ import annotations

from grouped_direct_ab import ab_calls, checks, run_ab
from grouped_tensor_core_bound import tensor_core_call, wide_groups
from models import replayed_us  # on the path grouped_direct_ab puts benchmarks/ on
from torch import nn

import cute_conv

METHODS = ("cudnn", "tensor_cores")


def measure(conv: nn.Conv2d, shape: tuple, activation: str | None, rounds: int) -> dict:
    cudnn, _, ref = ab_calls(conv, shape, activation)
    fns = {"cudnn": cudnn, "tensor_cores": tensor_core_call(conv, shape, activation)}
    return {"module": repr(conv), "input": list(shape), "activation": activation,
            "checks": checks(fns, ref), "graph_us": replayed_us(fns, rounds)}  # fmt: skip


if __name__ == "__main__":
    print(f"cute_conv from {cute_conv.__file__}", flush=True)  # which version this process runs
    run_ab(
        __doc__.splitlines()[0], measure, METHODS, ["regnet_y_1_6gf"], takes=wide_groups,
        min_group_in=8,
    )  # fmt: skip
