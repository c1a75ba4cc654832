"""When ``cute_conv.nn.Conv2d`` runs a grouped conv on the grouped kernel, and when on cuDNN;
how many output pixels a kernel thread computes (``pixels_per_thread``); and how many threads
share an output vector (``channel_split_for``).

The grouped kernel (``kernels/common/grouped_direct.py``) runs on CUDA cores: it wins where
cuDNN's time is launches and layout transforms, and loses where the work is large enough for
cuDNN's tensor-core grouped kernels to pay. The bound is on the call's multiply-adds
(``N * P * Q * K * R * S * C / groups``), measured on an H200 by
``benchmarks/experiments/grouped_direct_ab.py`` (the kernel with its fused bias and activation
against cuDNN's conv with the bias, then the activation, CUDA-graph replays):

- depthwise: up to ``FITTED_DEPTHWISE`` (``DepthwiseBound``: a bound on the multiply-adds
  that may fall with the filter's taps; fitted, it does not).
- grouped, where cuDNN runs the conv natively in NHWC (the group width ``w = C / groups`` a
  power of two, as ResNeXt's, or fewer than ``few_groups`` groups: RegNet's 2-group calls):
  up to ``native_max_macs_at_8 * (8 / w) ** native_width_power``. cuDNN's tensor-core tiles
  fill as the groups widen, so the bound falls with the width.
- other grouped convs (RegNet's 24, 48, 56 or 120 per group), which cuDNN transforms to NCHW
  and back (tens of microseconds a conv): up to ``transformed_max_macs_at_24 * (24 / w) **
  transformed_width_power``. The kernel's rate falls on wide groups while cuDNN's rises.

Widths below 8 (no model measured) take the bound of 8. The grouped constants (``FITTED``)
were fitted (``benchmarks/experiments/grouped_rule_fit.py --search``) on the rows of ten
models at batch 1, 8 and 32, the kernel at the rule's pixels and split with its one-CTA
schedule on every group width (``experiments/grouped_direct_ab_all_widths_fit_H200.json``,
its batch-1 forwards that the split changes re-measured in ``..._split_fit_b1_H200.json``):
RegNetY-400MF/800MF/1.6GF/8GF, RegNetX-400MF/1.6GF/3.2GF/8GF, ResNeXt-50 32x4d and
ResNeXt-101 32x8d (1.225x cuDNN summed per forward over their grouped convs, no forward
slower; the bounds before gave 1.220x on the same rows). Held out
(``..._all_widths_heldout_H200.json`` with ``..._split_heldout_b1_H200.json``: RegNetX-800MF,
RegNetY-3.2GF, ResNeXt-101 64x4d, RegNetY-16GF, RegNetX-16GF, RegNetY-32GF and RegNetX-32GF):
1.082x summed (the bounds before: 1.078x); one forward 0.99x, RegNetX-32GF at batch 1 (1,067
-> 1,073 us); the faster of the two on every call would give 1.084x.
"""

from __future__ import annotations

from dataclasses import dataclass

from .kernels.common.grouped_direct import CHANNEL_SPLITS, GroupedDirectConfig
from .problem import Conv2dProblemShape

__all__ = [
    "FITTED",
    "FITTED_DEPTHWISE",
    "FITTED_PIXELS",
    "FITTED_SPLIT",
    "ChannelSplitRule",
    "DepthwiseBound",
    "GroupedBounds",
    "PixelsRule",
    "channel_split_for",
    "pixels_per_thread",
    "runs_grouped_kernel",
]


@dataclass(frozen=True)
class DepthwiseBound:
    """A depthwise call of ``macs`` multiply-adds over ``taps`` filter taps runs on the kernel
    when ``macs <= max_macs_at_9 * (9 / taps) ** taps_power``."""

    max_macs_at_9: float
    taps_power: float

    def takes(self, macs: int, taps: int) -> bool:
        return macs <= self.max_macs_at_9 * (9 / taps) ** self.taps_power


