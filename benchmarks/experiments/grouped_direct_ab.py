"""The grouped / depthwise CUDA-core kernel (``cute_conv.grouped_conv2d``) against cuDNN on
the grouped convs of torchvision models (H100/H200).

    python benchmarks/experiments/grouped_direct_ab.py --models regnet_y_1_6gf \
        mobilenet_v3_large --batches 1 8 32 --out grouped_direct_ab.json

For each distinct grouped conv call of a model (groups > 1, input shapes recorded by forward
hooks on a 224x224 batch) that ``cute_conv.grouped_limits`` takes: bf16 channels_last, random
weights and bias, the activation after it in the model (its ``Conv2dNormActivation``'s, else
none). ``cudnn``: ``F.conv2d(groups=...)`` with the bias, then the activation (what an
unoptimized model runs; torch.compile fuses the activation into a Triton kernel but calls the
same cuDNN conv); ``grouped``: the kernel with the bias and activation fused, on the filter
staged once. Both checked against float32 from NaN-poisoned outputs
(``compare_to_reference``), CUDA-graph replays in interleaved rounds (medians); sums per
forward weigh each call by its count. Each row says whether ``cute_conv.grouped_rule`` sends
the call to the kernel (``rule_takes_kernel``); ``rule`` sums what ``nn.Conv2d`` would run.
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

from cute_conv.fold import activation_name
from cute_conv.grouped import grouped_conv2d, grouped_limits, stage_filter
from cute_conv.grouped_rule import runs_grouped_kernel
from cute_conv.reference import TORCH_ACTIVATIONS
from cute_conv.testing import compare_to_reference

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from models import build_model, distinct_calls, replayed_us  # noqa: E402

METHODS = ("cudnn", "grouped")


def runs_grouped(module: nn.Module) -> bool:
    """A grouped conv the kernel takes."""
    if not isinstance(module, nn.Conv2d) or module.groups == 1:
        return False
    try:
        grouped_limits(module.in_channels, module.out_channels, module.groups)
    except ValueError:
        return False
    return True


def grouped_convs(model: nn.Module, batch: int) -> list[tuple[nn.Conv2d, tuple, str | None, int]]:
    """``(conv, input shape, activation after it, calls per forward)`` of each distinct
    grouped conv call of ``model`` that the kernel takes (the activation: the first module
    after the conv in its parent that is not a BatchNorm, where it is one, else None)."""
    activations: dict[int, str | None] = {}
    for block in model.modules():
        children = list(block.children())
        for i, child in enumerate(children):
            if runs_grouped(child):
                rest = [m for m in children[i + 1 : i + 3] if not isinstance(m, nn.BatchNorm2d)]
                activations[id(child)] = activation_name(rest[0]) if rest else None
    calls = distinct_calls(model, batch, lambda m: id(m) in activations, lambda m: activations[id(m)])
    return [(conv, shape, activations[id(conv)], count) for conv, shape, count in calls]


def random_operands(conv: nn.Conv2d, shape: tuple) -> tuple[torch.Tensor, ...]:
    """Seeded inputs of a call of ``conv`` on ``shape``: bf16 channels_last ``x``, float32
    KCRS weights scaled by the fan-in, a float32 bias."""
    c, groups, k = shape[1], conv.groups, conv.out_channels
    r, s = conv.kernel_size
    gen = torch.Generator("cuda").manual_seed(0)
    x = torch.randn(shape, device="cuda", generator=gen).bfloat16()
    x = x.to(memory_format=torch.channels_last)
    fan_in = r * s * c // groups
    weight = torch.randn(k, c // groups, r, s, device="cuda", generator=gen) / fan_in**0.5
    return x, weight, torch.randn(k, device="cuda", generator=gen)


def ab_calls(conv: nn.Conv2d, shape: tuple, activation: str | None):
    """``(cudnn, kernel, ref)`` for a call of ``conv`` on ``shape`` (``random_operands``, in
    bf16): cuDNN's conv with the bias, then the activation; ``kernel(pixels, channel_split)``,
    the kernel with both fused on the filter staged once (either None: the rules'), its
    NPQK output viewed NCHW; the float32 reference."""
    groups = conv.groups
    geom = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation)
    x, weight, bias = random_operands(conv, shape)
    weight, bias = weight.bfloat16(), bias.bfloat16()
    act = TORCH_ACTIVATIONS[activation]
    ref = act(F.conv2d(x.float(), weight.float(), bias.float(), groups=groups, **geom))
    staged = stage_filter(weight.permute(0, 2, 3, 1))
    x_nhwc = x.permute(0, 2, 3, 1)  # a view of the channels_last tensor

    def kernel(pixels: int | None, channel_split: int | None = None):
        return lambda: grouped_conv2d(
            x_nhwc, staged, filter_layout="rsck", groups=groups, bias=bias,
            activation=activation, pixels=pixels, channel_split=channel_split, **geom,
        ).permute(0, 3, 1, 2)  # fmt: skip

    return lambda: act(F.conv2d(x, weight, bias, groups=groups, **geom)), kernel, ref


def checks(fns: dict[str, Callable[[], torch.Tensor]], ref: torch.Tensor) -> dict[str, dict]:
    """Each of ``fns``' output against ``ref`` (``compare_to_reference``)."""
    reports = {name: compare_to_reference(fn(), ref) for name, fn in fns.items()}
    return {name: {"ok": r.ok, "rel_err": r.rel_err} for name, r in reports.items()}


def measure(conv: nn.Conv2d, shape: tuple, activation: str | None, rounds: int) -> dict:
    n, c, _, _ = shape
    k, groups = conv.out_channels, conv.groups
    r, s = conv.kernel_size
    cudnn, kernel, ref = ab_calls(conv, shape, activation)
    fns = {"cudnn": cudnn, "grouped": kernel(None)}
    macs = n * k * ref.shape[2] * ref.shape[3] * r * s * c // groups
    return {"module": repr(conv), "input": list(shape), "activation": activation,
            "macs": macs, "rule_takes_kernel": runs_grouped_kernel(macs, c // groups, k // groups, groups, r * s),
            "checks": checks(fns, ref), "graph_us": replayed_us(fns, rounds)}  # fmt: skip


def run_ab(
    description: str,
    measure_row: Callable[[nn.Conv2d, tuple, str | None, int], dict],
    methods: tuple[str, ...],
    default_models: list[str],
    extra_totals: Callable[[list[dict]], dict[str, float]] = lambda rows: {},
    takes: Callable[[nn.Conv2d], bool] = lambda conv: True,
    min_group_in: int = 0,
) -> None:
    """The command line of an A/B over models' grouped convs: ``measure_row(conv, input
    shape, activation, rounds)`` per distinct call that ``takes`` of at least
    ``--min-group-in`` (default ``min_group_in``) input channels a group, the rows written
    to ``--out`` after each (model, batch), its per-forward sums of ``methods`` (those every
    row has; and ``extra_totals``) printed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--models", nargs="+", default=default_models)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--min-group-in", type=int, default=min_group_in)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    result = {"device": torch.cuda.get_device_name(), "rows": []}
    for name in args.models:
        model = build_model(name)
        for batch in args.batches:
            rows = [
                {"model": name, "batch": batch, "calls": calls,
                 **measure_row(conv, shape, activation, args.rounds)}
                for conv, shape, activation, calls in grouped_convs(model, batch)
                if takes(conv) and conv.in_channels // conv.groups >= args.min_group_in
            ]  # fmt: skip
            result["rows"] += rows
            summed = [m for m in methods if all(m in r["graph_us"] for r in rows)]
            totals = {m: sum(r["graph_us"][m] * r["calls"] for r in rows) for m in summed}
            totals.update(extra_totals(rows))
            bad = [r["input"] for r in rows if not all(c["ok"] for c in r["checks"].values())]
            print(
                f"{name} batch {batch}: {len(rows)} distinct grouped convs, per forward "
                + ", ".join(f"{m} {us:.1f} us" for m, us in totals.items())
                + f"; out of tolerance: {bad}",
                flush=True,
            )
            args.out.write_text(json.dumps(result, indent=1))


def rule_total(rows: list[dict]) -> dict[str, float]:
    """What ``nn.Conv2d`` would run per forward: the kernel where the rule takes the call."""
    return {
        "rule": sum(
            r["graph_us"]["grouped" if r["rule_takes_kernel"] else "cudnn"] * r["calls"]
            for r in rows
        )
    }


if __name__ == "__main__":
    run_ab(
        __doc__.splitlines()[0], measure, METHODS, ["regnet_y_1_6gf", "mobilenet_v3_large"],
        rule_total,
    )  # fmt: skip
