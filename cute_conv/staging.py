"""Operand staging for the calls the kernel cannot take as they are.

The kernel wants 16-byte channel rows of its inputs (C a multiple of 8; K takes any size:
output rows that are not 16-byte units are stored by the epilogue threads,
``EpilogueSpec.store_by_threads``; a kernel that gathers its operands, ``gather``, reads any
C), an output that no input aliases, a source that is the
output or disjoint from it, and contiguous bias/scale vectors of one dtype (float32 when a
call's bias and scale differ).
Most calls meet all of that and launch directly; the others are staged here with a few torch
ops on the same stream, around the one kernel launch. Every extra copy is listed in
``run_staged``'s docstring and in the README.

Three more stagings are for speed: a conv with very few input channels (the RGB stem, C=3)
wastes most of each k-tile, since a k-tile never spans two filter taps.
- Stride 2, C=8: a super-pixel view, no copy of the activation (``super_pixel_view``). Four
  pixels of 8 channels are one 64-byte super pixel: the input ``[N, H, W, 8]`` is read as
  ``[N, H, W/4, 32]``, and each GEMM row computes the two outputs whose windows start in one
  super pixel (the two phases of stride 2 along W), so the conv becomes a stride-(2, 1) conv
  with 2K output channels whose output ``[N, P, Q/2, 2K]`` is the NHWC output itself. The
  filter is regrouped into ``[2K, R, taps, 32]`` (zero where a phase's window does not reach).
  The 7x7 stem: 3 taps of 4 pixels along W, 672 of GEMM K per output against the fold's 512,
  but no staging pass and 128-wide tiles.
- Stride 2 otherwise: folded space-to-depth. Each block of 2 rows x ``cols`` columns of input pixels
  (at an even row and column) becomes one staged pixel of up to 64 channels (C rounded up to
  a power of two, times the block's pixels) and the filter is regrouped the same way, giving
  an equivalent stride-1 conv with ceil(R/2) x ceil(S/cols) taps, dilated by cols/2 along W
  since neighbouring staged pixels overlap (``fold_shape``). The 7x7 stem with C=8: 2x4
  blocks, 4x2 taps of 64 channels instead of 49 of 8; with C=3: 2x8 blocks, 4x1 taps.
- Otherwise: the activation is unfolded into explicit im2col columns ``[N, P, Q, R*S*C]`` and
  the kernel runs the equivalent 1x1 conv, whose k-tiles are full. A patch of at most
  ``PATCH_ROW_FASTER_COLUMNS`` columns (VGG's 3x3 stem: 27) over at least
  ``PATCH_ROW_MIN_ROWS`` output pixels is unfolded a row per thread, the window compile-time
  (``unfolds_rows``).

A conv whose filter windows tile its input (``validation.tiles_input``: stride = filter size,
as in a ViT patch embedding or a ConvNeXt downsampling) runs on the patch view (``patch_view``,
no copy: R taps of a patch row's S*C channels instead of R*S taps of C, at stride 1) where a
patch row is whole 16-byte units and no staging above takes it. Such a conv may have a stride
past the im2col TMA's 8; without the view it is then unfolded into columns.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .compile import compile_im2col_columns, compile_space_to_depth
from .cuda_context import current_raw_stream, device_arch, on_device
from .epilogue import kernel_vector_dtype
from .kernels.common.channel_rows import VECTOR_BYTES
from .kernels.common.space_to_depth import FOLD_ROWS
from .kernels.sm90.schedule_checks import MAX_K_TILE_BYTES
from .problem import Conv2dProblemShape
from .validation import MAX_STRIDE, ROW_ALIGNMENT_BYTES, tiles_input

__all__ = [
    "CHANNEL_ALIGNMENT",
    "StagedWeightCache",
    "StagingPlan",
    "SuperPixelView",
    "channel_alignment",
    "clear_staged_weights",
    "channels_padded",
    "gather_replaces",
    "kernel_problem_for",
    "patch_view",
    "run_staged",
    "span_bytes",
    "staged_weights",
    "staging_plan",
    "super_pixel_view",
    "unfolds_rows",
    "uses_im2col",
    "uses_space_to_depth",
]

# ``Im2colPatchRows`` (a thread per row) against ``Im2colColumns`` (a thread per 16-byte vector),
# per call on an H200 (benchmarks/experiments/unfold_ab_H200.json): 1.1-1.9x for VGG's 27
# columns, even for ConvNeXt's 48 at 25k rows, 0.6-0.9x for a 7x7 stem's 147 and at 3k rows,
# where a row per thread leaves most SMs idle. Bounds fitted between those points.
PATCH_ROW_FASTER_COLUMNS = 64  # at most the kernel's PATCH_ROW_MAX_COLUMNS
PATCH_ROW_MIN_ROWS = 8192

# TMA rows are whole 16-byte units: C and K of 16-bit tensors must be multiples of 8
# elements, of fp8 tensors multiples of 16 (``channel_alignment``).
CHANNEL_ALIGNMENT = ROW_ALIGNMENT_BYTES // 2
# Unfold when a filter tap holds at most this many channels and there are several taps: the
# implicit GEMM would use at most 8 of each 64-wide k-tile.
IM2COL_MAX_CHANNELS = 4
IM2COL_MIN_TAPS = 4
# Folded space-to-depth packs 8 to 16 input pixels into one staged pixel of up to 64 channels:
# worth it up to C=8.
SPACE_TO_DEPTH_MAX_CHANNELS = 8
# A staged pixel holds at most a full 16-bit k-tile of channels (half an fp8 one).
MAX_TILE_K = MAX_K_TILE_BYTES // 2


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


# The super-pixel view: input channels it takes, and pixels per 64-byte super pixel.
SUPER_PIXEL_INPUT_CHANNELS = 8
SUPER_PIXEL_PIXELS = 4


@dataclass(frozen=True)
class SuperPixelView:
    """How a stride-2 conv of ``SUPER_PIXEL_INPUT_CHANNELS`` channels runs on the input's
    super-pixel view (see the module docstring).

    Output ``q = phases * j + phase`` is row ``j`` of the view's GEMM, channel block ``phase``.
    Its window starts at input column ``2q - left``, in super pixel ``j + first_tap`` or later;
    the ``taps`` super pixels from there cover every phase's window.
    """

    pixels: int
    phases: int
    first_tap: int
    taps: int

    def filter_column(self, phase: int, tap: int, pixel: int, left: int) -> int:
        """The filter column (s) that ``pixel`` of super-pixel ``tap`` meets in ``phase``'s
        window (outside ``[0, S)``: none, a zero of the regrouped filter)."""
        return self.pixels * (self.first_tap + tap) + pixel - 2 * phase + left


def channel_alignment(element_bytes: int) -> int:
    """The channels of one 16-byte TMA row: what C and K are padded to a multiple of."""
    return ROW_ALIGNMENT_BYTES // element_bytes


def super_pixel_view(problem: Conv2dProblemShape) -> SuperPixelView | None:
    """The super-pixel view of ``problem``, or None where it does not apply: stride 2, no
    dilation, C=8, several taps, K a multiple of 8, W a multiple of 4 and Q of 2, and right
    padding that the view's columns can take as whole super pixels. (fp8 super pixels are
    32-byte rows of 32 channels: still whole TMA rows, and the shortest k-tile.)"""
    if not (
        problem.C == SUPER_PIXEL_INPUT_CHANNELS
        and problem.R * problem.S >= IM2COL_MIN_TAPS
        and problem.stride == (2, 2)
        and problem.dilation == (1, 1)
        and problem.K % CHANNEL_ALIGNMENT == 0
    ):
        return None
    pixels = SUPER_PIXEL_PIXELS
    phases = pixels // 2
    _, (left, _) = problem.padding
    first_tap = -left // pixels  # floor: a window may start in the padding
    last_tap = (-left + 2 * (phases - 1) + problem.S - 1) // pixels
    view = SuperPixelView(pixels, phases, first_tap, last_tap - first_tap + 1)
    if problem.W % pixels or problem.Q % phases or _view_padding_w(problem, view)[1] < 0:
        return None
    return view


def _view_padding_w(problem: Conv2dProblemShape, view: SuperPixelView) -> tuple[int, int]:
    """The view's left and right padding, in super pixels, for Q / phases output columns."""
    left = -view.first_tap
    right = problem.Q // view.phases - 1 + view.taps - left - problem.W // view.pixels
    return left, right