# Fitted (benchmarks/experiments/depthwise_rule_fit.py --search) on the depthwise rows of
# grouped_pixels_sweep.py on an H200 at batch 1, 8 and 32, with the kernel's row window
# (ConvNeXt-T, MobileNetV3-Large, EfficientNet-B3, MobileNetV2, MNASNet-1.0): 1.496x cuDNN
# summed per forward, where the bound fitted without the window (2**29 * 9 / taps: the 7x7s
# lost to cuDNN from ~2**25.8 then) gives 1.460x and the flat 2**27 before it 1.431x. The
# largest measured call (ConvNeXt-T's 7x7 at batch 32, 2**28.8) runs on the kernel at 1.06x.
FITTED_DEPTHWISE = DepthwiseBound(max_macs_at_9=2**29, taps_power=0)


@dataclass(frozen=True)
class GroupedBounds:
    """The grouped (not depthwise) rule's constants: the bounds on the multiply-adds at the
    reference widths, and the group count below which cuDNN runs a non-power-of-two width
    natively."""

    native_max_macs_at_8: float
    native_width_power: float
    transformed_max_macs_at_24: float
    transformed_width_power: float
    few_groups: int

    def takes(self, macs: int, group_in: int, groups: int) -> bool:
        """Whether a grouped conv call of ``macs`` multiply-adds over ``groups`` groups of
        ``group_in`` input channels runs faster on the grouped kernel than on cuDNN."""
        width = max(group_in, 8)
        if width & (width - 1) == 0 or groups < self.few_groups:
            return macs <= self.native_max_macs_at_8 * (8 / width) ** self.native_width_power
        bound = self.transformed_max_macs_at_24 * (24 / width) ** self.transformed_width_power
        return macs <= bound


FITTED = GroupedBounds(
    native_max_macs_at_8=2**29,
    native_width_power=3,
    transformed_max_macs_at_24=2**30.5,
    transformed_width_power=1,
    few_groups=3,
)


def runs_grouped_kernel(
    macs: int, group_in: int, group_out: int, groups: int, taps: int, *, normalizes: bool = False
) -> bool:
    """Whether a grouped conv call of ``macs`` multiply-adds, ``groups`` groups of
    ``group_in`` input and ``group_out`` output channels and ``taps`` (``R * S``) filter taps
    runs faster on the grouped kernel than on cuDNN.

    A call that ``normalizes`` its output over the channels (``channel_norm_eps``) always
    does: cuDNN's path adds a LayerNorm pass, and on an H200 the kernel beat cuDNN's conv
    and torch's LayerNorm on every stage of ConvNeXt-T and ConvNeXt-B (7x7 depthwise, C = 96
    .. 1024) at batch 1 to 128, by 1.4-1.8x where the bounds below send the plain call to
    cuDNN (``benchmarks/experiments/channel_norm_ab*.json``, session 75). So does a
    depthwise 1x1 conv (``optimize``'s lone BatchNorms): a per-channel scale, one pass over
    memory in the kernel, where cuDNN's path adds its epilogue's passes (no such call was in
    the bounds' fits)."""
    if normalizes:
        return True
    if group_in == group_out == 1:
        return taps == 1 or FITTED_DEPTHWISE.takes(macs, taps)
    return FITTED.takes(macs, group_in, groups)


def _one_pixel_threads(problem: Conv2dProblemShape, config: GroupedDirectConfig) -> int:
    """The grouped kernel's threads for ``problem`` at one output pixel each and one thread
    per output vector: what the pixels and split rules' thresholds count."""
    return problem.K // config.vector * problem.N * problem.P * problem.Q


