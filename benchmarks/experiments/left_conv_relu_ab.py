"""The convs ``optimize`` leaves to torch that a ReLU follows (RegNets' grouped 3x3s, their
BatchNorm folded into the weights): the ReLU as a kernel of its own against cuDNN's conv +
bias + ReLU in one call (``torch.cudnn_convolution_relu``), on an H100/H200:

    python benchmarks/experiments/left_conv_relu_ab.py --model regnet_y_1_6gf --batches 1 8 \
        --out left_conv_relu.json

For each distinct grouped conv of the model (input shapes recorded by forward hooks on a
224x224 batch): random bf16 weights and bias, a channels_last bf16 input; ``conv``
(``F.conv2d`` with the bias), ``conv_relu`` (then ``torch.relu``: what an optimized model runs)
and ``fused``; the last two checked against float32 (``compare_to_reference``), all three
replayed from CUDA graphs in interleaved rounds (medians). Their sums over a forward's calls
say what fusing the ReLU would save per forward. (The squeeze-excitation's global average
pools need no such test: aten runs ``adaptive_avg_pool2d`` to 1x1 as a ``mean``.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from cute_conv.testing import compare_to_reference

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import MODELS, build_model, distinct_calls, replayed_us  # noqa: E402


def measure(conv: nn.Conv2d, shape: tuple[int, ...], calls: int, rounds: int) -> dict:
    geom = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation)
    groups = conv.groups
    x = torch.randn(shape, device="cuda").bfloat16().to(memory_format=torch.channels_last)
    w = torch.randn(conv.weight.shape, device="cuda") / conv.weight[0].numel() ** 0.5
    w = w.bfloat16().to(memory_format=torch.channels_last)
    b = torch.randn(conv.out_channels, device="cuda").bfloat16()
    ref = torch.relu(F.conv2d(x.float(), w.float(), b.float(), groups=groups, **geom))
    fns = {
        "conv": lambda: F.conv2d(x, w, b, groups=groups, **geom),
        "conv_relu": lambda: torch.relu(F.conv2d(x, w, b, groups=groups, **geom)),
        "fused": lambda: torch.cudnn_convolution_relu(
            x, w, b, geom["stride"], geom["padding"], geom["dilation"], groups
        ),
    }
    row = {"module": repr(conv), "input": list(shape), "calls": calls, "checks": {}}
    for name in ("conv_relu", "fused"):
        try:
            check = compare_to_reference(fns[name](), ref)
        except RuntimeError as exc:  # e.g. cuDNN without a kernel for this conv
            row["checks"][name] = {"ok": False, "error": str(exc)[:300]}
            del fns[name]
            continue
        row["checks"][name] = {"ok": check.ok, "rel_err": check.rel_err}
    row["graph_us"] = replayed_us(fns, rounds)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="regnet_y_1_6gf", choices=MODELS)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    model = build_model(args.model)
    result = {"device": torch.cuda.get_device_name(), "model": args.model, "rows": []}
    for batch in args.batches:
        grouped = distinct_calls(model, batch, lambda m: isinstance(m, nn.Conv2d) and m.groups > 1)
        rows = [measure(*found, args.rounds) for found in grouped]
        result["rows"] += [{"batch": batch, **row} for row in rows]
        names = set.intersection(*(set(r["graph_us"]) for r in rows))
        totals = {name: sum(r["graph_us"][name] * r["calls"] for r in rows) for name in names}
        bad = [r["input"] for r in rows if not all(c["ok"] for c in r["checks"].values())]
        print(
            f"{args.model} batch {batch}: {len(rows)} distinct grouped convs, per forward "
            + ", ".join(f"{name} {us:.1f} us" for name, us in sorted(totals.items()))
            + f"; outputs out of tolerance or failed: {bad}",
            flush=True,
        )
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