def uses_space_to_depth(problem: Conv2dProblemShape) -> bool:
    """Folded space-to-depth: few channels and stride 2, where no super-pixel view applies."""
    return (
        super_pixel_view(problem) is None
        and problem.C <= SPACE_TO_DEPTH_MAX_CHANNELS
        and problem.R * problem.S >= IM2COL_MIN_TAPS
        and problem.stride == (2, 2)
        and problem.dilation == (1, 1)
    )


def _few_channels(problem: Conv2dProblemShape) -> bool:
    """A filter tap holds at most ``IM2COL_MAX_CHANNELS`` channels, over several taps."""
    return problem.C <= IM2COL_MAX_CHANNELS and problem.R * problem.S >= IM2COL_MIN_TAPS


def patch_view(problem: Conv2dProblemShape, element_bytes: int = 2) -> Conv2dProblemShape | None:
    """The problem a conv whose filter windows tile its input (``validation.tiles_input``)
    runs on views of its tensors, or None where it does not. The input ``[N, P*R, Q*S, C]``
    is read as ``[N*P, R, Q, S*C]`` (a patch row of S pixels is one pixel of S*C channels),
    the filter ``[K, R, S, C]`` as ``[K, R, 1, S*C]`` and the output ``[N, P, Q, K]`` as
    ``[N*P, 1, Q, K]``: a stride-1 conv of R x 1 taps on images R rows high, whose k-tiles
    are never more than the conv's own. Needs S*C to fill whole 16-byte TMA rows; at strides
    the im2col TMA takes, the stem stagings (super pixels, space-to-depth, columns of a few
    channels) keep the convs they take."""
    if not tiles_input(problem):
        return None
    channels = problem.S * problem.C
    if channels % channel_alignment(element_bytes):
        return None
    if max(problem.stride) <= MAX_STRIDE and (
        _few_channels(problem)
        or super_pixel_view(problem) is not None
        or uses_space_to_depth(problem)
    ):
        return None
    return Conv2dProblemShape(
        problem.N * problem.P, problem.R, problem.Q, channels, problem.K, problem.R, 1
    )