@dataclass(frozen=True)
class PixelsRule:
    """How many adjacent output pixels of a row a grouped-kernel thread computes.

    A depthwise thread's work is short (``R * S`` taps): a second pixel pays only where the
    call has threads to spare, ``depthwise_two_pixels_threads`` or more at one pixel each,
    and a fourth from ``depthwise_four_pixels_threads`` (the row window loads a filter row's
    ``pixels + S - 1`` columns once, so more pixels share more of them). A
    grouped thread's is long (``R * S * C / groups`` multiply-adds per output vector, one
    dependent chain): ``grouped_pixels`` chains side by side hide the latency that fewer
    threads cost, on groups of up to ``grouped_max_width`` input channels (the kernel unrolls
    its loop over them, ``grouped_pixels`` times over: on wider groups, where no call was
    measured, it keeps one pixel); below ``grouped_two_pixels_threads`` threads (at one pixel
    each) fewer: there each thread's latency, not the SMs' issue rate, is the call's time. Two
    pixels on groups of ``grouped_two_pixels_min_width`` input channels or more (a filter
    vector loaded once serves both pixels: RegNet's 24) from ``grouped_one_pixel_threads``
    threads, else one (on narrower groups, 8 or 16, a thread's whole group is one batch of
    loads per tap at one pixel as at two, so a second pixel only lengthens its chain; on the
    fewest threads the SMs have room for the one-pixel grid at once). The thresholds were
    fitted on staged filters; the dense direct form (``filter_krsc``: few-channel stems, a
    thread's weights by scalar loads) keeps ``grouped_pixels``, at which ``direct_rule`` was
    measured (the batch-1 RGB stem ran 10.8 us at two pixels against 9.3 at four,
    ``experiments/direct_dense_ab_H200.json``).
    """

    depthwise_two_pixels_threads: int
    depthwise_four_pixels_threads: int
    grouped_pixels: int
    grouped_max_width: int
    grouped_two_pixels_threads: int = 0  # 0: never
    grouped_two_pixels_min_width: int = 0  # 0: two pixels at every width
    grouped_one_pixel_threads: int = 0  # 0: never one (below grouped_two_pixels_threads)

    def pixels(self, problem: Conv2dProblemShape, config: GroupedDirectConfig) -> int:
        threads = _one_pixel_threads(problem, config)
        if not config.depthwise:
            if config.group_in > self.grouped_max_width:
                return 1
            if config.filter_krsc or threads >= self.grouped_two_pixels_threads:
                return self.grouped_pixels
            wide = config.group_in >= self.grouped_two_pixels_min_width
            return 2 if wide and threads >= self.grouped_one_pixel_threads else 1
        if threads >= self.depthwise_four_pixels_threads:
            return 4
        return 2 if threads >= self.depthwise_two_pixels_threads else 1


