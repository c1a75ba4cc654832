"""The ring rule: an A/B ring no deeper than the one tile each CTA runs.

The kernel's A/B ring is as deep as SMEM allows (up to 16 stages), and one thread of the CTA
initializes each stage's two barriers, one after the other, before any load can start: ~9
cycles a barrier on an H200, 0.13 us for a 16-stage ring against a 2-stage one. Where a conv's
tiles fill at most one wave, each CTA runs a single tile, whose loads never use more stages
than the tile has k-tiles; a ring of exactly that many keeps every load in flight at once and
initializes no barrier it does not use. The bound was fitted on the corpus's train part,
plain and fused calls together (``benchmarks/sweep_single_tile_ring.py --joint``)."""

from __future__ import annotations

from dataclasses import replace

from .config import Conv2dConfig, check_out_bytes, check_rule_args, k_tile_bound
from .dtypes import DTYPES_BY_BYTES
from .problem import Conv2dProblemShape
from .schedule import schedule_shape

__all__ = ["SINGLE_TILE_RING_MAX_K_TILES", "single_tile_ring_config"]

# A ring of one tile's k-tiles for 16-bit data-parallel convs of at most a wave of tiles with
# at most this many k-tiles each: fitted on the corpus' plain and fused train convs together
# (benchmarks/sweep_single_tile_ring.py --joint, on an H200).
SINGLE_TILE_RING_MAX_K_TILES = 12
# The shallowest ring the kernel takes.
_MIN_STAGES = 2


def single_tile_ring_config(
    config: Conv2dConfig,
    problem: Conv2dProblemShape,
    num_sms: int = 132,
    has_residual: bool = False,
    element_bytes: int = 2,
    out_bytes: int = 2,
    max_k_tiles: float | None = None,
) -> Conv2dConfig:
    """``config`` (the one a call without one would run on ``problem``, the conv the kernel
    runs) with ``stages`` set to its tiles' k-tile count (at least 2) where its 16-bit
    (``element_bytes`` 2; fp8 is not measured) data-parallel tiles (no stream-K, halo tiles,
    ping-pong or dynamic schedule) fill at most one wave of ``num_sms`` SMs, take at most
    ``max_k_tiles`` k-tiles (None: ``SINGLE_TILE_RING_MAX_K_TILES``; 0: never) and the ring
    its SMEM fits is deeper. Else ``config``; a config that sets its own ``stages`` is kept.

    Raises:
        TypeError, ValueError: ``config`` is no ``Conv2dConfig``, or a bad problem, SM count,
            element size, output size or bound.
    """
    check_rule_args(config, problem, num_sms, has_residual, element_bytes)
    check_out_bytes(out_bytes)
    max_k_tiles = k_tile_bound("max_k_tiles", max_k_tiles, SINGLE_TILE_RING_MAX_K_TILES)
    # Halo tiles count their tiles by output rows (their halos have a ring of their own);
    # stream-K, ping-pong and dynamic CTAs run work of several tiles.
    other_schedule = config.stream_k or config.pingpong or config.dynamic_schedule
    if element_bytes != 2 or config.stages or config.tile_w or other_schedule:
        return config
    tiles, k_tiles = schedule_shape(problem, config.tile_m, config.tile_n, config.tile_k)
    if tiles > num_sms or k_tiles > max_k_tiles:
        return config
    dtypes = (DTYPES_BY_BYTES[element_bytes], DTYPES_BY_BYTES[out_bytes])
    stages = max(k_tiles, _MIN_STAGES)
    if stages >= config.plan(*dtypes, has_residual).ab_stages:
        return config
    short = replace(config, stages=stages)
    try:
        short.plan(*dtypes, has_residual)
    except ValueError:  # a set depth takes the epilogue's full buffers: the ring no longer fits
        return config
    return short
