"""``optimize``'s per-channel rewrites against the torch modules they replace (H100/H200):

    python benchmarks/experiments/channel_ops_ab.py --models densenet121 convnext_tiny \
        --batches 1 8 32 --out channel_ops_ab.json

For each distinct call (input shape and rewrite) of a model's lone BatchNorms with the
activation after them (DenseNet's, ``bn+relu``: a depthwise 1x1 of ones on the grouped kernel)
and of its ``LayerNorm2d``s (ConvNeXt's: ``ChannelLayerNorm``), as ``cute_conv.optimize``
rewrites them: ``torch``: the model's own modules, eager (the BatchNorm then the activation;
the ``LayerNorm2d``); ``cute_conv``: the module ``optimize`` made of them; ``kernel``: that
module on the grouped kernel whatever its rule says (``ChannelLayerNorm.kernel_forward``; the
BatchNorms' module itself), so that rows judge ``channel_norm.runs_norm_kernel``. bf16 channels_last
random inputs, both checked against the float32 modules, CUDA-graph replays in interleaved
rounds (medians); the per-forward sums weigh each call by its count.
"""

from __future__ import annotations

import copy
import functools
import sys
from pathlib import Path

import torch
from torch import nn

import cute_conv
from cute_conv.reference import TORCH_ACTIVATIONS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import pointwise_linear_ab  # noqa: E402
from grouped_direct_ab import checks  # noqa: E402
from models import IMAGE_SIZE, build_model, replayed_us  # noqa: E402

METHODS = ("torch", "cute_conv", "kernel")
NORM_SUFFIX = "_channel_norm"  # optimize's name of a ChannelLayerNorm: the LayerNorm's + this


def rewrites(model: nn.Module, optimized: nn.Module) -> list[tuple[str, str, str | None]]:
    """``(original module, rewritten module, activation)`` of each lone BatchNorm and each
    channel LayerNorm that ``optimized`` (``optimize(model)``) rewrote."""
    report = optimized.cute_conv_report
    found = []
    for chain in report.fused:
        first, *rest = chain.pattern.split("+")
        if first == "bn":
            found.append((chain.nodes[0], chain.module, rest[0] if rest else None))
    for name in report.channel_norms:
        original = name.removesuffix(NORM_SUFFIX)
        if original != name and original in dict(model.named_modules()):
            found.append((original, name, None))
    return found


def input_shapes(model: nn.Module, names: list[str]) -> dict[str, tuple[int, ...]]:
    """The input shape of each of the modules ``names`` at batch 1 (forward hooks, CPU)."""
    modules = dict(model.named_modules())
    shapes: dict[str, tuple[int, ...]] = {}

    def record(name: str, _module, args, _output) -> None:  # None: the output stays
        shapes.setdefault(name, tuple(args[0].shape))

    hooks = [modules[name].register_forward_hook(functools.partial(record, name))
             for name in names]  # fmt: skip
    with torch.no_grad():
        model(torch.randn(1, 3, IMAGE_SIZE, IMAGE_SIZE))
    for hook in hooks:
        hook.remove()
    return shapes


def measure(model, optimized, original, rewritten, activation, shape, batch, rounds) -> dict:
    modules = dict(model.named_modules())
    reference = copy.deepcopy(modules[original]).cuda()
    torch_module = copy.deepcopy(reference).to(torch.bfloat16)
    ours = optimized.get_submodule(rewritten).cuda()
    act = TORCH_ACTIVATIONS[activation] if activation else (lambda y: y)
    gen = torch.Generator("cuda").manual_seed(0)
    x = torch.randn(batch, *shape[1:], device="cuda", generator=gen) * 2 + 1
    x = x.contiguous(memory_format=torch.channels_last)
    x16 = x.bfloat16()
    on_kernel = getattr(ours, "kernel_forward", ours)
    fns = {"torch": lambda: act(torch_module(x16)), "cute_conv": lambda: ours(x16),
           "kernel": lambda: on_kernel(x16)}  # fmt: skip
    with torch.no_grad():
        expected = act(reference(x16.float()))
        checked = checks(fns, expected)
        graph_us = replayed_us(fns, rounds)
    return {"module": original, "activation": activation, "shape": [batch, *shape[1:]],
            "checks": checked, "graph_us": graph_us}  # fmt: skip


def main() -> int:
    args = pointwise_linear_ab.ab_arguments(__doc__.splitlines()[0], ["densenet121", "convnext_tiny"])
    result = {"device": torch.cuda.get_device_name(), "rows": []}
    for model_name in args.models:
        model = build_model(model_name)
        optimized = cute_conv.optimize(copy.deepcopy(model).to(torch.bfloat16))
        found = rewrites(model, optimized)
        shapes = input_shapes(model, [original for original, _, _ in found])
        calls: dict[tuple, list] = {}  # distinct (shape, rewrite kind): its first call, count
        for original, rewritten, activation in found:
            kind = (shapes[original], activation, rewritten.endswith(NORM_SUFFIX))
            calls.setdefault(kind, [original, rewritten, activation, 0])[3] += 1
        for batch in args.batches:
            rows = [(f"{original} {[batch, *shape[1:]]}", count,
                     functools.partial(measure, model, optimized, original, rewritten,
                                       activation, shape, batch, args.rounds))
                    for (shape, _, _), (original, rewritten, activation, count)
                    in calls.items()]  # fmt: skip
            pointwise_linear_ab.measure_rows(f"{model_name} batch {batch}", rows, METHODS,
                                             result, args.out)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
