"""The grouped kernel's threads per output vector (``grouped_conv2d(channel_split=)``) swept
on the grouped (not depthwise) convs of torchvision models, with cuDNN beside them
(H100/H200):

    python benchmarks/experiments/grouped_split_sweep.py --models regnet_x_8gf \
        --batches 1 8 --out grouped_split_sweep.json

Same rows, inputs, checks and timing as ``grouped_direct_ab.py``: ``cudnn`` is ``F.conv2d``
then the activation, ``s1`` .. ``s8`` the kernel at the rule's pixels with 1 .. 8 threads
per output vector (a split past the group's activation vectors is left out of the row).
Wide groups at small batches are the calls a split is for: there a thread's chain of
``R * S * C / groups`` multiply-adds, not the SMs' rate, is the call's time.
"""

from __future__ import annotations

import sys
from pathlib import Path

from cute_conv.kernels.common.grouped_direct import CHANNEL_SPLITS, VECTOR
from torch import nn

from cute_conv.grouped import grouped_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from grouped_direct_ab import ab_calls, checks, run_ab  # noqa: E402
from models import replayed_us  # noqa: E402

METHODS = ("cudnn", *(f"s{s}" for s in CHANNEL_SPLITS))


def measure(conv: nn.Conv2d, shape: tuple, activation: str | None, rounds: int) -> dict:
    cudnn, kernel, ref = ab_calls(conv, shape, activation)
    config = grouped_limits(conv.in_channels, conv.out_channels, conv.groups)
    parts = config.group_in // config.in_vector  # a part per activation vector at most
    fns = {"cudnn": cudnn, **{f"s{s}": kernel(None, s) for s in CHANNEL_SPLITS if s <= parts}}
    return {"module": repr(conv), "input": list(shape), "output": list(ref.shape),
            "activation": activation, "checks": checks(fns, ref),
            "graph_us": replayed_us(fns, rounds)}  # fmt: skip


def wide_grouped(conv: nn.Conv2d) -> bool:
    """A grouped conv of at least two activation vectors per group (one to split)."""
    return conv.in_channels // conv.groups >= 2 * VECTOR


if __name__ == "__main__":
    run_ab(__doc__.splitlines()[0], measure, METHODS, ["regnet_x_8gf"], takes=wide_grouped)
