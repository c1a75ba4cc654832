"""The SM90 mainloop's operands: the load warp's two ``OperandLoader``s (``Im2colLoader``:
per k-tile, im2col A at its filter tap and the filter tile; ``HaloLoader``: per c-block, one
halo box and the filter tile of every tap), and the consumers' WGMMAs over the ring (im2col A
from the ring; halo tiles: each tap's A is the halo shifted by ``r * dil_h * pitch + s *
dil_w`` rows).

Halo tiles (``tile_w``, stride-1 convs, single-CTA clusters): an output tile is tile_h output
rows of tile_w columns at (q0, p0). Per c-block the load warp brings the tile's input halo
(halo_h rows x pitch columns from (q0 - pad_left, p0 - pad_top), zero-filled outside the
image) in by one tiled TMA box into the ``halo`` ring (PipelineTmaAsync, ``HALO_STAGES`` deep;
ping-pong ``HALO_STAGES_PINGPONG``, each consumer skipping the other's halos), and the filter
tile of every tap into the ab ring, which then carries B alone. Tap (r, s) reads the halo from
row ``r * dil_h * pitch + s * dil_w`` on: WGMMA descriptors may start at any 128-byte row of a
128B-swizzled buffer, since the swizzle is a function of the SMEM address.

Whole-row tiles (``halo_w`` 0): the pitch is tile_w >= Q + the filter's reach, q0 = 0, and a
tap's tile_m rows are contiguous; columns q >= Q read past their row (or into
``HALO_SLACK_ROWS`` of slack) and are clipped by the (channel, q, p, n) output boxes. Pitched
tiles (``halo_w``, the pitch): ceil(Q / tile_w) tiles side by side per output row, each tile
row one 64-row WGMMA atom, a tap's atoms ``halo_w`` rows apart in the halo; the last tile of
a row is clipped at Q.
"""

from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Protocol, Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync, warpgroup

from ..common.dependent_launch import wait_before_first_load
from ..common.im2col import (
    ChannelBlocks,
    ConvGeometry,
    PixelDivisors,
    activation_im2col_view,
    filter_gemm_view,
    fprop_im2col_params,
    im2col_tile_at_origin,
    packed_filter_view,
)
from ..common.tile_scheduler import StaticTileScheduler
from .gather import copies_async


class HaloGeometry(NamedTuple):
    """What halo tiles need of the geometry at run time."""

    # Divisors made on the host (the scheduler's (q, p, image) tile coordinate):
    tiles_w: cute.FastDivmodDivisorV2  # output tiles across an output row (1: whole rows)
    tiles_h: cute.FastDivmodDivisorV2  # output tiles down an image
    pad_top: cutlass.Int32
    pad_left: cutlass.Int32
    dil_h: cutlass.Int32
    dil_w: cutlass.Int32


class ConsumerStates(NamedTuple):
    """A consumer's positions in the rings it reads. Every ring carries every tile of the CTA
    in order, so a ping-pong consumer passes over the other's tiles in all of them at once."""

    read: pipeline.PipelineState  # the A/B stage it waits for next
    release: pipeline.PipelineState  # the A/B stage it releases next
    halo: pipeline.PipelineState  # halo tiles: the halo it reads next
    source: pipeline.PipelineState  # residual: the C subtile it reads next

    @staticmethod
    def start(ab_stages: int, source_stages: int, halo_stages: int) -> "ConsumerStates":
        """Positions at the start of every ring (a ring's stage count: at least 1)."""

        def state(stages: int) -> pipeline.PipelineState:
            return pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, stages)

        read, release, source = state(ab_stages), state(ab_stages), state(source_stages)
        return ConsumerStates(read, release, state(halo_stages), source)

    def advance_past_tile(
        self,
        k_tiles: cutlass.Int32,
        source_subtiles: Optional[int],
        halos: Optional[cutlass.Int32],
    ) -> None:
        """Advance past one tile of ``k_tiles`` k-tiles, ``source_subtiles`` C subtiles and
        ``halos`` halos (one per c-block); None where the kernel has no such ring."""
        self.read.advance(k_tiles)
        self.release.advance(k_tiles)
        if source_subtiles is not None:
            self.source.advance(source_subtiles)
        if halos is not None:
            self.halo.advance(halos)


