"""The SM90 kernel's scheduling options that exclude one another (plain Python, host side):
dynamic scheduling, halo tiles, ping-pong and gathered operands. Checked by
``Conv2dConfig`` for users and by the kernel's constructor for direct callers, with the same
messages."""

from typing import Tuple

# The most input rows or columns of a halo: a TMA box dimension.
MAX_HALO_H = 256
MAX_HALO_W = 256
# Pitched halo tiles: each tile row is one 64-row WGMMA atom (128-column rows: their halo box
# does not trace), the halo's rows start on 8-row swizzle blocks, and a halo is an even number
# of them (the TMA atom of a box of an odd number does not trace either).
PITCHED_TILE_W = 64
PITCHED_HALO_W_MULTIPLE = 8
PITCHED_HALO_ROWS_MULTIPLE = 16
# Halo tiles read each tap's A at any 128-byte row of a 128B-swizzled halo: k-tiles of 128
# bytes, which the element width decides (``check_k_tile_bytes``).
HALO_MIN_TILE_K = 64
# A k-tile is 32..128 bytes: one WGMMA K step (16 16-bit or 32 fp8 channels) up to one
# 128-byte swizzle row.
MIN_K_TILE_BYTES, MAX_K_TILE_BYTES = 32, 128
# Gathered operands (``gather``) are loaded as 16-bit values, this many channels per load
# (``gather_vector``).
GATHER_ELEMENT_BITS = 16
# Channels of one gathered unit of work: a 16-byte chunk of a swizzled row (the 128-byte
# swizzle permutes whole chunks, so a run's elements stay adjacent).
GATHER_RUN_CHANNELS = 8
GATHER_VECTOR_CHOICES = (1, 2, 4)
# A cluster's CTAs each load a slice of the tiles they share by multicast: whole 8-row
# swizzle atoms.
MULTICAST_SLICE_ROWS = 8
# Stream-K's splits wait on partial tiles that other clusters write: every cluster of a
# full grid must be resident at once, which 2-CTA clusters are on 132 SMs.
MAX_STREAM_K_CLUSTER_SIZE = 2


def check_schedule_options(
    *,
    tile_mnk: Tuple[int, int, int],
    cluster_mn: Tuple[int, int],
    stream_k: bool,
    dynamic_schedule: bool,
    tile_w: int,
    halo_h: int,
    halo_w: int,
    pingpong: bool,
    gather: bool,
    gather_vector: int,
) -> None:
    """Raise ``ValueError`` naming the fields if the options cannot run together (halo tiles
    are checked when ``tile_w`` is set)."""
    tile_m, tile_n, tile_k = tile_mnk
    cluster_m, cluster_n = cluster_mn
    single_cta = cluster_m * cluster_n == 1
    if tile_m % (MULTICAST_SLICE_ROWS * cluster_n) or tile_n % (MULTICAST_SLICE_ROWS * cluster_m):
        raise ValueError(
            f"each CTA of a cluster loads a slice of the tiles it shares, a multiple of "
            f"{MULTICAST_SLICE_ROWS} rows (whole swizzle atoms): tile_m must be a multiple of "
            f"{MULTICAST_SLICE_ROWS}*cluster_n and tile_n of {MULTICAST_SLICE_ROWS}*cluster_m, "
            f"got tile_m={tile_m}, tile_n={tile_n}, cluster_m={cluster_m}, cluster_n={cluster_n}"
        )
    if stream_k and cluster_m * cluster_n > MAX_STREAM_K_CLUSTER_SIZE:
        raise ValueError(
            f"stream_k needs clusters of at most {MAX_STREAM_K_CLUSTER_SIZE} CTAs (a split "
            f"waits on other clusters' partial tiles, and not every larger cluster of a full "
            f"grid is resident at once), got cluster_m={cluster_m}, cluster_n={cluster_n}"
        )
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
        if tile_k < HALO_MIN_TILE_K or not single_cta or stream_k:
            raise ValueError(
                f"halo tiles (tile_w={tile_w}) need tile_k >= {HALO_MIN_TILE_K} (128-byte "
                f"k-tiles: 64 16-bit or 128 fp8 channels), cluster_m=cluster_n=1 and "
                f"stream_k=False, got tile_k={tile_k}, cluster_m={cluster_m}, "
                f"cluster_n={cluster_n}, stream_k={stream_k}"
            )
    if halo_w:
        check_pitched_halo(tile_w, halo_h, halo_w)
    if pingpong and (tile_m != 128 or tile_n > 128 or stream_k or dynamic_schedule):
        raise ValueError(
            f"pingpong needs tile_m=128, tile_n <= 128, stream_k=False and "
            f"dynamic_schedule=False, got tile_m={tile_m}, tile_n={tile_n}, "
            f"stream_k={stream_k}, dynamic_schedule={dynamic_schedule}"
        )
    if gather and (not single_cta or tile_w or pingpong or stream_k or dynamic_schedule):
        raise ValueError(
            f"gather needs cluster_m=cluster_n=1, no halo tiles (tile_w=0), pingpong=False, "
            f"stream_k=False and dynamic_schedule=False, got cluster_m={cluster_m}, "
            f"cluster_n={cluster_n}, tile_w={tile_w}, pingpong={pingpong}, "
            f"stream_k={stream_k}, dynamic_schedule={dynamic_schedule}"
        )
    if gather_vector not in GATHER_VECTOR_CHOICES or (gather_vector != 1 and not gather):
        raise ValueError(
            f"gather_vector must be one of {GATHER_VECTOR_CHOICES} (1 without gather), got "
            f"gather_vector={gather_vector}, gather={gather}"
        )


