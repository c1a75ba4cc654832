"""The rules for convs whose tiles leave SMs idle: 32-wide tiles where a conv has a few tiles
along M (``small_m_config``), 64-row tiles, one consumer warpgroup, where its 128-row tiles
fill less than a wave (``single_warpgroup_config``), the activation tile shared by 4 CTAs
where 64-wide tiles of a long mainloop fill part of a wave (``wide_cluster_config``),
stream-K over the whole grid where tiles past one wave leave much of the last one idle
(``last_wave_config``), the filter tile shared along M instead of the activation along N
where a 1x1's few k-tiles are partly empty (``pointwise_pair_config``), and single CTAs
instead of 2-CTA clusters where the tiles fill at most one wave (``lone_cta_config``). Each
refines the config a call without one would run (the heuristic's, or the gathering one);
``untuned`` applies them through the arch registry (``arch.ArchKernels``)."""

from __future__ import annotations

import math
from dataclasses import replace

from .config import (
    NARROW_TILE_N,
    Conv2dConfig,
    check_bound,
    check_rule_args,
    cluster_shape,
    k_tile_bound,
)
from .kernels.sm90.config import HALF_STEP_MIN_K_TILE_BYTES, TILE_N_CHOICES, is_half_step
from .problem import Conv2dProblemShape
from .schedule import cluster_tile_count, schedule_shape, tile_count

__all__ = [
    "LAST_WAVE_MAX_FILL",
    "LAST_WAVE_MAX_FILL_FUSED",
    "LAST_WAVE_MIN_K_TILES",
    "LAST_WAVE_MIN_K_TILES_FUSED",
    "LONE_CTA_MAX_K_TILES",
    "SINGLE_WARPGROUP_MAX_K_TILES",
    "SINGLE_WARPGROUP_WIDEN_MAX_K_TILES",
    "SINGLE_WARPGROUP_WIDEN_MAX_SHARE",
    "SMALL_M_MAX_GEMM_K",
    "SMALL_M_MAX_TILES_M",
    "WIDE_CLUSTER_MAX_SHARE",
    "WIDE_CLUSTER_MIN_K_TILES",
    "WIDE_CLUSTER_MIN_SHARE",
    "POINTWISE_PAIR_MAX_K_TILES",
    "last_wave_config",
    "last_wave_fill",
    "lone_cta_config",
    "pointwise_pair_config",
    "single_warpgroup_config",
    "single_warpgroup_fits",
    "small_m_config",
    "wide_cluster_config",
    "wide_cluster_share",
    "widened_single_warpgroup_width",
]

# Small-M convs (see small_m_config): at most this many 128-row tiles along M and this much
# GEMM K take 32-wide tiles, unsplit, on single CTAs, where that fills at most one wave
# (plain or fused, unstaged or gathered).
# Fitted on the corpus's train part on an H100 (benchmarks/sweep_small_m.py --fit).
SMALL_M_MAX_TILES_M = 3
SMALL_M_MAX_GEMM_K = 3456
# 64-row tiles (see single_warpgroup_config) for mainloops of at most this many k-tiles:
# fitted on the corpus's train part on an H200 for plain, fused and fp8 calls alike
# (benchmarks/sweep_tile_m64.py, tile_m64_*sweep.json).
SINGLE_WARPGROUP_MAX_K_TILES = 72
# ... and where 64-row tiles of the config's width do not fit one wave, a wider width (less
# than twice it) whose 64-row tiles do, for plain 16-bit convs of at most this many k-tiles
# where such a tile holds at most this share of the 128-row tile's output: fitted together
# on the corpus's train part on an H200 and an H100 (benchmarks/sweep_widened_m64.py --joint).
SINGLE_WARPGROUP_WIDEN_MAX_K_TILES = 30
SINGLE_WARPGROUP_WIDEN_MAX_SHARE = 0.85
# 1x4 clusters (see wide_cluster_config) for plain 16-bit convs of several taps on 64-wide
# tiles, mainloops of at least WIDE_CLUSTER_MIN_K_TILES k-tiles (shorter ones were not
# measured), whose clusters occupy this share of the SMs: fitted on the corpus's train part on
# an H100 and an H200 together (benchmarks/sweep_wide_cluster.py --joint).
WIDE_CLUSTER_MIN_SHARE = 0.4
WIDE_CLUSTER_MAX_SHARE = 0.85
WIDE_CLUSTER_MIN_K_TILES = 36
WIDE_CLUSTER_N = 4  # CTAs sharing the activation tile
WIDE_CLUSTER_TILE_N = 64
# Stream-K (see last_wave_config) for 16-bit data-parallel tiles past one wave whose launched
# waves are at most this full (tiles over the SM slots of whole waves), where each CTA's share
# holds at least this many k-tiles; per form (plain, or with a residual). Fitted on the
# corpus's train part on an H200 (benchmarks/sweep_last_wave.py --fit).
LAST_WAVE_MAX_FILL = 0.85
LAST_WAVE_MAX_FILL_FUSED = 0.85
LAST_WAVE_MIN_K_TILES = 64
LAST_WAVE_MIN_K_TILES_FUSED = 64
# 2x1 clusters for 16-bit 1x1s on 1x2 clusters whose channels leave their k-tiles partly
# empty, plain and fused, for tiles of at most this many k-tiles (see pointwise_pair_config);
# fitted on the corpus's train part on an H200, both forms alike
# (benchmarks/sweep_pointwise_pair.py).
POINTWISE_PAIR_MAX_K_TILES = 5
# Single CTAs instead of 2-CTA clusters for 16-bit convs whose tiles fill at most one wave, for
# tiles of at most this many k-tiles (see lone_cta_config): fitted on the corpus's train part
# on an H200, plain and fused calls alike: any (benchmarks/sweep_lone_cta.py).
LONE_CTA_MAX_K_TILES = math.inf


