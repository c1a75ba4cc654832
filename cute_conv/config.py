"""The Hopper kernel's configuration on the host: the default-config heuristic and the checks
of a config against a problem.

``Conv2dConfig`` itself (tile shape, cluster shape, pipeline depth, rasterization, schedule
options) is defined next to the kernel, in ``kernels/sm90/config.py``, and re-exported here. It
is part of the compile-cache key, so it is frozen and hashable and holds only what changes the
compiled kernel, apart from its launch choices (``stream_k_split``, see
``schedule.launch_clusters``); geometry (``Conv2dProblemShape``) never does. How the grid walks
a problem (tile counts, the stream-K choice) is ``schedule``'s.
"""

from __future__ import annotations

import math

from .dtypes import CUTLASS_DTYPES
from .kernels.common.grouped_direct import GroupedDirectConfig
from .kernels.common.pointwise_gemv import PointwiseGemvConfig
from .kernels.sm90.config import (
    HALF_STEP_MIN_K_TILE_BYTES,
    HALO_SLACK_ROWS,
    TILE_K_CHOICES,
    TILE_N_CHOICES,
    Conv2dConfig,
    is_half_step,
)
from .kernels.sm90.schedule_checks import (
    MAX_K_TILE_BYTES,
    MIN_K_TILE_BYTES,
    PITCHED_HALO_ROWS_MULTIPLE,
    PITCHED_HALO_W_MULTIPLE,
    check_pitched_halo,
)
from .kernels.sm100.config import Conv2dConfigSm100
from .problem import Conv2dProblemShape
from .schedule import (
    cluster_tile_count,
    halo_tile_count,
    padded_k,
    schedule_shape,
    stream_k_for_tiles,
    stream_k_schedule,
    tile_count,
)
from .validation import check_problem_limits

__all__ = [
    "BULK_TILE_STORE_MIN_BYTES",
    "Conv2dConfig",
    "THREE_WARPGROUP_MAX_COST",
    "bulk_tile_store_pays",
    "check_bound",
    "check_channels",
    "check_config_fits",
    "check_element_bytes",
    "check_rule_args",
    "cluster_shape",
    "default_config",
    "half_step_widths",
    "k_tile_width",
    "split_tile_config",
    "takes_whole_source",
    "tile_widths",
    "tiles_hold_whole_rows",
    "wide_split_shape",
    "wide_tile_shapes",
]

# GEMM K up to which a mainloop is short: a 2x1 cluster sharing a wide filter tile does not
# pay there (see default_config).
_SHORT_MAINLOOP_K = 512
# 16-bit 1x1 convs of at least a wave of single-CTA tiles whose channels fill at most this
# fraction of their k-tiles take 2x1 clusters (see default_config), plain calls and residual
# ones: fitted on the corpus's train part (benchmarks/sweep_paired_m.py, H200), any k-tile
# left partly empty.
PAIRED_M_MAX_CHANNEL_FILL = 0.99
PAIRED_M_MAX_CHANNEL_FILL_FUSED = 0.99
# GEMM K up to which a residual kernel's mainloop is too short to hide a 256-wide tile of C
# loads behind: such convs take 128-wide tiles (measured on an H200: K=64 and 256 1x1 convs
# 1.2x faster at tile_n=128 than 256, K=2304 and 4608 3x3 convs 3-5% slower).
RESIDUAL_NARROW_MAX_GEMM_K = 128
# GEMM K up to which a residual 1x1 conv takes 128-wide tiles all the same (see
# default_config): fitted on the corpus's train part on an H200
# (benchmarks/sweep_residual_pointwise_width.py), every GEMM K.
RESIDUAL_NARROW_POINTWISE_MAX_GEMM_K = math.inf
# Output tiles per SM and GEMM K from which a 16-bit residual conv's tiles wider than 192 keep
# three A/B stages, so that a whole tile of C fits in SMEM (four leave room for 2-4 of its 8
# subtiles): the source-load warp then fetches the next tile's C under this one's mainloop,
# which pays where an SM has tiles after this one. Fitted together on the train part of an
# H100's rows, checked on an H200's (benchmarks/sweep_residual_source.py).
WHOLE_SOURCE_MIN_TILES_PER_SM = 2.5
WHOLE_SOURCE_MIN_GEMM_K = 192
# The A/B stages that leave a 128x256 tile's whole C room in SMEM.
WHOLE_SOURCE_AB_STAGES = 3
# The fixed cost of a k-tile (barriers, issue), in channels of MMA work, by input element
# bytes (see default_config). fp8: fitted on the corpus's train part (C=320 wants 64-wide
# k-tiles, so below 32; C=432 128-wide ones, so above 21.3), not the 32 that equal bytes
# would give; 16-bit: equal bytes, which ties the fit (benchmarks/sweep_k_tile.py).
_K_TILE_COST_CHANNELS = {2: 16, 1: 26.5}
ELEMENT_BYTES = (1, 2)  # fp8, 16-bit inputs
OUT_BYTES = (1, 2, 4)  # e4m3, 16-bit, float32 outputs
# 256-row tiles for 64-wide ones, given at least this many waves of them (see default_config):
# for plain 16-bit calls fitted on the corpus's train part on an H200 and, apart, on an H100
# (benchmarks/sweep_tall_tiles.py; both gave 1.5); for 16-bit calls with a residual and for
# fp8 calls, with and without one, on an H200 (--form fused, fp8, fused_fp8: each gave 0.5,
# the least measured).
_MIN_WAVES_TALL = 1.5
_MIN_WAVES_TALL_FUSED = 0.5
_MIN_WAVES_TALL_FP8 = 0.5
# 256-row tiles for 128-wide ones of plain 16-bit stride-1 convs of several taps, given at
# least this many waves of them (see default_config): fitted on the corpus's train part on an
# H200 and, apart, on an H100 (benchmarks/sweep_tall_wide_tiles.py; both gave 6).
_MIN_WAVES_TALL_WIDE = 6
# The same for calls with a residual: never (--form fused on an H200: no bound gained on the
# train part; fused 256x128 tiles ran 0.99-1.33x the 128x128 ones' time).
_MIN_WAVES_TALL_WIDE_FUSED = math.inf
# The same for fp8 calls: --form fp8 on an H200, fitted on 3 train convs (1.005x, one takes
# it), 1.034x on the 3 held-out (one takes it).
_MIN_WAVES_TALL_WIDE_FP8 = 6
# Three warpgroups of 64 rows (see default_config): the one tile of them measured faster, where
# at least a wave of them costs at most this factor of the 128-row tiles' cost.
_THREE_WARPGROUP_TILE = (192, 128)
THREE_WARPGROUP_MAX_COST = 0.95
# 32-wide tiles (see default_config): for K up to their width; 256 rows (in 2x1 clusters) for
# K up to _NARROW_TALL_MAX_K with at least this fraction of a wave of 256-row tiles.
NARROW_TILE_N = 32
_NARROW_TALL_MAX_K = 8
_MIN_WAVES_NARROW_TALL = 0.75
# Dynamic scheduling (see default_config) from this many waves of tiles: fitted on the
# corpus's train part (benchmarks/sweep_dynamic.py).
MIN_WAVES_DYNAMIC = 19.8
# Ping-pong (see default_config): for pointwise convs of at least this many k-tiles, at this
# tile width.
_MIN_K_TILES_PINGPONG = 4
# ... and at most this many: fitted on the corpus's train part (benchmarks/
# sweep_pingpong_k_tiles.py, H200).
PINGPONG_MAX_K_TILES = 8
_PINGPONG_TILE_N = 128
# Halo tiles (see default_config): the one tile width measured faster, for output rows that
# fill at least this fraction of it.
_HALO_TILE_W = 64
_HALO_MIN_FILL = 0.75
# Ping-pong halo tiles (see pingpong_halo_tile): 4 output rows of 32 columns.
_PINGPONG_HALO_TILE_W = 32
# Wide split tiles (see wide_split_shape): data-parallel 16-bit convs of at least this many
# k-tiles per tile take 128x256 (or 256x128) tiles split by stream-K, where a split fits; the
# wide tile's N padding at most this fraction of K. Fitted on the corpus's train part on an
# H200 (benchmarks/sweep_wide_split.py, wide_split_sweep.json).
WIDE_SPLIT_MIN_K_TILES = 180
_WIDE_SPLIT_SHAPES = ((128, 256), (256, 128))
_WIDE_SPLIT_MAX_N_PADDING = 0.25
# Data-parallel 16-bit convs of at least this many k-tiles per tile take 128x128 tiles split by
# stream-K where such a split fits (before the wide split: fewer ways, half the partial tile
# per way); plain calls, calls with a residual. Fitted per form on the corpus's train part and
# a family of SD-like convs on an H200 (benchmarks/sweep_square_split.py,
# square_split*_sweep_H200.json).
SQUARE_SPLIT_MIN_K_TILES = 90
SQUARE_SPLIT_MIN_K_TILES_FUSED = 72
_SQUARE_SPLIT_SHAPE = (128, 128)
# Tile widths step by 32 (the epilogue's subtile); the half steps between them (48, 80, ...,
# 240) are considered for convs of at least this many k-tiles: 16-bit plain, 16-bit with a
# residual, fp8 plain (see default_config). Fitted on the corpus's train part on an H200
# and an H100 alike (benchmarks/sweep_tile_width.py: tile_width_*sweep*.json).
HALF_STEP_MIN_K_TILES = 9
HALF_STEP_MIN_K_TILES_FUSED = 18
HALF_STEP_MIN_K_TILES_FP8 = 12  # fp8 inputs with a residual: never (not measured)


