"""``optimize(model)``: a ``torch.fx`` rewrite that runs a model's convs as fused cute_conv kernels.

It traces the model and replaces each chain

    conv [-> BatchNorm] [-> add(identity)] [-> activation] [-> add(identity)]

(ResNet's ``relu(bn(conv(x)) + identity)`` included; at most one add; the BatchNorm an
``nn.BatchNorm2d``, an ``nn.SyncBatchNorm`` or torchvision's ``FrozenBatchNorm2d``, which
pretrained detection backbones hold) by one ``cute_conv.nn.Conv2d`` whose kernel computes it
all: the BatchNorm folded in float32 into the epilogue's scale and bias, the activation, and
the add as the kernel's residual, before or after the activation as in the model. A chain ends
where an intermediate value has another user, so nothing the rest of the model reads is
skipped. Ops that are the identity in eval mode (dropout, torchvision's stochastic depth before
EfficientNet's residual adds) join a chain wherever they fall in it.

An ``nn.Linear`` applied to the channels of an NHWC tensor (ConvNeXt's pointwise layers: its
input a permute of NCHW to NHWC, past LayerNorms over the channels and activations) is a 1x1
conv and fuses as one (``Conv2d.from_linear``): with the activation after it, or, where its
value is permuted back to NCHW, with a multiply by a per-channel parameter (ConvNeXt's layer
scale, folded into the epilogue's scale and bias) and a residual add. Other Linears stay torch.

Grouped and depthwise convs fuse the same way, on the grouped kernel (within
``cute_conv.grouped_limits``) or on cuDNN's grouped conv (``cute_conv.nn.Conv2d`` chooses per
call). Convs the kernels cannot run (float32, non-zero padding
modes, geometry out of the limits, subclasses of nn.Conv2d) stay torch, and the report says
why; a BatchNorm right after such a conv (an ``nn.Conv2d`` itself) is folded into a copy of
its weights and bias, as ``torch.compile``'s freezing folds it, so that it costs no kernel of
its own.

Max pools (``cute_conv.pooling``; torch's channels_last pool kernel is slow): those whose
windows tile the map (VGG's 2x2 stride-2) become ``TiledMaxPool2d``, the others without ceil mode
or indices (ResNet's 3x3 stride-2) ``MaxPool2d``, one kernel pass.

What is checked when: the shapes of the activations are unknown at trace time, so a conv is
judged by its module's attributes (``cute_conv.nn.conv_limits``: groups, padding mode, weight
dtype, and the geometry limits that do not depend on the input's size). The rest (an output of at
least one pixel, N*P*Q < 2**31, a residual of the output's shape) is checked on each call, with
an error naming the limit; an add whose other operand broadcasts to the conv's output (a
scalar, a per-channel tensor) runs that call in torch ops, as torch would.
"""

from __future__ import annotations

import copy
import functools
import operator
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from .delayed_scaling import DelayedScales, seed, seed_on_first_call
from .fold import activation_name, folds_as_batch_norm
from .fp8 import scale_from_amax
from .kernels.common.max_pool import VECTOR_BYTES as POOL_VECTOR_BYTES
from .nn import Conv2d, conv_limits
from .pooling import MaxPool2d, TiledMaxPool2d, runs_as_kernel, tiles_the_map

__all__ = [
    "FP8_MIN_CHANNELS",
    "FP8_SCALINGS",
    "FusedChain",
    "LeftConv",
    "OptimizeReport",
    "optimize",
]

# Convs of fewer input channels stay 16-bit under dtype="fp8": their MMA work is small (the
# stem's C=3 or 8) and their first input is the 16-bit image, which fp8 would quantize first.
FP8_MIN_CHANNELS = 16
# optimize(dtype="fp8")'s ways to scale activations (see its docstring).
FP8_SCALINGS = ("static", "dynamic", "delayed")


@dataclass(frozen=True)
class FusedChain:
    """One chain of torch ops now run by one ``cute_conv.nn.Conv2d``."""

    module: str  # its name in the returned model
    pattern: str  # e.g. "conv+bn+add+relu"
    nodes: tuple[str, ...]  # the ops it replaced, in order: module names, fx node names
    stopped: str | None = None  # why a following op that looks fusable was not fused


