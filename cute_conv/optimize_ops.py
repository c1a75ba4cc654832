"""``optimize``'s rewrites of the ops between the convs, and the graph edits they share.

``OpRewrites`` is the base of ``optimize``'s rewriter: the graph module, its module table,
the names taken and the report, and the rewrites of pools (max pools, global average pools:
``cute_conv.pooling``), LayerNorms over an NCHW tensor's channels
(``cute_conv.channel_norm``), channel shuffles (``cute_conv.shuffle``), squeeze-excitation
multiplies (``cute_conv.channel_scale``) and chains of growing concatenations
(``cute_conv.concat``). The conv chains are ``optimize``'s own.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter

import torch
import torch.nn.functional as F
from torch import fx, nn

from .channel_norm import ChannelLayerNorm
from .concat import (
    ConcatChain,
    cat_inputs,
    concat_buffer,
    concat_prefix,
    concat_slice,
    concat_write,
    conv_concat_buffer,
)
from .nn import Conv2d
from .optimize_report import OptimizeReport
from .pooling import MAP_DIMS, AvgPool2d, GlobalAvgPool2d, MaxPool2d, pool_for
from .shuffle import ChannelShuffle, ShufflePattern

__all__ = [
    "TO_NCHW",
    "TO_NHWC",
    "OpRewrites",
    "functional_pool",
    "global_mean",
    "is_layer_norm",
    "permute_dims",
]

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


class OpRewrites:
    """The graph module being rewritten and the rewrites of the ops between its convs."""

    def __init__(self, gm: fx.GraphModule) -> None:
        self.gm = gm
        self.modules = dict(gm.named_modules())
        self.report = OptimizeReport()
        # How many nodes call each module: a conv module called twice keeps its name for
        # neither of its fused replacements.
        self.calls = Counter(n.target for n in gm.graph.nodes if n.op == "call_module")
        self.names = set(self.modules)  # taken, by the model's modules or fused ones

    def _fresh_name(self, base: str) -> str:
        """A module name no module of the graph has."""
        name, index = base, 0
        while name in self.names:
            name, index = f"{base}{index}", index + 1
        self.names.add(name)
        return name

    def _sole_user(self, node: fx.Node, ignored: list[fx.Node] = ()) -> fx.Node | None:
        """The one node besides ``ignored`` that reads ``node``'s value, or None (no user, or
        several)."""
        users = [user for user in node.users if user not in ignored]
        return users[0] if len(users) == 1 else None

    def _replace_pool(self, node: fx.Node, pool: nn.Module) -> None:
        """The pool module ``node`` calls as ``pool`` (``pooling.pool_for``'s)."""
        self.gm.add_submodule(node.target, pool)  # every call of the module: the same pool
        self.modules[node.target] = pool
        self.report.pools.append(node.target)

    def _rewrite_channel_layer_norm(self, norm_node: fx.Node) -> None:
        """``permute(x, NHWC) -> LayerNorm over C -> permute back`` with nothing else reading
        the permutes (torchvision's ``LayerNorm2d``, which traces to ``F.layer_norm``:
        ConvNeXt's stem and downsampling layers; or an ``nn.LayerNorm`` module there) as one
        ``ChannelLayerNorm`` of ``x``; left as it is where the pattern or the dtypes and
        channels do not fit."""
        to_nhwc = norm_node.args[0] if norm_node.args else None
        back = self._sole_user(norm_node)
        if (
            not isinstance(to_nhwc, fx.Node)
            or permute_dims(to_nhwc, None) != TO_NHWC
            or len(to_nhwc.users) != 1
            or back is None
            or permute_dims(back, norm_node) != TO_NCHW
        ):
            return
        weight = bias = None  # their get_attr nodes (the functional form's)
        if norm_node.op == "call_module":
            module = self.modules[norm_node.target]
            if len(norm_node.args) != 1 or norm_node.kwargs:
                return
            shape, affine, eps = module.normalized_shape, [module.weight, module.bias], module.eps
        else:
            try:
                shape, weight, bias, eps = _layer_norm_args(*norm_node.args[1:], **norm_node.kwargs)
            except TypeError:
                return
            if any(a is not None and (not isinstance(a, fx.Node) or a.op != "get_attr")
                   for a in (weight, bias)):  # fmt: skip
                return  # an affine computed in the graph
            affine = [None if a is None else functools.reduce(getattr, a.target.split("."), self.gm)
                      for a in (weight, bias)]  # fmt: skip
        if not isinstance(shape, (list, tuple)) or len(shape) != 1:
            return
        present = [a for a in affine if a is not None]
        try:
            (dtype,) = {a.dtype for a in present} or {torch.bfloat16}
            device = present[0].device if present else None
            norm = ChannelLayerNorm(int(shape[0]), float(eps), *affine, dtype=dtype, device=device)
        except (TypeError, ValueError):
            return  # a float32 affine, or channels the grouped kernel does not take
        # Named after the LayerNorm module (called, or traced through), if any.
        if norm_node.op == "call_module":
            owner = norm_node.target
        else:
            owner = weight.target.rpartition(".")[0] if weight is not None else ""
        base = f"{owner}_channel_norm" if owner else "channel_norm"
        self._replace_call(back, norm, base, (to_nhwc.args[0],), self.report.channel_norms)
        for old in (norm_node, to_nhwc, weight, bias):
            if old is not None and not old.users:
                self.gm.graph.erase_node(old)

    def _replace_function(
        self, node: fx.Node, module: nn.Module, base: str, names: list[str]
    ) -> None:
        """A functional pool (``global_mean``, ``functional_pool``) as ``module``, called
        on its input, named from ``base`` and listed in ``names``."""
        self._replace_call(node, module, base, (node.args[0],), names)

    def _replace_call(
        self, node: fx.Node, module: nn.Module, base: str, args: tuple, names: list[str]
    ) -> None:
        """``node`` as a call of ``module`` on ``args``, named from ``base`` and listed in
        ``names``."""
        name = self._fresh_name(base)
        self.gm.add_submodule(name, module)
        self.modules[name] = module
        with self.gm.graph.inserting_before(node):
            replacement = self.gm.graph.call_module(name, args)
        node.replace_all_uses_with(replacement)
        self.gm.graph.erase_node(node)
        names.append(name)

    def _is_global_pool(self, node: fx.Node) -> bool:
        """Whether ``node`` calls a ``GlobalAvgPool2d`` (what the pools became) on one input."""
        if node.op != "call_module" or len(node.args) != 1 or node.kwargs:
            return False
        return isinstance(self.gm.get_submodule(node.target), GlobalAvgPool2d)

    def _replace_shuffle(self, shuffle: ShufflePattern) -> None:
        """A channel shuffle (of the tensors of the concatenation before it, if it is one) as
        one ``ChannelShuffle``; the shape reads, and the concatenation, that nothing else
        reads go with it."""
        graph = self.gm.graph
        *rest, last = shuffle.nodes
        unread = {a: None for node in shuffle.nodes for a in node.args if isinstance(a, fx.Node)}
        self._replace_call(last, ChannelShuffle(shuffle.groups), "channel_shuffle",
                           shuffle.inputs, self.report.shuffles)  # fmt: skip
        for old in reversed(rest):
            graph.erase_node(old)
        while unread:
            node = next(iter(unread))
            del unread[node]
            shape_read = node.op in ("call_function", "call_method") and node.target in (
                operator.getitem, operator.floordiv, getattr, "size"
            )  # fmt: skip
            if node.users or not (shape_read or cat_inputs(node) is not None):
                continue
            unread.update((a, None) for a in node.args if isinstance(a, fx.Node))
            graph.erase_node(node)

    def _keep_in_one_buffer(self, chain: ConcatChain) -> None:
        """A chain of growing concatenations (``cute_conv.concat``) as one buffer: its first
        tensor copied in where the first concatenation was, each piece where the next one
        was (or written there by its conv, ``_hand_slice``), each concatenation a prefix
        view of it."""
        graph, after = self.gm.graph, sum(chain.channels)
        order = {node: index for index, node in enumerate(graph.nodes)}
        buffer = first_buffer = None
        in_place = 0
        for index, cat in enumerate(chain.cats):
            with graph.inserting_before(cat):
                if buffer is None:
                    buffer = first_buffer = graph.call_function(concat_buffer, (chain.first, after))
                else:
                    after -= chain.channels[index - 1]
                    piece = chain.pieces[index - 1]
                    # The piece's conv must come after the buffer is made.
                    if order[piece] > order[chain.cats[0]] and self._writes_in_place(
                        piece, chain.cats
                    ):
                        self._hand_slice(piece, first_buffer, after)
                        in_place += 1
                    buffer = graph.call_function(concat_write, (buffer, piece, after))
                view = graph.call_function(concat_prefix, (buffer, after))
            cat.replace_all_uses_with(view)
            graph.erase_node(cat)
        self.report.concats.append(
            f"{chain.first.name}: {len(chain.cats)} concatenations, {in_place} of "
            f"{len(chain.pieces)} pieces written in place by their convs"
        )

    def _write_concatenation(self, cat: fx.Node) -> None:
        """A concatenation along dim 1 of fused convs' outputs (Inception's and GoogLeNet's
        branches, SqueezeNet's expands) made in one channels_last buffer, allocated before
        the first conv that writes its channels of it (``_hand_slice``: those whose output
        only the concatenation reads); the other pieces, of channels the graph says
        (``_piece_channels``), are copied in where it was."""
        graph = self.gm.graph
        pieces = cat_inputs(cat) or ()
        channels = [self._piece_channels(piece) for piece in pieces]
        if len(pieces) < 2 or None in channels or len(set(pieces)) != len(pieces):
            return
        writers = [piece for piece in pieces if self._writes_in_place(piece, (cat,))]
        if not writers:
            return
        order = {node: index for index, node in enumerate(graph.nodes)}
        first = min(writers, key=order.__getitem__)
        conv = self.gm.get_submodule(first.target)
        geometry = (conv.kernel_size, conv.stride, conv._padding, conv.dilation)
        with graph.inserting_before(first):
            buffer = graph.call_function(
                conv_concat_buffer, (first.args[0], sum(channels), *geometry, conv.output_dtype)
            )
        after = sum(channels)
        value = buffer
        for piece, piece_channels in zip(pieces, channels, strict=True):
            after -= piece_channels
            if piece in writers:
                self._hand_slice(piece, buffer, after)
            with graph.inserting_before(cat):
                value = graph.call_function(concat_write, (value, piece, after))
        cat.replace_all_uses_with(value)
        graph.erase_node(cat)
        self.report.concat_writes.append(
            f"{cat.name}: {len(writers)} of {len(pieces)} pieces written in place by their convs"
        )

    def _piece_channels(self, node: fx.Node) -> int | None:
        """The channels of a concatenation's piece where the graph says them: a fused
        module's output, a pool's (its input's), a concatenation made by
        ``_write_concatenation`` (Inception-v3's B and D blocks pool the block before, its E
        blocks concatenate pairs); else None."""
        if node.op == "call_module":
            module = self.gm.get_submodule(node.target)
            if isinstance(module, (MaxPool2d, AvgPool2d)) and isinstance(node.args[0], fx.Node):
                return self._piece_channels(node.args[0])
            return self._conv_channels(node)
        while node.op == "call_function" and node.target is concat_write:
            node = node.args[0]
        if node.op == "call_function" and node.target is conv_concat_buffer:
            return node.args[1]
        return None

    def _writes_in_place(self, piece: fx.Node, readers: tuple[fx.Node, ...]) -> bool:
        """Whether ``piece`` is a fused conv's call, not yet given an ``out=``, that only
        ``readers`` read: its conv may write it into its channels of a buffer."""
        return (
            self._conv_channels(piece) is not None
            and "out" not in piece.kwargs
            and all(user in readers for user in piece.users)
        )

    def _hand_slice(self, piece: fx.Node, buffer: fx.Node, channels_after: int) -> None:
        """Hand ``piece``'s fused conv its channels of ``buffer`` (those that end
        ``channels_after`` before its last) as ``out=``: ``concat_write`` then has nothing to
        copy."""
        with self.gm.graph.inserting_before(piece):
            part = self.gm.graph.call_function(
                concat_slice, (buffer, self._conv_channels(piece), channels_after)
            )
        piece.kwargs = {**piece.kwargs, "out": part}

    def _conv_channels(self, node: fx.Node) -> int | None:
        """The output channels of a fused module's call, else None."""
        module = self.gm.get_submodule(node.target) if node.op == "call_module" else None
        return module.out_channels if isinstance(module, Conv2d) else None

    def _reads_in_place(self, reader: fx.Node, value: fx.Node) -> bool:
        """Whether ``reader`` is a fused module's call on ``value`` alone (it reads its input,
        a view of a buffer written after, without writing it)."""
        fused = self._conv_channels(reader) is not None
        return fused and reader.args == (value,) and not reader.kwargs


def global_mean(node: fx.Node) -> GlobalAvgPool2d | None:
    """The ``GlobalAvgPool2d`` computing ``node`` where it is ``F.adaptive_avg_pool2d(x, 1)``
    or a mean over the map's two dims (``x.mean((2, 3), keepdim)``, ``torch.mean``; no
    ``dtype``), else None."""
    try:
        if node.op == "call_function" and node.target is F.adaptive_avg_pool2d:
            x, size = _adaptive_pool_args(*node.args, **node.kwargs)
            size = tuple(size) if isinstance(size, (list, tuple)) else (size, size)
            return GlobalAvgPool2d() if isinstance(x, fx.Node) and size == (1, 1) else None
        if (node.op == "call_method" and node.target == "mean") or (
            node.op == "call_function" and node.target is torch.mean
        ):
            x, dims, keepdim = _mean_args(*node.args, **node.kwargs)
            if not isinstance(x, fx.Node) or not isinstance(dims, (list, tuple)):
                return None
            if tuple(dims) in MAP_DIMS and isinstance(keepdim, bool):
                return GlobalAvgPool2d(tuple(dims), keepdim)
    except TypeError:  # arguments these ops do not take as written here
        return None
    return None


def functional_pool(node: fx.Node) -> nn.Module | None:
    """The pool module computing ``node`` where it is ``F.max_pool2d`` without indices
    (Inception-v3's, an FPN's last level) or ``F.avg_pool2d`` (Inception-v3's), else None."""
    if node.op != "call_function" or node.target not in _POOL_ARGS:
        return None
    try:
        x, torch_pool = _POOL_ARGS[node.target](*node.args, **node.kwargs)
    except TypeError:  # arguments it does not take as written here
        return None
    if not isinstance(x, fx.Node):
        return None
    return pool_for(torch_pool)


def _constant_window(*args: object) -> None:
    """A TypeError where a window argument is computed in the graph."""
    values = [v for a in args for v in (a if isinstance(a, (tuple, list)) else (a,))]
    if any(isinstance(v, fx.Node) for v in values):
        raise TypeError("a pool window computed in the graph")


def _max_pool_args(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # noqa: A002
    return_indices=False,
):  # fmt: skip
    """``F.max_pool2d``'s input and the ``nn.MaxPool2d`` of its other arguments (a TypeError
    for non-constant ones)."""
    args = (kernel_size, stride, padding, dilation)
    _constant_window(*args, ceil_mode, return_indices)
    return input, nn.MaxPool2d(*args, ceil_mode=ceil_mode, return_indices=return_indices)


def _avg_pool_args(
    input, kernel_size, stride=None, padding=0, ceil_mode=False,  # noqa: A002
    count_include_pad=True, divisor_override=None,
):  # fmt: skip
    """``F.avg_pool2d``'s input and the ``nn.AvgPool2d`` of its other arguments (a TypeError
    for non-constant ones)."""
    args = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    _constant_window(*args)
    return input, nn.AvgPool2d(*args)


_POOL_ARGS = {F.max_pool2d: _max_pool_args, F.avg_pool2d: _avg_pool_args}


def _adaptive_pool_args(input, output_size):  # noqa: A002 - torch's names
    return input, output_size


def _mean_args(input, dim, keepdim=False):  # noqa: A002 - torch's names
    return input, dim, keepdim


def is_layer_norm(node: fx.Node, modules: dict[str, nn.Module]) -> bool:
    """Whether ``node`` calls ``F.layer_norm`` or an ``nn.LayerNorm`` module (not a subclass,
    whose forward may differ)."""
    if node.op == "call_function":
        return node.target is F.layer_norm
    return node.op == "call_module" and type(modules[node.target]) is nn.LayerNorm


def _layer_norm_args(normalized_shape, weight=None, bias=None, eps=1e-5):
    """``F.layer_norm``'s arguments after its input, as a traced call passes them (a
    TypeError for others)."""
    return normalized_shape, weight, bias, eps


def permute_dims(node: fx.Node, value: fx.Node | None) -> tuple | None:
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
