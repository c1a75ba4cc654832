"""The pools ``optimize`` rewrites against torch's, per call (H100/H200):

    python benchmarks/experiments/pool_ab.py --batches 1 8 32 --out pool_ab.json

- VGG-16's five tiling max pools (2x2, stride 2): ``torch`` (``F.max_pool2d``), ``amax``
  (``TiledMaxPool2d``'s fallback: one ``amax`` over the NHWC view), ``kernel``
  (``pooling.MaxPool2d``: one pass of ``kernels.common.pool``).
- ResNet's 3x3 stride-2 max pool of the stem's output: ``torch`` and ``kernel``.
- DenseNet-121's three 2x2 transitions and Inception-v3's 3x3 stride-1 branch pools: ``torch``
  (``F.avg_pool2d``) and ``kernel`` (``pooling.AvgPool2d``).

bf16 channels_last random inputs; each output checked bit for bit against torch's; CUDA-graph
replays in interleaved rounds (medians). (``tiled_pool_ab_H200.json``: the VGG rows, from this
script's first form.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from cute_conv.pooling import AvgPool2d, MaxPool2d

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import replayed_us  # noqa: E402

# Pool inputs at batch 1, (channels, size), per model.
VGG_POOLS = ((64, 224), (128, 112), (256, 56), (512, 28), (512, 14))
RESNET_STEM_POOL = ((64, 112),)
DENSENET_TRANSITIONS = ((128, 56), (256, 28), (512, 14))
INCEPTION_BRANCHES = ((192, 35), (256, 35), (288, 35), (768, 17), (1280, 8), (2048, 8))


def _tiled_amax(x: torch.Tensor) -> torch.Tensor:
    n, c, h, w = x.shape
    nhwc = x.permute(0, 2, 3, 1)
    return nhwc.view(n, h // 2, 2, w // 2, 2, c).amax(dim=(2, 4)).permute(0, 3, 1, 2)


def calls(kind: str, x: torch.Tensor) -> dict:
    """The functions timed for ``kind`` of pool on ``x``, torch's first."""
    if kind == "vgg":
        return {"torch": lambda: F.max_pool2d(x, 2), "amax": lambda: _tiled_amax(x),
                "kernel": lambda: MaxPool2d(2)(x)}  # fmt: skip
    if kind == "resnet":
        return {"torch": lambda: F.max_pool2d(x, 3, 2, 1), "kernel": lambda: MaxPool2d(3, 2, 1)(x)}
    args = (2, 2) if kind == "densenet" else (3, 1, 1)
    return {"torch": lambda: F.avg_pool2d(x, *args), "kernel": lambda: AvgPool2d(*args)(x)}


def measure(kind: str, shape: tuple[int, ...], rounds: int) -> dict:
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    fns = calls(kind, x)
    ref = fns["torch"]()
    exact = {name: bool(torch.equal(fn(), ref)) for name, fn in fns.items()}
    return {"pool": kind, "input": list(shape), "exact": exact,
            "graph_us": replayed_us(fns, rounds)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    kinds = ["vgg", "resnet", "densenet", "inception"]
    parser.add_argument("--pools", nargs="+", default=kinds, choices=kinds)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    shapes = {"vgg": VGG_POOLS, "resnet": RESNET_STEM_POOL, "densenet": DENSENET_TRANSITIONS,
              "inception": INCEPTION_BRANCHES}  # fmt: skip
    rows = []
    for kind in args.pools:
        for batch in args.batches:
            for c, size in shapes[kind]:
                row = measure(kind, (batch, c, size, size), args.rounds)
                rows.append(row)
                times = {k: round(v, 1) for k, v in row["graph_us"].items()}
                print(kind, row["input"], row["exact"], times)
                args.out.write_text(json.dumps(rows, indent=1))  # a timeout keeps the rows


if __name__ == "__main__":
    main()