class ProducerStates(NamedTuple):
    """The load warp's positions in the rings it fills."""

    ab: pipeline.PipelineState  # the A/B ring (B alone with halo tiles)
    halo: pipeline.PipelineState  # halo tiles: the halo ring


class OperandLoader(Protocol):
    """The load warp's operands of one output tile, loaded into the rings."""

    def load_tile(
        self, states: ProducerStates, scheduler: StaticTileScheduler, work: cutlass.Int32
    ) -> ProducerStates:
        """Load the k-tiles of work item ``work`` (its output tile's, stream-K: those of its
        segment) into the rings; returns the advanced states. With ``waits_late`` the CTA's
        first work item waits for the previous grid (PDL) after its tile coordinates, before
        its first load."""


@cute.jit
def load_k_tile(
    ab_pipeline: pipeline.PipelineTmaAsync,
    producer_state: pipeline.PipelineState,
    tma_atoms: Tuple[cute.CopyAtom, ...],
    ab_gmem: Tuple[cute.Tensor, ...],
    ab_smem: Tuple[cute.Tensor, ...],
    mcast_masks: Tuple,
    k_coord: Tuple,
):
    """TMA-load the tiles of k-tile ``k_coord`` (c-block, s, r) of each operand (A and B;
    B alone with halo tiles) into the ring stage of ``producer_state``, once that stage is
    free."""
    ab_pipeline.producer_acquire(producer_state)
    barrier = ab_pipeline.producer_get_barrier(producer_state)
    for operand in cutlass.range_constexpr(len(tma_atoms)):
        cute.copy(
            tma_atoms[operand],
            ab_gmem[operand][(None, k_coord)],
            ab_smem[operand][(None, producer_state.index)],
            tma_bar_ptr=barrier,
            mcast_mask=mcast_masks[operand],
        )
    ab_pipeline.producer_commit(producer_state)


