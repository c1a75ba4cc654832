"""``optimize(model, dtype="fp8")``: the fused modules of an optimized graph converted to fp8,
and their activations scaled statically (from a calibration run), dynamically (per call) or
with delayed scales (``cute_conv.delayed_scaling``), as ``cute_conv.optimize`` documents."""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch import fx, nn

from .delayed_scaling import DelayedScales, seed, seed_on_first_call
from .fp8 import scale_from_amax
from .kernels.common.channel_rows import VECTOR_BYTES as POOL_VECTOR_BYTES
from .nn import Conv2d
from .optimize_report import LeftConv, OptimizeReport
from .pooling import MaxPool2d

__all__ = ["FP8_MIN_CHANNELS", "FP8_SCALINGS", "resolve_scaling", "to_fp8"]

# Convs of fewer input channels stay 16-bit under dtype="fp8": their MMA work is small (the
# stem's C=3 or 8) and their first input is the 16-bit image, which fp8 would quantize first.
FP8_MIN_CHANNELS = 16
# optimize(dtype="fp8")'s ways to scale activations (see its docstring).
FP8_SCALINGS = ("static", "dynamic", "delayed")


def resolve_scaling(dtype: str | None, scaling: str | None, calibration: Any) -> str | None:
    """``optimize``'s ``scaling``, with None resolved; raises ValueError on a bad combination
    (TypeError for a non-str)."""
    if scaling is None:
        return None if dtype != "fp8" else "delayed" if calibration is None else "static"
    if not isinstance(scaling, str):
        raise TypeError(f"scaling must be None or a str, one of {FP8_SCALINGS}, got {scaling!r}")
    if dtype != "fp8":
        raise ValueError(f"scaling={scaling!r} scales fp8 activations: pass it with dtype='fp8'")
    if scaling not in FP8_SCALINGS:
        raise ValueError(f"scaling must be None or one of {FP8_SCALINGS}, got {scaling!r}")
    if scaling == "static" and calibration is None:
        raise ValueError("scaling='static' takes its scales from a calibration input: pass one")
    if scaling == "dynamic" and calibration is not None:
        raise ValueError("scaling='dynamic' measures every call: it takes no calibration input")
    return scaling


def _fused_calls(gm: fx.GraphModule) -> list[tuple[fx.Node, Conv2d]]:
    modules = dict(gm.named_modules())
    return [
        (node, modules[node.target])
        for node in gm.graph.nodes
        if node.op == "call_module" and isinstance(modules[node.target], Conv2d)
    ]


@torch.no_grad()
def to_fp8(gm: fx.GraphModule, report: OptimizeReport, calibration: Any, scaling: str) -> None:
    """``optimize``'s ``dtype="fp8"``: convert the fused modules and scale their inputs as
    ``scaling`` says (see ``optimize``)."""
    calls = _fused_calls(gm)
    called = Counter(node.target for node, _ in calls)
    chosen = {}
    for node, module in calls:
        if module.groups != 1:
            reason = f"a grouped conv (groups={module.groups}): fp8 runs groups=1 convs"
            report.kept_16bit.append(LeftConv(node.target, reason))
        elif module.in_channels < FP8_MIN_CHANNELS:
            reason = f"{module.in_channels} input channels (fp8 from {FP8_MIN_CHANNELS})"
            report.kept_16bit.append(LeftConv(node.target, reason))
        elif module.w_scale is None and called[node.target] == 1:
            chosen[node.target] = module
        elif module.w_scale is None:
            report.kept_16bit.append(LeftConv(node.target, "called more than once"))
    update = None
    if scaling == "dynamic":
        for name, module in chosen.items():
            module.to_fp8()
            report.fp8.append(name)
        report.fp8_amax_inputs = _share_amax(gm, chosen)
    elif scaling == "delayed":
        update = _delay_scales(gm, report, calls, chosen)
    else:
        _static_scales(gm, report, calls, chosen, calibration)
    _zero_amax_first(gm, after=update)
    if update is not None:
        gm.register_forward_pre_hook(seed_on_first_call, with_kwargs=True)
        if calibration is not None:
            seed(gm, calibration if isinstance(calibration, tuple) else (calibration,), {})


def _static_scales(
    gm: fx.GraphModule,
    report: OptimizeReport,
    calls: list[tuple[fx.Node, Conv2d]],
    chosen: dict[str, Conv2d],
    calibration: Any,
) -> None:
    """Static fp8 scales from one calibration run; each conv whose every reader is an fp8
    conv writes fp8 (a 16-bit stem too, ``_fp8_producers``)."""
    modules = dict(gm.named_modules())
    writers = _fp8_producers(gm, chosen)
    measured = {**chosen, **{name: modules[name] for name in writers}}
    in_amax, out_amax = _calibrate(gm, measured, calibration)
    # A tensor written as fp8 has one scale tensor, its producer's, for every reader.
    written = {name: scale_from_amax(out_amax[name]) for name in writers}
    _convert(gm, report, calls, chosen, written, lambda name: scale_from_amax(in_amax[name]))