@dataclass(frozen=True)
class LeftConv:
    """A conv left to torch."""

    name: str  # its module's name in the returned model (the fx node's target)
    reason: str
    folded_bn: str | None = None  # the BatchNorm after it, folded into its weights and bias


@dataclass
class OptimizeReport:
    """What ``optimize`` fused and what it left to torch, with the reasons."""

    fused: list[FusedChain] = field(default_factory=list)
    left: list[LeftConv] = field(default_factory=list)
    # dtype="fp8": the fused modules that run on fp8, those that write fp8 for the next conv,
    # and those kept 16-bit (with why).
    fp8: list[str] = field(default_factory=list)
    fp8_outputs: list[str] = field(default_factory=list)
    # 16-bit convs (the stem) writing fp8 for the fp8 convs after them (``_fp8_producers``).
    fp8_stems: list[str] = field(default_factory=list)
    fp8_scaling: str | None = None  # one of FP8_SCALINGS
    # dynamic scales: the fp8 convs whose 16-bit input another fused conv writes, with its
    # max|output| from the epilogue (``_share_amax``): quantized without a reduction.
    fp8_amax_inputs: list[str] = field(default_factory=list)
    kept_16bit: list[LeftConv] = field(default_factory=list)
    # Max pools now ``TiledMaxPool2d`` or ``MaxPool2d`` (torch's channels_last kernel is slow).
    pools: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Fused chains per pattern, most common first."""
        return dict(Counter(chain.pattern for chain in self.fused).most_common())

    def __str__(self) -> str:
        lines = [
            f"cute_conv.optimize: {len(self.fused)} convs fused, {len(self.left)} left to torch"
        ]
        lines += [f"  {count:4d} x {pattern}" for pattern, count in self.counts().items()]
        if self.fused:
            lines.append("fused:")
        for chain in self.fused:
            line = f"  {chain.module}: {chain.pattern} ({', '.join(chain.nodes)})"
            lines.append(line + (f"; stopped before: {chain.stopped}" if chain.stopped else ""))
        if self.left:
            lines.append("left to torch:")
        for conv in self.left:
            folded = f"; {conv.folded_bn} folded into its weights" if conv.folded_bn else ""
            lines.append(f"  {conv.name}: {conv.reason}{folded}")
        if self.pools:
            lines.append(f"max pools run by cute_conv: {len(self.pools)}")
        if self.fp8 or self.kept_16bit:
            lines.append(
                f"fp8 ({self.fp8_scaling} scaling): {len(self.fp8)} fused convs "
                f"({len(self.fp8_outputs)} writing fp8 for the next conv), "
                f"{len(self.kept_16bit)} kept 16-bit"
            )
            if self.fp8_amax_inputs:
                lines.append(
                    f"  {len(self.fp8_amax_inputs)} scaled by the amax their input's conv "
                    "takes in its epilogue"
                )
            lines += [f"  kept 16-bit {conv.name}: {conv.reason}" for conv in self.kept_16bit]
            lines += [
                f"  16-bit {name} writes fp8 for the convs after it" for name in self.fp8_stems
            ]
        return "\n".join(lines)


class _Tracer(fx.Tracer):
    """``symbolic_trace``'s tracer, with cute_conv modules kept whole (an optimized model traces
    again), and torchvision's ``FrozenBatchNorm2d`` too (so that it folds as a BatchNorm)."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        ours = isinstance(m, (Conv2d, TiledMaxPool2d, MaxPool2d, DelayedScales))
        leaf = ours or folds_as_batch_norm(m)
        return leaf or super().is_leaf_module(m, module_qualified_name)