def check_problem(problem: object) -> None:
    """``TypeError`` unless ``problem`` is a ``Conv2dProblemShape``."""
    if not isinstance(problem, Conv2dProblemShape):
        raise TypeError(
            f"problem must be a Conv2dProblemShape (e.g. Conv2dProblemShape.from_shapes("
            f"x_shape, filter_shape, stride=..., padding=...)), got {problem!r} "
            f"({type(problem).__name__})"
        )


def check_heuristic_args(problem: object, num_sms: object, has_residual: object = False) -> None:
    """``TypeError`` / ``ValueError`` unless the arguments of a default-config heuristic are a
    ``Conv2dProblemShape`` a call can run (``validation.check_problem_limits``), a positive int
    and a bool."""
    check_problem(problem)
    check_problem_limits(problem)
    if isinstance(num_sms, bool) or not isinstance(num_sms, int):
        raise TypeError(f"num_sms must be an int, got {num_sms!r} ({type(num_sms).__name__})")
    if num_sms < 1:
        raise ValueError(f"num_sms must be >= 1 (the device's SM count), got {num_sms}")
    if not isinstance(has_residual, bool):
        raise TypeError(
            f"has_residual must be a bool, got {has_residual!r} ({type(has_residual).__name__})"
        )


def check_channels(channels: object, hint: str = "") -> None:
    """``TypeError`` unless ``channels`` is an int (not a bool), ``ValueError`` unless it is
    at least 1; ``hint`` follows the name in the messages."""
    if not isinstance(channels, int) or isinstance(channels, bool):
        raise TypeError(f"channels must be an int{hint}, got {channels!r}")
    if channels < 1:
        raise ValueError(f"channels must be >= 1{hint}, got {channels}")


def check_rule_args(
    config: object, problem: object, num_sms: object, has_residual: object, element_bytes: object
) -> None:
    """``TypeError`` / ``ValueError`` unless the arguments of a rule that refines a call's
    config (``small_m_config``, ``single_warpgroup_config``, ``halo_rule``,
    ``epilogue_rule``) are a ``Conv2dConfig`` and a heuristic's arguments
    (``check_heuristic_args``, an input element size)."""
    check_heuristic_args(problem, num_sms, has_residual)
    check_element_bytes(element_bytes)
    if not isinstance(config, Conv2dConfig):
        raise TypeError(f"config must be a Conv2dConfig, got {type(config).__name__}")


def k_tile_bound(name: str, value: object, fitted: float) -> float:
    """A rule's bound on k-tiles per tile: ``value``, or ``fitted`` for None; ``ValueError``
    unless it is a number >= 0 (``math.inf`` included; not a bool)."""
    if value is None:
        return fitted
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"{name} must be a number >= 0 or None, got {value!r}")
    return value


def check_out_bytes(out_bytes: object) -> None:
    """``ValueError`` unless ``out_bytes`` is an output width the kernels write."""
    if out_bytes not in OUT_BYTES:
        raise ValueError(f"out_bytes must be one of {OUT_BYTES}, got {out_bytes!r}")


def check_element_bytes(element_bytes: object) -> None:
    """``ValueError`` unless ``element_bytes`` is an input width the kernels take (2: 16-bit,
    1: fp8)."""
    if isinstance(element_bytes, bool) or element_bytes not in ELEMENT_BYTES:
        raise ValueError(
            f"element_bytes must be 2 (bfloat16/float16 inputs) or 1 (fp8), got {element_bytes!r}"
        )


def check_config_fits(config: Conv2dConfig, problem: Conv2dProblemShape) -> None:
    """Raise ``ValueError`` if ``config`` cannot run the kernel problem ``problem`` (the limits
    of halo tiles, C a multiple of ``gather_vector``; other configs run any problem);
    ``TypeError`` for arguments of other types (``can_implement_sm100`` checks an SM100
    config)."""
    if not isinstance(config, Conv2dConfig):
        hint = ""
        if isinstance(config, Conv2dConfigSm100):
            hint = " (can_implement_sm100 checks those)"
        elif isinstance(config, PointwiseGemvConfig):
            hint = " (cute_conv.gemv_rule.check_pointwise_gemv_fits checks those)"
        elif isinstance(config, GroupedDirectConfig):
            hint = " (cute_conv.direct_rule.check_direct_dense_fits checks those)"
        raise TypeError(f"config must be a Conv2dConfig, got {type(config).__name__}{hint}")
    check_problem(problem)
    if config.tile_w:
        misfit = _halo_misfit(problem, config.tile_m, config.tile_w, config.halo_h, config.halo_w)
        if misfit:
            raise ValueError(misfit)
    if problem.C % config.gather_vector:
        raise ValueError(
            f"gather_vector={config.gather_vector} loads that many channels at once: C must be "
            f"a multiple of it, got C={problem.C} (with_gathered_operands picks one that fits)"
        )


def tiles_hold_whole_rows(
    config: Conv2dConfig, problem: Conv2dProblemShape, act_dtype: str, out_dtype: str
) -> bool:
    """Whether a thread-stored output (``EpilogueSpec.store_by_threads``) of ``config`` on
    the kernel problem ``problem`` may go out in bulk, a tile at a time
    (``EpilogueSpec.bulk_tile_store``): its tiles run along M (no halo tiles) with one
    epilogue each (no ping-pong), its N tile holds all of K (so a tile's rows are one
    contiguous range of the output), and its staging buffers hold a whole tile."""
    if problem.K > config.tile_n:
        return False
    plan = config.plan(CUTLASS_DTYPES[act_dtype], CUTLASS_DTYPES[out_dtype], False)
    return config.tile_copies(plan) >= 1


# Bulk tile stores for plain outputs of at least this many bytes: below it, a tile's two
# barriers and its bulk copy cost more than the thread stores they replace. Set on the
# corpus's train rows measured in session 54 (benchmarks/thread_store_bulk_compare_H200.md).
BULK_TILE_STORE_MIN_BYTES = 256 * 1024


def bulk_tile_store_pays(problem: Conv2dProblemShape, out_bits: int, has_residual: bool) -> bool:
    """Whether a thread-stored output whose tiles hold whole rows (``tiles_hold_whole_rows``)
    goes out in bulk (``EpilogueSpec.bulk_tile_store``): plain outputs (with a residual the
    threads read C, and the bulk path measured slower) of at least
    ``BULK_TILE_STORE_MIN_BYTES``."""
    out_bytes = problem.gemm_m * problem.K * out_bits // 8
    return not has_residual and out_bytes >= BULK_TILE_STORE_MIN_BYTES


def _halo_rows(problem: Conv2dProblemShape, tile_m: int, tile_w: int) -> int:
    """Input rows of a halo tile's halo: its output rows plus the filter's reach along H."""
    return tile_m // tile_w + (problem.R - 1) * problem.dilation[0]