def small_m_config(
    config: Conv2dConfig,
    problem: Conv2dProblemShape,
    num_sms: int = 132,
    has_residual: bool = False,
    element_bytes: int = 2,
) -> Conv2dConfig:
    """The config a call without one runs for an unstaged conv (C whole TMA rows, no stem
    staging) or a gathered one (odd C, ``gathered_config``; ``dispatch``), from ``config``,
    the one it would run (the heuristic's, or the gathering one): 32-wide tiles, unsplit, on
    single CTAs, for a conv of at most ``SMALL_M_MAX_TILES_M`` 128-row tiles along M (an fp8
    one without a residual), K >= 128 and GEMM K up to ``SMALL_M_MAX_GEMM_K``, where one wave holds those tiles; else
    ``config``. Few M tiles leave most SMs idle at 64-wide tiles; narrow tiles spread the conv
    over more of them without a stream-K split's reduction.

    Fitted on an H100 (``benchmarks/sweep_small_m.py``, ``small_m_sweep.json``): the corpus
    problems of GEMM M <= 512, K >= 128 and at most 2 GFLOP, each replayed from a CUDA graph
    at its config, 32 and 64 wide without cluster or split, and cuDNN, in five groups fitted
    apart (a residual or 8-bit inputs change nothing in the rule's bounds). Plain unstaged convs (64): the bounds were picked on the 43 train problems (1.051x
    the config's speed by geomean; 32-wide everywhere 0.964x: at 4 M tiles or deep 3x3
    mainloops they lose) and hold on the 21 held-out ones (1.071x); e.g. ResNet-50's 1x1 at
    batch 1, 7x7, C=2048, K=512: 13.2 -> 11.1 us (cuDNN 9.7). The same convs as fused calls
    (``relu(conv + b) + r``) fit the same bounds: train 1.072x, held-out 1.100x. Gathered
    convs (23, all of GEMM K < 256) gain at any bounds of the grid; these give train 1.066x
    (the best, at 4 M tiles, 1.075x), held-out 1.054x, and fused 1.052x / 1.029x. fp8
    unstaged convs (56): train 1.079x (the best, up to GEMM K 4608, 1.088x), held-out
    1.064x. Convs staged by channel padding and fp8 calls with a residual were not measured:
    not for them.

    Raises:
        TypeError, ValueError: ``config`` is no ``Conv2dConfig``, or a bad problem, SM count
            or element size.
    """
    check_rule_args(config, problem, num_sms, has_residual, element_bytes)
    tiles_m = -(-problem.gemm_m // 128)
    tiles = tiles_m * -(-problem.K // NARROW_TILE_N)
    takes = (
        not (has_residual and element_bytes == 1)  # not measured
        and config.tile_m == 128
        and tiles_m <= SMALL_M_MAX_TILES_M
        and problem.K >= 128
        and problem.gemm_k <= SMALL_M_MAX_GEMM_K
        and tiles <= num_sms
    )
    if not takes:
        return config
    return replace(
        config, tile_n=NARROW_TILE_N, cluster_m=1, cluster_n=1, stream_k=False,
        stream_k_split=0, dynamic_schedule=False, pingpong=False, tile_w=0, halo_h=0,
        halo_w=0,
    )  # fmt: skip


def single_warpgroup_config(
    config: Conv2dConfig,
    problem: Conv2dProblemShape,
    num_sms: int = 132,
    has_residual: bool = False,
    element_bytes: int = 2,
    max_k_tiles: float | None = None,
    widen_max_k_tiles: float | None = None,
    widen_max_share: float | None = None,
) -> Conv2dConfig:
    """``config`` (the one a call without one would run on ``problem``, the conv the kernel
    runs) with 64-row tiles, one consumer warpgroup, where its 128-row tiles fill less than
    a wave and 64-row ones of the same width still fit one, for mainloops of at most
    ``max_k_tiles`` k-tiles (None: ``SINGLE_WARPGROUP_MAX_K_TILES``; 0: never); a
    stream-K split is dropped for them (single CTAs, each tile's whole K). Where 64-row
    tiles of that width are more than a wave, a plain 16-bit conv of at most
    ``widen_max_k_tiles`` k-tiles (None: ``SINGLE_WARPGROUP_WIDEN_MAX_K_TILES``; 0: never)
    takes 64-row tiles of the narrowest wider width that fits one wave
    (``widened_single_warpgroup_width``), unsplit, clustered as ``default_config`` clusters
    that width (a gathered one on single CTAs), where such a tile holds at most
    ``widen_max_share`` of the 128-row tile's output (None:
    ``SINGLE_WARPGROUP_WIDEN_MAX_SHARE``). Else ``config``.

    Few 128-row tiles leave SMs idle or split K and sum partials; twice the tiles, each
    with its whole K, fill more SMs without the reduction (cuDNN runs such convs as 64-row
    tiles), at twice the filter traffic per MMA, which long mainloops do not repay.
    Measured with ``benchmarks/sweep_tile_m64.py`` (``tile_m64_sweep.json``). A wider
    64-row tile still holds less of the output than the 128-row one (SDXL's 1x1 of C=960,
    K=640 at 32x32: 128 tiles of 64x80 for 80 of 128x64, 0.62 of the work per SM). Measured
    with ``benchmarks/sweep_widened_m64.py`` (the 45 corpus convs it can change, CUDA-graph
    replays, both bounds fitted on both GPUs' train rows together): on the convs the fitted
    bounds take, 1.043x (train, 17) / 1.027x (held-out, 7) on an H200, 1.028x / 1.014x on
    an H100 (e.g. that 1x1 10.0 -> 9.5 us on the H200, cuDNN 8.6); longer mainloops (32-72
    k-tiles, the 3x3s of C=512) and wider tiles (64x112 for 128x64) lost up to 25%.

    Raises:
        TypeError, ValueError: ``config`` is no ``Conv2dConfig``, or a bad problem, SM count,
            element size or bound.
    """
    check_rule_args(config, problem, num_sms, has_residual, element_bytes)
    max_k_tiles = k_tile_bound("max_k_tiles", max_k_tiles, SINGLE_WARPGROUP_MAX_K_TILES)
    widen_max_k_tiles = k_tile_bound(
        "widen_max_k_tiles", widen_max_k_tiles, SINGLE_WARPGROUP_WIDEN_MAX_K_TILES
    )
    if widen_max_share is None:
        widen_max_share = SINGLE_WARPGROUP_WIDEN_MAX_SHARE
    check_bound("widen_max_share", widen_max_share, "output shares")
    _, k_tiles = schedule_shape(problem, config.tile_m, config.tile_n, config.tile_k)
    if config.tile_m != 128 or k_tiles > max_k_tiles:
        return config
    if not single_warpgroup_fits(problem, config.tile_n, config.tile_k, num_sms):
        if has_residual or element_bytes != 2 or k_tiles > widen_max_k_tiles:
            return config
        width = widened_single_warpgroup_width(problem, config.tile_n, config.tile_k, num_sms)
        if width is None or 64 * width > widen_max_share * 128 * config.tile_n:
            return config
        # A gathered conv's loads take no cluster.
        cluster_m, cluster_n = (1, 1) if config.gather else cluster_shape(problem, width)
        return replace(
            config, tile_m=64, tile_n=width, cluster_m=cluster_m, cluster_n=cluster_n,
            stream_k=False, stream_k_split=0, dynamic_schedule=False, pingpong=False,
            tile_w=0, halo_h=0, halo_w=0,
        )  # fmt: skip
    single = replace(config, tile_m=64, pingpong=False, tile_w=0, halo_h=0, halo_w=0)
    if config.stream_k:
        single = replace(
            single, cluster_m=1, cluster_n=1, stream_k=False, stream_k_split=0,
            dynamic_schedule=False,
        )  # fmt: skip
    return single


def widened_single_warpgroup_width(
    problem: Conv2dProblemShape, tile_n: int, tile_k: int, num_sms: int = 132
) -> int | None:
    """The narrowest tile width above ``tile_n`` and below twice it (half steps included,
    where the k-tiles take them) whose 64-row tiles fit one wave of ``num_sms`` SMs, where
    ``problem``'s 128 x ``tile_n`` tiles fill less than a wave; else None. Such a tile holds
    less of the output than the 128-row one, so each SM's share of the conv shrinks."""
    if tile_count(problem, 128, tile_n) >= num_sms:
        return None
    half_steps = tile_k * 2 >= HALF_STEP_MIN_K_TILE_BYTES  # 16-bit k-tiles
    for width in sorted(TILE_N_CHOICES):
        if not tile_n < width < 2 * tile_n or (is_half_step(width) and not half_steps):
            continue
        if single_warpgroup_fits(problem, width, tile_k, num_sms):
            return width
    return None


def single_warpgroup_fits(
    problem: Conv2dProblemShape, tile_n: int, tile_k: int, num_sms: int = 132
) -> bool:
    """Whether ``problem``'s 64-row tiles of ``tile_n`` x ``tile_k`` fit one wave of
    ``num_sms`` SMs: where they can pay (``single_warpgroup_config``; past a wave they lost,
    ``benchmarks/tile_m64_explore.json``)."""
    tiles, _ = schedule_shape(problem, 64, tile_n, tile_k)
    return tiles <= num_sms


def wide_cluster_config(
    config: Conv2dConfig,
    problem: Conv2dProblemShape,
    num_sms: int = 132,
    has_residual: bool = False,
    element_bytes: int = 2,
    min_share: float | None = None,
    max_share: float | None = None,
    take_residual: bool = False,
) -> Conv2dConfig:
    """``config`` (the one a call without one would run on ``problem``, an unstaged conv)
    with its activation tile shared by 4 CTAs along N (1x4 clusters; a stream-K split
    dropped), for a plain 16-bit conv of several filter taps on 64-wide tiles (no halo tiles,
    gather, ping-pong or dynamic schedule) with at least 4 N tiles and mainloops of at least
    ``WIDE_CLUSTER_MIN_K_TILES`` k-tiles, where the SMs its clusters occupy
    (``wide_cluster_share``) are a share of ``num_sms`` within ``min_share`` (None:
    ``WIDE_CLUSTER_MIN_SHARE``) and ``max_share`` (None: ``WIDE_CLUSTER_MAX_SHARE``), and at
    most all of them (past that, not every cluster could be resident at once). Else
    ``config``.

    A 64-wide tile's loads are mostly its activation tile (tile_m rows against the filter's
    64); shared by multicast, it is read once for four CTAs. That paid where the tiles are few
    and the mainloop long (the 3x3s of C=256..960 on small maps; why, not profiled).
    Measured with ``benchmarks/sweep_wide_cluster.py`` (the 37 corpus convs of shares up to
    1, 27 train and 10 held-out, CUDA-graph replays) on an H100 and an H200; the bounds are
    the best on both GPUs' train convs together (the H100's alone give the same). On an
    H100, over the selection: train 1.043x their configs' speed by geomean (1x4 clusters at
    every share 0.910x), held-out 1.089x; on the convs the bounds take, train 1.091x (13,
    none slower), held-out 1.113x (8, worst 0.964x), e.g. VGG-16's 3x3 at batch 1, 28x28,
    C=K=512: 22.7 -> 17.5 us (cuDNN 19.9). On an H200, whose own configs run these convs
    faster (19.1 us there), the clusters gain little: train 1.004x, held-out 1.010x over the
    selection; on the convs taken 1.009x / 1.013x, from 0.93x to 1.13x. Below 0.4 of the
    SMs the tiles are too few to repay the clusters (up to 1.8x slower), and near all of
    them (32 or more 1x4 clusters) not every cluster is resident at once: up to 1.8x slower.
    ``take_residual``: residual calls take the clusters too (the fused sweep's variant,
    ``sweep_wide_cluster.py --form fused``). Off, as measured: on the 42 corpus convs whose
    fused calls would take them at any share, at the bounds above their fused calls ran
    0.976x (H200) and 1.002x (H100) their own configs' speed on train (held-out 0.977x,
    1.028x); both GPUs' train rows together fit no bounds at all. Not measured: fp8 calls,
    1x1 convs.

    Raises:
        TypeError, ValueError: ``config`` is no ``Conv2dConfig``, or a bad problem, SM count,
            element size or bound.
    """
    check_rule_args(config, problem, num_sms, has_residual, element_bytes)
    min_share = WIDE_CLUSTER_MIN_SHARE if min_share is None else min_share
    max_share = WIDE_CLUSTER_MAX_SHARE if max_share is None else max_share
    check_bound("min_share", min_share, "SM shares")
    check_bound("max_share", max_share, "SM shares")
    takes = (
        (take_residual or not has_residual)
        and element_bytes == 2
        and problem.R * problem.S > 1
        and config.tile_n == WIDE_CLUSTER_TILE_N
        and not (config.gather or config.tile_w or config.pingpong or config.dynamic_schedule)
        and -(-problem.K // config.tile_n) >= WIDE_CLUSTER_N
        and schedule_shape(problem, config.tile_m, config.tile_n, config.tile_k)[1]
        >= WIDE_CLUSTER_MIN_K_TILES
    )
    if not takes:
        return config
    share = wide_cluster_share(problem, config.tile_m, config.tile_n, num_sms)
    if not min_share <= share <= min(max_share, 1.0):
        return config
    return replace(config, cluster_m=1, cluster_n=WIDE_CLUSTER_N, stream_k=False, stream_k_split=0)


def wide_cluster_share(
    problem: Conv2dProblemShape, tile_m: int, tile_n: int, num_sms: int = 132
) -> float:
    """The share of ``num_sms`` SMs that ``problem``'s ``tile_m`` x ``tile_n`` tiles occupy in
    1x4 clusters: every M tile's N tiles in whole clusters of 4 (more than 1: not every
    cluster can be resident at once)."""
    clusters = -(-problem.gemm_m // tile_m) * -(-problem.K // (tile_n * WIDE_CLUSTER_N))
    return clusters * WIDE_CLUSTER_N / num_sms


def last_wave_config(
    config: Conv2dConfig,
    problem: Conv2dProblemShape,
    num_sms: int = 132,
    has_residual: bool = False,
    element_bytes: int = 2,
    max_fill: float | None = None,
    min_k_tiles: float | None = None,
) -> Conv2dConfig:
    """``config`` (the one a call without one would run on ``problem``, the conv the kernel
    runs) with its tiles' k-tiles spread evenly over one CTA per SM by stream-K (``stream_k``
    over the whole grid), for a 16-bit conv whose data-parallel tiles (no halo tiles, gather,
    ping-pong, dynamic schedule or 4-CTA cluster) run past one wave, where the waves they
    launch are at most ``max_fill`` full (``last_wave_fill``; None: ``LAST_WAVE_MAX_FILL``,
    or ``LAST_WAVE_MAX_FILL_FUSED`` with a residual) and each CTA's even share holds at least
    ``min_k_tiles`` k-tiles (None: ``LAST_WAVE_MIN_K_TILES``, ``_FUSED``). Else ``config``.

    A data-parallel grid of 4.02 waves (DeepLab's 65x65 maps at batch 8: 265 cluster tiles
    on 66 clusters) runs five rounds, the last of one tile. Past two waves the kernel's
    stream-K splits only the last partial wave and one whole wave before it, first, and runs
    the rest as whole tiles (``kernels/common/tile_scheduler.py``); each tile split between
    two SMs costs its fp32 partial's write and read, so a CTA's share must be long enough to
    repay it. Swept on an H200 (``benchmarks/sweep_last_wave.py``, CUDA-graph replays): the
    corpus's 36 plain and 32 fused convs the rule would take at any bounds (waves at most
    0.95 full, 16 k-tiles per CTA) lost 0.91x / 0.93x by geomean taken everywhere (short
    1x1s of 8-16 k-tiles per tile down to 0.75x); the bounds fitted on train take 4 of the 27
    train convs per form (1.008x plain, 1.013x fused over the train part) and hold on
    held-out (1.006x, 1.021x), all of them DeepLab's batch-8 convs at K=512 (1.03-1.15x, e.g.
    its 1x1 C=2048 122.7 -> 115.5 us plain). On a family of 39 convs drawn after the fit
    that the rule takes (batch 2-32, 14-96 pixel maps, C=128-2048, K=128-1024): 1.059x plain
    (median 1.063x, 0.87-1.21x), 1.050x fused (0.87-1.20x), cuDNN's time over ours 0.999x ->
    1.057x plain. Stream-K over the whole grid with every tile's range equal (before the
    split tiles came first) lost more: the DeepLab 1x1 at C=2048 gained 1.03x instead of
    1.06x. Not measured: fp8 calls (not taken).

    Raises:
        TypeError, ValueError: ``config`` is no ``Conv2dConfig``, or a bad problem, SM count,
            element size or bound.
    """
    check_rule_args(config, problem, num_sms, has_residual, element_bytes)
    if max_fill is None:
        max_fill = LAST_WAVE_MAX_FILL_FUSED if has_residual else LAST_WAVE_MAX_FILL
    if min_k_tiles is None:
        min_k_tiles = LAST_WAVE_MIN_K_TILES_FUSED if has_residual else LAST_WAVE_MIN_K_TILES
    check_bound("max_fill", max_fill, "wave fills")
    check_bound("min_k_tiles", min_k_tiles, "k-tiles")
    cluster_size = config.cluster_m * config.cluster_n
    takes = (
        element_bytes == 2
        and cluster_size <= 2  # a split's tiles wait on other clusters: all must be resident
        and not (
            config.stream_k or config.gather or config.tile_w or config.pingpong
            or config.dynamic_schedule
        )
    )  # fmt: skip
    if not takes:
        return config
    waves = cluster_tile_count(problem, config) / (num_sms // cluster_size)
    k_tiles = schedule_shape(problem, config.tile_m, config.tile_n, config.tile_k)[1]
    if waves <= 1 or last_wave_fill(waves) > max_fill or waves * k_tiles < min_k_tiles:
        return config
    return replace(config, stream_k=True, stream_k_split=0)


def last_wave_fill(waves: float) -> float:
    """The share of the SM slots of the whole waves a grid of ``waves`` launches that hold
    tiles: 1 for whole waves, 0.67 for 2.01."""
    return waves / math.ceil(waves)


def pointwise_pair_config(
    config: Conv2dConfig,
    problem: Conv2dProblemShape,
    num_sms: int = 132,
    has_residual: bool = False,
    element_bytes: int = 2,
    max_k_tiles: float | None = None,
) -> Conv2dConfig:
    """``config`` (the one a call without one would run on ``problem``, the conv as called:
    one the staging unfolds into a 1x1 is not a 1x1 here) on 2x1 clusters instead of 1x2 for
    a 16-bit 1x1 conv, plain or fused, whose data-parallel tiles (no gather, stream-K or dynamic
    schedule) take at most ``max_k_tiles`` k-tiles (None: ``POINTWISE_PAIR_MAX_K_TILES``; 0:
    never) that its channels leave partly empty (C=48 fills 0.75 of one 64-wide k-tile,
    C=120 0.94 of two). Else ``config``.

    The pair then shares the filter tile along M instead of the activation tile along N, as
    ``default_config``'s 2x1 clusters of single-CTA 1x1s do (``paired_m_max_channel_fill``).
    Measured with ``benchmarks/sweep_pointwise_pair.py`` (H200, CUDA-graph replays, the 33
    corpus convs the rule can change, plain calls): the C=48 and C=120 1x1s (1-2 k-tiles)
    gained 1.01-1.16x, a C=257 one (5) 1.02x; at 6-16 k-tiles (C=336..1008) the pair lost up
    to 25%. Fused calls (``relu(conv + b) + r``, the 34 corpus convs whose fused call it can
    change) fit the same bound: 1.008x train, 1.016x held-out.

    Raises:
        TypeError, ValueError: ``config`` is no ``Conv2dConfig``, or a bad problem, SM count,
            element size or bound.
    """
    check_rule_args(config, problem, num_sms, has_residual, element_bytes)
    max_k_tiles = k_tile_bound("max_k_tiles", max_k_tiles, POINTWISE_PAIR_MAX_K_TILES)
    takes = (
        element_bytes == 2
        and problem.R == problem.S == 1
        and (config.cluster_m, config.cluster_n) == (1, 2)
        and not (config.gather or config.stream_k or config.dynamic_schedule)
    )
    partly_empty = problem.C % config.tile_k != 0
    if not (takes and partly_empty):
        return config
    k_tiles = schedule_shape(problem, config.tile_m, config.tile_n, config.tile_k)[1]
    if k_tiles > max_k_tiles:
        return config
    return replace(config, cluster_m=2, cluster_n=1)


def lone_cta_config(
    config: Conv2dConfig,
    problem: Conv2dProblemShape,
    num_sms: int = 132,
    has_residual: bool = False,
    element_bytes: int = 2,
    max_k_tiles: float | None = None,
) -> Conv2dConfig:
    """``config`` (the one a call without one would run on ``problem``, the conv the kernel
    runs) on single CTAs instead of its 2-CTA cluster, for a 16-bit conv, plain or fused,
    whose data-parallel tiles (no stream-K; gathered and halo tiles run on single CTAs
    anyway) fill at most one wave of ``num_sms`` SMs and take at most ``max_k_tiles``
    k-tiles (None: ``LONE_CTA_MAX_K_TILES``; 0: never). Else ``config``.

    A cluster's CTAs share one operand tile by multicast, each loading half of it, and they
    launch together and wait for each other at the kernel's start and end. On a 2-4 us
    kernel single CTAs took 0.1-0.25 us off (CUPTI, H200; n1 28x28 C=512 K=256 3.58 -> 3.33
    us). Measured with ``benchmarks/sweep_lone_cta.py`` (H200, CUDA-graph replays, every
    corpus conv the rule can change: 155 plain calls, 163 fused): single CTAs 1.010x
    faster by geomean (fused 1.019x), at every k-tile bound of the grid and most at none
    (train 1.010x plain, 1.017x fused; held-out 1.011x, 1.023x); per conv from 0.86x (deep
    1x1s of K=2048 on 7x7 and 14x14 maps, where the shared filter tile pays) to 1.21x. Past
    a wave the clusters pay: on the corpus convs of 1-4 waves single CTAs ran 0.993x plain,
    1.003x fused on train, 0.987x and 0.992x held-out
    (``benchmarks/experiments/lone_cta_past_one_wave_H200.json``).

    Raises:
        TypeError, ValueError: ``config`` is no ``Conv2dConfig``, or a bad problem, SM count,
            element size or bound.
    """
    check_rule_args(config, problem, num_sms, has_residual, element_bytes)
    max_k_tiles = k_tile_bound("max_k_tiles", max_k_tiles, LONE_CTA_MAX_K_TILES)
    takes = element_bytes == 2 and config.cluster_m * config.cluster_n == 2
    if not takes or config.stream_k:
        return config
    tiles, k_tiles = schedule_shape(problem, config.tile_m, config.tile_n, config.tile_k)
    if tiles > num_sms or k_tiles > max_k_tiles:
        return config
    return replace(config, cluster_m=1, cluster_n=1)
