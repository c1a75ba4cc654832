"""Operand staging for the calls the kernel cannot take as they are.

The kernel wants 16-byte channel rows (C, K multiples of 8), an output that no input
aliases, a source that is the output or disjoint from it, and contiguous bias/scale vectors of
one dtype (float32 when a call's bias and scale differ).
Most calls meet all of that and launch directly; the others are staged here with a few torch
ops on the same stream, around the one kernel launch. Every extra copy is listed in
``run_staged``'s docstring and in the README.

Two more stagings are for speed: a conv with very few input channels (the RGB stem, C=3)
wastes most of each k-tile, since a k-tile never spans two filter taps.
- Stride 2: space-to-depth. Each 2x2 pixel block becomes one pixel of 4*C channels and the
  filter is regrouped the same way, giving an equivalent stride-1 conv with ceil(R/2) x
  ceil(S/2) taps of 4*C channels (the 7x7 stem: 16 taps of 12 channels instead of 49 of 3).
- Otherwise: the activation is unfolded into explicit im2col columns ``[N, P, Q, R*S*C]`` and
  the kernel runs the equivalent 1x1 conv, whose k-tiles are full.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .epilogue import kernel_vector_dtype
from .problem import Conv2dProblemShape

__all__ = [
    "CHANNEL_ALIGNMENT",
    "kernel_problem_for",
    "run_staged",
    "uses_im2col",
    "uses_space_to_depth",
]

# TMA rows are 16 bytes: C and K of 16-bit tensors must be multiples of 8 elements.
CHANNEL_ALIGNMENT = 8
# Unfold when a filter tap holds at most this many channels and there are several taps: the
# implicit GEMM would use at most 8 of each 64-wide k-tile.
IM2COL_MAX_CHANNELS = 4
IM2COL_MIN_TAPS = 4
# Space-to-depth turns C channels into 4*C: worth it up to C=8 (32 channels per tap).
SPACE_TO_DEPTH_MAX_CHANNELS = 8


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def uses_space_to_depth(problem: Conv2dProblemShape) -> bool:
    return (
        problem.C <= SPACE_TO_DEPTH_MAX_CHANNELS
        and problem.R * problem.S >= IM2COL_MIN_TAPS
        and problem.stride == (2, 2)
        and problem.dilation == (1, 1)
    )


def uses_im2col(problem: Conv2dProblemShape) -> bool:
    few_channels = problem.C <= IM2COL_MAX_CHANNELS and problem.R * problem.S >= IM2COL_MIN_TAPS
    return few_channels and not uses_space_to_depth(problem)


def kernel_problem_for(problem: Conv2dProblemShape) -> Conv2dProblemShape:
    """The problem the kernel runs: ``problem`` itself when it needs no staging."""
    k = _round_up(problem.K, CHANNEL_ALIGNMENT)
    if uses_space_to_depth(problem):
        taps_h, taps_w = -(-problem.R // 2), -(-problem.S // 2)
        return Conv2dProblemShape(
            problem.N, problem.P + taps_h - 1, problem.Q + taps_w - 1,
            _round_up(4 * problem.C, CHANNEL_ALIGNMENT), k, taps_h, taps_w,
        )  # fmt: skip
    if uses_im2col(problem):
        columns = _round_up(problem.C * problem.R * problem.S, CHANNEL_ALIGNMENT)
        return Conv2dProblemShape(problem.N, problem.P, problem.Q, columns, k, 1, 1)
    c = _round_up(problem.C, CHANNEL_ALIGNMENT)
    if (c, k) == (problem.C, problem.K):
        return problem
    return Conv2dProblemShape(
        problem.N, problem.H, problem.W, c, k, problem.R, problem.S,
        padding=problem.padding, stride=problem.stride, dilation=problem.dilation,
    )  # fmt: skip


def _im2col_columns(x: torch.Tensor, problem: Conv2dProblemShape, width: int) -> torch.Tensor:
    """``[N, P, Q, width]``: row (n, p, q) holds the (r, s, c) patch under output (p, q)."""
    (top, bottom), (left, right) = problem.padding
    padded = F.pad(x, (0, 0, left, right, top, bottom))
    s_n, s_h, s_w, s_c = padded.stride()
    (stride_h, stride_w), (dil_h, dil_w) = problem.stride, problem.dilation
    n, p, q, r, s, c = problem.N, problem.P, problem.Q, problem.R, problem.S, problem.C
    if dil_w == 1:  # the s taps of one row are adjacent pixels: copy S*C contiguous values
        shape = (n, p, q, r, s * c)
        strides = (s_n, s_h * stride_h, s_w * stride_w, s_h * dil_h, s_c)
    else:
        shape = (n, p, q, r, s, c)
        strides = (s_n, s_h * stride_h, s_w * stride_w, s_h * dil_h, s_w * dil_w, s_c)
    patches = padded.as_strided(shape, strides)
    columns = x.new_zeros(n, p, q, width)
    columns[..., : r * s * c].unflatten(-1, shape[3:]).copy_(patches)
    return columns


def _space_to_depth(x: torch.Tensor, problem: Conv2dProblemShape, kp: Conv2dProblemShape):
    """``[N, kp.H, kp.W, kp.C]``: pixel (i, j) holds the 2x2 block at (2i, 2j) of the padded
    input, channels ordered (a, b, c) for block offset (a, b)."""
    (top, _), (left, _) = problem.padding
    n, c = problem.N, problem.C
    padded = x.new_zeros(n, 2 * kp.H, 2 * kp.W, c)
    rows, cols = min(problem.H, 2 * kp.H - top), min(problem.W, 2 * kp.W - left)
    padded[:, top : top + rows, left : left + cols] = x[:, :rows, :cols]
    blocks = padded.view(n, kp.H, 2, kp.W, 2, c).permute(0, 1, 3, 2, 4, 5)
    staged = x.new_zeros(n, kp.H, kp.W, kp.C)  # one copy into the zero-padded channels
    staged[..., : 4 * c].unflatten(-1, (2, 2, c)).copy_(blocks)
    return staged


def _space_to_depth_filter(filter: torch.Tensor, kp: Conv2dProblemShape) -> torch.Tensor:  # noqa: A002
    """The filter regrouped like ``_space_to_depth``: tap (u, v) holds taps (2u+a, 2v+b)."""
    k, r, s, c = filter.shape
    padded = F.pad(filter, (0, 0, 0, 2 * kp.S - s, 0, 2 * kp.R - r))
    blocks = padded.view(k, kp.R, 2, kp.S, 2, c).permute(0, 1, 3, 2, 4, 5)
    regrouped = blocks.reshape(k, kp.R, kp.S, 4 * c)
    return F.pad(regrouped, (0, kp.C - 4 * c, 0, 0, 0, 0, 0, kp.K - k))


def _stage_inputs(
    x: torch.Tensor, filter: torch.Tensor, problem: Conv2dProblemShape, kp: Conv2dProblemShape
) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: A002
    k_pad = kp.K - problem.K
    if uses_space_to_depth(problem):
        return _space_to_depth(x, problem, kp), _space_to_depth_filter(filter, kp).contiguous()
    if uses_im2col(problem):
        flt = filter.reshape(problem.K, 1, 1, problem.R * problem.S * problem.C)
        flt = F.pad(flt, (0, kp.C - flt.shape[-1], 0, 0, 0, 0, 0, k_pad))
        return _im2col_columns(x, problem, kp.C), flt.contiguous()
    c_pad = kp.C - problem.C
    x_k = F.pad(x, (0, c_pad)) if c_pad else x
    flt = F.pad(filter, (0, c_pad, 0, 0, 0, 0, 0, k_pad)) if c_pad or k_pad else filter
    return x_k.contiguous(), flt.contiguous()


def run_staged(
    launch,
    problem: Conv2dProblemShape,
    kernel_problem: Conv2dProblemShape,
    x: torch.Tensor,
    filter: torch.Tensor,  # noqa: A002
    out: torch.Tensor,
    source: torch.Tensor | None,
    bias: torch.Tensor | None,
    scale: torch.Tensor | None,
) -> None:
    """Stage the operands, call ``launch(x, filter, out, source, bias, scale)``, unstage.

    Must run on the call's stream. The copies, by case:
    - C or K not a multiple of 8: ``x`` and/or ``filter`` zero-padded to the next multiple
      (zero channels add nothing); with K padded, the kernel writes a scratch output whose
      first K channels are copied to ``out``, and ``source``/``bias``/``scale`` are padded too.
    - few input channels and stride 2 (``uses_space_to_depth``): ``x`` rearranged into 2x2
      blocks (about the activation's size, times 16/(4*C) for the channel padding) and the
      filter regrouped.
    - few input channels otherwise (``uses_im2col``): ``x`` unfolded into ``[N, P, Q, R*S*C]``
      columns, about ``R*S / (stride_h*stride_w)`` times the activation's size.
    - ``out`` overlapping ``x`` or ``filter`` (``x = x + conv(x)``): a scratch output, copied
      to ``out`` after the kernel, since other CTAs may still read a halo already written.
    - ``source`` overlapping ``out`` without being it: a copy of ``source``.
    - bias/scale not contiguous, or of two different dtypes: copied (as float32 in the latter
      case; the kernel reads float32, bfloat16 and float16 vectors as they are).
    """
    k_pad = kernel_problem.K - problem.K
    x_k, flt_k = _stage_inputs(x, filter, problem, kernel_problem)
    dtype = kernel_vector_dtype(bias, scale)
    bias, scale = (_kernel_vector(v, dtype, k_pad) for v in (bias, scale))
    if source is not None:
        source = F.pad(source, (0, k_pad)) if k_pad else source
        if source is not out and overlaps(source, out):
            source = source.clone()
    kernel_out = out
    if k_pad or overlaps(out, x) or overlaps(out, filter):
        # If ``out`` is also the source, the kernel reads it and writes only the scratch.
        kernel_out = torch.empty(kernel_problem.output_shape, dtype=out.dtype, device=out.device)
    launch(x_k, flt_k, kernel_out, source, bias, scale)
    if kernel_out is not out:
        out.copy_(kernel_out[..., : problem.K])


def _kernel_vector(
    vector: torch.Tensor | None, dtype: torch.dtype, k_pad: int
) -> torch.Tensor | None:
    """A bias/scale vector as the kernel reads it: contiguous, in ``dtype``, zero-padded by
    ``k_pad`` channels. One copy at most: each extra copy is a launch on the call's path."""
    if vector is None:
        return None
    if k_pad:
        return F.pad(vector.to(dtype), (0, k_pad))
    return vector.to(dtype).contiguous()


def overlaps(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Whether two contiguous tensors share any byte of memory."""
    if a is None or b is None:
        return False
    nbytes = (a.numel() * a.element_size(), b.numel() * b.element_size())
    return spans_overlap(a.data_ptr(), nbytes[0], b.data_ptr(), nbytes[1])


def spans_overlap(a: int, a_bytes: int, b: int, b_bytes: int) -> bool:
    """Whether the byte ranges ``[a, a + a_bytes)`` and ``[b, b + b_bytes)`` intersect."""
    return a_bytes > 0 and b_bytes > 0 and a < b + b_bytes and b < a + a_bytes
