"""How the SM90 kernel's persistent grid walks a problem: output tiles and k-tiles per tile,
cluster tiles (the scheduler's work units), the stream-K choice and the launch's cluster
count. Plain Python on the host, shared by the heuristic (``config``), the autotuner
(``tuning``), dispatch and the stream-K workspace."""

from __future__ import annotations

from .problem import Conv2dProblemShape

__all__ = [
    "K_TILES_PER_SPLIT",
    "STREAM_K_SPLITS",
    "cluster_tile_count",
    "halo_tile_count",
    "launch_clusters",
    "padded_k",
    "schedule_shape",
    "stream_k_for_tiles",
    "stream_k_schedule",
    "tile_count",
]

# Bounded stream-K splits (``Conv2dConfig.stream_k_split``) the heuristic chooses among, and
# the k-tiles each CTA of a split keeps at least: fitted on the corpus's train part on an H100
# (benchmarks/sweep_stream_k.py, stream_k_sweep.json; see stream_k_schedule).
STREAM_K_SPLITS = (2, 3, 4, 6, 8, 12, 16)
K_TILES_PER_SPLIT = 9.0
# Where no split fits: stream-K over the whole grid for at most this fraction of a wave of
# tiles ...
_MAX_WAVE_STREAM_K = 0.6
# ... with mainloops of at least this many k-tiles.
_MIN_K_TILES_STREAM_K = 64


def schedule_shape(
    problem: Conv2dProblemShape, tile_m: int, tile_n: int, tile_k: int
) -> tuple[int, int]:
    """``(output tiles, k-tiles per tile)`` of im2col tiles of this shape on ``problem``: a
    k-tile never spans two filter taps, so each tap takes ``ceil(C / tile_k)`` of them."""
    return tile_count(problem, tile_m, tile_n), -(-problem.C // tile_k) * problem.R * problem.S


def cluster_tile_count(problem: Conv2dProblemShape, config) -> int:
    """Cluster tiles (the work units of the SM90 kernel's scheduler) of ``config`` on the
    kernel problem ``problem``, halo tiles aside."""
    return _cluster_tiles(problem, config.tile_m, config.tile_n, config.cluster_m, config.cluster_n)


def _cluster_tiles(
    problem: Conv2dProblemShape, tile_m: int, tile_n: int, cluster_m: int, cluster_n: int
) -> int:
    tiles_m = -(-problem.gemm_m // tile_m)
    tiles_n = -(-problem.K // tile_n)
    return -(-tiles_m // cluster_m) * -(-tiles_n // cluster_n)


def stream_k_schedule(
    cluster_tiles: int,
    k_tiles: int,
    max_clusters: int,
    k_tiles_per_split: float = K_TILES_PER_SPLIT,
) -> tuple[bool, int]:
    """``(stream_k, stream_k_split)`` for ``cluster_tiles`` tiles of ``k_tiles`` k-tiles on
    ``max_clusters`` clusters: the most ways of ``STREAM_K_SPLITS`` that fit the grid while
    every CTA keeps at least ``k_tiles_per_split`` k-tiles; where none does, the whole grid
    for at most ``_MAX_WAVE_STREAM_K`` of a wave of tiles of ``_MIN_K_TILES_STREAM_K`` or
    more k-tiles (``(True, 0)``); else data-parallel (``(False, 0)``)."""
    fits = [
        s for s in STREAM_K_SPLITS
        if cluster_tiles * s <= max_clusters and k_tiles >= s * k_tiles_per_split
    ]  # fmt: skip
    if fits:
        return True, max(fits)
    whole_grid = (
        cluster_tiles <= _MAX_WAVE_STREAM_K * max_clusters and k_tiles >= _MIN_K_TILES_STREAM_K
    )
    return whole_grid, 0


def stream_k_for_tiles(
    problem: Conv2dProblemShape,
    tile_m: int,
    tile_n: int,
    tile_k: int,
    cluster_m: int,
    cluster_n: int,
    num_sms: int,
) -> tuple[bool, int]:
    """``stream_k_schedule`` for tiles of this shape and clusters on ``problem`` and
    ``num_sms`` SMs: the heuristic's stream-K choice, also applied to the autotuner's
    candidates."""
    _, k_tiles = schedule_shape(problem, tile_m, tile_n, tile_k)
    cluster_tiles = _cluster_tiles(problem, tile_m, tile_n, cluster_m, cluster_n)
    return stream_k_schedule(cluster_tiles, k_tiles, num_sms // (cluster_m * cluster_n))


def launch_clusters(
    problem: Conv2dProblemShape, config, num_sms: int, resident: int | None = None
) -> int:
    """The most clusters a launch of ``config`` (of either arch) on the kernel problem
    ``problem`` may take on ``num_sms`` SMs: a CTA per SM, as many clusters as the device
    holds at once where ``resident`` says that is fewer (``occupancy.resident_clusters``;
    the persistent grid must be resident), or with a bounded stream-K split
    (``Conv2dConfig.stream_k_split``) that many per cluster tile where that is fewer."""
    clusters = num_sms // (config.cluster_m * config.cluster_n)
    if resident is not None:
        clusters = min(clusters, resident)
    split = getattr(config, "stream_k_split", 0)  # SM100 configs have no such choice
    if split:
        clusters = min(clusters, cluster_tile_count(problem, config) * split)
    return clusters


def tile_count(problem: Conv2dProblemShape, tile_m: int, tile_n: int) -> int:
    """Output tiles of ``tile_m`` x ``tile_n`` (GEMM M x N)."""
    return -(-problem.gemm_m // tile_m) * -(-problem.K // tile_n)


def halo_tile_count(problem: Conv2dProblemShape, tile_m: int, tile_n: int, tile_w: int) -> int:
    """Output tiles of halo tiles of ``tile_m`` rows, ``tile_w`` columns per tile row and
    ``tile_n`` channels: ``ceil(Q / tile_w)`` per output row (one for whole-row tiles), as
    the SM90 kernel walks them."""
    tiles_p = -(-problem.P // (tile_m // tile_w))
    return problem.N * tiles_p * -(-problem.Q // tile_w) * -(-problem.K // tile_n)


def padded_k(k: int, tile_n: int) -> int:
    """Output channels ``tile_n``-wide tiles compute: ``k`` rounded up to whole tiles."""
    return -(-k // tile_n) * tile_n
