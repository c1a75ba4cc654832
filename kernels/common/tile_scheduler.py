"""Static persistent tile scheduling with grouped rasterization.

The grid is ``(cluster_m, cluster_n, num_clusters)`` with clusters of ``(cluster_m, cluster_n)``
CTAs. Cluster ``z`` of the grid takes work items ``z, z + num_clusters, ...``; each work item is
one cluster tile, and the CTA at ``(x, y)`` inside the cluster computes the output tile
``(cluster_tile_m * cluster_m + x, cluster_tile_n * cluster_n + y)``. Tiles that fall past the
edge of a partial cluster still run: their loads zero-fill and their TMA stores clip, which keeps
the multicast peers of a cluster in step.

Grouped rasterization: work items are walked in bands ``swizzle`` cluster tiles wide across the
minor direction. With ``raster_along_m`` a band is ``swizzle`` columns of N; inside a band n moves
fastest, then m, so the CTAs that run together share a few filter tiles and revisit each
activation tile ``swizzle`` times while it is still in L2.
"""

from typing import List, Tuple

import cutlass
import cutlass.cute as cute
from cutlass.cutlass_dsl import extract_mlir_values, new_from_mlir_values


class StaticTileScheduler:
    """Maps a linear work index to an output tile coordinate ``(m_tile, n_tile)``.

    Only Python ints (compile-time) and ``Int32`` values computed inside the kernel live here,
    so the scheduler is rebuilt in each role from the same arguments and carries no state
    across the persistent loop but the work index itself.
    """

    def __init__(
        self,
        num_tiles_m: cutlass.Int32,
        num_tiles_n: cutlass.Int32,
        cluster_shape_mn: Tuple[int, int],
        swizzle: int,
        raster_along_m: bool,
    ):
        self.cluster_shape_mn = cluster_shape_mn
        self.swizzle = swizzle
        self.raster_along_m = raster_along_m
        self.clusters_m = (num_tiles_m + cluster_shape_mn[0] - 1) // cluster_shape_mn[0]
        self.clusters_n = (num_tiles_n + cluster_shape_mn[1] - 1) // cluster_shape_mn[1]
        self.num_work = self.clusters_m * self.clusters_n

    # The DSL carries the scheduler through the persistent ``while`` loops of the roles:
    # its runtime extents are the loop-carried values, the rest is compile-time.
    def __extract_mlir_values__(self) -> List:
        return extract_mlir_values([self.clusters_m, self.clusters_n, self.num_work])

    def __new_from_mlir_values__(self, values: List) -> "StaticTileScheduler":
        clusters_m, clusters_n, num_work = new_from_mlir_values(
            [self.clusters_m, self.clusters_n, self.num_work], values
        )
        new = object.__new__(StaticTileScheduler)
        new.cluster_shape_mn = self.cluster_shape_mn
        new.swizzle = self.swizzle
        new.raster_along_m = self.raster_along_m
        new.clusters_m, new.clusters_n, new.num_work = clusters_m, clusters_n, num_work
        return new

    @cute.jit
    def first_work(self) -> cutlass.Int32:
        return cutlass.Int32(cute.arch.block_idx()[2])

    @cute.jit
    def next_work(self, work: cutlass.Int32) -> cutlass.Int32:
        return work + cutlass.Int32(cute.arch.grid_dim()[2])

    @cute.jit
    def tile_coord(self, work: cutlass.Int32) -> Tuple[cutlass.Int32, cutlass.Int32]:
        """This CTA's ``(m_tile, n_tile)`` for work item ``work``."""
        if cutlass.const_expr(self.raster_along_m):
            major, minor = self.clusters_m, self.clusters_n
        else:
            major, minor = self.clusters_n, self.clusters_m
        band_items = self.swizzle * major
        band = work // band_items
        rest = work - band * band_items
        first_minor = band * self.swizzle
        band_width = cutlass.min(minor - first_minor, self.swizzle)
        minor_idx = first_minor + rest % band_width
        major_idx = rest // band_width
        if cutlass.const_expr(self.raster_along_m):
            cluster_m, cluster_n = major_idx, minor_idx
        else:
            cluster_m, cluster_n = minor_idx, major_idx
        bidx, bidy, _ = cute.arch.block_idx()
        return (
            cluster_m * self.cluster_shape_mn[0] + cutlass.Int32(bidx),
            cluster_n * self.cluster_shape_mn[1] + cutlass.Int32(bidy),
        )