def _halo_misfit(
    problem: Conv2dProblemShape, tile_m: int, tile_w: int, halo_h: int, halo_w: int = 0
) -> str:
    """Why halo tiles of ``tile_m`` x ``tile_w`` with ``halo_h``-row halos (``halo_w``
    columns wide where pitched) cannot run ``problem``; empty if they can."""
    shift_w = (problem.S - 1) * problem.dilation[1]
    rows = _halo_rows(problem, tile_m, tile_w)
    if problem.stride != (1, 1):
        return f"halo tiles (tile_w={tile_w}) need stride 1, got {problem.stride}"
    if halo_w and tile_w + shift_w > halo_w:
        return (
            f"pitched halo tiles need tile_w + (S-1)*dilation_w <= halo_w, got "
            f"tile_w={tile_w}, S={problem.S}, dilation_w={problem.dilation[1]}, "
            f"halo_w={halo_w}"
        )
    if not halo_w and (problem.Q + shift_w > tile_w or shift_w > HALO_SLACK_ROWS):
        return (
            f"halo tiles need Q + (S-1)*dilation_w <= tile_w and (S-1)*dilation_w <= "
            f"{HALO_SLACK_ROWS}, got Q={problem.Q}, S={problem.S}, "
            f"dilation_w={problem.dilation[1]}, tile_w={tile_w}"
        )
    if rows > halo_h:
        return (
            f"halo tiles need tile_m/tile_w + (R-1)*dilation_h <= halo_h, got "
            f"{tile_m}/{tile_w} + ({problem.R}-1)*{problem.dilation[0]} = {rows} "
            f"> halo_h={halo_h}"
        )
    return ""