def optimize(
    model: nn.Module,
    *,
    inplace: bool = False,
    verbose: bool = False,
    dtype: str | None = None,
    calibration: Any = None,
    scaling: str | None = None,
) -> fx.GraphModule:
    """Return ``model`` as a ``torch.fx.GraphModule`` whose convs run as cute_conv kernels.

    Args:
        model: an eval-mode model, traceable by ``torch.fx.symbolic_trace``, whose convs to run
            hold bfloat16 or float16 weights (``model.to(torch.bfloat16).eval()``). Give it
            channels_last inputs (``x.to(memory_format=torch.channels_last)``): the fused
            modules read and write channels_last, and copy other inputs first.
        inplace: False copies the model first. True works on ``model`` itself: the result
            shares its weights (channels_last conv weights become the KRSC weights without a
            copy; a conv left to torch with a BatchNorm folded into it gets new ones); do not
            use ``model`` afterwards.
        verbose: print the report.
        dtype: None runs the convs in the model's 16-bit dtype; ``"fp8"`` runs the fused
            convs of at least ``FP8_MIN_CHANNELS`` input channels on float8_e4m3fn
            (``cute_conv.nn.Conv2d.to_fp8``): weights quantized once per output channel,
            activations per tensor, fp32 accumulation and epilogue. Few-channel convs (the
            stem) stay 16-bit.
        calibration: with ``dtype="fp8"``: an input of the model (a tensor, or a tuple of
            its positional arguments) run once to measure each conv's input and output
            (``max|x| / 448``): static scales, or the first amax of delayed ones.
        scaling: with ``dtype="fp8"``, how activations are scaled (``FP8_SCALINGS``); None
            takes ``"static"`` with a calibration input, else ``"delayed"`` (the fastest that
            needs none: ``"dynamic"`` writes every fp8 input 16-bit and quantizes it again).

            - ``"static"``: scales from ``calibration`` (required), fixed. A conv whose
              readers are all fp8 convs (directly or past a max pool), and whose own
              identity (if any) is fp8, writes fp8 with its output's scale (its readers read
              with it, an identity through the residual's beta), the 16-bit stem included
              (``Conv2d.write_fp8``); the other convs write 16 bits, and their fp8 readers
              quantize them in one pass.
            - ``"dynamic"``: each conv measures its input's scale on every call, and every
              conv writes 16 bits. An input written by another fused conv is measured by
              that conv's epilogue (``max|y|`` into a buffer of the result), so it is
              quantized in one pass too, elsewhere by a reduction first. Exact per call, but
              slower than bf16 on ResNets (a 16-bit write and a quantize pass per conv).
            - ``"delayed"`` (``cute_conv.delayed_scaling``): the convs that write fp8 under
              ``"static"`` do, each with a scale from its epilogue's amax over the last
              ``AMAX_HISTORY`` calls, kept on the device and updated by the model at the
              start of each call (an fp8 identity's scale is read by the kernel too); other
              inputs are scaled as in ``"dynamic"``. No calibration needed: the first call (or
              ``calibration``, if given) measures and runs as ``"dynamic"``, so make it
              before capturing a CUDA graph or compiling with ``fullgraph=True`` (both
              refuse it; ``torch.compile`` without ``fullgraph`` runs it eagerly). Values
              past the history's amax saturate to +-448.

    Returns:
        The rewritten model, usable under CUDA graphs and ``torch.compile``; its
        ``cute_conv_report`` attribute is the ``OptimizeReport``. Run it under
        ``torch.inference_mode()`` or ``torch.no_grad()``: its parameters require grad as the
        model's did, and a call that records gradients goes through cute_conv's
        differentiable ops, at a higher cost per call.

    Raises:
        TypeError: ``model`` is not an ``nn.Module``, or ``scaling`` not a str.
        ValueError: ``model`` (or a submodule) is in training mode: BatchNorm folds only its
            running statistics (a folded model normalizes as the eval-mode model does); or
            ``dtype``, ``scaling`` and ``calibration`` do not go together.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if dtype not in (None, "fp8"):
        raise ValueError(f"dtype must be None (the model's 16-bit dtype) or 'fp8', got {dtype!r}")
    if calibration is not None and dtype != "fp8":
        raise ValueError("calibration sets fp8 scales: pass it with dtype='fp8'")
    scaling = _fp8_scaling(dtype, scaling, calibration)
    training = [name or type(model).__name__ for name, m in model.named_modules() if m.training]
    if training:
        raise ValueError(
            f"model is in training mode ({len(training)} modules, e.g. {training[0]!r}); call "
            "model.eval() first: BatchNorm folds only its running statistics (the optimized "
            "model normalizes as the eval-mode model does)"
        )
    if not inplace:
        model = copy.deepcopy(model)
    tracer = _Tracer()
    graph = tracer.trace(model)
    gm = fx.GraphModule(tracer.root, graph, type(model).__name__)
    report = _Rewriter(gm).run()
    if dtype == "fp8":
        report.fp8_scaling = scaling
        _to_fp8(gm, report, calibration, scaling)
    gm.eval()  # the module containers fx made, and the fused modules, as the model was
    gm.cute_conv_report = report
    if verbose:
        print(report)
    return gm


def _fp8_scaling(dtype: str | None, scaling: str | None, calibration: Any) -> str | None:
    """``optimize``'s scaling, with None resolved; raises ValueError on a bad combination."""
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


