"""Static persistent tile scheduling with grouped rasterization, data-parallel or stream-K.

The grid is ``(cluster_m, cluster_n, num_clusters)`` with clusters of ``(cluster_m, cluster_n)``
CTAs. Each cluster tile is one unit of output; the CTA at ``(x, y)`` inside the cluster computes
the output tile ``(cluster_tile_m * cluster_m + x, cluster_tile_n * cluster_n + y)``. Tiles that
fall past the edge of a partial cluster still run: their loads zero-fill and their TMA stores
clip, which keeps the multicast peers of a cluster in step.

Data-parallel: cluster ``z`` of the grid takes the whole cluster tiles ``z, z + num_clusters,
...``; a work item is a cluster tile index.

Stream-K: the k-tiles of the first ``stream_k_tile_count`` cluster tiles (all of them for
less than two waves; else the last partial wave and one whole wave before it), laid end to end
(tile-major), are split into ``num_clusters`` equal contiguous ranges, one per cluster, so that
a grid of less than a wave of tiles still keeps every SM busy and a longer grid's last wave
leaves none idle. A work item is a linear k-tile index: the start of one segment, the part of a
cluster's range inside one tile. Only a range's first segment can start inside a tile (it is
then a *partial*, summed into the tile by another cluster) and only its last can end inside
one (it then holds the tile's first k-tile: the *owner*, which adds the partials of the
clusters after it and runs the epilogue). Partials are written at the start of a range and
read at its end, so an owner rarely waits. After its range, a cluster takes the remaining
tiles data-parallel (the work item of a whole tile is its first linear k-tile): the split
tiles come first, so their fixups overlap whole tiles instead of ending the kernel together.

Grouped rasterization: cluster tiles are walked in bands ``swizzle`` cluster tiles wide across
the minor direction. With ``raster_along_m`` a band is ``swizzle`` columns of N; inside a band n
moves fastest, then m, so the CTAs that run together share a few filter tiles and revisit each
activation tile ``swizzle`` times while it is still in L2. ``GroupedRaster`` holds the walk; the
SM90 kernel (but for its gather kernels) divides by its run-time extents through divisors the
host makes once per launch (``cute.fast_divmod_create_divisor_v2``: a multiply-high and a
shift in the kernel), since an integer division by a run-time value is ~20 dependent
instructions, four of them on the load warp's path to a kernel's first TMA load.
"""

from typing import Any, Callable, List, Optional, Protocol, Tuple

import cutlass
import cutlass.cute as cute
from cutlass.cutlass_dsl import extract_mlir_values, new_from_mlir_values

from .im2col import qpn_coord


class TileScheduler(Protocol):
    """What every role of both kernels asks of its tile scheduler (SM90: data-parallel or
    stream-K, ``StaticTileScheduler``, optionally fed by the dynamic work queue; SM100: cluster
    launch control, ``ClcTileScheduler``): the output tile of a work item."""

    def tile_coord(self, work: cutlass.Int32) -> Tuple[cutlass.Int32, cutlass.Int32]:
        """This CTA's ``(tile_m, tile_n)`` for work item ``work``."""


class WorkItems(Protocol):
    """How every role that computes on tiles walks its work items, on both archs (SM90:
    ``Sm90WorkItems``, data-parallel, stream-K or fed by the dynamic work queue; SM100:
    ``ClcWorkItems``, fed by cluster launch control)::

        state = items.initial_state()
        work, valid, state = items.first(state)
        while valid:
            ...  # items.tile_coord(work)
            work, valid, state = items.next(work, state)

    ``state`` is the role's read position in whatever feeds it (a consumer state of the
    work queue or of the CLC response ring; None where the order is computed); the advanced
    state must be taken back, since a jit function's argument is a copy of the caller's
    value. The roles that feed the others (SM90's load warp with the work queue, SM100's
    scheduler warp) produce work items instead of walking them this way."""

    def initial_state(self) -> Any:
        """The read position before the first work item."""

    def first(self, state: Any) -> Tuple[cutlass.Int32, cutlass.Boolean, Any]:
        """``(work, valid, state)``: this role's first work item and whether there is one."""

    def next(self, work: cutlass.Int32, state: Any) -> Tuple[cutlass.Int32, cutlass.Boolean, Any]:
        """``(work, valid, state)``: the work item after ``work``."""

    def tile_coord(self, work: cutlass.Int32) -> Tuple[cutlass.Int32, cutlass.Int32]:
        """This CTA's ``(tile_m, tile_n)`` for work item ``work``."""


