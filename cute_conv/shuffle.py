"""``ChannelShuffle``: ShuffleNet's channel shuffle kept channels_last, for ``optimize``.

torchvision's ``channel_shuffle`` (``x.view(n, g, c // g, h, w).transpose(1, 2).contiguous()
.view(n, -1, h, w)``) turns a channels_last input into an NCHW-contiguous output: one copy
there, and another where the next fused conv (channels_last) reads it. ShuffleNetV2 shuffles
the concatenation of its two branches, a third pass. ``ChannelShuffle`` takes the concatenated
tensors themselves and stacks their NHWC views along a new last dim: concatenation and shuffle
in one copy, its output channels_last.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

import torch
from torch import fx, nn

from .concat import cat_inputs

__all__ = ["ChannelShuffle", "ShufflePattern", "match_channel_shuffle"]

_TO_NHWC = (0, 2, 3, 1)
_TO_NCHW = (0, 3, 1, 2)


class ChannelShuffle(nn.Module):
    """``channel_shuffle(torch.cat(inputs, 1), groups)``: output channel ``i * groups + j`` is
    channel ``j * (C / groups) + i`` of the concatenation, C its channels. The output is
    channels_last (whatever the inputs' memory format), computed in one copy where the
    inputs are ``groups`` tensors of one shape (ShuffleNetV2's), else in the concatenation and
    one copy.

    Args:
        groups: the shuffle's groups, an int >= 1.

    Raises:
        TypeError, ValueError: ``groups`` not an int >= 1 (constructor); on a call, inputs
            that are not 4-D tensors that concatenate along dim 1 into channels divisible
            by ``groups``.
    """

    def __init__(self, groups: int) -> None:
        super().__init__()
        if not isinstance(groups, int) or isinstance(groups, bool):
            raise TypeError(f"groups must be an int, got {type(groups).__name__}")
        if groups < 1:
            raise ValueError(f"groups must be >= 1, got {groups}")
        self.groups = groups

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if not inputs or any(not isinstance(t, torch.Tensor) or t.dim() != 4 for t in inputs):
            raise ValueError("ChannelShuffle takes one or more 4-D [N, C, H, W] tensors")
        if len(inputs) == self.groups and len({t.shape for t in inputs}) == 1:
            stacked = torch.stack([t.permute(_TO_NHWC) for t in inputs], dim=-1)
            return stacked.flatten(3).permute(_TO_NCHW)
        x = inputs[0] if len(inputs) == 1 else torch.cat(inputs, 1)
        n, c, h, w = x.shape
        if c % self.groups:
            raise ValueError(f"ChannelShuffle: {c} channels do not split into {self.groups} groups")
        groups = x.permute(_TO_NHWC).reshape(n, h, w, self.groups, c // self.groups)
        return groups.transpose(3, 4).reshape(n, h, w, c).permute(_TO_NCHW)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"


@dataclass(frozen=True)
class ShufflePattern:
    """A channel shuffle found in a graph: the tensors it shuffles the concatenation of (the
    shuffled value alone where that is not a ``torch.cat`` along dim 1), its groups, and its
    nodes (the last the shuffled value; the concatenation not among them: it goes where
    nothing else reads it)."""

    inputs: tuple[fx.Node, ...]
    groups: int
    nodes: tuple[fx.Node, ...]


def match_channel_shuffle(node: fx.Node) -> ShufflePattern | None:
    """The channel shuffle whose last node is ``node``: ``x.view(n, g, c // g, h, w)``, then
    ``transpose(1, 2)``, ``.contiguous()`` and ``.view(n, c, h, w)`` (or ``-1`` for ``c``),
    with ``n``, ``c``, ``h``, ``w`` read from ``x.size()`` or ``x.shape``, a constant int
    ``g``, and each intermediate value read by the next op alone. None where ``node`` ends no
    such pattern."""
    if not _is_method(node, "view") or len(node.args) != 5 or node.kwargs:
        return None
    contiguous = node.args[0]
    if not _is_method(contiguous, "contiguous") or len(contiguous.args) != 1:
        return None
    transpose = contiguous.args[0]
    if not isinstance(transpose, fx.Node) or not _transposes_1_2(transpose):
        return None
    split = transpose.args[0]
    if not _is_method(split, "view") or len(split.args) != 6 or split.kwargs:
        return None
    x, n, groups, _, h, w = split.args
    if not isinstance(x, fx.Node) or not isinstance(groups, int) or groups < 1:
        return None
    if [_dim_read(arg, x) for arg in (n, h, w)] != [0, 2, 3]:
        return None
    merged = node.args[2]
    if (node.args[1], node.args[3], node.args[4]) != (n, h, w):
        return None
    if merged != -1 and _dim_read(merged, x) != 1:
        return None
    if any(len(v.users) != 1 for v in (split, transpose, contiguous)):
        return None
    inputs = cat_inputs(x) or (x,)
    return ShufflePattern(inputs, groups, (split, transpose, contiguous, node))


def _is_method(node: object, name: str) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_method" and node.target == name


def _transposes_1_2(node: fx.Node) -> bool:
    """``torch.transpose(v, 1, 2)`` or ``v.transpose(1, 2)``."""
    called = (node.op == "call_function" and node.target is torch.transpose) or _is_method(
        node, "transpose"
    )
    return called and not node.kwargs and len(node.args) == 3 and set(node.args[1:]) == {1, 2}


def _dim_read(node: object, x: fx.Node) -> int | None:
    """``d`` where ``node`` is ``x.size()[d]``, ``x.shape[d]`` or ``x.size(d)``, else None."""
    if not isinstance(node, fx.Node):
        return None
    if _is_method(node, "size") and len(node.args) == 2 and node.args[0] is x:
        return node.args[1] if isinstance(node.args[1], int) else None
    if node.op != "call_function" or node.target is not operator.getitem:
        return None
    shape, index = node.args
    if not isinstance(shape, fx.Node) or not isinstance(index, int):
        return None
    size_call = _is_method(shape, "size") and shape.args == (x,)
    shape_attr = shape.op == "call_function" and shape.target is getattr
    if size_call or (shape_attr and shape.args == (x, "shape")):
        return index
    return None
