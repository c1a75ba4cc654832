"""ConvNeXt's pointwise Linears as fused 1x1 convs (``cute_conv.optimize``) against torch's
Linears with the GELU, layer scale and residual add in eager ops (H100/H200):

    python benchmarks/experiments/pointwise_linear_ab.py --batches 1 8 32 \
        --out pointwise_linear_ab.json

Each row is one ConvNeXt-T stage's block without its depthwise conv (``BlockTail``: the
LayerNorm over the channels, Linear C -> 4C, GELU, Linear 4C -> C, the layer scale and the
residual), bf16 channels_last, random weights, layer scales of order one. ``torch``: the
module as it is (cuBLAS and eager ops, what ``optimize`` left before); ``compiled``:
``torch.compile`` of it (freezing off: inference mode, no parameters to fold); ``optimize``:
``cute_conv.optimize`` of it (the two Linears fused, the LayerNorm eager). Every output is
checked against the float32 module (``compare_to_reference``); CUDA-graph replays in
interleaved rounds (medians). The stage's per-forward time counts its blocks (3, 3, 9, 3).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import cute_conv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from grouped_direct_ab import checks  # noqa: E402
from models import replayed_us  # noqa: E402

# ConvNeXt-T's stages at 224x224: (channels, map size, blocks).
STAGES = ((96, 56, 3), (192, 28, 3), (384, 14, 9), (768, 7, 3))
METHODS = ("torch", "compiled", "optimize")


class BlockTail(nn.Module):
    """A ConvNeXt block after its depthwise conv, on an NCHW input (torchvision's CNBlock
    with the conv taken out)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=1e-6)
        self.fc1 = nn.Linear(channels, 4 * channels)
        self.fc2 = nn.Linear(4 * channels, channels)
        self.layer_scale = nn.Parameter(torch.rand(channels, 1, 1) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc2(F.gelu(self.fc1(self.norm(x.permute(0, 2, 3, 1)))))
        return self.layer_scale * y.permute(0, 3, 1, 2) + x


def measure(channels: int, size: int, batch: int, rounds: int) -> dict:
    torch.manual_seed(0)
    tail = BlockTail(channels).eval().cuda()
    x = torch.randn(batch, channels, size, size, device="cuda")
    x = x.to(memory_format=torch.channels_last)
    with torch.no_grad():
        expected = tail(x)
    model = copy.deepcopy(tail).to(torch.bfloat16)
    xb = x.to(torch.bfloat16)
    optimized = cute_conv.optimize(model)
    # Every stage and batch shares BlockTail.forward: without a reset, dynamo's recompile
    # limit (8) is reached and later problems silently run eager.
    torch._dynamo.reset()
    compiled = torch.compile(model, dynamic=False)
    fns = {name: (lambda m=m: m(xb)) for name, m in
           (("torch", model), ("compiled", compiled), ("optimize", optimized))}  # fmt: skip
    with torch.no_grad():
        checked = checks(fns, expected)
        graph_us = replayed_us(fns, rounds)
    return {"channels": channels, "size": size, "batch": batch,
            "fused": optimized.cute_conv_report.counts(), "checks": checked,
            "graph_us": graph_us}  # fmt: skip


def run_stages(description: str, measure_row, methods: tuple[str, ...], stages=STAGES) -> None:
    """The command line of an A/B over a ConvNeXt's ``stages`` (ConvNeXt-T's by default):
    ``measure_row(channels, size, batch, rounds)`` per stage and batch, each row printed and
    saved as it comes, and the per-forward sums (each stage weighed by its blocks)."""
    args = ab_arguments(description)
    result = {"device": torch.cuda.get_device_name(), "rows": []}
    for batch in args.batches:
        rows = [(f"C={channels} {size}x{size}", blocks,
                 functools.partial(measure_row, channels, size, batch, args.rounds))
                for channels, size, blocks in stages]  # fmt: skip
        measure_rows(f"batch {batch}", rows, methods, result, args.out)


def ab_arguments(description: str, models: list[str] | None = None) -> argparse.Namespace:
    """The A/B scripts' command line: ``--batches``, ``--rounds``, ``--out``, and with
    ``models`` (its default) ``--models``."""
    parser = argparse.ArgumentParser(description=description)
    if models is not None:
        parser.add_argument("--models", nargs="+", default=models)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args()


def measure_rows(label: str, rows, methods: tuple[str, ...], result: dict, out: Path) -> None:
    """Measure each ``(row label, blocks, measure)`` of ``rows`` (``measure()`` returns a row
    with ``checks`` and ``graph_us``), print it and save ``result`` with it, then print the
    per-forward sums, each row weighed by its blocks."""
    totals = dict.fromkeys(methods, 0.0)
    for row_label, blocks, measure in rows:
        row = {**measure(), "blocks": blocks}
        result["rows"].append(row)
        for name in methods:
            totals[name] += row["graph_us"][name] * blocks
        bad = [n for n, c in row["checks"].items() if not c["ok"]]
        fused = f"; fused {row['fused']}" if "fused" in row else ""
        print(f"{label} {row_label}: "
              + ", ".join(f"{n} {row['graph_us'][n]:.1f} us" for n in methods)
              + f"{fused}; out of tolerance: {bad}", flush=True)  # fmt: skip
        out.write_text(json.dumps(result, indent=1))
    print(f"{label} per forward ({sum(blocks for _, blocks, _ in rows)} blocks): "
          + ", ".join(f"{n} {us:.1f} us" for n, us in totals.items()), flush=True)  # fmt: skip


if __name__ == "__main__":
    run_stages(__doc__.splitlines()[0], measure, METHODS)
