"""The gather rule: which calls the SM90 kernel's gather warps load instead of staging them.

A conv whose channels are no whole TMA rows (odd C) or whose stem would be unfolded is staged
(``staging``): zero-padded or im2col-unfolded by extra passes. The gather warps instead load
its A and filter tiles by plain loads, far slower than TMA, so they pay on small convs only,
where the staging's launches and passes cost more than the kernel's whole mainloop."""

from __future__ import annotations

from dataclasses import replace

from .config import Conv2dConfig, check_channels, check_element_bytes, check_heuristic_args
from .kernels.sm90.gather import copies_async
from .kernels.sm90.schedule_checks import GATHER_ELEMENT_BITS, GATHER_VECTOR_CHOICES
from .problem import Conv2dProblemShape
from .schedule import schedule_shape

__all__ = [
    "GATHERED_ELEMENT_BYTES",
    "MAX_GATHER_LOADS_PER_SM",
    "gather_loads_per_sm",
    "gathered_config",
    "packed_k_tiles",
    "with_gathered_operands",
]

# Gathered operands (see gathered_config) for convs whose SMs each issue at most this many
# gather loads (A and filter tile rows x k-tile channels / gather_vector, summed over the SM's
# tiles), by the staging they spare: fitted on the corpus's train part on an H100 and an
# H200 together (benchmarks/sweep_gather.py --joint, gather_sweep*.json).
MAX_GATHER_LOADS_PER_SM = {"pad": 43008, "im2col": 28672}
GATHERED_ELEMENT_BYTES = GATHER_ELEMENT_BITS // 8
# Register gathers (vectors of 1 or 2 channels, not cp.async copies) pack their taps only in
# k-tiles of at most this many channels: in wider ones a packed run's per-vector taps kept
# fewer loads in flight or spilled (tests/test_gather.py's SASS checks).
PACKED_REGISTER_MAX_TILE_K = 16


def gathered_config(
    config: Conv2dConfig,
    padded_problem: Conv2dProblemShape,
    num_sms: int = 132,
    element_bytes: int = 2,
    replaces: str = "pad",
    *,
    channels: int,
    max_loads_per_sm: dict[str, float] | None = None,
    pack_taps: bool = True,
) -> Conv2dConfig | None:
    """For a call of ``channels`` input channels whose operands would be staged
    (``replaces``: ``"pad"``, C zero-padded to a multiple of 8, or ``"im2col"``, unfolded into
    columns; ``staging.gather_replaces``): ``with_gathered_operands(config, channels)``, where
    ``config`` is the heuristic's for the channel-padded problem
    (``staging.channels_padded``), if each SM issues at most
    ``MAX_GATHER_LOADS_PER_SM[replaces]`` gather loads (``gather_loads_per_sm``); else None
    (the staged path). The gather warps load far slower than TMA, so this pays on small convs
    only, where the staging's launches and passes cost more than the kernel's whole
    mainloop. fp8 inputs (``element_bytes`` 1) are never gathered. The taps are packed
    (``Conv2dConfig.pack_taps``) where that takes fewer k-tiles (``packed_k_tiles``; each
    k-tile is a round trip of the gather loads) and the gather copies asynchronously or its
    k-tiles are at most ``PACKED_REGISTER_MAX_TILE_K`` channels. A sweep's variant of the
    rule: ``max_loads_per_sm`` (by staging spared; None: ``MAX_GATHER_LOADS_PER_SM``) and
    ``pack_taps`` False (no packing, as the rule was before it)."""
    check_element_bytes(element_bytes)
    bounds = MAX_GATHER_LOADS_PER_SM if max_loads_per_sm is None else max_loads_per_sm
    if not isinstance(bounds, dict) or set(bounds) != set(MAX_GATHER_LOADS_PER_SM):
        raise ValueError(
            f"max_loads_per_sm must be None or a dict of {', '.join(MAX_GATHER_LOADS_PER_SM)}, "
            f"got {max_loads_per_sm!r}"
        )
    if not isinstance(pack_taps, bool):
        raise TypeError(f"pack_taps must be a bool, got {pack_taps!r}")
    if replaces not in bounds:
        raise ValueError(f"replaces must be one of {', '.join(bounds)}, got {replaces!r}")
    gathered = with_gathered_operands(config, channels)
    if element_bytes != GATHERED_ELEMENT_BYTES:
        return None
    if gather_loads_per_sm(gathered, padded_problem, num_sms) > bounds[replaces]:
        return None
    taps = padded_problem.R * padded_problem.S
    tap_k_tiles = taps * -(-channels // gathered.tile_k)
    packs = packed_k_tiles(gathered, taps, channels) < tap_k_tiles and (
        copies_async(gathered.gather_vector) or gathered.tile_k <= PACKED_REGISTER_MAX_TILE_K
    )
    return replace(gathered, pack_taps=pack_taps and packs)


def packed_k_tiles(config: Conv2dConfig, taps: int, channels: int) -> int:
    """The k-tiles of a gathered filter row of ``taps`` taps of ``channels`` channels with
    ``Conv2dConfig.pack_taps``: the row's elements back to back in k-tiles of ``tile_k``
    (without it, each tap takes ``ceil(channels / tile_k)``)."""
    if not isinstance(config, Conv2dConfig):
        raise TypeError(f"config must be a Conv2dConfig, got {type(config).__name__}")
    if isinstance(taps, bool) or not isinstance(taps, int):
        raise TypeError(f"taps must be an int (R*S), got {taps!r}")
    if taps < 1:
        raise ValueError(f"taps must be >= 1 (R*S), got {taps}")
    check_channels(channels, " (the conv's C)")
    return -(-taps * channels // config.tile_k)


def with_gathered_operands(config: Conv2dConfig, channels: int) -> Conv2dConfig:
    """``config`` with ``gather`` for a conv of ``channels`` input channels (C): on
    single-CTA clusters without ping-pong, halo tiles, stream-K or dynamic scheduling (which
    a gathering kernel does not take), loading the largest ``gather_vector`` that divides C,
    its tile kept."""
    if not isinstance(config, Conv2dConfig):
        raise TypeError(f"config must be a Conv2dConfig, got {type(config).__name__}")
    check_channels(channels, " (the conv's C)")
    vector = max(v for v in GATHER_VECTOR_CHOICES if channels % v == 0)
    return replace(
        config, cluster_m=1, cluster_n=1, stream_k=False, stream_k_split=0,
        dynamic_schedule=False, tile_w=0, halo_h=0, halo_w=0, pingpong=False, gather=True,
        gather_vector=vector,
    )  # fmt: skip


def gather_loads_per_sm(
    config: Conv2dConfig, kernel_problem: Conv2dProblemShape, num_sms: int = 132
) -> int:
    """The gather loads the busiest SM issues with ``config``'s tiles on the channel-padded
    ``kernel_problem``: its rounds of tiles x k-tiles x (tile_m + tile_n) x tile_k elements
    of A and filter, over ``gather_vector`` elements per load."""
    check_heuristic_args(kernel_problem, num_sms)
    if not isinstance(config, Conv2dConfig):
        raise TypeError(f"config must be a Conv2dConfig, got {type(config).__name__}")
    tiles, k_tiles = schedule_shape(kernel_problem, config.tile_m, config.tile_n, config.tile_k)
    elements = -(-tiles // num_sms) * k_tiles * (config.tile_m + config.tile_n) * config.tile_k
    return elements // config.gather_vector