class StaticTileScheduler:
    """Maps work items to output tiles and k-tile ranges (see the module docstring).

    Only Python ints (compile-time) and run-time values the launch passes in live here (the
    rasterization, its extents and divisors, the work count and the k-tiles per tile), so the
    scheduler is rebuilt in each role from the same arguments and carries no state across the
    persistent loop but the work item itself.
    """

    def __init__(
        self,
        raster: "GroupedRaster",
        k_tiles: cutlass.Int32,
        cluster_shape_mn: Tuple[int, int],
        stream_k: bool = False,
        halo_tiles: Optional[Tuple] = None,
    ):
        self.raster = raster
        # Halo tiles: the divisors of the output tiles across a row and down an image, so
        # that tile_coord gives a tile's (q, p, image) coordinate, as the output's tile view
        # and the halo boxes take it.
        self.halo_tiles = halo_tiles
        self.cluster_shape_mn = cluster_shape_mn
        self.stream_k = stream_k
        self.num_work = raster.num_tiles()
        self.k_tiles = k_tiles

    # The DSL carries the scheduler through the persistent ``while`` loops of the roles:
    # its runtime values are the loop-carried ones, the rest is compile-time.
    def _runtime_values(self) -> List:
        halo_tiles = [] if self.halo_tiles is None else list(self.halo_tiles)
        return [self.raster, self.num_work, self.k_tiles, *halo_tiles]

    def __extract_mlir_values__(self) -> List:
        return extract_mlir_values(self._runtime_values())

    def __new_from_mlir_values__(self, values: List) -> "StaticTileScheduler":
        new = object.__new__(StaticTileScheduler)
        new.cluster_shape_mn = self.cluster_shape_mn
        new.stream_k = self.stream_k
        new.raster, new.num_work, new.k_tiles, *halo_tiles = new_from_mlir_values(
            self._runtime_values(), values
        )
        new.halo_tiles = None if self.halo_tiles is None else tuple(halo_tiles)
        return new

    @cute.jit
    def split_tiles(self) -> cutlass.Int32:
        """Stream-K: the cluster tiles whose k-tiles the clusters' ranges split."""
        return stream_k_tile_count(
            self.num_work, cutlass.Int32(cute.arch.grid_dim()[2]), cutlass.max
        )

    @cute.jit
    def range_start(self, cluster: cutlass.Int32) -> cutlass.Int32:
        """Stream-K: the first linear k-tile of ``cluster``'s range (``cluster`` up to the
        number of clusters, whose start is the total)."""
        total = cutlass.Int64(self.split_tiles()) * cutlass.Int64(self.k_tiles)
        num_clusters = cutlass.Int64(cute.arch.grid_dim()[2])
        return cutlass.Int32((cutlass.Int64(cluster) * total) // num_clusters)

    @cute.jit
    def range_owner(self, k_tile: cutlass.Int32) -> cutlass.Int32:
        """Stream-K: the cluster whose range holds linear k-tile ``k_tile``."""
        total = cutlass.Int64(self.split_tiles()) * cutlass.Int64(self.k_tiles)
        num_clusters = cutlass.Int64(cute.arch.grid_dim()[2])
        return cutlass.Int32(((cutlass.Int64(k_tile) + 1) * num_clusters - 1) // total)

    @cute.jit
    def first_work(self) -> cutlass.Int32:
        cluster = cutlass.Int32(cute.arch.block_idx()[2])
        first = cluster
        if cutlass.const_expr(self.stream_k):
            first = self.range_start(cluster)
            if first == self.range_start(cluster + 1):  # an empty range: the whole tiles
                first = (self.split_tiles() + cluster) * self.k_tiles
        return first

    @cute.jit
    def end_work(self) -> cutlass.Int32:
        """The bound of the work items (exclusive)."""
        if cutlass.const_expr(self.stream_k):
            return self.num_work * self.k_tiles
        return self.num_work

    @cute.jit
    def next_work(self, work: cutlass.Int32) -> cutlass.Int32:
        num_clusters = cutlass.Int32(cute.arch.grid_dim()[2])
        if cutlass.const_expr(self.stream_k):
            tile = self.tile_index(work)
            split_tiles = self.split_tiles()
            following = (tile + num_clusters) * self.k_tiles  # a whole tile's successor
            if tile < split_tiles:
                following = (tile + 1) * self.k_tiles
                cluster = cutlass.Int32(cute.arch.block_idx()[2])
                if following >= self.range_start(cluster + 1):  # the range ends: whole tiles
                    following = (split_tiles + cluster) * self.k_tiles
            return following
        return work + num_clusters

    @cute.jit
    def tile_index(self, work: cutlass.Int32) -> cutlass.Int32:
        """The cluster tile of work item ``work``."""
        if cutlass.const_expr(self.stream_k):
            return work // self.k_tiles
        return work

    @cute.jit
    def k_tile_range(self, work: cutlass.Int32) -> Tuple[cutlass.Int32, cutlass.Int32]:
        """``(first, end)``: the k-tiles of its tile that work item ``work`` computes."""
        first, end = cutlass.Int32(0), self.k_tiles
        if cutlass.const_expr(self.stream_k):
            tile = self.tile_index(work)
            if tile < self.split_tiles():
                tile_start = tile * self.k_tiles
                range_end = self.range_start(cutlass.Int32(cute.arch.block_idx()[2]) + 1)
                first, end = work - tile_start, cutlass.min(range_end - tile_start, self.k_tiles)
        return first, end

    @cute.jit
    def tile_coord(self, work: cutlass.Int32) -> Tuple[Any, cutlass.Int32]:
        """This CTA's ``(m_tile, n_tile)`` for work item ``work``; with halo tiles (single-CTA
        clusters) ``m_tile`` is the tile's ``(q, p, image)`` coordinate."""
        cluster_m, cluster_n = self.raster.coord(self.tile_index(work), select_int32)
        bidx, bidy, _ = cute.arch.block_idx()
        m_tile = cluster_m * self.cluster_shape_mn[0] + cutlass.Int32(bidx)
        n_tile = cluster_n * self.cluster_shape_mn[1] + cutlass.Int32(bidy)
        if cutlass.const_expr(self.halo_tiles is not None):
            m_tile = qpn_coord(m_tile, *self.halo_tiles)
        return m_tile, n_tile


def stream_k_tile_count(num_work, num_clusters, maximum):
    """Stream-K: how many of ``num_work`` cluster tiles (the first ones) ``num_clusters``
    clusters split between them: all of them below two waves, else those past the whole waves
    but one. Plain arithmetic, so the same function runs on ``Int32`` in the kernel and on
    Python ints in the tests (``maximum``: ``max``)."""
    return num_work - maximum(num_work // num_clusters - 1, 0) * num_clusters


def plain_extent(extent):
    """``GroupedRaster``'s default ``divisor``: the extent itself (plain integer divisions)."""
    return extent


def select_int32(condition: cutlass.Boolean, if_true, if_false) -> cutlass.Int32:
    """``if_true`` where ``condition`` holds, else ``if_false``: ``GroupedRaster.coord``'s
    ``select`` inside a kernel."""
    return cutlass.Int32(cutlass.select_(condition, if_true, if_false))


def select_python(condition: bool, if_true, if_false):
    """``GroupedRaster.coord``'s ``select`` on Python ints (host code and tests)."""
    return if_true if condition else if_false


class GroupedRaster:
    """Grouped rasterization (see the module docstring) of ``tiles_m`` x ``tiles_n`` tiles in
    bands of ``swizzle`` across the minor direction: work item -> ``(tile_m, tile_n)``
    (``coord``).

    Every band but the last is ``swizzle`` tiles wide (compile-time); ``divisor`` makes the
    divisors of the two run-time divisions, by a band's item count and by the last band's
    width: ``cute.fast_divmod_create_divisor_v2`` on the host (the SM90 launch, which passes
    the raster to its kernel). With the default, ``plain_extent``, the raster keeps the
    extents alone and divides by them (SM100's kernel, the SM90 gather kernels, Python ints
    in the tests)."""

    def __init__(
        self,
        tiles_m,
        tiles_n,
        swizzle: int,
        raster_along_m: bool,
        divisor: Callable[[Any], Any] = plain_extent,
    ):
        major, minor = (tiles_m, tiles_n) if raster_along_m else (tiles_n, tiles_m)
        self.swizzle = swizzle
        self.raster_along_m = raster_along_m
        self.divides_fast = divisor is not plain_extent
        self.major, self.minor = major, minor
        self.band_items, self.last_band_width = None, None
        if self.divides_fast:  # else computed where used: fewer values for a kernel to carry
            self.band_items = divisor(swizzle * major)
            self.last_band_width = divisor(minor - (minor - 1) // swizzle * swizzle)

    def _runtime_values(self) -> List:
        divisors = [self.band_items, self.last_band_width] if self.divides_fast else []
        return [self.major, self.minor, *divisors]

    def __extract_mlir_values__(self) -> List:
        return extract_mlir_values(self._runtime_values())

    def __new_from_mlir_values__(self, values: List) -> "GroupedRaster":
        new = object.__new__(GroupedRaster)
        new.swizzle, new.raster_along_m = self.swizzle, self.raster_along_m
        new.divides_fast = self.divides_fast
        new.major, new.minor, *divisors = new_from_mlir_values(self._runtime_values(), values)
        new.band_items, new.last_band_width = divisors if self.divides_fast else (None, None)
        return new

    def num_tiles(self):
        """The tiles (work items) the raster walks."""
        return self.major * self.minor

    def coord(self, work, select: Callable[[Any, Any, Any], Any]):
        """``(tile_m, tile_n)`` of work item ``work``, the minor index fastest inside a band.
        ``select(condition, a, b)``: ``a`` where ``condition`` holds, else ``b``
        (``select_int32`` in a kernel, ``select_python`` on Python ints)."""
        band_items = self.band_items if self.divides_fast else self.swizzle * self.major
        band, rest = work // band_items, work % band_items
        first_minor = band * self.swizzle
        in_last_band = first_minor + self.swizzle > self.minor
        if self.divides_fast:  # a divisor per band width: divide by both, then select
            lbw = self.last_band_width
            minor_idx = first_minor + select(in_last_band, rest % lbw, rest % self.swizzle)
            major_idx = select(in_last_band, rest // lbw, rest // self.swizzle)
        else:  # one division by the band's width
            width = select(in_last_band, self.minor - first_minor, self.swizzle)
            minor_idx, major_idx = first_minor + rest % width, rest // width
        if self.raster_along_m:
            return major_idx, minor_idx
        return minor_idx, major_idx