def uses_im2col(problem: Conv2dProblemShape, element_bytes: int = 2) -> bool:
    """Whether the activation (of ``element_bytes``-byte elements) is unfolded into im2col
    columns: few channels over several taps, or a stride past the im2col TMA's, where no
    view or space-to-depth takes the conv."""
    unfolded = _few_channels(problem) or max(problem.stride) > MAX_STRIDE
    return (
        unfolded
        and super_pixel_view(problem) is None
        and not uses_space_to_depth(problem)
        and patch_view(problem, element_bytes) is None
    )


def kernel_problem_for(
    problem: Conv2dProblemShape, element_bytes: int = 2, gathered: bool = False
) -> Conv2dProblemShape:
    """The problem the kernel runs on inputs of ``element_bytes`` (2, or 1 for fp8):
    ``problem`` itself when it needs no staging. Only C is padded: K is the filter's outer
    extent, which TMA takes at any size, and the output's rows are stored by threads where
    they are not 16-byte units. A kernel that gathers its operands (``gathered``) takes any
    C unpadded, and runs the convs otherwise unfolded into im2col columns as they are; the
    patch view, and the columns of a stride past the im2col TMA's, are every kernel's."""
    alignment = channel_alignment(element_bytes)
    view = super_pixel_view(problem)
    if view is not None:
        (top, bottom), _ = problem.padding
        return Conv2dProblemShape(
            problem.N, problem.H, problem.W // view.pixels, view.pixels * problem.C,
            view.phases * problem.K, problem.R, view.taps,
            padding=((top, bottom), _view_padding_w(problem, view)), stride=(2, 1),
        )  # fmt: skip
    if uses_space_to_depth(problem):
        fold = fold_shape(problem)
        taps_h, taps_w = -(-problem.R // FOLD_ROWS), -(-problem.S // fold.cols)
        tap_step = fold.cols // 2  # staged pixels between the taps of one row
        return Conv2dProblemShape(
            problem.N, problem.P + taps_h - 1, problem.Q + tap_step * (taps_w - 1),
            fold.staged_channels, problem.K, taps_h, taps_w, dilation=(1, tap_step),
        )  # fmt: skip
    patches = patch_view(problem, element_bytes)
    if patches is not None:
        return patches
    if gathered and max(problem.stride) <= MAX_STRIDE:
        return problem
    if uses_im2col(problem, element_bytes):
        columns = _round_up(problem.C * problem.R * problem.S, alignment)
        return Conv2dProblemShape(problem.N, problem.P, problem.Q, columns, problem.K, 1, 1)
    return channels_padded(problem, element_bytes)


def copies_activation(problem: Conv2dProblemShape, element_bytes: int = 2) -> bool:
    """Whether the tensor-core path copies ``problem``'s activation before its conv (channel
    padding, an im2col unfold, a stem's super pixels or space-to-depth) rather than running
    it as it is or on views of it (``patch_view``)."""
    if kernel_problem_for(problem, element_bytes) is problem:
        return False
    return patch_view(problem, element_bytes) is None


def channels_padded(problem: Conv2dProblemShape, element_bytes: int = 2) -> Conv2dProblemShape:
    """``problem`` with C zero-padded to whole TMA rows (itself where it has them): how the
    heuristic sizes the tiles of a kernel that gathers it."""
    c = _round_up(problem.C, channel_alignment(element_bytes))
    if c == problem.C:
        return problem
    return Conv2dProblemShape(
        problem.N, problem.H, problem.W, c, problem.K, problem.R, problem.S,
        padding=problem.padding, stride=problem.stride, dilation=problem.dilation,
    )  # fmt: skip


def gather_replaces(problem: Conv2dProblemShape, element_bytes: int = 2) -> str | None:
    """The staging a kernel that gathers its operands would spare ``problem``: ``"pad"``
    (C zero-padded to whole TMA rows, its only staging), ``"im2col"`` (unfolded into
    explicit columns), or None (no staging, or the stem's space-to-depth and super-pixel
    stagings, which cost little)."""
    if super_pixel_view(problem) is not None or uses_space_to_depth(problem):
        return None
    if patch_view(problem, element_bytes) is not None or max(problem.stride) > MAX_STRIDE:
        return None  # read through views, or unfolded whatever the kernel
    if uses_im2col(problem, element_bytes):
        return "im2col"
    return "pad" if problem.C % channel_alignment(element_bytes) else None


def _im2col_launch(
    problem: Conv2dProblemShape, width: int, element_bytes: int
) -> StagingLaunch | None:
    """The unfolding kernel's launch (``kernels.common.unfold``) that writes the im2col
    columns ``[N, P, Q, width]``: row (n, p, q) holds the (r, s, c) patch under output
    (p, q), zero past the image and past column R*S*C (``Im2colPatchRows`` where
    ``unfolds_rows``). None where the kernel cannot take it (it numbers its threads in 32
    bits): torch ops stage it then."""
    vector = VECTOR_BYTES // element_bytes
    if problem.N * problem.P * problem.Q * (width // vector) >= 2**31:
        return None
    (top, _), (left, _) = problem.padding
    geometry = (
        problem.N, problem.H, problem.W, problem.P, problem.Q, problem.R, problem.S, top, left,
        *problem.stride, *problem.dilation, width // vector,
    )  # fmt: skip
    shape = (problem.N, problem.P, problem.Q, width)
    if unfolds_rows(problem, width, element_bytes):
        compile_args = (problem.C, (problem.R, problem.S))
    else:
        compile_args = (problem.C,)
    return StagingLaunch(compile_im2col_columns, compile_args, shape, geometry)


def unfolds_rows(problem: Conv2dProblemShape, width: int, element_bytes: int) -> bool:
    """Whether the columns ``[N, P, Q, width]`` of ``problem`` are unfolded a thread per row
    (``Im2colPatchRows``): a small patch (the RGB stems) whose row is ``width`` rounded to
    whole vectors no further, over enough rows to fill the GPU (``PATCH_ROW_FASTER_COLUMNS``,
    ``PATCH_ROW_MIN_ROWS``)."""
    vector = VECTOR_BYTES // element_bytes
    columns = problem.R * problem.S * problem.C
    return (
        columns <= PATCH_ROW_FASTER_COLUMNS
        and width // vector == -(-columns // vector)
        and problem.N * problem.P * problem.Q >= PATCH_ROW_MIN_ROWS
    )


def _channel_pad_launch(
    problem: Conv2dProblemShape, width: int, element_bytes: int
) -> StagingLaunch | None:
    """The launch that zero-pads the activation's C to ``width`` channels: the unfolding
    kernel on the conv's 1x1 stride-1 counterpart, whose columns are the pixels' channels.
    One pass and one launch where torch's pad takes a fill, a copy and ~20 us of host time
    per eager call."""
    pixels = Conv2dProblemShape(problem.N, problem.H, problem.W, problem.C, problem.K, 1, 1)
    return _im2col_launch(pixels, width, element_bytes)


def _im2col_columns_torch(
    x: torch.Tensor, problem: Conv2dProblemShape, width: int
) -> torch.Tensor:
    """The columns of ``_im2col_launch`` in torch ops (a pad, a zero fill and a strided
    copy): for CPU tensors, and the specification the GPU tests hold the kernel to."""
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


@dataclass(frozen=True)
class StagingLaunch:
    """One staging kernel's launch for the calls of one signature, worked out once (a
    ``StagingPlan`` holds it): the kernel ``compile_fn(arch, dtype, *compile_args)``, the
    staged tensor's shape and the kernel's runtime geometry."""

    compile_fn: Callable
    compile_args: tuple
    shape: tuple[int, int, int, int]
    geometry: tuple[int, ...]
    # The compiled kernel by (device index, dtype), filled on first use.
    kernels: dict = field(default_factory=dict, compare=False, repr=False)

    def run(self, x: torch.Tensor, stream: int | None) -> torch.Tensor:
        """The staged copy of ``x`` (a CUDA tensor; fp8 as its bytes), by one launch on
        ``stream`` (a raw handle on ``x``'s device, which must be current, as in
        ``run_staged``; None: that device is made current and its current stream taken)."""
        device_index = x.get_device()
        key = (device_index, x.dtype)
        kernel = self.kernels.get(key)
        if kernel is None:
            # fp8 arrives as bytes (uint8): the kernels move them as fp8 values, unconverted.
            dtype = torch.float8_e4m3fn if x.element_size() == 1 else x.dtype
            kernel = self.compile_fn(device_arch(device_index), dtype, *self.compile_args)
            self.kernels[key] = kernel
        staged = x.new_empty(self.shape)  # x's dtype and device, without parsing them
        if stream is not None:  # the per-call path: no device lookup, no context
            kernel.launch(x.data_ptr(), staged.data_ptr(), *self.geometry, stream)
            return staged
        with on_device(device_index):
            kernel.launch(
                x.data_ptr(), staged.data_ptr(), *self.geometry, current_raw_stream(device_index)
            )
        return staged


@dataclass(frozen=True)
class FoldShape:
    """The blocks of a folded space-to-depth: ``FOLD_ROWS x cols`` input pixels of
    ``channels`` channels (C zero-extended) become one staged pixel."""

    channels: int
    cols: int

    @property
    def staged_channels(self) -> int:
        return FOLD_ROWS * self.cols * self.channels


def fold_shape(problem: Conv2dProblemShape) -> FoldShape:
    """Channels: C rounded up to a power of two, at least 2 (16 staged channels at least).
    Columns: as many as fill a 64-wide k-tile, but no more than the filter's width needs
    (C=8: 4; C=3 or 4 with a 7-wide filter: 8, a single tap per filter row)."""
    channels = max(2, 1 << (problem.C - 1).bit_length())
    fills_a_k_tile = MAX_TILE_K // (FOLD_ROWS * channels)
    covers_the_filter = max(4, 1 << (problem.S - 1).bit_length())
    return FoldShape(channels, min(fills_a_k_tile, covers_the_filter))


def _space_to_depth_launch(problem: Conv2dProblemShape, kp: Conv2dProblemShape) -> StagingLaunch:
    """The folding kernel's launch (``kernels.common.space_to_depth``) that writes
    ``[N, kp.H, kp.W, kp.C]``: pixel (i, j) holds the block of rows 2i, 2i+1 and columns
    2j..2j+cols-1 of the zero-padded input, channels ordered (row, column, c)."""
    fold = fold_shape(problem)
    (top, _), (left, _) = problem.padding
    geometry = (problem.N, problem.H, problem.W, kp.H, kp.W, top, left)
    compile_args = (problem.C, fold.channels, fold.cols)
    return StagingLaunch(compile_space_to_depth, compile_args, kp.activation_shape, geometry)


def _space_to_depth_torch(
    x: torch.Tensor, problem: Conv2dProblemShape, kp: Conv2dProblemShape
) -> torch.Tensor:
    """The blocks of ``_space_to_depth_launch`` in torch ops (a pad, then a strided copy):
    for CPU tensors, and the specification the GPU tests hold the kernel to."""
    (top, _), (left, _) = problem.padding
    fold = fold_shape(problem)
    # Zero borders and channels in one copy; a negative pad crops rows no output reads.
    padded = F.pad(
        x,
        (0, fold.channels - problem.C,
         left, 2 * (kp.W - 1) + fold.cols - problem.W - left,
         top, 2 * kp.H - problem.H - top),
    )  # fmt: skip
    s_n, s_h, s_w, s_c = padded.stride()
    blocks = padded.as_strided(
        (problem.N, kp.H, kp.W, FOLD_ROWS, fold.cols, fold.channels),
        (s_n, 2 * s_h, 2 * s_w, s_h, s_w, s_c),
    )
    return blocks.reshape(problem.N, kp.H, kp.W, kp.C)


def _space_to_depth_filter(
    filter: torch.Tensor,  # noqa: A002
    problem: Conv2dProblemShape,
    kp: Conv2dProblemShape,
) -> torch.Tensor:
    """The filter regrouped like the activation (``_space_to_depth_launch``): tap (u, v)
    holds the taps (2u + a, cols*v + b), channels ordered (a, b, c)."""
    k, r, s, c = filter.shape
    fold = fold_shape(problem)
    padded = F.pad(
        filter,
        (0, fold.channels - c, 0, fold.cols * kp.S - s, 0, FOLD_ROWS * kp.R - r, 0, kp.K - k),
    )
    blocks = padded.view(kp.K, kp.R, FOLD_ROWS, kp.S, fold.cols, fold.channels)
    return blocks.permute(0, 1, 3, 2, 4, 5).reshape(kp.K, kp.R, kp.S, kp.C)


def _super_pixel_filter(
    filter: torch.Tensor,  # noqa: A002
    problem: Conv2dProblemShape,
    view: SuperPixelView,
) -> torch.Tensor:
    """``[phases * K, R, taps, pixels * C]``: the filter as the super-pixel view's conv reads
    it. Output channel ``phase * K + k``, tap ``(r, t)``, channel ``(pixel, c)`` holds
    ``filter[k, r, view.filter_column(phase, t, pixel, left), c]``, or zero. Two launches."""
    _, (left, _) = problem.padding
    index = _super_pixel_filter_index(problem.filter_shape, view, left, filter.device)
    with_zero = F.pad(filter.reshape(-1), (0, 1))  # the last element is the zero
    return torch.take(with_zero, index)


@functools.lru_cache(maxsize=64)
def _super_pixel_filter_index(
    filter_shape: tuple[int, int, int, int], view: SuperPixelView, left: int, device: torch.device
) -> torch.Tensor:
    """Where ``_super_pixel_filter`` takes each element from in the flattened filter (its
    numel: the appended zero). Built once per filter shape, view, padding and device."""
    k, r, s, c = filter_shape
    phase, kk, rr, tap, pixel, cc = torch.meshgrid(
        *(torch.arange(n) for n in (view.phases, k, r, view.taps, view.pixels, c)), indexing="ij"
    )
    column = view.filter_column(phase, tap, pixel, left)
    flat = ((kk * r + rr) * s + column) * c + cc
    index = torch.where((column >= 0) & (column < s), flat, k * r * s * c)
    return index.reshape(view.phases * k, r, view.taps, view.pixels * c).to(device)


@dataclass(frozen=True)
class StagingPlan:
    """How the calls of one signature are staged, worked out once (the launch plan holds
    it): the per-call path is then tensor ops only."""

    problem: Conv2dProblemShape
    kernel_problem: Conv2dProblemShape
    view: SuperPixelView | None
    patches: bool  # on the patch view (``patch_view``): every tensor a view, nothing copied
    space_to_depth: bool
    im2col: bool
    phases: int  # output channel blocks per GEMM row: 2 on the super-pixel view, else 1
    stages_filter: bool  # the kernel reads a padded or regrouped copy of the filter
    # The staging kernel that lays out the activation on the GPU (space-to-depth, im2col
    # columns or padded channels), None where torch ops do (or nothing is staged).
    activation_launch: StagingLaunch | None = None

    @property
    def on_view(self) -> bool:
        """Whether the kernel reads ``x`` and writes ``out`` (and reads the source) as views
        of other shapes: the super-pixel and patch views."""
        return self.view is not None or self.patches


def staging_plan(
    problem: Conv2dProblemShape, kernel_problem: Conv2dProblemShape, element_bytes: int
) -> StagingPlan:
    """The staging of ``problem`` as the kernel runs it (``kernel_problem_for`` for
    ``element_bytes``-byte inputs)."""
    view = super_pixel_view(problem)
    phases = 1 if view is None else view.phases
    patches = patch_view(problem, element_bytes) is not None
    space_to_depth, im2col = uses_space_to_depth(problem), uses_im2col(problem, element_bytes)
    launch = None
    if view is None and space_to_depth:
        launch = _space_to_depth_launch(problem, kernel_problem)
    elif view is None and im2col:
        launch = _im2col_launch(problem, kernel_problem.C, element_bytes)
    elif view is None and not patches and kernel_problem.C != problem.C:
        launch = _channel_pad_launch(problem, kernel_problem.C, element_bytes)
    regrouped = not patches and kernel_problem.filter_shape != problem.filter_shape
    return StagingPlan(
        problem, kernel_problem, view, patches, space_to_depth, im2col, phases,
        view is not None or regrouped, launch,
    )  # fmt: skip


def _stage_activation(x: torch.Tensor, plan: StagingPlan, stream: int | None) -> torch.Tensor:
    problem, kp = plan.problem, plan.kernel_problem
    if plan.activation_launch is not None and x.is_cuda:
        return plan.activation_launch.run(x, stream)
    if plan.on_view:
        return x.reshape(kp.activation_shape)
    if plan.space_to_depth:
        return _space_to_depth_torch(x, problem, kp)
    if plan.im2col:
        return _im2col_columns_torch(x, problem, kp.C)
    c_pad = kp.C - problem.C
    return (F.pad(x, (0, c_pad)) if c_pad else x).contiguous()


def _stage_filter(filter: torch.Tensor, plan: StagingPlan) -> torch.Tensor:  # noqa: A002
    problem, kp = plan.problem, plan.kernel_problem
    if plan.view is not None:
        return _super_pixel_filter(filter, problem, plan.view)
    if plan.patches:
        return filter.view(kp.filter_shape)
    if plan.space_to_depth:
        return _space_to_depth_filter(filter, problem, kp).contiguous()
    if plan.im2col:
        flt = filter.reshape(problem.K, 1, 1, problem.R * problem.S * problem.C)
        return F.pad(flt, (0, kp.C - flt.shape[-1])).contiguous()
    c_pad = kp.C - problem.C
    return (F.pad(filter, (0, c_pad)) if c_pad else filter).contiguous()


class StagedWeightCache:
    """Staged copies of a conv's weights (the filter padded or regrouped, bias and scale
    vectors padded, repeated or converted), kept while their source tensor lives and is
    unchanged, so that a model's staged convs stage each weight once instead of on every
    call.

    An entry is reused when the source is the same tensor object, at the same address,
    with the same version counter (torch bumps it on every in-place write) and the same
    ``how``: the staging plan, what else shaped the copy, and the stream it was made on (a
    call on another stream would not wait for the copy, so it makes its own). Writes that
    bypass the version counter (through ``.data``, DLPack or another library's kernels) are
    not seen: ``clear()`` after them. Nothing is kept while a CUDA graph is captured (the
    graph then stages the weight itself, so a replay sees its current values) nor for
    inference-mode tensors (no version counter).
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple] = {}

    def get(
        self,
        source: torch.Tensor,
        how: tuple,
        stage: Callable[[], torch.Tensor],
        *,
        capturing: bool,
    ) -> torch.Tensor:
        """``stage()`` (the staged ``source``), or the copy kept from an earlier call;
        ``capturing``: whether the call is being captured into a CUDA graph (asked once per
        call by the caller)."""
        if capturing or source.is_inference():
            return stage()
        key, version, address = id(source), source._version, source.data_ptr()
        entry = self._entries.get(key)
        if entry is not None:
            ref, entry_version, entry_address, entry_how, staged = entry
            same = ref() is source and (entry_version, entry_address) == (version, address)
            if same and entry_how == how:  # the plans in ``how`` are cached: `is` first
                return staged
        staged = stage()
        # The entry goes when its source does (a new tensor may then reuse the id).
        ref = weakref.ref(source, functools.partial(self._drop, key))
        self._entries[key] = (ref, version, address, how, staged)
        return staged

    def _drop(self, key: int, _ref: weakref.ref) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget every staged weight (the next call restages)."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


staged_weights = StagedWeightCache()


def clear_staged_weights() -> None:
    """Forget the staged copies of filters and bias/scale vectors kept for staged calls:
    needed only after writing one of them in a way torch's version counter does not see
    (``.data``, DLPack, another library's kernel); see ``StagedWeightCache``."""
    staged_weights.clear()


def run_staged(
    launch,
    plan: StagingPlan,
    x: torch.Tensor,
    filter: torch.Tensor,  # noqa: A002
    out: torch.Tensor,
    source: torch.Tensor | None,
    bias: torch.Tensor | None,
    scale: torch.Tensor | None,
    *,
    stream: int | None = None,
    may_alias: bool = True,
) -> None:
    """Stage the operands, call ``launch(x, filter, out, source, bias, scale)``, unstage.

    Must run with the call's device and stream current; ``stream`` is the stream's raw
    handle (None: looked up when a staging kernel needs it). ``may_alias=False``: the caller
    has found that ``out`` shares no byte with ``x``, ``filter`` or a distinct ``source``
    (``dispatch`` compares their data pointers and spans), so those checks are skipped.
    The copies, by case:
    - C not a multiple of 8: ``x`` and ``filter`` zero-padded to the next multiple (zero
      channels add nothing); ``x`` by one staging kernel on the GPU. K is never padded
      (see ``kernel_problem_for``).
    - 8 input channels and stride 2 (``super_pixel_view``): no copy of ``x``, ``out`` or
      ``source`` (views); the filter regrouped, and ``bias``/``scale`` repeated per phase.
    - filter windows that tile the input (``patch_view``): no copy of anything (views).
    - few input channels and stride 2 otherwise (``uses_space_to_depth``): ``x`` rearranged into
      blocks by one staging kernel (``cols / 2`` times the activation's size, more for C not
      a power of two); the filter regrouped.
    - few input channels otherwise, or a stride past 8 (``uses_im2col``): ``x`` unfolded into
      ``[N, P, Q, R*S*C]`` columns, about ``R*S / (stride_h*stride_w)`` times the activation's
      size.
    - ``out`` overlapping ``x`` or ``filter`` (``x = x + conv(x)``): a scratch output, copied
      to ``out`` after the kernel, since other CTAs may still read a halo already written.
    - ``source`` overlapping ``out`` without being it: a copy of ``source``.
    - bias/scale not contiguous, or of two different dtypes: copied (as float32 in the latter
      case; the kernel reads float32, bfloat16 and float16 vectors as they are).
    Staged filters and bias/scale vectors are kept for the next call while their sources are
    unchanged (``StagedWeightCache``).
    """
    kp = plan.kernel_problem
    # fp8 tensors are staged as their bytes (zero bytes are +0.0): torch's pads and copies
    # do not all take fp8 dtypes.
    if x.element_size() == 1:
        x_k = _stage_activation(_bytes(x), plan, stream).view(x.dtype)
        stage = lambda: _stage_filter(_bytes(filter), plan).view(filter.dtype)  # noqa: E731
    else:
        x_k = _stage_activation(x, plan, stream)
        stage = lambda: _stage_filter(filter, plan)  # noqa: E731
    # A filter the kernel reads as it is needs no copy, hence no cache entry. A copy made on
    # one stream is reused on that stream only: another would not wait for its staging.
    how = (plan, stream)
    capturing = x.is_cuda and torch.cuda.is_current_stream_capturing()
    if plan.stages_filter:
        flt_k = staged_weights.get(filter, how, stage, capturing=capturing)
    else:
        flt_k = stage()
    if bias is not None or scale is not None:
        dtype = kernel_vector_dtype(bias, scale)
        bias, scale = (
            _kernel_vector(v, dtype, plan, stream, capturing) for v in (bias, scale)
        )
    # A channel slice of a wider tensor (``validation.out_pixel_stride``) is written through a
    # scratch output too: the staged kernel writes a contiguous one.
    scratch = not out.is_contiguous() or (
        may_alias and (overlaps(out, x) or overlaps(out, filter))
    )
    kernel_out = out.view(kp.output_shape) if plan.on_view and not scratch else out
    if scratch:
        # If ``out`` is also the source, the kernel reads it and writes only the scratch.
        kernel_out = torch.empty(kp.output_shape, dtype=out.dtype, device=out.device)
    if source is not None:
        if may_alias and source is not out and overlaps(source, out):
            source = source.clone()
        source = source.view(kp.output_shape) if plan.on_view else source
    launch(x_k, flt_k, kernel_out, source, bias, scale)
    if scratch:
        out.copy_(kernel_out.view(out.shape))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """An fp8 tensor as its bytes (uint8), other tensors as they are."""
    return t.view(torch.uint8) if t.element_size() == 1 else t


def _kernel_vector(
    vector: torch.Tensor | None,
    dtype: torch.dtype,
    plan: StagingPlan,
    stream: int | None,
    capturing: bool,
) -> torch.Tensor | None:
    """A bias/scale vector as the kernel reads it: contiguous, in ``dtype``, repeated per
    phase of a super-pixel view. A copy is kept for calls on ``stream`` while the vector is
    unchanged (``staged_weights``): each copy is a launch."""
    if vector is None:
        return None
    if plan.phases > 1:
        stage = lambda: vector.to(dtype).repeat(plan.phases)  # noqa: E731
    elif vector.dtype == dtype and vector.is_contiguous():
        return vector
    else:
        stage = lambda: vector.to(dtype).contiguous()  # noqa: E731
    return staged_weights.get(vector, (plan, dtype, stream), stage, capturing=capturing)


def overlaps(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Whether the spans of two dense tensors (first to last element) share any byte."""
    if a is None or b is None:
        return False
    return spans_overlap(a.data_ptr(), span_bytes(a), b.data_ptr(), span_bytes(b))


def span_bytes(t: torch.Tensor) -> int:
    """The bytes from ``t``'s first element to the end of its last (0 if it has none)."""
    if t.is_contiguous():  # every staged call's x and filter: no loop over the dims
        return t.numel() * t.element_size()
    if t.numel() == 0:
        return 0
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
    return (last + 1) * t.element_size()


def spans_overlap(a: int, a_bytes: int, b: int, b_bytes: int) -> bool:
    """Whether the byte ranges ``[a, a + a_bytes)`` and ``[b, b + b_bytes)`` intersect."""
    return a_bytes > 0 and b_bytes > 0 and a < b + b_bytes and b < a + a_bytes
