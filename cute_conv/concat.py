"""Growing concatenations in one buffer, for ``optimize`` (DenseNet's dense blocks).

A dense block concatenates its input with every layer's output so far before each layer:
``torch.cat([x0])``, ``torch.cat([x0, f1])``, ... ``torch.cat([x0, f1, .., fL])``, each a new
tensor, so every value is copied once per later layer (DenseNet-121 at batch 8 on an H200: 58
concatenations, 30% of its kernel time). Where each concatenation is read only by fused
modules (DenseNet's BatchNorm + ReLU, as depthwise 1x1 convs of the grouped kernel, which read
a channel prefix of a wider channels_last tensor in place), ``optimize`` allocates the last
concatenation's buffer once, copies ``x0`` and then each ``fj`` into its channels once, and
hands every concatenation over as a prefix view of the buffer. A piece made by a fused conv
that nothing else reads is written by that conv into its channels (``concat_slice``, the
conv's ``out=``), and its copy is skipped. A lone concatenation of pieces whose channels the
graph says (Inception's and GoogLeNet's branches, SqueezeNet's expands) is made the same way, in
a buffer allocated before its first conv that writes into it (``conv_concat_buffer``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import fx

from .problem import output_hw

__all__ = [
    "ConcatChain",
    "cat_inputs",
    "concat_buffer",
    "concat_chains",
    "concat_prefix",
    "concat_slice",
    "concat_write",
    "conv_concat_buffer",
]


def concat_buffer(first: torch.Tensor, more_channels: int) -> torch.Tensor:
    """A channels_last ``[N, C + more_channels, H, W]`` buffer whose first C channels are a
    copy of ``first`` (``[N, C, H, W]``)."""
    n, c, h, w = first.shape
    buffer = torch.empty((n, c + more_channels, h, w), dtype=first.dtype, device=first.device,
                         memory_format=torch.channels_last)  # fmt: skip
    buffer[:, :c].copy_(first)
    return buffer


def conv_concat_buffer(
    x: torch.Tensor,
    channels: int,
    kernel_size: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[tuple[int, int], tuple[int, int]],
    dilation: tuple[int, int],
    dtype: torch.dtype,
) -> torch.Tensor:
    """An empty channels_last ``[N, channels, P, Q]`` tensor of ``dtype``, P and Q those of a
    conv of this geometry on ``x`` (``[N, C, H, W]``): the buffer that a concatenation's
    convs write their channels of."""
    n, _, h, w = x.shape
    p, q = output_hw((h, w), kernel_size, stride, padding, dilation)
    return torch.empty((n, channels, p, q), dtype=dtype, device=x.device,
                       memory_format=torch.channels_last)  # fmt: skip


def concat_write(buffer: torch.Tensor, piece: torch.Tensor, channels_after: int) -> torch.Tensor:
    """Copy ``piece`` into ``buffer``'s channels that end ``channels_after`` before its last;
    return ``buffer``. A ValueError where ``piece`` is not of the buffer's N, H and W (as
    ``torch.cat`` raises, where a copy would broadcast)."""
    n, channels, h, w = buffer.shape
    if piece.dim() != 4 or (piece.shape[0], *piece.shape[2:]) != (n, h, w):
        raise ValueError(
            f"concatenation: a tensor of shape {tuple(piece.shape)} does not concatenate along "
            f"dim 1 with tensors of N, H, W = {n}, {h}, {w}"
        )
    part = concat_slice(buffer, piece.shape[1], channels_after)
    # Skipped where the piece's conv wrote it in place. torch.compile traces no data
    # pointers; a copy of a slice onto itself is the same values.
    in_place = not torch.compiler.is_compiling() and piece.data_ptr() == part.data_ptr()
    if not (in_place and piece.stride() == part.stride()):
        part.copy_(piece)
    return buffer


def concat_slice(buffer: torch.Tensor, channels: int, channels_after: int) -> torch.Tensor:
    """``buffer``'s ``channels`` channels that end ``channels_after`` before its last: a view
    (a piece's place, for its conv to write)."""
    end = buffer.shape[1] - channels_after
    return buffer[:, end - channels : end]


def concat_prefix(buffer: torch.Tensor, channels_after: int) -> torch.Tensor:
    """``buffer``'s channels but its last ``channels_after``: a view."""
    return buffer[:, : buffer.shape[1] - channels_after]


def cat_inputs(node: fx.Node) -> tuple[fx.Node, ...] | None:
    """The tensors of ``torch.cat([...], 1)`` (or ``dim=1``) where ``node`` is one of graph
    values, else None."""
    if node.op != "call_function" or node.target is not torch.cat:
        return None
    tensors = node.args[0] if node.args else node.kwargs.get("tensors")
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if dim != 1 or not isinstance(tensors, (list, tuple)) or not tensors:
        return None
    if not all(isinstance(t, fx.Node) for t in tensors):
        return None
    return tuple(tensors)


@dataclass(frozen=True)
class ConcatChain:
    """Concatenations along dim 1 of growing lists: ``cats[i]`` of ``first`` and
    ``pieces[:i]``, ``pieces[j]`` of ``channels[j]`` channels."""

    first: fx.Node
    pieces: tuple[fx.Node, ...]
    channels: tuple[int, ...]
    cats: tuple[fx.Node, ...]


def concat_chains(
    graph: fx.Graph,
    piece_channels: Callable[[fx.Node], int | None],
    reads_in_place: Callable[[fx.Node, fx.Node], bool],
) -> list[ConcatChain]:
    """The chains of ``graph``: concatenations of one first tensor and 0, 1, .. L pieces,
    each list the one before with one more piece, in the graph's order, at least two of
    them; every piece of
    channels that ``piece_channels`` knows (None: unknown, no chain), every reader of every
    concatenation one that ``reads_in_place(reader, concatenation)`` (a view is safe)."""
    by_first: dict[fx.Node, list[tuple[fx.Node, tuple[fx.Node, ...]]]] = defaultdict(list)
    order = {node: index for index, node in enumerate(graph.nodes)}
    for node in graph.nodes:
        tensors = cat_inputs(node)
        if tensors is not None:
            by_first[tensors[0]].append((node, tensors))
    chains = []
    for first, cats in by_first.items():
        cats.sort(key=lambda cat: len(cat[1]))
        longest = cats[-1][1]
        if len(cats) < 2 or [len(t) for _, t in cats] != list(range(1, len(longest) + 1)):
            continue
        if any(tensors != longest[: len(tensors)] for _, tensors in cats):
            continue
        if [order[cat] for cat, _ in cats] != sorted(order[cat] for cat, _ in cats):
            continue  # the buffer is written in the graph's order
        pieces = longest[1:]
        channels = [piece_channels(piece) for piece in pieces]
        if any(c is None for c in channels) or len(set(pieces)) != len(pieces):
            continue
        if not all(
            reader.args[0] is cat and reads_in_place(reader, cat)
            for cat, _ in cats
            for reader in cat.users
        ):
            continue
        cat_nodes = tuple(cat for cat, _ in cats)
        chains.append(ConcatChain(first, tuple(pieces), tuple(channels), cat_nodes))
    return chains