def _convert(
    gm: fx.GraphModule,
    report: OptimizeReport,
    calls: list[tuple[fx.Node, Conv2d]],
    chosen: dict[str, Conv2d],
    written: dict[str, torch.Tensor],
    input_scale: Any,
) -> None:
    """``Conv2d.to_fp8`` on each chosen module, ``Conv2d.write_fp8`` on the 16-bit ones in
    ``written`` (stems): the convs in ``written`` write fp8 with their scale there, which
    their readers read their input (past max pools) or identity with; any other input is
    scaled by ``input_scale(name)`` (a tensor, or None: measured on each call)."""
    modules = dict(gm.named_modules())
    for node, module in calls:
        if node.target in written and node.target not in chosen:
            module.write_fp8(written[node.target])
            report.fp8_stems.append(node.target)
        if node.target not in chosen:
            continue
        x = _past_pools(node.args[0], modules)
        identity = _past_pools(node.args[1] if len(node.args) > 1 else None, modules)
        from_fp8 = isinstance(x, fx.Node) and x.target in written
        x_scale = written[x.target] if from_fp8 else input_scale(node.target)
        identity_scale = None
        if isinstance(identity, fx.Node) and identity.target in written:
            identity_scale = written[identity.target]
        out_scale = written.get(node.target)
        module.to_fp8(x_scale=x_scale, out_scale=out_scale, identity_scale=identity_scale)
        report.fp8.append(node.target)
        if out_scale is not None:
            report.fp8_outputs.append(node.target)


def _delay_scales(
    gm: fx.GraphModule,
    report: OptimizeReport,
    calls: list[tuple[fx.Node, Conv2d]],
    chosen: dict[str, Conv2d],
) -> fx.Node:
    """Delayed fp8 scales (``cute_conv.delayed_scaling``): the convs that static scales let
    write fp8 do, with a ``DelayedScales`` scale, which the graph updates from their epilogue
    amax at its start; the other inputs are scaled dynamically. Returns the update's node."""
    writers = sorted(_fp8_producers(gm, chosen))
    device = next(iter(chosen.values())).weight.device if chosen else torch.device("cpu")
    delayed = DelayedScales(writers, device)
    gm.add_submodule("fp8_delayed_scales", delayed)
    written = dict(zip(writers, delayed.scales, strict=True))
    _convert(gm, report, calls, chosen, written, lambda _: None)
    readers = _share_amax(gm, chosen)  # their x_amax: for the measuring call
    report.fp8_amax_inputs = [name for name in readers if chosen[name].x_scale is None]
    nodes = {node.target: node for node, _ in calls}
    amax = tuple(_out_amax(gm, nodes[name]) for name in writers)
    with gm.graph.inserting_before(_first_op(gm)):  # before every conv
        update = gm.graph.call_module("fp8_delayed_scales", amax)
    gm.graph.lint()
    gm.recompile()
    return update


def _share_amax(gm: fx.GraphModule, chosen: dict[str, Conv2d]) -> list[str]:
    """Dynamic fp8: each fp8 conv whose input is the output of another fused conv (called
    once), directly or through our max pools, reads ``max|x|`` from that conv's epilogue
    (``Conv2d.forward``'s ``out_amax`` and ``x_amax``, one float32 buffer of ``gm`` per
    writer) instead of reducing over ``x``: the quantization of its input is then one pass.
    A max pool's output holds some of its input's values, so its amax is at most the conv's:
    the scale never saturates (and is the same when the largest magnitude is a maximum, as
    after a ReLU). Returns the readers' names."""
    modules = dict(gm.named_modules())
    called = Counter(node.target for node in gm.graph.nodes if node.op == "call_module")
    readers = []
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or node.target not in chosen:
            continue
        writer = _past_pools(node.args[0], modules)
        if not _calls(writer, modules, Conv2d) or called[writer.target] != 1:
            continue
        node.kwargs = {**node.kwargs, "x_amax": _out_amax(gm, writer)}
        readers.append(node.target)
    gm.recompile()
    return readers


def _out_amax(gm: fx.GraphModule, node: fx.Node) -> fx.Node:
    """The ``get_attr`` node of the float32 buffer of ``gm`` that the fused conv ``node``
    raises to its output's amax (its ``out_amax``), made on the first request. The conv does
    not zero it (``reset_amax=False``): ``_zero_amax_first`` zeroes them all in one op."""
    if "out_amax" in node.kwargs:
        return node.kwargs["out_amax"]
    name = f"{node.target.replace('.', '_')}_out_amax"
    device = gm.get_submodule(node.target).weight.device
    gm.register_buffer(name, torch.zeros((), device=device), persistent=False)
    # At the graph's start: the ops that run before every conv read it too.
    with gm.graph.inserting_before(_first_op(gm)):
        amax = gm.graph.get_attr(name)
    node.kwargs = {**node.kwargs, "out_amax": amax, "reset_amax": False}
    return amax


