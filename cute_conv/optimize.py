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

A grouped conv without activation or add whose value goes to NHWC, through a ``LayerNorm``
over its channels, into Linears alone (ConvNeXt's depthwise conv -> LayerNorm -> Linear)
normalizes its output in its kernel (``Conv2d.normalize_channels``); the LayerNorm's weight and
bias fold (in float32) into those Linears' weights and biases, and the LayerNorm goes. A
LayerNorm over the channels of an NCHW value (a permute to NHWC, ``F.layer_norm`` over C, the
permute back: torchvision's ``LayerNorm2d``, ConvNeXt's stem and downsampling norms) becomes a
``ChannelLayerNorm``: the grouped kernel's norm on an identity depthwise conv, then the affine.

Grouped and depthwise convs fuse the same way, on the grouped kernel (within
``cute_conv.grouped_limits``) or on cuDNN's grouped conv (``cute_conv.nn.Conv2d`` chooses per
call). Convs the kernels cannot run (float32, non-zero padding
modes, geometry out of the limits, subclasses of nn.Conv2d) stay torch, and the report says
why; a BatchNorm right after such a conv (an ``nn.Conv2d`` itself) is folded into a copy of
its weights and bias, as ``torch.compile``'s freezing folds it, so that it costs no kernel of
its own.