# The loaders are frozen dataclasses: the DSL then reads one inside the persistent loop that
# calls it instead of carrying it through the loop, which would turn its Python ints (shapes,
# the halo box) into run-time values.
@dataclass(frozen=True)
class Im2colLoader:
    """im2col operands: per k-tile, A by an im2col TMA box at its filter tap (multicast along
    cluster N) and B by a tiled box (multicast along cluster M), together in one ring stage."""

    ab_pipeline: pipeline.PipelineTmaAsync
    tma_atoms: Tuple[cute.CopyAtom, cute.CopyAtom]  # (A, B)
    gmem: Tuple[cute.Tensor, cute.Tensor]  # (tAgA, tBgB): (TMA, m or n tile, k-tile)
    smem: Tuple[cute.Tensor, cute.Tensor]  # (tAsA, tBsB): (TMA, ring stage)
    mcast_masks: Tuple  # (A, B); 0 where a tile is not multicast
    k_shape: Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32]  # (c-blocks, S, R)
    pixel_divisors: Optional[PixelDivisors]  # see ``im2col_tile_at_origin``
    waits_late: bool  # see ``OperandLoader.load_tile``
    # A grouped conv: (n tiles per group, output channels per group, images); None for a
    # dense one.
    channel_group: Optional[Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32]] = None

    @cute.jit
    def load_tile(
        self, states: ProducerStates, scheduler: StaticTileScheduler, work: cutlass.Int32
    ) -> ProducerStates:
        """See ``OperandLoader``. The hierarchical k mode (c-block, s, r) is walked by nested
        loops or carries: indexing it with a linear k-tile would cost runtime divisions by
        C/TK and S per load. A grouped conv's tile reads the group its output channels are
        in (``channel_group``; ``activation_im2col_view``)."""
        m_tile, n_tile = scheduler.tile_coord(work)
        group = None
        if cutlass.const_expr(self.channel_group is not None):
            tiles_per_group, _, images = self.channel_group
            group = (n_tile // tiles_per_group, images)
        ab_gmem = (
            im2col_tile_at_origin(self.gmem[0][(None, m_tile, None)], self.pixel_divisors, group),
            self.gmem[1][(None, n_tile, None)],
        )
        wait_before_first_load(self.waits_late, scheduler, work)
        load_args = (self.ab_pipeline, states.ab, self.tma_atoms, ab_gmem, self.smem)
        if cutlass.const_expr(scheduler.stream_k):
            producer_state = self._load_k_range(*load_args, scheduler.k_tile_range(work))
        else:
            producer_state = self._load_whole_tile(*load_args)
        return states._replace(ab=producer_state)

    @cute.jit
    def _load_whole_tile(
        self,
        ab_pipeline: pipeline.PipelineTmaAsync,
        producer_state: pipeline.PipelineState,
        tma_atoms: Tuple[cute.CopyAtom, ...],
        ab_gmem: Tuple[cute.Tensor, ...],
        ab_smem: Tuple[cute.Tensor, ...],
    ) -> pipeline.PipelineState:
        """Every k-tile of one output tile, one filter tap at a time (nested loops issue 1-4%
        faster than the carries of ``_load_k_range``, H200)."""
        c_blocks, taps_s, taps_r = self.k_shape
        mcast_masks = self.mcast_masks
        for r in range(taps_r):
            for s in range(taps_s):
                for c_block in range(c_blocks):
                    load_k_tile(
                        ab_pipeline, producer_state, tma_atoms, ab_gmem, ab_smem, mcast_masks,
                        (c_block, s, r),
                    )  # fmt: skip
                    producer_state.advance()
        return producer_state

    @cute.jit
    def _load_k_range(
        self,
        ab_pipeline: pipeline.PipelineTmaAsync,
        producer_state: pipeline.PipelineState,
        tma_atoms: Tuple[cute.CopyAtom, ...],
        ab_gmem: Tuple[cute.Tensor, ...],
        ab_smem: Tuple[cute.Tensor, ...],
        k_range: Tuple[cutlass.Int32, cutlass.Int32],
    ) -> pipeline.PipelineState:
        """Stream-K: the k-tiles ``[first, end)`` of one output tile, the (c-block, s, r)
        coordinate carried from one to the next."""
        c_blocks, taps_s, _ = self.k_shape
        mcast_masks = self.mcast_masks
        k_first, k_end = k_range
        c_block = k_first % c_blocks
        s = (k_first // c_blocks) % taps_s
        r = k_first // (c_blocks * taps_s)
        for _ in range(k_first, k_end):
            load_k_tile(
                ab_pipeline, producer_state, tma_atoms, ab_gmem, ab_smem, mcast_masks,
                (c_block, s, r),
            )  # fmt: skip
            producer_state.advance()
            c_block += 1
            if c_block == c_blocks:
                c_block = cutlass.Int32(0)
                s += 1
                if s == taps_s:
                    s = cutlass.Int32(0)
                    r += 1
        return producer_state


@dataclass(frozen=True)
class HaloLoader:
    """Halo tiles: per c-block, the tile's halo by one tiled TMA box into the halo ring, then
    the filter tile of every tap into the ring (which carries B alone)."""

    ab_pipeline: pipeline.PipelineTmaAsync
    halo_pipeline: pipeline.PipelineTmaAsync
    tma_atoms: Tuple[cute.CopyAtom, cute.CopyAtom]  # (A: a halo box, B)
    gA: cute.Tensor  # the activation's ((w, h, n), c) coordinates
    sA: cute.Tensor  # the halo ring
    tBgB: cute.Tensor  # (TMA, n tile, k-tile)
    tBsB: cute.Tensor  # (TMA, ring stage)
    b_mcast_mask: Any  # 0: single-CTA clusters
    halo: HaloGeometry
    k_shape: Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32]  # (c-blocks, S, R)
    box: Tuple  # a halo: ((halo pitch, halo_h, 1), tile_k)
    tile_wh: Tuple[int, int]  # output columns and rows of a tile
    waits_late: bool  # see ``OperandLoader.load_tile``

    @cute.jit
    def load_tile(
        self, states: ProducerStates, scheduler: StaticTileScheduler, work: cutlass.Int32
    ) -> ProducerStates:
        """See ``OperandLoader`` (halo tiles have no stream-K: a work item is a whole tile)."""
        m_tile, n_tile = scheduler.tile_coord(work)
        tma_atom_a, tma_atom_b = self.tma_atoms
        tBgB_tile = self.tBgB[(None, n_tile, None)]
        producer_state, halo_state = states.ab, states.halo
        c_blocks, taps_s, taps_r = self.k_shape
        tHsA, tHgA = self._partition_halo(m_tile)
        wait_before_first_load(self.waits_late, scheduler, work)
        for c_block in range(c_blocks):
            self.halo_pipeline.producer_acquire(halo_state)
            cute.copy(
                tma_atom_a,
                tHgA[(None, c_block)],
                tHsA[(None, halo_state.index)],
                tma_bar_ptr=self.halo_pipeline.producer_get_barrier(halo_state),
            )
            self.halo_pipeline.producer_commit(halo_state)
            halo_state.advance()
            for r in range(taps_r):
                for s in range(taps_s):
                    load_k_tile(
                        self.ab_pipeline, producer_state, (tma_atom_b,), (tBgB_tile,),
                        (self.tBsB,), (self.b_mcast_mask,), (c_block, s, r),
                    )  # fmt: skip
                    producer_state.advance()
        return ProducerStates(producer_state, halo_state)

    @cute.jit
    def _partition_halo(self, m_tile: Tuple) -> Tuple[cute.Tensor, cute.Tensor]:
        """The TMA views of output tile ``m_tile``'s halo boxes (its ``(q, p, image)`` tile
        coordinate, ``StaticTileScheduler.tile_coord``), ``(TMA, halo stage)`` in SMEM and
        ``(TMA, c-block)`` in the activation: input rows from ``p0 - pad_top``, columns from
        ``q0 - pad_left`` (TMA zero-fills what lies outside)."""
        halo = self.halo
        tile_w, tile_h = self.tile_wh
        q_tile, p_tile, image = m_tile
        q0, p0 = q_tile * tile_w, p_tile * tile_h
        origin = ((q0 - halo.pad_left, p0 - halo.pad_top, image), 0)
        gA_halo = cute.local_tile(cute.domain_offset(origin, self.gA), self.box, (0, None))
        return cpasync.tma_partition(
            self.tma_atoms[0],
            0,
            cute.make_layout(1),
            cute.group_modes(self.sA, 0, 2),
            cute.group_modes(gA_halo, 0, 2),
        )


def _load_op(multicast: int, single: type, multicast_op: type) -> Any:
    """The TMA load op of a box that ``multicast`` CTAs receive (its multicast form past 1)."""
    return multicast_op() if multicast > 1 else single()


class MainloopMixin:
    """The mainloop methods of the SM90 kernel (mixed into ``Conv2dFpropSm90``)."""

    def make_operand_atoms(
        self, act_ptr: cute.Pointer, filter_ptr: cute.Pointer, geom: ConvGeometry
    ) -> Tuple[cute.CopyAtom, cute.Tensor, cute.CopyAtom, cute.Tensor]:
        """Host side: the TMA atoms and tensors of A (im2col, multicast along cluster N; or a
        halo box) and of B (tiled, multicast along cluster M); gathered operands
        (``gather``): no atoms, the activation's ``((w, h, n), c)`` and the filter's GEMM
        view."""
        tile_m, tile_n, tile_k = self.tile_mnk
        a_smem_layout = cute.slice_(self.a_smem_layout_staged, (None, None, 0))
        b_smem_layout = cute.slice_(self.b_smem_layout_staged, (None, None, 0))

        if cutlass.const_expr(self.gather):
            packed = cutlass.const_expr(self.pack_taps)
            flt = (packed_filter_view if packed else filter_gemm_view)(filter_ptr, geom)
            return None, activation_im2col_view(act_ptr, geom), None, flt
        if cutlass.const_expr(self.tile_w):
            # A halo: a (tile_k channels, halo pitch columns, halo_h rows, 1 image) box.
            tma_atom_a, tma_tensor_a = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileG2SOp(),
                activation_im2col_view(act_ptr, geom),
                a_smem_layout,
                ((self.halo_pitch, self.halo_h, 1), tile_k),
            )
        else:
            tma_atom_a, tma_tensor_a = cpasync.make_im2col_tma_atom(
                _load_op(
                    self.num_mcast_a,
                    cpasync.CopyBulkTensorIm2ColG2SOp,
                    cpasync.CopyBulkTensorIm2ColG2SMulticastOp,
                ),
                activation_im2col_view(act_ptr, geom, self.groups),
                a_smem_layout,
                (tile_m, tile_k),  # the activation's K mode is c alone: a flat tiler here
                num_multicast=self.num_mcast_a,
                **fprop_im2col_params(geom, self.groups),
            )
            if cutlass.const_expr(self.groups > 1):
                # The 3-d view's K mode is (c, s, r, t): its one depth tap dropped, the K
                # mode is (c, s, r) as the filter's.
                tma_tensor_a = cute.group_modes(tma_tensor_a[(None, (None, None, None, 0))], 1, 4)
        tma_atom_b, tma_tensor_b = cpasync.make_tiled_tma_atom(
            _load_op(
                self.num_mcast_b,
                cpasync.CopyBulkTensorTileG2SOp,
                cpasync.CopyBulkTensorTileG2SMulticastOp,
            ),
            filter_gemm_view(filter_ptr, geom, self.groups),
            b_smem_layout,
            # Hierarchical K keeps the tiler static for runtime C (and a grouped conv's N,
            # its runtime channels per group: filter_gemm_view).
            (self.n_tiler, (tile_k, 1, 1)),
            num_multicast=self.num_mcast_b,
        )
        return tma_atom_a, tma_tensor_a, tma_atom_b, tma_tensor_b

    @cute.jit
    def mainloop(
        self,
        ab_pipeline: pipeline.PipelineAsync,  # PipelineTmaAsync, or filled by gather threads
        tiled_mma: cute.TiledMma,
        accumulators: cute.Tensor,
        tCrA: cute.Tensor,
        tCrB: cute.Tensor,
        states: ConsumerStates,
        k_range: Tuple[cutlass.Int32, cutlass.Int32],
        channels: ChannelBlocks,
    ) -> ConsumerStates:
        """One tile's WGMMAs over k-tiles ``k_range`` of the ring: one k-tile batch in flight,
        each ring stage released once the batch that read it is done. Returns the advanced
        states."""
        read_state, release_state = states.read, states.release
        k_first, k_end = k_range
        c_block = k_first % channels.c_blocks
        accumulators.fill(0.0)
        warpgroup.fence()
        self.wait_for_k_tile(ab_pipeline, read_state)
        self.mma_k_tile(
            tiled_mma, accumulators, tCrA, tCrB, read_state.index,
            k_blocks=channels.k_blocks_of(c_block, self.k_blocks_per_tile(tCrA)),
        )  # fmt: skip
        read_state.advance()
        for _ in range(k_first + 1, k_end):
            c_block = channels.next_c_block(c_block)
            self.wait_for_k_tile(ab_pipeline, read_state)
            self.mma_k_tile(
                tiled_mma, accumulators, tCrA, tCrB, read_state.index,
                k_blocks=channels.k_blocks_of(c_block, self.k_blocks_per_tile(tCrA)),
            )  # fmt: skip
            read_state.advance()
            warpgroup.wait_group(1)
            ab_pipeline.consumer_release(release_state)
            release_state.advance()
        warpgroup.wait_group(0)
        ab_pipeline.consumer_release(release_state)
        release_state.advance()
        return states._replace(read=read_state, release=release_state)

    @cute.jit
    def wait_for_k_tile(self, ab_pipeline: pipeline.PipelineAsync, state: pipeline.PipelineState):
        """Wait until ring stage ``state`` is full. Gathered by ``cp.async``, its contents are
        generic-proxy writes the gather threads could not fence (they land after the threads
        move on): the fence here makes them visible to this thread's WGMMAs."""
        ab_pipeline.consumer_wait(state)
        if cutlass.const_expr(self.gather and copies_async(self.gather_vector)):
            cute.arch.fence_proxy("async.shared", space="cta")

    @cute.jit
    def mainloop_over_halos(
        self,
        ab_pipeline: pipeline.PipelineTmaAsync,
        halo_pipeline: pipeline.PipelineTmaAsync,
        tiled_mma: cute.TiledMma,
        thr_mma: cute.ThrMma,
        accumulators: cute.Tensor,
        sA: cute.Tensor,
        a_tap_layout: cute.ComposedLayout,
        tCrB: cute.Tensor,
        states: ConsumerStates,
        halo: HaloGeometry,
        k_shape: Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32],
        channels: ChannelBlocks,
    ) -> ConsumerStates:
        """One tile's WGMMAs with halo tiles: per c-block, one halo from the halo ring and
        a filter tile per tap from the ring; tap (r, s) reads the halo from row
        ``r * dil_h * pitch + s * dil_w`` on. One k-tile batch in flight, as in ``mainloop``;
        a halo is released once the last batch that read it is done."""
        read_state, release_state, halo_state = states.read, states.release, states.halo
        c_blocks, taps_s, taps_r = k_shape
        tap_layout = a_tap_layout.outer
        accumulators.fill(0.0)
        warpgroup.fence()
        for c_block in range(c_blocks):
            k_blocks = channels.k_blocks_of(c_block, self.k_blocks_per_tile(tCrB))
            halo_pipeline.consumer_wait(halo_state)
            halo_rows = sA[(None, None, halo_state.index)].iterator
            batches = cutlass.Int32(0)
            for r in range(taps_r):
                for s in range(taps_s):
                    shift = r * halo.dil_h * self.halo_pitch + s * halo.dil_w
                    sA_tap = cute.make_tensor(halo_rows + shift * self.tile_mnk[2], tap_layout)
                    tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA_tap))
                    ab_pipeline.consumer_wait(read_state)
                    self.mma_k_tile(
                        tiled_mma, accumulators, tCrA, tCrB, read_state.index, k_blocks, 0
                    )
                    read_state.advance()
                    if batches > 0:
                        warpgroup.wait_group(1)
                        ab_pipeline.consumer_release(release_state)
                        release_state.advance()
                    batches += 1
            warpgroup.wait_group(0)
            ab_pipeline.consumer_release(release_state)
            release_state.advance()
            halo_pipeline.consumer_release(halo_state)
            halo_state.advance()
        return states._replace(read=read_state, release=release_state, halo=halo_state)

    @cute.jit
    def mma_k_tile(
        self,
        tiled_mma: cute.TiledMma,
        accumulators: cute.Tensor,
        tCrA: cute.Tensor,
        tCrB: cute.Tensor,
        stage: cutlass.Int32,
        k_blocks: cutlass.Int32,
        a_stage: Optional[cutlass.Int32] = None,
    ):
        """Issue the WGMMAs of one k-tile (from ring stage ``stage``; A from ``a_stage`` when
        given: a halo tap's one-stage view) as one commit group: its first ``k_blocks`` MMA
        k-blocks. The rest hold channels past C, zeros the MMA may skip.

        A whole k-tile is one straight batch; a partial one issues each WGMMA under its own
        branch (ptxas fences each one and closes the group with an empty WGMMA), so only
        k-tiles that skip pay that."""
        stages = (stage, stage if cutlass.const_expr(a_stage is None) else a_stage)
        per_tile = self.k_blocks_per_tile(tCrA)
        if cutlass.const_expr(per_tile == 1):  # one k-block: nothing to skip
            self._mma_k_blocks(tiled_mma, accumulators, tCrA, tCrB, stages, per_tile, None)
            warpgroup.commit_group()
        elif k_blocks == per_tile:
            self._mma_k_blocks(tiled_mma, accumulators, tCrA, tCrB, stages, per_tile, None)
            warpgroup.commit_group()
        else:
            self._mma_k_blocks(tiled_mma, accumulators, tCrA, tCrB, stages, per_tile, k_blocks)
            warpgroup.commit_group()

    @cute.jit
    def _mma_k_blocks(
        self,
        tiled_mma: cute.TiledMma,
        accumulators: cute.Tensor,
        tCrA: cute.Tensor,
        tCrB: cute.Tensor,
        stages: Tuple[cutlass.Int32, cutlass.Int32],
        per_tile: cutlass.Constexpr,
        k_blocks: Optional[cutlass.Int32],
    ):
        """The WGMMAs of a k-tile's MMA k-blocks (B's ring stage, A's): all ``per_tile``
        (``k_blocks`` None), or the first ``k_blocks`` of them."""
        stage, a_stage = stages
        for k_block in cutlass.range_constexpr(per_tile):
            a_kb, b_kb = (None, None, k_block, a_stage), (None, None, k_block, stage)
            if cutlass.const_expr(k_block == 0 or k_blocks is None):
                cute.gemm(tiled_mma, accumulators, tCrA[a_kb], tCrB[b_kb], accumulators)
            elif k_block < k_blocks:
                cute.gemm(tiled_mma, accumulators, tCrA[a_kb], tCrB[b_kb], accumulators)

    @staticmethod
    def k_blocks_per_tile(tCrA: cute.Tensor) -> int:
        """MMA k-blocks per k-tile (tile_k over the WGMMA's K)."""
        return cute.size(tCrA, mode=[2])