# Fitted (benchmarks/experiments/grouped_pixels_fit.py --search) on grouped_pixels_sweep.py's
# FIT_MODELS at batch 1, 8 and 32 on an H200, over the calls nn.Conv2d runs on the kernel:
# 6,328 us summed against 7,951 at one pixel (1.256x), the best pixels per call 6,310. Judged
# on HELD_OUT_MODELS (named before they were measured): 1.249x, no forward slower, within 1.1%
# of the best pixels per call. The grouped calls the kernel took there had 8 or 24 input
# channels per group (ResNeXt-50's layer2, RegNet's); at 32 (ResNeXt-50's layer4, which the
# bounds leave to cuDNN) four pixels ran 40-43 us against 28 at one at batch 1 and 8, so
# groups wider than 24 keep one pixel. The bounds above were fitted on the kernel at one pixel.
# The depthwise thresholds were refitted on the row window's sweep (grouped_pixels_sweep_window
# _H200.json: 4,382 us summed against 4,408 with two pixels from 2**17 threads and never four;
# the best per call 4,298) and judged on its held-out sweep (..._window_heldout_H200.json,
# measured before the refit): 4,387 us against 4,520 (1.030x), the best per call 4,280.
# grouped_two_pixels_threads: with the batched filter loads, two pixels while their grid fits in
# about one wave (132 SMs, 3 CTAs of 128 threads each at the two-pixel kernel's 158 registers:
# ~101 k threads at one pixel each), else four. On an H200 (call82d: the sweep before and after
# the batching, each against cuDNN in its own process) the train rows (RegNetY-1.6GF,
# ResNeXt-50) took 2**17 (RegNetY-1.6GF per forward at batch 1 / 8 633 -> 510 / 730 -> 612 us,
# at batch 32 its calls keep four pixels, not re-timed after the change); held out (call82e,
# RegNetY-3.2GF) that cost 17% at batch 8: its 12 calls of 113 k threads ran 36.6 us at two
# pixels against 28.1 at four (the two-pixel grid past one wave). 3 * 2**15 splits every row of
# both models as the one-wave bound does; chosen after the held-out rows: RegNetY-3.2GF per
# forward at batch 1 / 8 / 32 518 -> 419 / 674 -> 672 / 2,017 -> 2,017 us. Judged afterwards
# on models named before they were measured (grouped_pixels_sweep_threshold_unseen_H200.json),
# the kernel's calls summed per forward against four pixels: RegNetX-1.6GF (24 per group)
# 391 -> 305 / 439 -> 406 / 1,061 -> 1,061 us at batch 1 / 8 / 32, the best per call each.
# grouped_two_pixels_min_width: the same sweep's 16-wide groups (RegNetY-800MF, RegNetX-800MF
# at batch 1) ran 18.6-19.6 us at one pixel against 22.5-23.1 at two, as ResNeXt-50's 8-wide
# batch-1 call in the fit rows (12.4 against 17.0); 24-wide ones 0.3-0.6 us faster at two at
# batch 1 and up to 35% at batch 8. Narrower groups than 24 take one pixel below the
# threshold. Judged on models named before they were measured (grouped_pixels_sweep_narrow_
# H200.json: RegNetY-400MF 8 wide, RegNetX-400MF 16, ResNeXt-101 32x8d and 64x4d at batch 1
# and 8): their kernel calls 1,089 -> 867 us summed (RegNetY-400MF per forward 266 -> 190 us
# at batch 1), the best per call 859. At one pixel the 16-wide batch-1 calls still run ~5%
# slower than cuDNN (RegNetX-400MF 384 against 362 us), which the bounds leave to the kernel.
# grouped_one_pixel_threads: with ptxas asked for one CTA per SM on the grouped form (the
# kernel's min_blocks_per_mp: a tap's loads issued together), one pixel beat two on every
# 24-wide batch-1 call of RegNetY-1.6GF (5,439-11,760 threads, 17.0-18.1 us against
# 17.3-18.8), two beat one from its batch-8 calls (43,512 threads and up: 20.0-24.6 us against
# 21.4-34.5); 2**15 lies between (grouped_pixels_sweep_min_ctas_H200.json, the fit rows).
# Kernel change and threshold together, the kernel's calls summed against HEAD's tree and rule
# before them (..._min_ctas_base_H200.json, one process each, back to back): fit rows
# (RegNetY-1.6GF, RegNetY-400MF, RegNetX-400MF at batch 1 and 8) 1,792 -> 1,551 us; held out
# (..._min_ctas_heldout[_base]_H200.json: RegNetX-1.6GF, RegNetY-800MF) 741 -> 681 us, the
# rule's pick the best per call on every row, no forward slower.
FITTED_PIXELS = PixelsRule(
    depthwise_two_pixels_threads=2**16,
    depthwise_four_pixels_threads=2**21,
    grouped_pixels=4,
    grouped_max_width=24,
    grouped_two_pixels_threads=3 * 2**15,
    grouped_two_pixels_min_width=24,
    grouped_one_pixel_threads=2**15,
)


def pixels_per_thread(problem: Conv2dProblemShape, config: GroupedDirectConfig) -> int:
    """The grouped kernel's output pixels per thread for ``problem`` (``config``'s group
    shape): ``FITTED_PIXELS``."""
    _check_rule_args(problem, config)
    return FITTED_PIXELS.pixels(problem, config)


def _check_rule_args(problem: object, config: object) -> None:
    """A ``TypeError`` naming the argument unless the two are a problem and a grouped config."""
    if not isinstance(problem, Conv2dProblemShape):
        raise TypeError(f"problem must be a Conv2dProblemShape, got {type(problem).__name__}")
    if not isinstance(config, GroupedDirectConfig):
        raise TypeError(f"config must be a GroupedDirectConfig, got {type(config).__name__}")