class _Rewriter:
    """Finds the fusable chains of one GraphModule's graph and replaces them."""

    def __init__(self, gm: fx.GraphModule) -> None:
        self.gm = gm
        self.modules = dict(gm.named_modules())
        self.report = OptimizeReport()
        # How many nodes call each module: a conv module called twice keeps its name for
        # neither of its fused replacements.
        self.calls = Counter(n.target for n in gm.graph.nodes if n.op == "call_module")
        self.names = set(self.modules)  # taken, by the model's modules or fused ones

    def run(self) -> OptimizeReport:
        for node in list(self.gm.graph.nodes):
            if node.op == "call_module" and isinstance(self.modules[node.target], nn.Conv2d):
                self._rewrite(node)
            elif node.op == "call_module" and type(self.modules[node.target]) is nn.Linear:
                self._rewrite_pointwise_linear(node)
            elif node.op == "call_module" and runs_as_kernel(self.modules[node.target]):
                self._replace_pool(node)
            elif node.op == "call_function" and node.target in _FUNCTIONAL_CONVS:
                reason = "a functional conv2d call: only nn.Conv2d modules are converted"
                self.report.left.append(LeftConv(node.name, reason))
        self.gm.graph.lint()
        self.gm.delete_all_unused_submodules()
        self.gm.recompile()
        return self.report

    def _rewrite(self, conv_node: fx.Node) -> None:
        conv = self.modules[conv_node.target]
        reason = _unsupported(conv, conv_node)
        if reason is not None:
            self._leave(conv_node, reason)
            return
        chain, pattern = [conv_node], ["conv"]
        bn = activation = identity = stopped = None
        node = self._next(chain)
        if node is not None and self._is_eval_bn(node):
            bn = self.modules[node.target]
            node = self._extend(chain, pattern, node, "bn")
        if node is not None:
            identity = _residual_operand(node, chain[-1])
            if identity is not None:  # ResNet's add, before the activation
                node = self._extend(chain, pattern, node, "add")
        if node is not None:
            try:
                activation = self._activation(node, chain[-1])
            except ValueError as exc:  # a known activation with an unsupported parameter
                stopped = f"{node.name}: {exc}"
            if activation is not None:
                node = self._extend(chain, pattern, node, activation)
        before = identity is not None and activation is not None
        if node is not None and identity is None and activation is not None:
            identity = _residual_operand(node, chain[-1])
            if identity is not None:  # an add after the activation
                self._extend(chain, pattern, node, "add")
        order = "before_activation" if before else "after_activation"
        fused = Conv2d.from_torch(conv, bn, activation, residual_order=order)
        self._replace(chain, pattern, fused, conv_node.args[0], identity, stopped)

    def _replace(
        self,
        chain: list[fx.Node],
        pattern: list[str],
        fused: Conv2d,
        x: fx.Node,
        identity: fx.Node | None,
        stopped: str | None,
        nhwc_output: bool = False,
    ) -> None:
        """Run ``fused`` on ``x`` (and ``identity``) in place of the chain's ops, named after
        the module of its first node (its output permuted to NHWC with ``nhwc_output``), and
        report the chain."""
        name = self._module_name(chain[0].target)
        self.gm.add_submodule(name, fused)
        graph, last = self.gm.graph, chain[-1]
        with graph.inserting_before(last):
            replacement = graph.call_module(name, (x,) if identity is None else (x, identity))
            if nhwc_output:
                replacement = graph.call_function(torch.permute, (replacement, _TO_NHWC))
        last.replace_all_uses_with(replacement)
        for old in reversed(chain):
            graph.erase_node(old)
        self.report.fused.append(
            FusedChain(name, "+".join(pattern), tuple(map(_describe, chain)), stopped)
        )

    def _rewrite_pointwise_linear(self, linear_node: fx.Node) -> None:
        """An ``nn.Linear`` on the channels of an NHWC tensor (ConvNeXt's pointwise layers) as
        a fused 1x1 conv: with the activation after it, or, where the value goes back to NCHW,
        a per-channel multiply by a parameter (the layer scale) and a residual add."""
        linear = self.modules[linear_node.target]
        x = linear_node.args[0] if len(linear_node.args) == 1 else None
        if linear_node.kwargs or x is None or not self._is_nhwc(x):
            return  # not known to read the channels of an NHWC tensor: torch's Linear
        chain, pattern = [linear_node], ["linear"]
        activation = scale = identity = stopped = None
        node = self._next(chain)
        if node is not None:
            try:
                activation = self._activation(node, chain[-1])
            except ValueError as exc:
                stopped = f"{node.name}: {exc}"
            if activation is not None:
                node = self._extend(chain, pattern, node, activation)
        to_nchw = node is not None and _permute_dims(node, chain[-1]) == _TO_NCHW
        if to_nchw:
            node = self._extend(chain, pattern, node, "permute")
            if node is not None and activation is None:
                scale = self._channel_scale(node, chain[-1], linear.out_features)
                if scale is not None:
                    node = self._extend(chain, pattern, node, "mul")
            if node is not None:
                identity = _residual_operand(node, chain[-1])
                if identity is not None:
                    self._extend(chain, pattern, node, "add")
        try:
            fused = Conv2d.from_linear(linear, activation, None if scale is None else scale[1])
        except (TypeError, ValueError):
            return  # a dtype or size the kernel does not run: torch's Linear
        graph = self.gm.graph
        if _permute_dims(x, None) == _TO_NHWC:
            nchw = x.args[0]  # the permute undone: its input
        else:
            with graph.inserting_before(chain[-1]):
                nchw = graph.call_function(torch.permute, (x, _TO_NCHW))
        self._replace(chain, pattern, fused, nchw, identity, stopped, nhwc_output=not to_nchw)
        for unused in (x, None if scale is None else scale[0]):
            if unused is not None and not unused.users:
                graph.erase_node(unused)

    def _is_nhwc(self, node: fx.Node) -> bool:
        """Whether ``node`` is an NHWC tensor by the graph: a permute of NCHW to NHWC, past
        ops that keep the shape (LayerNorm over the channels, activations, eval identities)."""
        while (dims := _permute_dims(node, None)) is None:
            if not node.args or not isinstance(node.args[0], fx.Node) or not self._keeps_shape(node):
                return False
            node = node.args[0]
        return dims == _TO_NHWC

    def _keeps_shape(self, node: fx.Node) -> bool:
        """Whether ``node`` returns its first input's shape: a LayerNorm over the last dim
        (module or function), an activation (module, function or method; one the kernel runs
        or not), or an eval identity."""
        if _is_eval_identity(node, node.args[0], self.modules):
            return True
        if node.op == "call_module":
            if len(node.args) != 1 or node.kwargs:
                return False
            target, args, kwargs = self.modules[node.target], (), {}
            if isinstance(target, nn.LayerNorm):
                return len(target.normalized_shape) == 1
        elif node.op in ("call_function", "call_method"):
            target, args, kwargs = node.target, node.args[1:], node.kwargs
            if target is F.layer_norm:
                shape = args[0] if args else kwargs.get("normalized_shape")
                return isinstance(shape, (list, tuple)) and len(shape) == 1
        else:
            return False
        try:
            return activation_name(target, *args, **kwargs) is not None
        except ValueError:  # a known activation with a parameter the kernel does not run
            return True
        except TypeError:  # arguments no torch activation takes: not known to keep the shape
            return False

    def _channel_scale(
        self, node: fx.Node, value: fx.Node, channels: int
    ) -> tuple[fx.Node, torch.Tensor] | None:
        """``(the attribute's node, its tensor)`` when ``node`` is ``value`` times a parameter or
        buffer of one factor per channel (``[channels, 1, 1]``, as ConvNeXt's layer scale),
        else None."""
        if node.op != "call_function" or node.target not in _MULS or node.kwargs:
            return None
        if len(node.args) != 2 or value not in node.args:
            return None
        other = node.args[1] if node.args[0] is value else node.args[0]
        if not isinstance(other, fx.Node) or other.op != "get_attr":
            return None
        tensor = functools.reduce(getattr, other.target.split("."), self.gm)
        if not isinstance(tensor, torch.Tensor):
            return None
        if tuple(tensor.shape) not in ((channels, 1, 1), (1, channels, 1, 1)):
            return None
        return other, tensor

    def _leave(self, conv_node: fx.Node, reason: str) -> None:
        """Leave the conv to torch; fold the eval BatchNorm that alone reads it into a copy of
        its weights and bias (in float32, then the conv's dtype)."""
        conv = self.modules[conv_node.target]
        bn_node = self._sole_user(conv_node)
        plain_call = type(conv) is nn.Conv2d and len(conv_node.args) == 1 and not conv_node.kwargs
        if not plain_call or bn_node is None or not self._is_eval_bn(bn_node):
            self.report.left.append(LeftConv(conv_node.target, reason))
            return
        bn = self.modules[bn_node.target]
        folded = fuse_conv_bn_eval(copy.deepcopy(conv).float(), copy.deepcopy(bn).float())
        name = self._module_name(conv_node.target)
        self.gm.add_submodule(name, folded.to(conv.weight.dtype))
        with self.gm.graph.inserting_before(bn_node):
            replacement = self.gm.graph.call_module(name, conv_node.args)
        bn_node.replace_all_uses_with(replacement)
        self.gm.graph.erase_node(bn_node)
        self.gm.graph.erase_node(conv_node)
        self.report.left.append(LeftConv(name, reason, folded_bn=bn_node.target))

    def _replace_pool(self, node: fx.Node) -> None:
        torch_pool = self.modules[node.target]
        kind = TiledMaxPool2d if tiles_the_map(torch_pool) else MaxPool2d
        pool = kind.from_torch(torch_pool)
        self.gm.add_submodule(node.target, pool)  # every call of the module: the same pool
        self.modules[node.target] = pool
        self.report.pools.append(node.target)

    def _extend(
        self, chain: list[fx.Node], pattern: list[str], node: fx.Node, op: str
    ) -> fx.Node | None:
        """Add ``node`` (the op ``op``) to the chain; return the node after it, if it is
        the only one to read its value."""
        chain.append(node)
        pattern.append(op)
        return self._next(chain)

    def _next(self, chain: list[fx.Node]) -> fx.Node | None:
        """The node after the chain's last, past ops that are the identity in eval mode
        (dropout, torchvision's stochastic depth: EfficientNet's residual adds follow one),
        which join the chain and go with it; None where that value has several readers."""
        node = self._sole_user(chain[-1])
        while node is not None and _is_eval_identity(node, chain[-1], self.modules):
            chain.append(node)
            node = self._sole_user(node)
        return node

    def _sole_user(self, node: fx.Node) -> fx.Node | None:
        """The one node that reads ``node``'s value, or None (no user, or several)."""
        return next(iter(node.users)) if len(node.users) == 1 else None

    def _activation(self, node: fx.Node, value: fx.Node) -> str | None:
        """The epilogue name of ``node`` when it is an activation of ``value`` the kernel runs,
        else None. Raises ValueError for a known activation with a parameter it does not."""
        if not node.args or node.args[0] is not value or value in node.args[1:]:
            return None
        if node.op == "call_module":
            return activation_name(self.modules[node.target])
        if node.op in ("call_function", "call_method"):
            return activation_name(node.target, *node.args[1:], **node.kwargs)
        return None

    def _is_eval_bn(self, node: fx.Node) -> bool:
        return (
            node.op == "call_module"
            and folds_as_batch_norm(self.modules[node.target])
            and len(node.args) == 1
            and not node.kwargs
        )

    def _module_name(self, conv_name: str) -> str:
        """The conv's own name, where the conv module is called once; else a fresh one."""
        name, index = conv_name, 0
        while self.calls[conv_name] > 1 and (name == conv_name or name in self.names):
            name, index = f"{conv_name}_fused{index}", index + 1
        self.names.add(name)
        return name