def check_pitched_halo(tile_w: int, halo_h: int, halo_w: int) -> None:
    """Raise ``ValueError`` unless a ``halo_w``-wide halo of ``halo_h`` rows can serve tiles
    of ``tile_w`` output columns (the filter's reach is checked against the problem, on the
    host)."""
    if (
        tile_w != PITCHED_TILE_W
        or halo_w % PITCHED_HALO_W_MULTIPLE
        or not tile_w <= halo_w <= MAX_HALO_W
    ):
        raise ValueError(
            f"pitched halo tiles need tile_w={PITCHED_TILE_W} and halo_w a multiple of "
            f"{PITCHED_HALO_W_MULTIPLE} in tile_w..{MAX_HALO_W}, got "
            f"tile_w={tile_w}, halo_w={halo_w}"
        )
    if halo_h * halo_w % PITCHED_HALO_ROWS_MULTIPLE:
        raise ValueError(
            f"pitched halo tiles need halo_h*halo_w a multiple of {PITCHED_HALO_ROWS_MULTIPLE} "
            f"(whole pairs of 8-row swizzle blocks), got halo_h={halo_h}, halo_w={halo_w}"
        )


def check_k_tile_bytes(tile_k: int, element_bits: int, halo_tiles: bool) -> None:
    """Raise ``ValueError`` if ``tile_k`` channels of ``element_bits``-bit inputs are not a
    k-tile the kernel can load and multiply (halo tiles: exactly one 128-byte row)."""
    k_tile_bytes = tile_k * element_bits // 8
    low = MAX_K_TILE_BYTES if halo_tiles else MIN_K_TILE_BYTES
    if not low <= k_tile_bytes <= MAX_K_TILE_BYTES:
        what = "halo tiles need" if halo_tiles else "a k-tile must be"
        raise ValueError(
            f"tile_k={tile_k} with {element_bits}-bit inputs is a {k_tile_bytes}-byte k-tile; "
            f"{what} {low}..{MAX_K_TILE_BYTES} bytes (16-bit inputs: tile_k "
            f"{low * 8 // 16}..{MAX_K_TILE_BYTES * 8 // 16}; fp8: "
            f"{low}..{MAX_K_TILE_BYTES})"
        )