@dataclass(frozen=True)
class ChannelSplitRule:
    """How many adjacent threads share a grouped-kernel output vector (``channel_split``),
    each summing a share of the group's input channels.

    A thread of a wide group at one pixel runs ``R * S * C / groups`` dependent multiply-adds
    per output channel; on a call of few threads that chain, not the SMs' issue rate, is the
    call's time (RegNetX-8GF's 120-wide batch-1 calls took ~53 us whatever their size). Split
    ``s`` ways it is ``s`` times shorter, for ``s`` times the threads and a butterfly of
    shuffles: it pays while the split grid stays within ``max_threads`` (about one wave of
    the split kernel on 132 SMs at three 128-thread CTAs an SM, its 136-168 registers on most
    widths), the largest such split being the fastest. Only one-pixel
    threads split: with several pixels a thread's chains already run side by side. At most
    ``max_split`` ways (the most that any measured call ran fastest at), and a part per
    activation vector of the group at most (16-wide groups: two).
    """

    max_threads: int
    max_split: int

    def __post_init__(self) -> None:
        if isinstance(self.max_threads, bool) or not isinstance(self.max_threads, int):
            raise TypeError(f"max_threads must be an int, got {type(self.max_threads).__name__}")
        if self.max_threads < 1:
            raise ValueError(f"max_threads must be >= 1, got {self.max_threads}")
        if isinstance(self.max_split, bool) or self.max_split not in CHANNEL_SPLITS:
            raise ValueError(f"max_split must be one of {CHANNEL_SPLITS}, got {self.max_split!r}")

    def split(self, problem: Conv2dProblemShape, config: GroupedDirectConfig) -> int:
        """The split of ``problem`` on ``config`` (its pixels and channel norm set)."""
        if config.depthwise or config.filter_krsc or config.channel_norm_eps is not None:
            return 1
        if config.pixels != 1:
            return 1
        threads = _one_pixel_threads(problem, config)
        parts = config.group_in // config.in_vector
        most = min(parts, self.max_split)
        fits = [s for s in CHANNEL_SPLITS if s <= most and threads * s <= self.max_threads]
        return max(fits, default=1)


# Fitted (benchmarks/experiments/grouped_split_fit.py --search) on grouped_split_sweep.py's
# rows of RegNetX-8GF, RegNetY-8GF and RegNetX-3.2GF at batch 1 and 8 on an H200 (48-, 56-
# and 120-wide groups): from 44,032 to 46,080 threads (the grid's steps of 1,024) the rule
# picks the best swept split of every call; summed over every call 10,717 -> 10,471 us
# (batch 1 1.08-1.16x per forward, batch 8 unchanged). Judged on RegNetY-16GF, RegNetX-16GF,
# RegNetY-32GF and RegNetX-32GF (112 to 232 wide, named before they were measured): the best
# split of all but one call (a 232-wide one, 2,701 against 2,706 us summed). First adopted on
# groups of 48 or more input channels only; the narrower ones were then swept (ResNeXt-101
# 32x8d and 64x4d, ResNeXt-50, RegNetX-400MF, RegNetY-800MF, RegNetX-800MF, RegNetY-1.6GF,
# RegNetX-1.6GF: 16, 24 and 32 wide) and on none did the same threshold pick a split slower
# than one thread, so every width takes it: over all thirteen models' calls 71,625 -> 70,893
# us summed (the best split per call 70,773), batch-1 forwards up to 1.25x (RegNetY-1.6GF),
# none slower. A 24-wide call of 28,224 threads ran 1.42x slower split in two (56,448
# threads); some 16- and 32-wide calls of 25,088 threads ran 0.90-0.92x split, which the
# threshold leaves at one.
FITTED_SPLIT = ChannelSplitRule(max_threads=45_000, max_split=4)


def channel_split_for(problem: Conv2dProblemShape, config: GroupedDirectConfig) -> int:
    """The grouped kernel's threads per output vector for ``problem`` (``config`` with its
    pixels and channel norm set): ``FITTED_SPLIT``."""
    _check_rule_args(problem, config)
    return FITTED_SPLIT.split(problem, config)
