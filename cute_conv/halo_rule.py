"""The halo rule: which calls run 256-row halo tiles instead of im2col tiles.

An im2col tile loads its A rows once per filter tap, 9 times for a 3x3 conv; a halo tile loads
its footprint once per 128 bytes of channels and reads every tap from SMEM
(``Conv2dConfig.tile_w``). Where an output row is wider than a tile, the halo is pitched
(``Conv2dConfig.halo_w``): tiles side by side along Q, each with its own halo. The rule was
fitted on the corpus's train part on an H200 (``benchmarks/sweep_pitched_halo.py``): halo
tiles of 4 rows of 64 columns pay where their columns are mostly real (Q close to a multiple
of 64), on narrow convs (their A traffic is nearly all of it: VAE output convs 1.9-2.1x) and
on wide ones with several waves of tiles. Narrow 16-bit tiles of 3x3-like convs pay with
fewer real columns too (Q=56, 224: 0.875), given several waves: VGG's 224x224 C=64 3x3 at
batch 8-128 1.14-1.28x plain, 1.06-1.20x fused (``benchmarks/sweep_halo_narrow.py``)."""

from __future__ import annotations

from dataclasses import replace

from .config import Conv2dConfig, check_out_bytes, check_rule_args, pitched_halo_tile
from .dtypes import DTYPES_BY_BYTES
from .kernels.sm90.config import MAX_TILE_ELEMS
from .kernels.sm90.schedule_checks import MAX_K_TILE_BYTES, PITCHED_TILE_W
from .problem import Conv2dProblemShape
from .schedule import halo_tile_count, padded_k

__all__ = [
    "HALO_MIN_COLUMN_FILL",
    "HALO_MIN_WAVES",
    "HALO_NARROW_MIN_COLUMN_FILL",
    "HALO_NARROW_MIN_WAVES",
    "HALO_TILE_M",
    "halo_tile_config",
    "halo_tiled_config",
]

# Halo tiles where a row's tiles hold at least this share of real columns (Q over Q rounded up
# to 64: 0.875 for Q=56, 112, 224, which lost as often as they gained) and, for tiles wider
# than HALO_NARROW_TILE_N, at least this many waves of them; fitted on the corpus's train part
# on an H200, plain, fused and fp8 together (benchmarks/sweep_pitched_halo.py --joint,
# pitched_halo*_sweep.json).
HALO_MIN_COLUMN_FILL = 0.95
HALO_MIN_WAVES = 4.0
HALO_NARROW_TILE_N = 64
# 16-bit narrow halo tiles of convs with several undilated taps along W (whose halo columns
# the pitched tile reuses) also where their columns are at least this share real, given at
# least this many waves of them: fitted on the corpus's train part, plain and fused together,
# on an H200 and, apart, on an H100 (benchmarks/sweep_halo_narrow.py; both gave these).
HALO_NARROW_MIN_COLUMN_FILL = 0.85
HALO_NARROW_MIN_WAVES = 3.0
HALO_TILE_M = 256


def halo_tile_config(
    config: Conv2dConfig,
    problem: Conv2dProblemShape,
    tile_m: int,
    tile_w: int,
    element_bytes: int = 2,
    out_bytes: int = 2,
    has_residual: bool = False,
) -> Conv2dConfig | None:
    """``config`` as halo tiles of ``tile_m`` rows, ``tile_w`` columns per tile row (whole
    output rows or pitched, as ``pitched_halo_tile`` gives them), as wide as ``config``'s
    tiles up to the accumulator's budget, on single-CTA clusters with 128-byte k-tiles,
    statically scheduled; None where such tiles cannot run the kernel problem ``problem`` or
    do not fit the SMEM."""
    tile_w, halo_h, halo_w = pitched_halo_tile(problem, tile_m, tile_w)
    if not tile_w:
        return None
    halo = replace(
        config, tile_m=tile_m, tile_n=min(config.tile_n, MAX_TILE_ELEMS // tile_m),
        tile_k=MAX_K_TILE_BYTES // element_bytes, cluster_m=1, cluster_n=1, stages=0,
        stream_k=False, stream_k_split=0, dynamic_schedule=False, pingpong=False,
        gather=False, gather_vector=1, tile_w=tile_w, halo_h=halo_h, halo_w=halo_w,
    )  # fmt: skip
    try:
        halo.plan(DTYPES_BY_BYTES[element_bytes], DTYPES_BY_BYTES[out_bytes], has_residual)
    except ValueError:
        return None
    return halo


def halo_tiled_config(
    config: Conv2dConfig,
    problem: Conv2dProblemShape,
    num_sms: int = 132,
    has_residual: bool = False,
    element_bytes: int = 2,
    out_bytes: int = 2,
    min_column_fill: float | None = None,
    min_waves: float | None = None,
    narrow_min_column_fill: float | None = None,
    narrow_min_waves: float | None = None,
) -> Conv2dConfig:
    """For a call without a config, after the other rules: ``config`` as 256-row halo tiles
    (``halo_tile_config``, 4 rows of 64 columns) where they run the kernel problem
    ``problem``, ``config`` is an im2col config of 128 or 256 rows (not gathered), the tiles'
    columns are at least ``min_column_fill`` real (default ``HALO_MIN_COLUMN_FILL``), their
    width pads K no more than ``config``'s, and, for tiles wider than
    ``HALO_NARROW_TILE_N``, they make at least ``min_waves`` waves on ``num_sms`` SMs
    (default ``HALO_MIN_WAVES``); else ``config``. Narrow 16-bit halo tiles of a conv with
    several undilated taps along W take a second pair of bounds: columns at least
    ``narrow_min_column_fill`` real (default ``HALO_NARROW_MIN_COLUMN_FILL``) and at least
    ``narrow_min_waves`` waves (default ``HALO_NARROW_MIN_WAVES``)."""
    check_rule_args(config, problem, num_sms, has_residual, element_bytes)
    check_out_bytes(out_bytes)
    min_column_fill = HALO_MIN_COLUMN_FILL if min_column_fill is None else min_column_fill
    min_waves = HALO_MIN_WAVES if min_waves is None else min_waves
    if narrow_min_column_fill is None:
        narrow_min_column_fill = HALO_NARROW_MIN_COLUMN_FILL
    narrow_min_waves = HALO_NARROW_MIN_WAVES if narrow_min_waves is None else narrow_min_waves
    if config.tile_w or config.gather or config.tile_m not in (128, HALO_TILE_M):
        return config
    halo = halo_tile_config(
        config, problem, HALO_TILE_M, PITCHED_TILE_W, element_bytes, out_bytes, has_residual
    )
    if halo is None:
        return config
    if padded_k(problem.K, halo.tile_n) > padded_k(problem.K, config.tile_n):
        return config
    column_fill = problem.Q / padded_k(problem.Q, halo.tile_w)
    tiles = halo_tile_count(problem, HALO_TILE_M, halo.tile_n, halo.tile_w)
    narrow = halo.tile_n <= HALO_NARROW_TILE_N
    # A 3x3's halo columns are reused across its taps along W; a folded stem has one tap.
    reuses_columns = problem.S > 1 and problem.dilation == (1, 1) and element_bytes == 2
    narrow_bounds_met = (
        column_fill >= narrow_min_column_fill and tiles >= narrow_min_waves * num_sms
    )
    if narrow and reuses_columns and narrow_bounds_met:
        return halo
    if column_fill < min_column_fill:
        return config
    if not narrow and tiles < min_waves * num_sms:
        return config
    return halo
