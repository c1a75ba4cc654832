"""The SM90 kernel's scheduling options that exclude one another (plain Python, host side):
dynamic scheduling, halo tiles and ping-pong. Checked by ``Conv2dConfig`` for users and by the
kernel's constructor for direct callers, with the same messages."""

from typing import Tuple

# The most input rows of a halo: a TMA box dimension.
MAX_HALO_H = 256


def check_schedule_options(
    *,
    tile_mnk: Tuple[int, int, int],
    k_tile_bytes: int,
    cluster_mn: Tuple[int, int],
    stream_k: bool,
    dynamic_schedule: bool,
    tile_w: int,
    halo_h: int,
    pingpong: bool,
) -> None:
    """Raise ``ValueError`` naming the fields if the options cannot run together (halo tiles
    are checked when ``tile_w`` is set)."""
    tile_m, tile_n, _ = tile_mnk
    cluster_m, cluster_n = cluster_mn
    single_cta = cluster_m * cluster_n == 1
    if dynamic_schedule and (stream_k or not single_cta):
        raise ValueError(
            f"dynamic_schedule needs cluster_m=cluster_n=1 and stream_k=False, got "
            f"cluster_m={cluster_m}, cluster_n={cluster_n}, stream_k={stream_k}"
        )
    if tile_w:
        if tile_m % tile_w:
            raise ValueError(
                f"tile_w must divide tile_m (a tile is whole rows of tile_w columns), got "
                f"tile_w={tile_w}, tile_m={tile_m}"
            )
        if not tile_m // tile_w <= halo_h <= MAX_HALO_H:
            raise ValueError(
                f"halo_h must be in tile_m/tile_w..{MAX_HALO_H} (the output rows of a tile plus "
                f"the filter's), got halo_h={halo_h} with tile_m={tile_m}, tile_w={tile_w}"
            )
        if k_tile_bytes != 128 or not single_cta or stream_k:
            raise ValueError(
                f"halo tiles (tile_w={tile_w}) need tile_k=64 (128-byte k-tiles), "
                f"cluster_m=cluster_n=1 and stream_k=False, got {k_tile_bytes}-byte k-tiles, "
                f"cluster_m={cluster_m}, cluster_n={cluster_n}, stream_k={stream_k}"
            )
    if pingpong and (tile_m != 128 or tile_n > 128 or stream_k or dynamic_schedule):
        raise ValueError(
            f"pingpong needs tile_m=128, tile_n <= 128, stream_k=False and "
            f"dynamic_schedule=False, got tile_m={tile_m}, tile_n={tile_n}, "
            f"stream_k={stream_k}, dynamic_schedule={dynamic_schedule}"
        )