def _unsupported(conv: nn.Conv2d, node: fx.Node) -> str | None:
    """Why the kernel cannot run this conv call, or None."""
    if type(conv) is not nn.Conv2d:
        return f"{type(conv).__name__} subclasses nn.Conv2d: its forward may differ"
    if len(node.args) != 1 or node.kwargs:
        return "called with other than one positional input"
    try:
        conv_limits(conv, conv.weight.dtype)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)


def _is_eval_identity(node: fx.Node, value: fx.Node, modules: dict[str, nn.Module]) -> bool:
    """Whether ``node`` returns ``value`` itself: a dropout module in eval mode, ``F.dropout``
    or torchvision's ``stochastic_depth`` traced with ``training=False``."""
    if not node.args or node.args[0] is not value:
        return False
    if node.op == "call_module":
        module = modules[node.target]
        return type(module) in _DROPOUTS and not module.training
    if node.op != "call_function":
        return False
    stochastic_depth = getattr(
        sys.modules.get("torchvision.ops.stochastic_depth"), "stochastic_depth", None
    )
    if node.target is F.dropout:
        position = 2  # (input, p, training, inplace)
    elif stochastic_depth is not None and node.target is stochastic_depth:
        position = 3  # (input, p, mode, training)
    else:
        return False
    args = node.args
    training = args[position] if len(args) > position else node.kwargs.get("training", True)
    return training is False


