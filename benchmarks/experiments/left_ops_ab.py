"""What the ops ``optimize`` leaves to torch in a model cost, against other ways torch runs them
(on an H100/H200):

    python benchmarks/experiments/left_ops_ab.py --model regnet_y_1_6gf --batches 1 8 \
        --out left_ops.json

- grouped convs, which a ReLU follows in RegNets (``optimize`` folds their BatchNorm into the
  weights): ``conv`` (``F.conv2d`` with a bias), ``conv_relu`` (then ``torch.relu``: what an
  optimized model runs) and ``fused`` (``torch.cudnn_convolution_relu``, cuDNN's conv + bias +
  ReLU in one call), on random bf16 weights and bias;
- global average pools (squeeze-excitation, the classifier's): ``pool``
  (``F.adaptive_avg_pool2d``, what the model runs) and ``mean`` (``x.mean((2, 3))``). torch's
  channels_last max pool was 4x slower than torch.compile's on ResNet-50 (``cute_conv.pooling``);
  this asks the same of the average pool.

Each distinct call (input shapes recorded by forward hooks on a 224x224 batch, channels_last
bf16 inputs) is checked against float32 (``compare_to_reference``) and replayed from CUDA
graphs in interleaved rounds (medians); the sums over a forward's calls say what each
alternative would save per forward.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from cute_conv.testing import compare_to_reference

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench  # noqa: E402
from models import IMAGE_SIZE, MODELS, build_model, replay_of  # noqa: E402


def recorded_calls(
    model: nn.Module, batch: int, takes: Callable[[nn.Module], bool]
) -> list[tuple[nn.Module, tuple[int, ...], int]]:
    """``(module, input shape, calls per forward)`` of each distinct call of the modules of
    ``model`` that ``takes`` picks, on a batch."""
    seen: dict[tuple, list] = {}

    def record(module: nn.Module, args, _output) -> None:
        shape = tuple(args[0].shape)
        seen.setdefault((shape, repr(module)), [module, shape, 0])[2] += 1

    hooks = [m.register_forward_hook(record) for m in model.modules() if takes(m)]
    with torch.no_grad():
        model(torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE))
    for hook in hooks:
        hook.remove()
    return [tuple(entry) for entry in seen.values()]


def grouped_conv_calls(conv: nn.Conv2d, x: torch.Tensor) -> tuple[dict, torch.Tensor]:
    geom = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation)
    groups = conv.groups
    w = torch.randn(conv.weight.shape, device="cuda") / conv.weight[0].numel() ** 0.5
    w = w.bfloat16().to(memory_format=torch.channels_last)
    b = torch.randn(conv.out_channels, device="cuda").bfloat16()
    ref = torch.relu(F.conv2d(x.float(), w.float(), b.float(), groups=groups, **geom))
    calls = {
        "conv": lambda: F.conv2d(x, w, b, groups=groups, **geom),
        "conv_relu": lambda: torch.relu(F.conv2d(x, w, b, groups=groups, **geom)),
        "fused": lambda: torch.cudnn_convolution_relu(
            x, w, b, geom["stride"], geom["padding"], geom["dilation"], groups
        ),
    }
    return calls, ref


def global_pool_calls(_pool: nn.Module, x: torch.Tensor) -> tuple[dict, torch.Tensor]:
    calls = {
        "pool": lambda: F.adaptive_avg_pool2d(x, 1),
        "mean": lambda: x.mean((2, 3), keepdim=True),
    }
    return calls, x.float().mean((2, 3), keepdim=True)


# name: (which modules, the calls compared, which of them compute the reference's function)
OPS = {
    "grouped_convs": (
        lambda m: isinstance(m, nn.Conv2d) and m.groups > 1,
        grouped_conv_calls,
        ("conv_relu", "fused"),
    ),
    "global_pools": (
        lambda m: isinstance(m, nn.AdaptiveAvgPool2d) and m.output_size in (1, (1, 1)),
        global_pool_calls,
        ("pool", "mean"),
    ),
}


def measure(op: str, module: nn.Module, shape: tuple[int, ...], calls: int, rounds: int) -> dict:
    _, make_calls, checked = OPS[op]
    x = torch.randn(shape, device="cuda").bfloat16().to(memory_format=torch.channels_last)
    fns, ref = make_calls(module, x)
    row = {"module": repr(module), "input": list(shape), "calls": calls, "checks": {}}
    for name in checked:
        try:
            check = compare_to_reference(fns[name](), ref)
        except RuntimeError as exc:  # e.g. a cuDNN call without a kernel for this conv
            row["checks"][name] = {"ok": False, "error": str(exc)[:300]}
            del fns[name]
            continue
        row["checks"][name] = {"ok": check.ok, "rel_err": check.rel_err}
    ms = bench.time_interleaved({name: replay_of(fn) for name, fn in fns.items()}, rounds)
    row["graph_us"] = {name: t * 1e3 for name, t in ms.items()}
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
        for op, (takes, _, _) in OPS.items():
            found = recorded_calls(model, batch, takes)
            rows = [measure(op, m, shape, calls, args.rounds) for m, shape, calls in found]
            result["rows"] += [{"batch": batch, "op": op, **row} for row in rows]
            if not rows:
                continue
            names = set.intersection(*(set(r["graph_us"]) for r in rows))
            totals = {name: sum(r["graph_us"][name] * r["calls"] for r in rows) for name in names}
            bad = [r["input"] for r in rows if not all(c["ok"] for c in r["checks"].values())]
            print(
                f"{args.model} batch {batch}: {len(rows)} distinct {op}, per forward "
                + ", ".join(f"{name} {us:.1f} us" for name, us in totals.items())
                + f"; outputs out of tolerance: {bad}",
                flush=True,
            )
            args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