def _first_op(gm: fx.GraphModule) -> fx.Node:
    """The graph's first node past its inputs and attribute reads."""
    return next(n for n in gm.graph.nodes if n.op not in ("placeholder", "get_attr"))


def _zero_amax_first(gm: fx.GraphModule, after: fx.Node | None) -> None:
    """Zero every fused conv's ``out_amax`` buffer before any conv runs, in one
    ``torch._foreach_zero_`` (one launch, where a ``zero_`` per conv was one each): after
    ``after`` (the delayed scales' update, which reads them) if given."""
    buffers = [node.kwargs["out_amax"] for node in gm.graph.nodes
               if node.op == "call_module" and "out_amax" in node.kwargs]  # fmt: skip
    if not buffers:
        return
    graph = gm.graph
    with graph.inserting_after(after) if after else graph.inserting_before(_first_op(gm)):
        graph.call_function(torch._foreach_zero_, (buffers,))
    gm.graph.lint()
    gm.recompile()


def _calls(node: object, modules: dict[str, nn.Module], kinds: type | tuple[type, ...]) -> bool:
    """Whether ``node`` is a call of a module of ``kinds``."""
    return (
        isinstance(node, fx.Node)
        and node.op == "call_module"
        and isinstance(modules[node.target], kinds)
    )


def _past_pools(node: object, modules: dict[str, nn.Module]) -> object:
    """The node whose values ``node`` holds: ``node`` itself, or the input of the chain of max
    pools whose output it is (``MaxPool2d``s, ``TiledMaxPool2d`` among them: the pools that
    take e4m3 maps)."""
    while _calls(node, modules, MaxPool2d):
        node = node.args[0]
    return node


def _fp8_producers(gm: fx.GraphModule, chosen: dict[str, Conv2d]) -> set[str]:
    """The fused convs that may write fp8: the fp8 convs, and the 16-bit ones kept for their
    few input channels (the stem: ``Conv2d.write_fp8``; called once, with no identity).
    Every reader is an fp8 conv, reading the output as its input or as the identity of a conv
    that writes fp8 too, directly or past ``MaxPool2d`` nodes (which pool e4m3 maps when K
    fills their 16-channel vectors); and their own identity (if any) is written as fp8 (a
    residual has the output's dtype)."""
    modules = dict(gm.named_modules())
    called = Counter(node.target for node in gm.graph.nodes if node.op == "call_module")

    def may_write(node: fx.Node) -> bool:
        if not node.users or not _calls(node, modules, Conv2d):
            return False
        module = modules[node.target]
        stem = (
            module.w_scale is None
            and module.out_scale is None
            and module.groups == 1
            and len(node.args) == 1
        )
        return node.target in chosen or (stem and called[node.target] == 1)

    def reads_fine(user: fx.Node, source: fx.Node, channels: int, producers: set[str]) -> bool:
        if _calls(user, modules, MaxPool2d):
            fills_vectors = channels % POOL_VECTOR_BYTES == 0  # one byte per e4m3 channel
            return (
                fills_vectors
                and bool(user.users)
                and all(reads_fine(u, user, channels, producers) for u in user.users)
            )
        if user.op != "call_module" or user.target not in chosen:
            return False
        as_x = user.args[0] is source
        as_identity = len(user.args) > 1 and user.args[1] is source
        return (as_x or as_identity) and not (as_identity and user.target not in producers)

    nodes = {node.target: node for node in gm.graph.nodes if may_write(node)}
    producers = set(nodes)
    changed = True
    while changed:  # drop producers with a reader that cannot take fp8, until none is left
        changed = False
        for name in sorted(producers):
            node = nodes[name]
            identity = node.args[1] if len(node.args) > 1 else None
            identity = _past_pools(identity, modules)
            fp8_identity = identity is None or getattr(identity, "target", None) in producers
            channels = modules[name].out_channels
            readers_fine = all(reads_fine(u, node, channels, producers) for u in node.users)
            if not fp8_identity or not readers_fine:
                producers.discard(name)
                changed = True
    return producers


def _calibrate(gm: fx.GraphModule, modules: dict[str, Conv2d], calibration: Any) -> tuple:
    """``(input amax, output amax)`` of each module over one run of ``calibration``."""
    in_amax: dict[str, torch.Tensor] = {}
    out_amax: dict[str, torch.Tensor] = {}

    def record(store: dict, name: str, value: torch.Tensor) -> None:
        amax = value.detach().abs().amax().float()
        store[name] = amax if name not in store else torch.maximum(store[name], amax)

    handles = []
    for name, module in modules.items():
        handles.append(module.register_forward_pre_hook(
            lambda _m, args, name=name: record(in_amax, name, args[0])))  # fmt: skip
        handles.append(module.register_forward_hook(
            lambda _m, _args, out, name=name: record(out_amax, name, out)))  # fmt: skip
    try:
        gm(*calibration) if isinstance(calibration, tuple) else gm(calibration)
    finally:
        for handle in handles:
            handle.remove()
    return in_amax, out_amax