def default_config(
    problem: Conv2dProblemShape,
    num_sms: int = 132,
    *,
    has_residual: bool = False,
    element_bytes: int = 2,
    wide_split: bool = True,
    wide_split_residual: bool = True,
    wide_split_min_k_tiles: float | None = None,
    square_split_min_k_tiles: float | None = None,
    pingpong_max_k_tiles: float | None = None,
    paired_m_max_channel_fill: float | None = None,
    half_step_min_k_tiles: float | None = None,
    out_bytes: int = 2,
    residual_narrow_max_k: float | None = None,
    residual_narrow_pointwise_max_k: float | None = None,
    whole_source_min_k: float | None = None,
    whole_source_min_tiles_per_sm: float | None = None,
    min_waves_tall: float | None = None,
    min_waves_tall_wide: float | None = None,
    three_warpgroup_max_cost: float | None = None,
) -> Conv2dConfig:
    """A fast heuristic for an H100/H200, fitted to measurements of the benchmark suite.

    tile_n: pick the tile that minimizes ``waves * (tile_n + 64)``, where ``waves`` is the
    number of rounds of persistent tiles over ``num_sms`` SMs and ``64`` stands for the fixed
    cost of a tile (epilogue, pipeline fill) in units of MMA columns. This trades padding waste
    in the last N tile (K=384 fits 192 exactly, 256 would waste a third) against wave
    quantization (few M tiles want narrower tiles to fill the machine). Ties go to the wider
    tile, which re-reads the activation fewer times.

    Half steps (``half_step_min_k_tiles``; None: the fitted bound of the call's form,
    ``math.inf``: none): for 16-bit convs of at least ``HALF_STEP_MIN_K_TILES`` k-tiles
    (``HALF_STEP_MIN_K_TILES_FUSED`` with a residual; fp8 ones ``HALF_STEP_MIN_K_TILES_FP8``,
    none with a residual) of 64 bytes or more, the widths between the multiples of 32 (48,
    80, ..., 240; 16-wide epilogue subtiles) that pad K less than the choice above
    (``half_step_widths``) join it in the same cost. SDXL's 1x1 conv of C=2560,
    K=1280 at 32x32 then runs 128 tiles of 128x80 (no padding) for 112 of 128x96; SD's 3x3
    convs of K=320 take 80 for 96 (four N tiles either way). Measured
    (``benchmarks/sweep_tile_width.py``: the corpus convs whose config half steps change,
    CUDA-graph replays) against the whole-step config, on an H200 / an H100, each fitting
    the same bounds on the train part: plain, 1.032x / 1.029x on 76 train problems and
    1.045x / 1.042x on 23 held-out ones (0.90-1.48x per problem on the H200's 55 that take
    them); fused (``relu(conv + b) + r``), 1.036x / 1.034x train (70), 1.035x / 1.038x
    held-out (23); fp8 inputs with bf16 output, 1.022x / 1.022x train (80), 1.024x / 1.028x
    held-out (24). Below the bounds, where the epilogue's doubled rounds weigh more, half
    steps lost up to 17%. 8-bit outputs (``out_bytes`` 1) keep whole steps: the kernel
    stores them from half-step tiles, but they were not measured.

    Cluster: two CTAs along N share the activation tile by multicast, halving its L2 traffic,
    when the N tiles pair up evenly (a lone CTA of a pair would compute a tile of zeros).
    Otherwise, when the filter tile is the wider one (tile_n > 128) and the mainloop is long,
    two CTAs along M share the filter tile (measured on an H200: a 5x5 conv, K=192, 1.17x;
    a 3x3 with K=256, 1.03x; 1x1 convs with K=64 1% slower, hence the mainloop bound).

    Residual epilogues (``has_residual``): the kernel keeps as much of a tile of C in SMEM as
    fits beside the A/B stages, so that its loads hide behind the mainloop, but a 256-wide
    tile's C does not fit whole beside four of them. With a short mainloop (at most ``residual_narrow_max_k`` of GEMM K; None:
    ``RESIDUAL_NARROW_MAX_GEMM_K``: 1x1 convs of C <= 128) the C loads would be exposed, so
    such convs take 128-wide tiles, on single-CTA clusters (for 1x1 convs: dynamically
    scheduled, see below): r50-c2-1x1-up fused, 128x128 1x2 -> 1x1 dynamic, 0.1274 -> 0.1214
    ms on an H200, 0.1725 -> 0.1638 on an H100. The bound is fitted on the corpus
    (``benchmarks/sweep_residual_width.py``: the 93 fused convs it can change, CUDA-graph
    replays on an H200 and an H100, the geomean of both GPUs' train scores): 1.030x the
    256-wide tiles' speed on the 59 train convs, held-out 1.002x (the former 512: 1.026x,
    0.999x). No bound fits both GPUs well: the 3x3 convs of C=128 (GEMM K 1152) gain 3-11%
    from 128-wide tiles on the H100, those of C=256 lose up to 15% there but not on the H200.
    16-bit 1x1 convs narrow at any GEMM K (``residual_narrow_pointwise_max_k``; None:
    ``RESIDUAL_NARROW_POINTWISE_MAX_GEMM_K``, inf; fp8 ones were not measured and keep
    ``residual_narrow_max_k``): fitted on the 15 corpus 1x1s of C >= 512
    it changes (``benchmarks/sweep_residual_pointwise_width.py``, CUDA-graph replays on an
    H200; bounds 0-2048 and inf), 1.040x the 256-wide tiles' speed on the 12 train convs and
    1.078x on the 3 held-out ones (0.98-1.14x per conv; e.g. the batch-128 14x14 1x1 of
    C=1024, K=512: 128x256 1x2 of three stages and a whole tile of C -> 128x128 of five).
    Wider tiles (208-256) of 16-bit residual convs keep three A/B stages instead of four,
    which leaves SMEM for the tile's whole C (four leave 2-4 of its eight subtiles, so most of
    C loads during the epilogue), where there are at least ``whole_source_min_tiles_per_sm``
    output tiles per SM (None: ``WHOLE_SOURCE_MIN_TILES_PER_SM``) and at least
    ``whole_source_min_k`` of GEMM K (None: ``WHOLE_SOURCE_MIN_GEMM_K``): prefetching the next
    tile's C pays only where an SM has a next tile. Both bounds fitted together on the
    corpus's train part on an H100 (``benchmarks/sweep_residual_source.py``: the 77 fused
    convs the rule can change, CUDA-graph replays): 1.018x on 51 train convs, held-out 1.015x
    (26); the same bounds on an H200's rows, which the fit did not see: 1.019x train, 1.019x
    held-out (GEMM K >= 1152 alone, the rule before: 1.009x / 1.011x on the H100, 1.007x /
    1.017x on the H200). Per conv the whole source ran 0.85-1.15x: the convs of many tiles per
    SM gaining (the batch-8 256x256 C=256 -> 512 3x3: 2.12 -> 1.85 ms on the H100), those of
    one or two waves of tiles losing, which the tiles-per-SM bound now leaves out.

    tile_m: 256 for 64-wide tiles (K <= 64) with at least ``min_waves_tall`` (None:
    ``_MIN_WAVES_TALL`` for plain 16-bit calls, ``_MIN_WAVES_TALL_FUSED`` for 16-bit calls
    with a residual, ``_MIN_WAVES_TALL_FP8`` for fp8 ones) waves of
    them: the filter traffic and the barrier rounds per MMA halve. Measured on an H200: r50-c2 3x3
    (C=K=64) 0.89x -> 1.06x cuDNN, the folded stem 2.24x -> 2.59x; wider tiles (128 and up)
    were slower at 256 rows on every suite shape but one (1x1, K=128, +3%). Also 256 rows,
    with the filter shared by a 2x1 cluster, for short k-tiles (tile_k < 64) up to 128 wide,
    whose MMA work per k-tile is half a 64-wide one's. Measured on an H100: the stem's
    super-pixel view (C=32, K=128, 21 k-tiles of 32) 128x128 0.360 ms, 256x128 0.271,
    256x128 2x1 0.249; 3x3 convs of C=32 (N=32, 112x112): K=128 128x128 0.0987, 256x128
    0.0793, 256x128 2x1 0.0717; K=64 256x64 0.0583, 256x64 2x1 0.0528. The bound on waves
    was 4 (the suite's shapes); fitted on the corpus (``benchmarks/sweep_tall_tiles.py``: the
    30 convs of 0.5-4 waves of 256-row tiles it can change, CUDA-graph replays on an H200,
    grid 0.5-4 waves) it is 1.5: 1.026x on the 12 train convs it takes, held-out 1.044x (3),
    e.g. RegNet's batch-8 112x112 1x1 of C=32, K=96 14.7 -> 12.2 us (cuDNN 12.8); below ~1.5
    waves 256-row tiles lost up to 11% (ResNet's batch-1 224x224 3x3 at C=64). An H100's
    rows, fitted apart, gave the same bound (train 1.021x, held-out 1.026x). Calls with a
    residual, the same 30 convs fitted apart (H200), take 0.5, the least measured: 1.028x on
    22 train convs, held-out 1.057x (8), per conv 0.87-1.17x (the worst again ResNet's
    batch-1 224x224 3x3 at C=64, 1.48 waves). fp8 calls (``--form fp8``, H200: the 40 convs
    of 0.5-4 waves it can change there) take 0.5 too: 1.078x on 26 train convs, held-out
    1.094x (14), per conv 0.92-1.41x (losing on batch-1 130x130 1x1s and a 28x28 C=192 1x1,
    by 4-8%; gaining most on the 56x56 and 112x112 1x1s of C=32-64); fp8 calls with a
    residual (``--form fused_fp8``, 47 convs fitted apart) take it as well: 1.053x on 30
    train convs, held-out 1.060x (17), per conv 0.85-1.24x (losing on batch-1 maps of 1-2
    waves, the worst a 100x168 3x3 of C=256, K=36).
    Residual kernels stay on single CTAs there (the fused stem: 0.3335 ms at 2x1, 0.3056 at
    1x1).

    tile_m 256 for 128-wide tiles of 128-byte k-tiles too, for plain stride-1 convs of
    several taps with at least ``min_waves_tall_wide`` (None: ``_MIN_WAVES_TALL_WIDE``,
    ``_MIN_WAVES_TALL_WIDE_FP8`` for fp8 calls) waves of 256-row tiles: a 128x128 tile
    loads 32 KB of A and filter per 1M MACs, a 256x128 one 48 KB per 2M, and on the large
    3x3 convs of K=128 that traffic binds.
    Measured (``benchmarks/sweep_tall_wide_tiles.py``: the 9 corpus convs the rule can
    change, CUDA-graph replays, each GPU fitted apart to the same bound) on an H200 / an H100:
    1.017x / 1.012x on the 4 train convs, held-out 1.029x / 1.019x on 5; e.g. VGG's batch-128
    112x112 3x3 of C=64, K=128 0.434 -> 0.403 ms on the H200 (cuDNN 0.396). Below ~4 waves
    256-row tiles lost (up to 20% at one wave); strided and 1x1 convs lost at any count
    (0.76-1.01x on an H100, 27 convs), so they keep 128 rows, as do calls with a residual
    (``--form fused``, H200: 0.99-1.33x the 128x128 time, no bound gaining on the train part).
    Plain fp8 calls (``--form fp8``, H200, 6 convs) fit 6 waves as well, on thin evidence: one
    train conv takes it (VGG's batch-32 112x112 C=K=128, 1.015x) and one held-out (its
    batch-128 form, 0.458 -> 0.414 ms); below it 256 rows lost 4-18% (ResNet's batch-128
    28x28 C=K=128 3x3, r50-c3-3x3 of the suite, 28.4 -> 30.3 us).

    tile_n 32 for K <= 32 (the MMA of 64-wide tiles is at least half padding there), on
    128-row tiles, or with K <= 8 and at least ``_MIN_WAVES_NARROW_TALL`` of a wave of them,
    256-row ones sharing the filter in 2x1 clusters; never ping-pong. Measured on an H100
    (``benchmarks/sweep_narrow_tiles.py``, 36 corpus problems with K <= 32): against the
    64-wide (or ping-pong 128-wide) config, this rule runs 1.15x (train) and 1.33x
    (held-out) by geomean, at 0.986 / 0.994 of the fastest variant (its two thresholds were
    picked looking at both splits); SD's VAE output conv (C=128, K=3, 512x512, batch 8)
    1.315 -> 0.80 ms at 256x32 2x1 (cuDNN 0.70), K=8 and K=4 convs on 128x128 maps at batch
    8 1.55x and 1.80x; 256-row tiles lost where there were fewer (K=4 at 128x128, batch 1:
    1.19x at 128 rows, 1.02x at 256) or K was 21 or 32 (0.92-0.98x of the 128-row ones).

    tile_m 192 (three consumer warpgroups of 64 rows), at tile_n 128: where at least a wave
    of them costs ``three_warpgroup_max_cost`` (None: ``THREE_WARPGROUP_MAX_COST``) or less
    of the 128-row tiles' cost (rounds of tiles x tile_m x (tile_n + 64)), i.e. where
    128-row tiles leave much of the last wave idle.
    Measured on an H200: r50-c5 3x3 (98 tiles of 128x256 on 132 SMs, 132 of 192x128)
    0.0511 -> 0.0421 ms plain (1x2 cluster), 0.0553 -> 0.0463 fused. Where both fill their
    waves alike, 192x128 was no faster (r50-c3/c4 3x3 1-5% slower, r50-c3-1x1-dn 2% faster,
    big-256 1% faster), and 192x64, 192x96 and 192x160 were slower than the default on
    every shape tried. The bound, first set on the suite, was swept over the corpus
    (``benchmarks/sweep_three_warpgroup.py``, H200: the 61 plain and 83 fused convs a bound
    up to 1.1 changes): wider bounds lost on fused calls (0.94-0.95x train and held-out) and
    on plain held-out ones (0.97x, train flat), so 0.95 stands.

    tile_k: a k-tile never spans two filter taps, so each tap's C channels are padded up to a
    multiple of tile_k; the choice trades that padding (C=96: 128 with 64, none with 32)
    against the fixed cost of each k-tile. The kernel skips the MMA k-blocks (16 channels,
    fp8 32) wholly past C, but the padding still fills SMEM and the loads. fp8 inputs
    (``element_bytes=1``) choose among k-tiles of the same bytes (32 to 128 channels), so
    that a stage holds the same bytes and MMA time as a 16-bit one; the rest of the heuristic
    is then unchanged. The k-tile costs were fitted on an H100 (``benchmarks/sweep_k_tile.py``:
    the corpus problems >= 2 GFLOP where the width is a choice, each timed at every width),
    last with the kernel that skips: fp8 (54 problems) 26.5 channels picks 0.996 of the
    per-problem best on the train part and 0.994 held-out, against 0.989 and 0.967 for the
    32 of equal bytes; e.g. sd-64-320 (C=320: 64-wide, no padding, instead of 128-wide padded
    to 384) 1081 -> 1146 TFLOP/s before the skip. 16-bit (29 problems): the 16 of equal bytes
    ties the fitted cost, 0.998 on train and 1.000 held-out.

    stream_k, stream_k_split: see ``stream_k_schedule``: each tile's k-tiles split a bounded
    number of ways where the SMs have room, else over the whole grid for long mainloops on at
    most ``_MAX_WAVE_STREAM_K`` of a wave, else data-parallel. The split rule was fitted on
    the corpus (``benchmarks/sweep_stream_k.py``, H100, the 172 unstaged sub-wave problems
    with 12+ k-tiles, each timed data-parallel, over the whole grid and at every split of
    ``STREAM_K_SPLITS``): the rule picks 0.965 -> 0.989 of the fastest variant's speed on
    the train part and 0.976 -> 0.990 held-out; e.g. ResNet-50's last 3x3 at batch 1 (4
    cluster tiles of 72 k-tiles): whole grid 16.7 us -> 6-way split 13.3 us (cuDNN 16.0).
    The whole-grid rule came before it, from the suite's shapes on an H200:
    measured on an H200 (small batches of suite shapes, stream-K vs data-parallel):
    r50-c5 (72 k-tiles) N=1/4/8: 0.0186/0.0188/0.0193 -> 0.0161/0.0138/0.0168 ms;
    sd-16-1280 (180 k-tiles) N=1: 0.0404 -> 0.0281. Shorter mainloops lost: r50-c3 (18
    k-tiles) and r50-c4 (36) at N=1..32 by 2-20%; so did odd-5x5 N=1 (75 k-tiles, 96 tiles,
    0.73 of a wave) 0.0178 -> 0.0203, while the suite's r50-c5 (98 tiles) gained 1%.

    Wide split tiles (``wide_split_shape``): a plain 16-bit conv the rules above leave
    data-parallel (unless ``wide_split`` is False: the baseline the rule is fitted against),
    with at least ``WIDE_SPLIT_MIN_K_TILES`` k-tiles per tile (3x3 convs of
    C >= 1280, or dilated ones of C=2048), takes 128x256 tiles (256x128 where K would pad a
    256-wide tile by more than a quarter) split by stream-K as ``stream_k_schedule`` splits
    them, where a split fits the SMs: the wave-cost choice (e.g. 112 tiles of 128x96 for
    SDXL's 32x32 3x3 at C=2560, K=1280) streams more operand rows per MMA than a wide tile,
    whose split still fills the SMs. Measured on an H200 (``benchmarks/sweep_wide_split.py``,
    88 corpus problems, replayed from CUDA graphs): that 3x3 0.109 -> 0.095 ms, the
    DeepLab-style dilated 3x3s 1.6-1.9x; below ~180 k-tiles every wide split lost (0.53-0.89x
    on 1x1 convs of C=2048 and 3x3 convs of C <= 960). ``wide_split_min_k_tiles`` (None:
    ``WIDE_SPLIT_MIN_K_TILES``) is that bound, a sweep's variable. Calls with a residual take
    it at the same bound (``wide_split_residual``; False keeps their own tiles): on an H200
    (``benchmarks/sweep_fused_wide_split.py``, the 18 corpus convs whose fused call it would
    change from 90 k-tiles, against the fused call's own tiles, replayed from CUDA graphs)
    the bound fitted on the 14 train ones is the plain calls' 180 (1.151x; from 90: 1.041x),
    held-out 1.142x (4 convs); SD's n8_h8_w8 C=2560 K=1280 3x3 fused 89 -> 61 us, the
    DeepLab-style dilated 3x3s of C=2048 1.6-1.9x. fp8 calls were not measured and keep
    their configs. Square split tiles come first: from ``SQUARE_SPLIT_MIN_K_TILES`` k-tiles
    per tile (``SQUARE_SPLIT_MIN_K_TILES_FUSED`` with a residual;
    ``square_split_min_k_tiles`` overrides it, ``math.inf``: none), where 128x128 tiles split
    (``stream_k_schedule``), they run instead of the wide split or the data-parallel tiles:
    a wide tile split 4-6 ways writes and reads a 128x256 fp32 partial per way, 128x128 ones
    split 2-3 ways half that, fewer times; against 64-wide data-parallel tiles they stream
    fewer operand rows per MMA. Measured on an H200 (``benchmarks/sweep_square_split.py``,
    CUDA-graph replays, the corpus's convs and a family of SD-like ones; the bounds fitted
    per form on the corpus's train part and the family): SD's batch-1 32x32 3x3s of K=640
    1.39-1.43x faster, 3x3s of C=640-960 1.0-1.3x. At 72 k-tiles (C=512 3x3s) the
    single-warpgroup rule turns the split into 64x128 data-parallel tiles: fused calls
    gained there (1.13-1.20x on 5 of 7), plain ones did not (0.83-1.06x).

    dynamic_schedule: for 1x1 convs on single-CTA clusters. Their tiles stream from DRAM and
    SMs run them at different speeds (ncu on an H200: the average SM busy 89-90% of the
    busiest one, for r50-c2-1x1-up and r50-c3-1x1-dn); taking tiles from a counter let the
    faster SMs take more: 0.0762 -> 0.0744 ms and 0.0417 -> 0.0414 (0.0416 -> 0.0405 in a
    second run). The same switch cost 3x3 convs 2-4% (r50-c2/c3 3x3, the stem), whose
    static order keeps neighbouring tiles in step for L2. Only from ``MIN_WAVES_DYNAMIC``
    waves of tiles: the counter's round trips cost every CTA (an H100, 1x1x1x120 -> 12, one
    tile: 3.5 -> 2.7 us kernel time static), and on the corpus (``benchmarks/
    sweep_dynamic.py``, H100: the 94 pointwise problems it took past one wave, dynamic and
    static, checked, eager and replayed from CUDA graphs) it paid only on the largest: always
    dynamic ran at 0.982 / 0.937 of the faster variant on the train part (eager / graphs);
    the bound fitted there, at 0.997 / 0.999 (held-out: 0.977 / 0.939 -> 0.991 / 0.998).

    cluster_m (paired M): 16-bit 1x1 convs left on single-CTA clusters, data-parallel, with
    at least a wave of tiles, whose C fills at most ``paired_m_max_channel_fill`` of their
    k-tiles (None: ``PAIRED_M_MAX_CHANNEL_FILL``, or ``PAIRED_M_MAX_CHANNEL_FILL_FUSED``
    with a residual; C=48 fills 0.75 of a 64-wide k-tile, C=120 0.94 of two) take 2x1
    clusters instead (and so no dynamic scheduling). Autotuning the H200's plain corpus rows
    furthest behind cuDNN picked 2x1 clusters for the short 1x1s of C=48/120 (1.08-1.28x
    over the heuristic's config, eager). Swept on the corpus (``benchmarks/
    sweep_paired_m.py``, H200, every 1x1 it could change: 94 plain, 91 fused, replayed from
    CUDA graphs): 2x1 clusters gained where C leaves a k-tile partly empty (C=48 1.05-1.11x,
    C=120 1.09-1.17x plain) and lost where C fills its k-tiles (C=64/128 K=256 0.92-0.98x);
    the bound fitted on train takes every partly empty one: plain 1.008x on the 70 train
    problems (held-out 1.009x), fused 1.004x (held-out 1.016x). The variable was chosen on
    rows whose held-out part had been seen (a k-tile bound was swept first and lost).

    pingpong: with a residual, for pointwise convs where ``pingpong_pays``, 128x128 tiles on
    single-CTA clusters, statically scheduled: one consumer's epilogue (a large share of a
    short mainloop's tile) runs under the other's mainloop. Measured on an H200 against the
    previous defaults: r50-c3-1x1-dn (8 k-tiles, dynamic 128x128) 0.0417 -> 0.0404 ms plain,
    0.0484 -> 0.0477 fused; r50-c4-1x1-up (4 k-tiles, 128x256 1x2) 0.0306 -> 0.0296, fused
    0.0422 -> 0.0411. Not where the epilogue is the smaller share or the tile one k-tile deep:
    r50-c3/c4 3x3 0-4% slower, r50-c2-1x1-up (one k-tile) 9% slower, wider convs (sd-64-320
    at 128 or 96 wide) much slower. On the corpus (H100, the 102 problems where it paid by
    that rule, against the heuristic's choice without it, replayed from CUDA graphs) it paid
    with a residual only: fused, the alternative ran 0.981x on the 73 train problems (held-out
    0.970x); plain, 1.073x (held-out 1.040x), its 128-wide tiles wasting N where the wave
    count wants 160, 224 or 256; plain fp8 on its 64 such problems, 1.093x (held-out
    1.047x). So plain convs no longer take it. ``pingpong_max_k_tiles`` (None:
    ``PINGPONG_MAX_K_TILES``) bounds the k-tiles of the convs that take it: on long
    mainloops the epilogue it hides is a small share of a tile, and the 128-wide tile costs
    more than the plain call's wider one. Fitted on the corpus (``benchmarks/
    sweep_pingpong_k_tiles.py``, H200, the 102 fused calls that took it unbounded, against
    their config without it, replayed from CUDA graphs): by k-tiles it ran 1.066x at 4
    (33 convs), 1.036x at 8 (25), 0.86-0.90x at 10-15 (11), 0.95-1.02x beyond; bounded at 8
    it runs 1.030x on the 73 train problems (unbounded 1.010x), 1.038x held-out (1.033x).
    Fp8 calls with a residual take the same bound in their own k-tiles (unmeasured).

    tile_w, halo_h (halo tiles): for the 256x64 tiles of stride-1 convs with several taps whose
    output rows are 48..64 wide (minus the filter's reach along W): 4 output rows of 64
    columns per tile, the input halo loaded once per 64 channels instead of once per tap.
    Measured on an H200: r50-c2 3x3 0.0718 -> 0.0592 ms plain, 0.0827 -> 0.0713 fused. Not
    for the stem (staged, 112 columns: 128-wide tiles, no faster) nor for 128-wide tiles
    (r50-c3 3x3 with 32-column tiles: 13-22% slower; as ping-pong tiles faster on an H100
    only, see ``pingpong_halo_tile``).
    """
    check_heuristic_args(problem, num_sms, has_residual)
    check_element_bytes(element_bytes)
    for name, switch in (("wide_split", wide_split), ("wide_split_residual", wide_split_residual)):
        if not isinstance(switch, bool):
            raise TypeError(f"{name} must be a bool, got {switch!r}")
    check_out_bytes(out_bytes)
    if half_step_min_k_tiles is None:
        half_step_min_k_tiles = _half_step_bound(has_residual, element_bytes)
    if residual_narrow_max_k is None:
        residual_narrow_max_k = RESIDUAL_NARROW_MAX_GEMM_K
    if residual_narrow_pointwise_max_k is None:
        residual_narrow_pointwise_max_k = RESIDUAL_NARROW_POINTWISE_MAX_GEMM_K
    if whole_source_min_k is None:
        whole_source_min_k = WHOLE_SOURCE_MIN_GEMM_K
    if wide_split_min_k_tiles is None:
        wide_split_min_k_tiles = WIDE_SPLIT_MIN_K_TILES
    if square_split_min_k_tiles is None:
        square_split_min_k_tiles = (
            SQUARE_SPLIT_MIN_K_TILES_FUSED if has_residual else SQUARE_SPLIT_MIN_K_TILES
        )
    if pingpong_max_k_tiles is None:
        pingpong_max_k_tiles = PINGPONG_MAX_K_TILES
    if paired_m_max_channel_fill is None:
        paired_m_max_channel_fill = (
            PAIRED_M_MAX_CHANNEL_FILL_FUSED if has_residual else PAIRED_M_MAX_CHANNEL_FILL
        )
    if whole_source_min_tiles_per_sm is None:
        whole_source_min_tiles_per_sm = WHOLE_SOURCE_MIN_TILES_PER_SM
    if three_warpgroup_max_cost is None:
        three_warpgroup_max_cost = THREE_WARPGROUP_MAX_COST
    # The 256-row tiles' fitted bounds (64-wide, 128-wide) of the call's form. The 128-wide
    # tiles of fp8 calls with a residual were not measured: they keep the fused calls' bound
    # (a whole 16-bit tile of C does not fit beside 256x128 stages).
    if element_bytes == 2 and not has_residual:  # plain 16-bit
        tall_bounds = (_MIN_WAVES_TALL, _MIN_WAVES_TALL_WIDE)
    elif element_bytes == 2:  # 16-bit with a residual
        tall_bounds = (_MIN_WAVES_TALL_FUSED, _MIN_WAVES_TALL_WIDE_FUSED)
    elif not has_residual:  # plain fp8
        tall_bounds = (_MIN_WAVES_TALL_FP8, _MIN_WAVES_TALL_WIDE_FP8)
    else:
        tall_bounds = (_MIN_WAVES_TALL_FP8, _MIN_WAVES_TALL_WIDE_FUSED)
    if min_waves_tall is None:
        min_waves_tall = tall_bounds[0]
    if min_waves_tall_wide is None:
        min_waves_tall_wide = tall_bounds[1]
    check_bound("half_step_min_k_tiles", half_step_min_k_tiles, "k-tiles")
    check_bound("residual_narrow_max_k", residual_narrow_max_k, "GEMM K channels")
    check_bound(
        "residual_narrow_pointwise_max_k", residual_narrow_pointwise_max_k, "GEMM K channels"
    )
    check_bound("whole_source_min_k", whole_source_min_k, "GEMM K channels")
    check_bound("wide_split_min_k_tiles", wide_split_min_k_tiles, "k-tiles")
    check_bound("square_split_min_k_tiles", square_split_min_k_tiles, "k-tiles")
    check_bound("pingpong_max_k_tiles", pingpong_max_k_tiles, "k-tiles")
    check_bound("paired_m_max_channel_fill", paired_m_max_channel_fill, "k-tile fill")
    check_bound("whole_source_min_tiles_per_sm", whole_source_min_tiles_per_sm, "tiles per SM")
    check_bound("min_waves_tall", min_waves_tall, "waves")
    check_bound("min_waves_tall_wide", min_waves_tall_wide, "waves")
    check_bound("three_warpgroup_max_cost", three_warpgroup_max_cost, "cost factor")
    tile_k = k_tile_width(problem.C, element_bytes)

    def cheapest(widths: tuple[int, ...]) -> int:
        # min() keeps the first of equal costs: ties go to the wider tile.
        return min(sorted(widths, reverse=True), key=lambda n: _wave_cost(problem, 128, n, num_sms))

    whole_widths = tile_widths(problem.K)
    tile_n = cheapest(whole_widths)
    _, k_tiles = schedule_shape(problem, 128, tile_n, tile_k)
    # 8-bit outputs from half-step tiles run but were not measured: whole steps for them.
    half_steps = out_bytes > 1 and tile_k * element_bytes >= HALF_STEP_MIN_K_TILE_BYTES
    if half_steps and k_tiles >= half_step_min_k_tiles:
        tile_n = cheapest(whole_widths + half_step_widths(problem.K, tile_n))
    pointwise = problem.R == problem.S == 1
    narrow_max_k = residual_narrow_max_k
    if pointwise and element_bytes == 2:  # fp8 was not measured
        narrow_max_k = max(narrow_max_k, residual_narrow_pointwise_max_k)
    narrowed_for_residual = has_residual and tile_n == 256 and problem.gemm_k <= narrow_max_k
    if narrowed_for_residual:
        tile_n = 128
    full_k_tile = tile_k * element_bytes == MAX_K_TILE_BYTES  # one 128-byte row
    tall_tiles = -(-problem.gemm_m // 256)
    many_tall_tiles = tall_tiles >= min_waves_tall * num_sms
    short_k_tiles = not full_k_tile and tile_n <= 128
    narrow_tall = (
        tile_n == NARROW_TILE_N
        and problem.K <= _NARROW_TALL_MAX_K
        and tall_tiles >= _MIN_WAVES_NARROW_TALL * num_sms
    )
    tall = (tile_n == 64 or short_k_tiles) and many_tall_tiles
    # Only stride-1 convs of several taps: strided and pointwise ones lost at 256 rows.
    several_taps = problem.stride == (1, 1) and problem.R * problem.S > 1
    tall_wide = tile_n == 128 and full_k_tile and several_taps
    tall_wide = tall_wide and tall_tiles >= min_waves_tall_wide * num_sms
    tile_m = 256 if tall or tall_wide or narrow_tall else 128
    if tile_m == 128 and _fills_waves_better_at_192(
        problem, tile_n, num_sms, three_warpgroup_max_cost
    ):
        tile_m, tile_n = _THREE_WARPGROUP_TILE
    # Short k-tiles load the filter tile in more pieces per MMA: share it along M.
    short_k_shares = (short_k_tiles or narrow_tall) and tile_m == 256 and not has_residual
    cluster_m, cluster_n = cluster_shape(
        problem, tile_n, pair_n=not narrowed_for_residual, share_filter=short_k_shares
    )
    tiles, _ = schedule_shape(problem, tile_m, tile_n, tile_k)
    stream_k, stream_k_split = stream_k_for_tiles(
        problem, tile_m, tile_n, tile_k, cluster_m, cluster_n, num_sms
    )
    paired_m = pointwise and cluster_m == cluster_n == 1 and not stream_k and tiles >= num_sms
    channel_fill = problem.C / (-(-problem.C // tile_k) * tile_k)  # of its k-tiles per tap
    if paired_m and element_bytes == 2 and channel_fill <= paired_m_max_channel_fill:
        cluster_m = 2
    dynamic_schedule = pointwise and cluster_m == cluster_n == 1 and not stream_k
    dynamic_schedule = dynamic_schedule and tiles >= MIN_WAVES_DYNAMIC * num_sms
    pingpong = has_residual and tile_m == 128 and tile_n > NARROW_TILE_N and not stream_k
    pingpong = pingpong and pingpong_pays(problem, tile_k, num_sms, pingpong_max_k_tiles)
    if pingpong:
        tile_n, cluster_m, cluster_n, dynamic_schedule = _PINGPONG_TILE_N, 1, 1, False
    takes_wide_split = wide_split and (wide_split_residual or not has_residual)
    if takes_wide_split and not stream_k and element_bytes == 2:
        wide = wide_split_shape(
            problem, num_sms, wide_split_min_k_tiles, square_split_min_k_tiles
        )
        if wide is not None:
            return split_tile_config(problem, *wide)
    halo = tile_m == 256 and tile_n == 64 and full_k_tile and not stream_k
    tile_w, halo_h = _halo_tile(problem, tile_m) if halo else (0, 0)
    whole_source = has_residual and takes_whole_source(tile_m, tile_n, element_bytes)
    whole_source = whole_source and problem.gemm_k >= whole_source_min_k
    tiles_per_sm = tile_count(problem, tile_m, tile_n) / num_sms
    whole_source = whole_source and tiles_per_sm >= whole_source_min_tiles_per_sm
    return Conv2dConfig(
        tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, cluster_m=cluster_m, cluster_n=cluster_n,
        stages=WHOLE_SOURCE_AB_STAGES if whole_source else 0,
        stream_k=stream_k, stream_k_split=stream_k_split, dynamic_schedule=dynamic_schedule,
        tile_w=tile_w, halo_h=halo_h, pingpong=pingpong,
    )  # fmt: skip


def takes_whole_source(tile_m: int, tile_n: int, element_bytes: int) -> bool:
    """Whether a residual conv's tiles can take ``WHOLE_SOURCE_AB_STAGES`` so that their whole
    tile of C fits in SMEM (see default_config): 128-row tiles wider than 192, 16-bit inputs
    (fp8 was not measured)."""
    return element_bytes == 2 and tile_m == 128 and tile_n > 192


def split_tile_config(
    problem: Conv2dProblemShape, tile_m: int, tile_n: int, split: int = 0
) -> Conv2dConfig:
    """``tile_m`` x ``tile_n`` tiles for ``problem``'s 16-bit inputs, clusters and k-tile as
    ``default_config`` sets them for that tile (two CTAs along N where the N tiles pair up,
    else along M for a tile wider than 128 on a long mainloop), statically scheduled;
    data-parallel (``split`` 0) or its k-tiles split ``split`` ways by stream-K. Whether the
    split fits the SMs is the caller's to check (``cluster_tile_count``)."""
    check_problem(problem)
    cluster_m, cluster_n = cluster_shape(problem, tile_n)
    return Conv2dConfig(
        tile_m=tile_m, tile_n=tile_n, tile_k=k_tile_width(problem.C, 2), cluster_m=cluster_m,
        cluster_n=cluster_n, stream_k=split > 0, stream_k_split=split,
    )  # fmt: skip


def cluster_shape(
    problem: Conv2dProblemShape, tile_n: int, pair_n: bool = True, share_filter: bool = False
) -> tuple[int, int]:
    """``(cluster_m, cluster_n)`` of the heuristic (see default_config): two CTAs along N where
    the N tiles pair up (and ``pair_n``), else two along M where the filter tile is the larger
    L2 stream (wider than 128 on a long mainloop) or ``share_filter`` says so, else one."""
    if pair_n and -(-problem.K // tile_n) % 2 == 0:
        return 1, 2
    wide_filter = tile_n > 128 and problem.gemm_k > _SHORT_MAINLOOP_K
    return (2, 1) if wide_filter or share_filter else (1, 1)


def wide_tile_shapes(problem: Conv2dProblemShape) -> tuple[tuple[int, int], ...]:
    """``(tile_m, tile_n)`` of the wide split tiles, 128x256 first then 256x128, that pad
    ``problem``'s K by at most ``_WIDE_SPLIT_MAX_N_PADDING`` of it."""
    check_problem(problem)
    return tuple(
        (tile_m, tile_n) for tile_m, tile_n in _WIDE_SPLIT_SHAPES
        if padded_k(problem.K, tile_n) <= (1 + _WIDE_SPLIT_MAX_N_PADDING) * problem.K
    )  # fmt: skip


def wide_split_shape(
    problem: Conv2dProblemShape,
    num_sms: int = 132,
    min_k_tiles: float = WIDE_SPLIT_MIN_K_TILES,
    square_min_k_tiles: float = SQUARE_SPLIT_MIN_K_TILES,
) -> tuple[int, int, int] | None:
    """``(tile_m, tile_n, split)`` of the split tiles ``default_config`` gives a
    data-parallel 16-bit ``problem`` (see there): 128x128 tiles where they have at least
    ``square_min_k_tiles`` k-tiles and ``stream_k_schedule`` splits them (the split fits
    the SMs), else the first of 128x256 and 256x128 whose N padding is at most
    ``_WIDE_SPLIT_MAX_N_PADDING`` of K, where its tiles have at least ``min_k_tiles``
    k-tiles and split; None otherwise. 128x128 tiles too pad K by at most
    ``_WIDE_SPLIT_MAX_N_PADDING``."""
    check_heuristic_args(problem, num_sms)
    for name, bound in (("min_k_tiles", min_k_tiles), ("square_min_k_tiles", square_min_k_tiles)):
        if isinstance(bound, bool) or not isinstance(bound, (int, float)):
            raise TypeError(f"{name} must be a number of k-tiles, got {bound!r}")
    square = split_tile_config(problem, *_SQUARE_SPLIT_SHAPE)
    # Every shape's tiles hold the same k-tiles: the conv's taps times its k-tiles of C.
    _, k_tiles = schedule_shape(problem, *_SQUARE_SPLIT_SHAPE, square.tile_k)
    square_pads = padded_k(problem.K, square.tile_n) > (1 + _WIDE_SPLIT_MAX_N_PADDING) * problem.K
    if k_tiles >= square_min_k_tiles and not square_pads:
        ways = _split_ways(problem, square, num_sms)
        if ways:
            return (*_SQUARE_SPLIT_SHAPE, ways)
    if k_tiles < min_k_tiles:
        return None
    for tile_m, tile_n in wide_tile_shapes(problem):
        split = _split_ways(problem, split_tile_config(problem, tile_m, tile_n), num_sms)
        return (tile_m, tile_n, split) if split else None
    return None


def _split_ways(problem: Conv2dProblemShape, config: Conv2dConfig, num_sms: int) -> int:
    """The ways ``stream_k_schedule`` splits ``config``'s tiles of ``problem`` over the
    clusters of ``num_sms`` SMs, 0 where no split fits."""
    _, k_tiles = schedule_shape(problem, config.tile_m, config.tile_n, config.tile_k)
    max_clusters = num_sms // (config.cluster_m * config.cluster_n)
    return stream_k_schedule(cluster_tile_count(problem, config), k_tiles, max_clusters)[1]


def tile_widths(k: int) -> tuple[int, ...]:
    """The tile widths the heuristic and the autotuner consider for ``k`` output channels:
    the multiples of 32, 32-wide tiles only where K fits one (the convs they were measured
    on)."""
    return tuple(
        n for n in TILE_N_CHOICES
        if not is_half_step(n) and (n > NARROW_TILE_N or k <= NARROW_TILE_N)
    )  # fmt: skip


def half_step_widths(k: int, whole_width: int) -> tuple[int, ...]:
    """The half-step tile widths (48, 80, ..., 240) that pad ``k`` output channels less than
    ``whole_width``-wide tiles do: those ``default_config`` weighs against it."""
    for name, value in (("k", k), ("whole_width", whole_width)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")

    return tuple(
        n for n in TILE_N_CHOICES if is_half_step(n) and padded_k(k, n) < padded_k(k, whole_width)
    )


def k_tile_width(channels: int, element_bytes: int, k_tile_cost: float | None = None) -> int:
    """The heuristic's ``tile_k`` for ``channels`` per filter tap (see default_config): a
    k-tile holds channels of one tap, so they are padded up to a multiple of it; the padded
    channels plus ``k_tile_cost`` per k-tile (default: the fitted cost for
    ``element_bytes``) are minimized, ties going to the wider k-tile."""
    check_element_bytes(element_bytes)
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"channels must be a positive int, got {channels!r}")
    if k_tile_cost is not None and not k_tile_cost >= 0:
        raise ValueError(f"k_tile_cost must be >= 0 channels, got {k_tile_cost!r}")
    cost = _K_TILE_COST_CHANNELS[element_bytes] if k_tile_cost is None else k_tile_cost
    widest_first = sorted(
        (k for k in TILE_K_CHOICES if MIN_K_TILE_BYTES <= k * element_bytes <= MAX_K_TILE_BYTES),
        reverse=True,
    )
    return min(widest_first, key=lambda k: -(-channels // k) * (k + cost))


def pingpong_pays(
    problem: Conv2dProblemShape,
    tile_k: int,
    num_sms: int = 132,
    max_k_tiles: float = PINGPONG_MAX_K_TILES,
) -> bool:
    """Whether ``problem`` is a pointwise conv with the k-tiles (of ``tile_k`` channels) and
    the tiles that ping-pong gains on (see default_config): at least
    ``_MIN_K_TILES_PINGPONG`` k-tiles and at most ``max_k_tiles``, and two tiles per SM of
    128 x ``_PINGPONG_TILE_N`` (so that both consumer warpgroups have tiles)."""
    if not problem.R == problem.S == 1:
        return False
    tiles, k_tiles = schedule_shape(problem, 128, _PINGPONG_TILE_N, tile_k)
    enough = _MIN_K_TILES_PINGPONG <= k_tiles <= max_k_tiles
    return enough and tiles >= 2 * num_sms


def check_bound(name: str, value: object, unit: str) -> None:
    """A rule's bound must be a number (``math.inf`` included), not a bool."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be None or a number of {unit}, got {value!r}")


def _half_step_bound(has_residual: bool, element_bytes: int) -> float:
    """The fitted k-tile bound of half-step widths for a call's form (see default_config)."""
    if element_bytes == 1:
        return math.inf if has_residual else HALF_STEP_MIN_K_TILES_FP8
    return HALF_STEP_MIN_K_TILES_FUSED if has_residual else HALF_STEP_MIN_K_TILES


def _wave_cost(problem: Conv2dProblemShape, tile_m: int, tile_n: int, num_sms: int) -> int:
    """Rounds of persistent tiles times a tile's cost (its MMA rows x columns plus the fixed
    cost of a tile, 64 columns' worth)."""
    waves = -(-tile_count(problem, tile_m, tile_n) // num_sms)
    return waves * tile_m * (tile_n + 64)


def _fills_waves_better_at_192(
    problem: Conv2dProblemShape, tile_n: int, num_sms: int, max_cost: float
) -> bool:
    """Whether ``_THREE_WARPGROUP_TILE`` tiles, at least a wave of them, cost at most
    ``max_cost`` times what 128 x ``tile_n`` ones cost (see default_config)."""
    tile_m_192, tile_n_192 = _THREE_WARPGROUP_TILE
    cost_192 = _wave_cost(problem, tile_m_192, tile_n_192, num_sms)
    return tile_count(problem, tile_m_192, tile_n_192) >= num_sms and (
        cost_192 <= max_cost * _wave_cost(problem, 128, tile_n, num_sms)
    )


def _halo_tile(
    problem: Conv2dProblemShape, tile_m: int, tile_w: int = _HALO_TILE_W
) -> tuple[int, int]:
    """``(tile_w, halo_h)`` of whole-row halo tiles (``pitched_halo_tile`` without a pitch)
    for a stride-1 conv with several taps whose output rows fill most of ``tile_w`` columns;
    ``(0, 0)`` otherwise."""
    tile_w, halo_h, halo_w = pitched_halo_tile(problem, tile_m, tile_w)
    if halo_w or problem.Q < _HALO_MIN_FILL * tile_w:
        return 0, 0
    return tile_w, halo_h


def pitched_halo_tile(
    problem: Conv2dProblemShape, tile_m: int, tile_w: int = _HALO_TILE_W
) -> tuple[int, int, int]:
    """``(tile_w, halo_h, halo_w)`` of halo tiles of ``tile_m`` rows, ``tile_w`` columns per
    tile row, for a stride-1 conv with several taps: whole output rows (``halo_w`` 0) where
    a row and the filter's reach fit ``tile_w``, else side by side along Q with a halo
    ``halo_w`` columns wide (the tile's columns and the reach, rounded up to whole 8-row
    swizzle blocks; a row taller where that leaves an odd number of them); ``(0, 0, 0)``
    where neither runs the problem."""
    halo_h = _halo_rows(problem, tile_m, tile_w)
    shift_w = (problem.S - 1) * problem.dilation[1]
    halo_w = -(-(tile_w + shift_w) // PITCHED_HALO_W_MULTIPLE) * PITCHED_HALO_W_MULTIPLE
    if problem.Q + shift_w <= tile_w:
        halo_w = 0
    elif halo_h * halo_w % PITCHED_HALO_ROWS_MULTIPLE:
        halo_h += 1  # a row taller: an even number of swizzle blocks
    if halo_w:
        try:
            check_pitched_halo(tile_w, halo_h, halo_w)  # the kernel's limits
        except ValueError:
            return 0, 0, 0
    runs = (
        problem.R * problem.S > 1
        and tile_m % tile_w == 0
        and not _halo_misfit(problem, tile_m, tile_w, halo_h, halo_w)
    )
    return (tile_w, halo_h, halo_w) if runs else (0, 0, 0)


def pingpong_halo_tile(problem: Conv2dProblemShape, num_sms: int = 132) -> tuple[int, int]:
    """``(tile_w, halo_h)`` of 128x128 ping-pong halo tiles (4 output rows of 32 columns,
    each consumer warpgroup with its own tile's halo) for a stride-1 conv with several taps
    whose output rows fill 24..32 columns, with two tiles per SM; ``(0, 0)`` otherwise.

    Not a default: on r50-c3 3x3 they were faster than cooperative im2col tiles on an H100
    (0.0536 -> 0.0514 ms plain, 0.0614 -> 0.0603 fused) and slower on an H200 (0.0476 ->
    0.0514, 0.0541 -> 0.0575), so the autotuner tries them per device."""
    tile_m = 128
    tile_w, halo_h = _halo_tile(problem, tile_m, _PINGPONG_HALO_TILE_W)
    tiles = halo_tile_count(problem, tile_m, _PINGPONG_TILE_N, _PINGPONG_HALO_TILE_W)
    return (tile_w, halo_h) if tile_w and tiles >= 2 * num_sms else (0, 0)
