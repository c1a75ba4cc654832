"""The im2col unfolding of few-channel stems, a thread per 16-byte vector (``Im2colColumns``)
against a thread per row with the window compile-time (``Im2colPatchRows``), per call
(H100/H200), and the whole stem conv against cuDNN:

    python benchmarks/experiments/unfold_ab.py --batches 1 8 32 --out unfold_ab.json

The stems ``staging.uses_im2col`` unfolds (VGG's 3x3 stride-1 of 3 channels, ConvNeXt's 4x4
stride-4 patchify, whose 12-channel patch rows are no whole 16-byte units, and a 7x7
stride-3 one; ``--stems heldout``: a 5x5 stride-1, a 3x3 stride-3, a 3x3 stride-1 on a
small map, for ``staging.unfolds_rows``' bounds, fitted on the first three): each staging
launch (``staging._im2col_launch``'s geometry, its compile arguments as each kernel takes
them) checked bit for bit against the torch specification
(``staging._im2col_columns_torch``), then ``vector`` / ``row`` replayed from CUDA graphs in
interleaved rounds (medians); ``conv`` (``cute_conv.conv2d_fprop``, its staging included) and
``cudnn`` (``F.conv2d``, channels_last) likewise. ``routed`` is the kernel the rule picks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import cute_conv
from cute_conv.compile import compile_im2col_columns
from cute_conv.problem import Conv2dProblemShape
from cute_conv.staging import (
    StagingLaunch,
    _im2col_columns_torch,
    _im2col_launch,
    kernel_problem_for,
    unfolds_rows,
    uses_im2col,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import replayed_us  # noqa: E402

# (name, image size, K, filter size, stride, padding)
STEMS = {
    "fit": (
        ("vgg", 224, 64, 3, 1, 1),
        ("convnext", 224, 96, 4, 4, 0),
        ("7x7_s3", 224, 64, 7, 3, 3),
    ),
    "heldout": (
        ("5x5_s1", 224, 32, 5, 1, 2),
        ("3x3_s3", 224, 64, 3, 3, 0),
        ("3x3_at_64", 64, 64, 3, 1, 1),
    ),
}


def measure(name: str, batch: int, size: int, k: int, r: int, stride: int, padding: int,
            rounds: int) -> dict:  # fmt: skip
    x = torch.randn(batch, size, size, 3, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(k, r, r, 3, device="cuda", dtype=torch.bfloat16) / 5
    problem = Conv2dProblemShape.from_shapes(x.shape, w.shape, stride=stride, padding=padding)
    assert uses_im2col(problem), name
    width = kernel_problem_for(problem).C
    routed = _im2col_launch(problem, width, 2)
    vector = StagingLaunch(compile_im2col_columns, (3,), routed.shape, routed.geometry)
    row = StagingLaunch(compile_im2col_columns, (3, (r, r)), routed.shape, routed.geometry)
    expected = _im2col_columns_torch(x.cpu(), problem, width)
    exact = {label: bool(torch.equal(launch.run(x, None).cpu(), expected))
             for label, launch in (("vector", vector), ("row", row))}  # fmt: skip
    nchw = x.permute(0, 3, 1, 2)  # channels_last
    w_nchw = w.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    fns = {
        "vector": lambda: vector.run(x, None),
        "row": lambda: row.run(x, None),
        "conv": lambda: cute_conv.conv2d_fprop(x, w, stride=stride, padding=padding),
        "cudnn": lambda: F.conv2d(nchw, w_nchw, stride=stride, padding=padding),
    }
    routed_kernel = "row" if unfolds_rows(problem, width, 2) else "vector"
    return {"stem": name, "batch": batch, "problem": str(problem), "routed": routed_kernel,
            "exact": exact, "graph_us": replayed_us(fns, rounds)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--stems", choices=sorted(STEMS), nargs="+", default=["fit"])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    rows = []
    for stem in (stem for group in args.stems for stem in STEMS[group]):
        for batch in args.batches:
            row = measure(stem[0], batch, *stem[1:], args.rounds)
            rows.append(row)
            times = {k: round(v, 1) for k, v in row["graph_us"].items()}
            print(row["stem"], batch, row["routed"], row["exact"], times)
            args.out.write_text(json.dumps(rows, indent=1, default=str))  # a timeout keeps them


if __name__ == "__main__":
    main()