Max and average pools (``cute_conv.pooling``; torch's channels_last pool kernels are slow): max
pools whose windows tile the map (VGG's 2x2 stride-2) become ``TiledMaxPool2d``, the others
without indices (ResNet's 3x3 stride-2) ``MaxPool2d``, ``nn.AvgPool2d`` and ``F.avg_pool2d``
(DenseNet's transitions, Inception's branches) ``AvgPool2d``: one kernel pass each (an
``amax`` for a tiling pool's input the kernel does not take). Global average pools
(``nn.AdaptiveAvgPool2d(1)``, ``F.adaptive_avg_pool2d(x, 1)``, ``x.mean((2, 3), keepdim)``:
squeeze-excitation blocks, classifier heads) become ``GlobalAvgPool2d``, one batched GEMV
(torch's channels_last mean is slow too). ShuffleNet's channel shuffle of a concatenation
(``channel_shuffle(torch.cat(branches, 1), g)``, torchvision's form) becomes one
``ChannelShuffle``: one copy, channels_last, where torch's leaves the value NCHW-contiguous.
Growing concatenations read only by fused modules (DenseNet's dense blocks) share one buffer
(``cute_conv.concat``): each value copied into it once, or written there by the fused conv
that makes it (its ``out=``), each concatenation a prefix view that the grouped kernel reads in
place. A lone concatenation of fused convs' outputs (Inception's and GoogLeNet's branches,
SqueezeNet's expands; pools and concatenations made so among its pieces are copied in) is
one buffer that those convs write their channels of.

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
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from .channel_norm import ChannelLayerNorm
from .channel_scale import ChannelScale, match_excitation_scale
from .concat import cat_inputs, concat_chains
from .delayed_scaling import DelayedScales
from .fold import activation_name, batch_norm_channels, folds_as_batch_norm
from .grouped import grouped_limits
from .nn import Conv2d, conv_limits
from .optimize_fp8 import FP8_MIN_CHANNELS, FP8_SCALINGS, resolve_scaling, to_fp8
from .optimize_ops import (
    TO_NCHW,
    TO_NHWC,
    OpRewrites,
    functional_pool,
    global_mean,
    is_layer_norm,
    permute_dims,
)
from .optimize_report import FusedChain, LeftConv, OptimizeReport
from .pooling import AvgPool2d, GlobalAvgPool2d, MaxPool2d, averages_the_map, pool_for
from .problem import Padding, Pair, output_hw
from .shuffle import ChannelShuffle, match_channel_shuffle

__all__ = [
    "FP8_MIN_CHANNELS",
    "FP8_SCALINGS",
    "FusedChain",
    "LeftConv",
    "OptimizeReport",
    "optimize",
]


class _Tracer(fx.Tracer):
    """``symbolic_trace``'s tracer, with cute_conv modules kept whole (an optimized model traces
    again), and torchvision's ``FrozenBatchNorm2d`` too (so that it folds as a BatchNorm)."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        ours = isinstance(
            m,
            (Conv2d, ChannelLayerNorm, ChannelScale, ChannelShuffle, MaxPool2d, AvgPool2d,
             GlobalAvgPool2d, DelayedScales),
        )  # fmt: skip
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
    scaling = resolve_scaling(dtype, scaling, calibration)
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
        to_fp8(gm, report, calibration, scaling)
    gm.eval()  # the module containers fx made, and the fused modules, as the model was
    gm.cute_conv_report = report
    if verbose:
        print(report)
    return gm


class _Rewriter(OpRewrites):
    """Finds the fusable chains of one GraphModule's graph and replaces them, and the ops
    between them that ``OpRewrites`` rewrites."""

    def run(self) -> OptimizeReport:
        for node in list(self.gm.graph.nodes):
            if node.op == "call_module" and isinstance(self.modules[node.target], nn.Conv2d):
                self._rewrite(node)
            elif node.op == "call_module" and type(self.modules[node.target]) is nn.Linear:
                self._rewrite_pointwise_linear(node)
            elif node.op == "call_module" and (pool := pool_for(self.modules[node.target])):
                self._replace_pool(node, pool)
            elif node.op == "call_module" and averages_the_map(self.modules[node.target]):
                self.gm.add_submodule(node.target, GlobalAvgPool2d())  # every call of it
                self.report.avg_pools.append(node.target)
            elif node.op == "call_module" and self._is_eval_bn(node):
                self._rewrite_batch_norm(node)
            elif is_layer_norm(node, self.modules):
                self._rewrite_channel_layer_norm(node)
            elif (pool := global_mean(node)) is not None:
                self._replace_function(node, pool, "global_avg_pool", self.report.avg_pools)
            elif (pool := functional_pool(node)) is not None:
                base = "avg_pool" if isinstance(pool, AvgPool2d) else "max_pool"
                self._replace_function(node, pool, base, self.report.pools)
            elif (shuffle := match_channel_shuffle(node)) is not None:
                self._replace_shuffle(shuffle)
            elif (operands := match_excitation_scale(node, self._is_global_pool)) is not None:
                self._replace_call(node, ChannelScale(), "channel_scale", operands,
                                   self.report.channel_scales)  # fmt: skip
            elif node.op == "call_function" and node.target in _FUNCTIONAL_CONVS:
                reason = "a functional conv2d call: only nn.Conv2d modules are converted"
                self.report.left.append(LeftConv(node.name, reason))
        # After the loop: a concatenation's readers are fused modules by now.
        for chain in concat_chains(self.gm.graph, self._conv_channels, self._reads_in_place):
            self._keep_in_one_buffer(chain)
        for node in [node for node in self.gm.graph.nodes if cat_inputs(node) is not None]:
            self._write_concatenation(node)
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
        bn = identity = None
        # Ops that read only the conv's shape (an FPN's ``lateral.shape[-2:]`` for the
        # upsampling it then adds) do not stop the chain: they get the shape from its input.
        shape_reads = [user for user in conv_node.users if _reads_shape(user, conv_node)]
        node = self._next(chain, ignored=shape_reads)
        if node is not None and self._is_eval_bn(node):
            bn = self.modules[node.target]
            node = self._extend(chain, pattern, node, "bn")
        if node is not None:
            identity = _residual_operand(node, chain[-1])
            if identity is not None:  # ResNet's add, before the activation
                node = self._extend(chain, pattern, node, "add")
        activation, node, stopped = self._take_activation(chain, pattern, node)
        before = identity is not None and activation is not None
        if node is not None and identity is None and activation is not None:
            identity = _residual_operand(node, chain[-1])
            if identity is not None:  # an add after the activation
                self._extend(chain, pattern, node, "add")
        order = "before_activation" if before else "after_activation"
        fused = Conv2d.from_torch(conv, bn, activation, residual_order=order)
        if len(chain) > 1:
            self._read_shape_from_input(conv_node, shape_reads, fused)
        if conv.groups != 1 and activation is None and identity is None and node is not None:
            if self._fold_channel_norm(node, chain[-1], fused):
                pattern.append("layer_norm")
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
                replacement = graph.call_function(torch.permute, (replacement, TO_NHWC))
        last.replace_all_uses_with(replacement)
        for old in reversed(chain):
            graph.erase_node(old)
        self.report.fused.append(
            FusedChain(name, "+".join(pattern), tuple(map(_describe, chain)), stopped)
        )

    def _rewrite_batch_norm(self, bn_node: fx.Node) -> None:
        """An eval BatchNorm2d that no conv chain took (after another op: DenseNet's
        concatenations, pre-activation blocks), with the activation after it, as one pass of
        the grouped kernel: a depthwise 1x1 conv of ones whose epilogue is the folded
        BatchNorm and the activation (``bn`` or ``bn+<activation>``). Left where its dtype or
        channels do not fit the kernel."""
        if not bn_node.users:  # taken by a conv chain (erased), or read by nothing
            return
        bn = self.modules[bn_node.target]
        if type(bn) is nn.SyncBatchNorm:  # any rank: the kernel takes NCHW alone
            return
        chain, pattern = [bn_node], ["bn"]
        activation, _, stopped = self._take_activation(chain, pattern, self._next(chain))
        try:
            fused = Conv2d.from_torch(_ones_depthwise_conv(bn), bn, activation)
        except (TypeError, ValueError):
            return  # a float32 BatchNorm, or channels the grouped kernel does not take
        self._replace(chain, pattern, fused, bn_node.args[0], None, stopped)

    def _read_shape_from_input(
        self, conv_node: fx.Node, reads: list[fx.Node], fused: Conv2d
    ) -> None:
        """Give ``reads`` (``.shape`` / ``.size()`` of the conv's output, which the fused chain
        replaces) the conv's output shape computed from its input (``_conv_output_shape``)."""
        graph = self.gm.graph
        geometry = (fused.out_channels, fused.kernel_size, fused.stride, fused._padding,
                    fused.dilation)  # fmt: skip
        for read in reads:
            with graph.inserting_before(read):
                shape = graph.call_function(_conv_output_shape, (conv_node.args[0], *geometry))
                if len(read.args) == 2 and read.op == "call_method":  # .size(dim)
                    shape = graph.call_function(operator.getitem, (shape, read.args[1]))
            read.replace_all_uses_with(shape)
            graph.erase_node(read)

    def _rewrite_pointwise_linear(self, linear_node: fx.Node) -> None:
        """An ``nn.Linear`` on the channels of an NHWC tensor (ConvNeXt's pointwise layers) as
        a fused 1x1 conv: with the activation after it, or, where the value goes back to NCHW,
        a per-channel multiply by a parameter (the layer scale) and a residual add."""
        linear = self.modules[linear_node.target]
        x = linear_node.args[0] if len(linear_node.args) == 1 else None
        if linear_node.kwargs or x is None or not self._is_nhwc(x):
            return  # not known to read the channels of an NHWC tensor: torch's Linear
        chain, pattern = [linear_node], ["linear"]
        scale = identity = None
        activation, node, stopped = self._take_activation(chain, pattern, self._next(chain))
        to_nchw = node is not None and permute_dims(node, chain[-1]) == TO_NCHW
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
        if permute_dims(x, None) == TO_NHWC:
            nchw = x.args[0]  # the permute undone: its input
        else:
            with graph.inserting_before(chain[-1]):
                nchw = graph.call_function(torch.permute, (x, TO_NCHW))
        self._replace(chain, pattern, fused, nchw, identity, stopped, nhwc_output=not to_nchw)
        for unused in (x, None if scale is None else scale[0]):
            if unused is not None and not unused.users:
                graph.erase_node(unused)

    def _fold_channel_norm(self, node: fx.Node, value: fx.Node, fused: Conv2d) -> bool:
        """Where ``node`` permutes ``value`` to NHWC and a ``LayerNorm`` over its channels alone
        reads that, and the LayerNorm's readers are all Linears called there alone: fold the
        LayerNorm's affine into the Linears, drop it, let ``fused`` normalize, return True
        (False where the pattern does not hold: nothing changed)."""
        norm_node = self._sole_user(node) if permute_dims(node, value) == TO_NHWC else None
        if norm_node is None or norm_node.op != "call_module" or len(norm_node.args) != 1:
            return False
        norm = self.modules[norm_node.target]
        if type(norm) is not nn.LayerNorm or tuple(norm.normalized_shape) != (fused.out_channels,):
            return False
        readers = list(norm_node.users)
        linears = [self.modules[r.target] if r.op == "call_module" else None for r in readers]
        if not readers or not all(
            type(linear) is nn.Linear and self.calls[reader.target] == 1
            and reader.args == (norm_node,) and not reader.kwargs
            for reader, linear in zip(readers, linears, strict=True)
        ):  # fmt: skip
            return False
        try:
            fused.normalize_channels(float(norm.eps))
        except ValueError:
            return False
        for reader, linear in zip(readers, linears, strict=True):
            folded = _linear_after_norm(linear, norm)
            self.gm.add_submodule(reader.target, folded)
            self.modules[reader.target] = folded
        norm_node.replace_all_uses_with(node)
        self.gm.graph.erase_node(norm_node)
        return True

    def _is_nhwc(self, node: fx.Node) -> bool:
        """Whether ``node`` is an NHWC tensor by the graph: a permute of NCHW to NHWC, past
        ops that keep the shape (LayerNorm over the channels, activations, eval identities)."""
        while (dims := permute_dims(node, None)) is None:
            if (
                not node.args
                or not isinstance(node.args[0], fx.Node)
                or not self._keeps_shape(node)
            ):
                return False
            node = node.args[0]
        return dims == TO_NHWC

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

    def _extend(
        self, chain: list[fx.Node], pattern: list[str], node: fx.Node, op: str
    ) -> fx.Node | None:
        """Add ``node`` (the op ``op``) to the chain; return the node after it, if it is
        the only one to read its value."""
        chain.append(node)
        pattern.append(op)
        return self._next(chain)

    def _next(self, chain: list[fx.Node], ignored: list[fx.Node] = ()) -> fx.Node | None:
        """The node after the chain's last, past ops that are the identity in eval mode
        (dropout, torchvision's stochastic depth: EfficientNet's residual adds follow one),
        which join the chain and go with it; None where that value has several readers
        (besides ``ignored``)."""
        node = self._sole_user(chain[-1], ignored)
        while node is not None and _is_eval_identity(node, chain[-1], self.modules):
            chain.append(node)
            node = self._sole_user(node)
        return node

    def _take_activation(
        self, chain: list[fx.Node], pattern: list[str], node: fx.Node | None
    ) -> tuple[str | None, fx.Node | None, str | None]:
        """Extend the chain with ``node`` where it is an activation of the chain's value that
        the kernel runs. Returns ``(its epilogue name or None, the node after the chain, why a
        known activation with an unsupported parameter stopped it or None)``."""
        if node is None:
            return None, None, None
        try:
            activation = self._activation(node, chain[-1])
        except ValueError as exc:  # a known activation with an unsupported parameter
            return None, node, f"{node.name}: {exc}"
        if activation is None:
            return None, node, None
        return activation, self._extend(chain, pattern, node, activation), None

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


def _ones_depthwise_conv(bn: nn.Module) -> nn.Conv2d:
    """A depthwise 1x1 conv of ones over ``bn``'s channels, in its dtype and on its device
    (frozen): with ``bn`` folded into its epilogue, the BatchNorm. A ValueError where the
    grouped kernel does not take the channels."""
    channels = batch_norm_channels(bn)
    grouped_limits(channels, channels, channels)
    stats = bn.running_mean
    conv = nn.Conv2d(channels, channels, 1, groups=channels, bias=False, device=stats.device,
                     dtype=stats.dtype)  # fmt: skip
    nn.init.ones_(conv.weight)
    return conv.requires_grad_(False).eval()


def _reads_shape(user: fx.Node, node: fx.Node) -> bool:
    """Whether ``user`` reads only ``node``'s shape: ``node.shape``, ``node.size()`` or
    ``node.size(dim)``."""
    if user.op == "call_function" and user.target is getattr:
        return user.args == (node, "shape") and not user.kwargs
    return (
        user.op == "call_method"
        and user.target == "size"
        and user.args[:1] == (node,)
        and len(user.args) <= 2
        and not user.kwargs
    )


def _conv_output_shape(
    x: torch.Tensor, out_channels: int, kernel_size: Pair, stride: Pair, padding: Padding,
    dilation: Pair,
) -> torch.Size:  # fmt: skip
    """The shape of a conv's output on the NCHW ``x``."""
    n, _, h, w = x.shape
    p, q = output_hw((h, w), kernel_size, stride, padding, dilation)
    return torch.Size((n, out_channels, p, q))


def _linear_after_norm(linear: nn.Linear, norm: nn.LayerNorm) -> nn.Linear:
    """A copy of ``linear`` that computes ``linear(norm.weight * y + norm.bias)`` from ``y``
    (folded in float32, stored in the Linear's dtype)."""
    weight = linear.weight.detach().float()
    bias = torch.zeros(linear.out_features, device=weight.device)
    if linear.bias is not None:
        bias = linear.bias.detach().float()
    if norm.bias is not None:
        bias = bias + weight @ norm.bias.detach().float()
    if norm.weight is not None:
        weight = weight * norm.weight.detach().float()
    folded = copy.deepcopy(linear)
    with torch.no_grad():
        folded.weight.copy_(weight)
        if folded.bias is None:
            folded.bias = nn.Parameter(bias.to(linear.weight.dtype))
        folded.bias.copy_(bias)
    return folded


def _describe(node: fx.Node) -> str:
    return node.target if node.op == "call_module" else node.name


_ADDS = (operator.add, torch.add)
_FUNCTIONAL_CONVS = (F.conv2d, torch.conv2d)
_MULS = (operator.mul, torch.mul)


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
