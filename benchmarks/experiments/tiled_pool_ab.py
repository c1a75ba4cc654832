"""VGG's tiling max pools (2x2, stride 2) three ways, per call (H100/H200):

    python benchmarks/experiments/tiled_pool_ab.py --batches 1 8 32 --out tiled_pool_ab.json

``torch``: ``F.max_pool2d`` (channels_last); ``amax``: ``pooling.TiledMaxPool2d`` (one ``amax``
over the NHWC view); ``kernel``: ``pooling.MaxPool2d`` (one pass of ``kernels.common.pool``).
bf16 channels_last random inputs of VGG-16's five pool shapes; each output checked bit for bit
against torch's; CUDA-graph replays in interleaved rounds (medians).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from cute_conv.pooling import MaxPool2d, TiledMaxPool2d

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import replayed_us  # noqa: E402

# VGG-16's pool inputs at batch 1: (channels, size).
VGG_POOLS = ((64, 224), (128, 112), (256, 56), (512, 28), (512, 14))


def measure(shape: tuple[int, ...], rounds: int) -> dict:
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    fns = {
        "torch": lambda: F.max_pool2d(x, 2),
        "amax": lambda: TiledMaxPool2d(2)(x),
        "kernel": lambda: MaxPool2d(2)(x),
    }
    ref = fns["torch"]()
    exact = {name: bool(torch.equal(fn(), ref)) for name, fn in fns.items()}
    return {"input": list(shape), "exact": exact, "graph_us": replayed_us(fns, rounds)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = []
    for batch in args.batches:
        for c, size in VGG_POOLS:
            row = measure((batch, c, size, size), args.rounds)
            rows.append(row)
            print(row["input"], row["exact"], {k: round(v, 1) for k, v in row["graph_us"].items()})
    args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