def _describe(node: fx.Node) -> str:
    return node.target if node.op == "call_module" else node.name


_ADDS = (operator.add, torch.add)
_FUNCTIONAL_CONVS = (F.conv2d, torch.conv2d)
_MULS = (operator.mul, torch.mul)
_TO_NHWC = (0, 2, 3, 1)
_TO_NCHW = (0, 3, 1, 2)


def _permute_dims(node: fx.Node, value: fx.Node | None) -> tuple | None:
    """The dims of a ``permute`` node (of ``value``, unless None), else None."""
    if not (node.op == "call_function" and node.target is torch.permute) and not (
        node.op == "call_method" and node.target == "permute"
    ):
        return None
    if not node.args or (value is not None and node.args[0] is not value):
        return None
    dims = node.args[1:] or (node.kwargs.get("dims"),)
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    return tuple(dims) if all(isinstance(d, int) for d in dims) else None


def _residual_operand(node: fx.Node, value: fx.Node) -> fx.Node | None:
    """The other operand when ``node`` is ``value + other`` of two tensors, else None.

    ``other`` is assumed to have the output's shape (no broadcast): a call with another shape
    raises a ValueError naming it. An in-place ``other.add_(value)`` is not fused (it writes
    ``other``, which others may read).
    """
    if node.op == "call_function" and node.target in _ADDS:
        if len(node.args) != 2 or any(k != "alpha" or v != 1 for k, v in node.kwargs.items()):
            return None
        a, b = node.args
    elif node.op == "call_method" and node.target in ("add", "add_"):
        if len(node.args) != 2 or node.kwargs or node.args[0] is not value:
            return None
        a, b = node.args
    else:
        return None
    other = b if a is value else a if b is value else None
    if not isinstance(other, fx.Node) or other is value or other.op == "get_attr":
        return None  # a constant, a parameter (usually broadcast), or value + value
    return other


def _fused_calls(gm: fx.GraphModule) -> list[tuple[fx.Node, Conv2d]]:
    modules = dict(gm.named_modules())
    return [
        (node, modules[node.target])
        for node in gm.graph.nodes
        if node.op == "call_module" and isinstance(modules[node.target], Conv2d)
    ]


@torch.no_grad()
def _to_fp8(gm: fx.GraphModule, report: OptimizeReport, calibration: Any, scaling: str) -> None:
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
        writer = _past_pools(node.args[0], modules, (MaxPool2d, TiledMaxPool2d))
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


def _past_pools(
    node: object, modules: dict[str, nn.Module], kinds: tuple[type, ...] = (MaxPool2d,)
) -> object:
    """The node whose values ``node`` holds: ``node`` itself, or the input of the chain of max
    pools of ``kinds`` whose output it is (``MaxPool2d`` alone by default: the one pool that
    takes e4m3 maps)."""
    while _calls(node, modules, kinds):
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
