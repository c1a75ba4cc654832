"""The epilogue rule: which calls store their output in 64-wide subtiles instead of 32-wide ones.

A plain kernel stages its output tile in SMEM ``Conv2dConfig.epi_n`` columns at a time; each
subtile costs a barrier round of the consumer warps and one TMA store of ``tile_m`` rows of
``epi_n`` channels. Convs with a short mainloop (1x1s of few channels: RegNet's C=48/120,
the bottlenecks' reductions) spend most of a tile in that loop, and a 64-wide subtile halves
its rounds and stores 128-byte rows. Its buffers take twice the SMEM, so the A/B ring is
shallower (128x128 tiles: 5 stages instead of 6; 128x256 and 192x128: 3 instead of 4), which
long mainloops feel and so do short ones when the ring gets too shallow. Both bounds were
fitted on the corpus's train part (``benchmarks/sweep_epi_width.py``)."""

from __future__ import annotations

from dataclasses import replace

import cutlass

from .config import Conv2dConfig, check_out_bytes, check_rule_args, k_tile_bound
from .problem import Conv2dProblemShape
from .schedule import schedule_shape

__all__ = [
    "WIDE_EPI_N",
    "WIDE_EPILOGUE_MAX_K_TILES",
    "WIDE_EPILOGUE_MIN_AB_STAGES",
    "wide_epilogue_config",
]

# 64-wide subtiles for plain 16-bit convs whose tiles take at most this many k-tiles each and
# keep at least this many A/B stages beside the wider buffers; fitted on the corpus's train
# part (benchmarks/sweep_epi_width.py, epi_width_sweep*.json).
WIDE_EPILOGUE_MAX_K_TILES = 6
WIDE_EPILOGUE_MIN_AB_STAGES = 4
WIDE_EPI_N = 64
# Tiles this wide or wider: a 64-wide tile would store in a single subtile, with nothing of
# its own to overlap the store with.
_MIN_TILE_N = 128


def wide_epilogue_config(
    config: Conv2dConfig,
    problem: Conv2dProblemShape,
    num_sms: int = 132,
    has_residual: bool = False,
    element_bytes: int = 2,
    out_bytes: int = 2,
    max_k_tiles: float | None = None,
    min_ab_stages: int | None = None,
) -> Conv2dConfig:
    """``config`` (the one a call without one would run on ``problem``, the conv the kernel
    runs) with ``WIDE_EPI_N``-wide epilogue subtiles where it is a plain kernel of 16-bit
    inputs and outputs, at least ``_MIN_TILE_N`` wide and a multiple of ``WIDE_EPI_N``, whose
    tiles take at most ``max_k_tiles`` k-tiles (None: ``WIDE_EPILOGUE_MAX_K_TILES``; 0:
    never) and whose A/B ring keeps at least ``min_ab_stages`` stages beside the wider
    buffers (None: ``WIDE_EPILOGUE_MIN_AB_STAGES``). Else ``config``; a config
    that sets its own ``epi_n`` is kept. Residual kernels choose their width by the SMEM a
    tile of C takes (``Conv2dConfig.epi_n``).

    Raises:
        TypeError, ValueError: ``config`` is no ``Conv2dConfig``, or a bad problem, SM count,
            element size, output size or bound.
    """
    check_rule_args(config, problem, num_sms, has_residual, element_bytes)
    check_out_bytes(out_bytes)
    max_k_tiles = k_tile_bound("max_k_tiles", max_k_tiles, WIDE_EPILOGUE_MAX_K_TILES)
    if min_ab_stages is None:
        min_ab_stages = WIDE_EPILOGUE_MIN_AB_STAGES
    elif isinstance(min_ab_stages, bool) or not isinstance(min_ab_stages, int):
        raise TypeError(f"min_ab_stages must be an int or None, got {min_ab_stages!r}")
    if (
        has_residual
        or element_bytes != 2
        or out_bytes != 2
        or config.epi_n
        or config.tile_n < _MIN_TILE_N
        or config.tile_n % WIDE_EPI_N
    ):
        return config
    _, k_tiles = schedule_shape(problem, config.tile_m, config.tile_n, config.tile_k)
    if k_tiles > max_k_tiles:
        return config
    wide = replace(config, epi_n=WIDE_EPI_N)
    try:
        plan = wide.plan(cutlass.BFloat16, cutlass.BFloat16, False)
    except ValueError:  # an explicit A/B depth that the wider buffers leave no room for
        return config
    return wide if plan.ab_stages >= min_ab_stages else config
