"""The SM90 epilogue: a consumer warpgroup's accumulator registers, subtile by subtile,
through ``kernels/common/epilogue_store.store_subtile`` (stmatrix into SMEM staging buffers,
TMA stores)."""

from typing import List, NamedTuple, Optional, Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync
from cutlass.tensor_utils import LayoutEnum

from ..common.barriers import NamedBarrierConv
from ..common.epilogue import prefetch_channel_vectors
from ..common.epilogue_store import (
    ChannelVectors,
    OutputSubtiles,
    SourceSubtiles,
    bulk_store_tile,
    preload_channel_vectors,
    preloaded_columns,
    read_source_by_threads,
    running_amax,
    store_subtile,
    store_subtile_by_threads,
    subtile_vectors,
)
from ..common.swizzled_smem import GroupedSmem, affine_groups
from ..common.tile_scheduler import StaticTileScheduler
from .mainloop import ConsumerStates

# Registers a consumer thread may hold its accumulators and a tile's bias and scale in across
# the mainloop (``preload_channel_vectors``). A 128-wide tile's bias takes 32 (fp32) or 16
# (16-bit) beside 64 accumulators (128 for 128x256 and 256x128 tiles, whose 16-bit bias at 160
# spilled registers around the mainloop). Past them, each subtile's vectors are loaded
# VECTOR_LOOKAHEAD_SUBTILES subtiles ahead (``Sm90Epilogue.vectors_ahead``): their L2 round
# trip overlaps the subtiles before, where loading them in the subtile that uses them (0)
# waits on it once a subtile.
PRELOAD_MAX_REGISTERS = 144
VECTOR_LOOKAHEAD_SUBTILES = 1
# Thread-stored residual epilogues (``EpilogueSpec.store_by_threads``) whose tile holds at most
# this many of a thread's values read the tile's C into registers before its mainloop
# (``preload_tile_source``): in the epilogue each subtile's loads of it wait an L2 round trip
# that nothing hides, the whole epilogue of a small conv's single tile.
SOURCE_PRELOAD_MAX_VALUES = 32


class EpilogueArgs(NamedTuple):
    """The epilogue's run-time operands as the consumers use them."""

    tma_atom_d: Optional[cute.CopyAtom]  # TMA store of the output (None: stored by threads)
    gD: cute.Tensor  # the output by tile: (tile_m, tile_n, m_tiles, n_tiles)
    # gD's output coordinates and the output's shape they must be inside (None unless
    # EpilogueSpec.needs_output_coords); stored by threads: the residual source tiled as gD
    # (None without one).
    cD: Optional[cute.Tensor]
    d_shape: Optional[cute.Shape]
    gC: Optional[cute.Tensor]
    bias: Optional[cute.Tensor]
    scale: Optional[cute.Tensor]
    alpha: cutlass.Float32  # times the fp8 inputs' scales
    beta: cutlass.Float32
    out_factor: Optional[cutlass.Float32]  # fp8 output: 1 / out_scale
    amax: Optional[cute.Tensor]  # the output's amax in global memory (None: not kept)
    # A grouped conv: (n tiles per group, input and output channels per group), else None.
    channel_group: Optional[Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32]] = None


class Sm90Epilogue(NamedTuple):
    """A consumer thread's epilogue: its partitions for ``store_subtile``, the accumulator
    registers by subtile, and its first staging buffer (ping-pong: its own)."""

    out: OutputSubtiles
    source: Optional[SourceSubtiles]
    vectors: ChannelVectors
    tRS_rAcc: cute.Tensor  # (V, M_reps, chunks_per_subtile, subtiles)
    tRS_rD: cute.Tensor  # one subtile's fp32 values
    sD: cute.Tensor  # the staging buffers
    first_buffer: cutlass.Int32
    tile_tidx: cutlass.Int32  # this thread among the tile's consumer threads
    # Trace time: > 0: ``vectors.tile_bias``/``tile_scale`` are loaded in the epilogue, each
    # subtile's this many subtiles ahead, not before the mainloop (PRELOAD_MAX_REGISTERS).
    vectors_ahead: int = 0
    # Thread-read C preloaded per tile (SOURCE_PRELOAD_MAX_VALUES): (values, subtile), or None.
    source_regs: Optional[cute.Tensor] = None


class Sm90EpilogueMixin:
    """The epilogue methods of the SM90 kernel (mixed into ``Conv2dFpropSm90``)."""

    def make_epilogue_context(
        self,
        tiled_mma: cute.TiledMma,
        tile_tidx: cutlass.Int32,
        warpgroup_idx: cutlass.Int32,
        sD: cute.Tensor,
        sC: Optional[cute.Tensor],
        accumulators: cute.Tensor,
        tma_atom_d: cute.CopyAtom,
        source_pipeline: Optional[pipeline.PipelineTmaAsync],
        m_bias: Optional[cute.Tensor],
        m_scale: Optional[cute.Tensor],
        out_factor: Optional[cutlass.Float32],
    ) -> "Sm90Epilogue":
        """This thread's epilogue partitions: accumulator registers -> SMEM staging buffer
        (stmatrix) -> TMA store, and its view of the C buffers, bias and scale."""
        tiled_copy_r2s = self.r2s_tiled_copy(tiled_mma)
        thr_copy_r2s = tiled_copy_r2s.get_slice(tile_tidx)
        rD_shape = cute.shape(thr_copy_r2s.partition_S(sD))[:3]
        barrier_id = int(NamedBarrierConv.Epilogue)
        store_warp, first_buffer = self.epi_store_warp_id, 0
        if self.pingpong:
            # Each consumer has its own barrier, store warp (its first) and staging buffers.
            consumer1_offset = int(NamedBarrierConv.EpilogueConsumer1) - barrier_id
            barrier_id = barrier_id + warpgroup_idx * consumer1_offset
            store_warp = self.epi_store_warp_id + warpgroup_idx * 4
            first_buffer = warpgroup_idx * self.epi_stages
        regs_out = cute.make_rmem_tensor(rD_shape, self.out_dtype)
        out_smem, out_regs_copy, out_copy = thr_copy_r2s.partition_D(sD), regs_out, tiled_copy_r2s
        pairs_grouped = cutlass.const_expr(
            self.out_dtype.width == 8 and self.pairs_group(tiled_copy_r2s, sD)
        )
        if pairs_grouped:
            # 8-bit values in byte pairs, each at an offset from one of a few bases (16-bit
            # outputs keep stmatrix, which addresses a row of 8 values per lane at once).
            out_smem = GroupedSmem(self.value_pairs(out_smem))
            out_regs_copy, out_copy = cute.recast_tensor(regs_out, cutlass.Uint16), None
        out = OutputSubtiles(
            regs=regs_out,
            regs_copy=out_regs_copy,
            tiled_copy=out_copy,
            smem=out_smem,  # (R2S, R2S_M, R2S_N, PIPE_D)
            tma_atom=tma_atom_d,
            smem_tma=None,  # per tile, with its global side (epilogue_tile)
            barrier=pipeline.NamedBarrier(
                barrier_id=barrier_id, num_threads=self.barrier_specs["named.epilogue"].count
            ),
            store_pipeline=pipeline.PipelineTmaStore.create(
                num_stages=self.epi_stages,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.tile_threads),
            ),
            store_warp=store_warp,
            out_factor=out_factor,
            amax=running_amax(self.epilogue),
        )
        source = None
        if self.epilogue.loads_source_by_tma:
            regs_c = cute.make_rmem_tensor(rD_shape, self.out_dtype)
            # This thread's values in C's buffers: the r2s partition, in tRS_rD's order.
            smem_c, regs_c_copy = thr_copy_r2s.partition_S(sC), regs_c
            # Read as value pairs (one 2- or 4-byte load each), from a few swizzled bases
            # where they group (C's buffers share the output's layout); float32 C as it is.
            c_pairs_group = cutlass.const_expr(
                self.out_dtype.width <= 16 and self.pairs_group(tiled_copy_r2s, sC)
            )
            if cutlass.const_expr(self.out_dtype.width == 8 or c_pairs_group):
                smem_c = self.value_pairs(smem_c)
                regs_c_copy = cute.recast_tensor(regs_c, smem_c.element_type)
                if c_pairs_group:
                    smem_c = GroupedSmem(smem_c)
            source = SourceSubtiles(source_pipeline, None, smem_c, regs_c_copy, regs_c)
        # The (m, n) position inside a subtile of each of this thread's values: what bias and
        # scale are indexed by. The source side of the r2s copy is the register fragment, so
        # partition_S of a subtile-shaped tensor lines up with tRS_rD.
        coords = thr_copy_r2s.partition_S(cute.make_identity_tensor(self.epi_tile))
        tile_bias, tile_scale = None, None
        preload_shape = (preloaded_columns(coords), self.tile_mnk[1] // self.epi_tile[1])
        preloads = self.preloads_channel_vectors(
            preload_shape, m_bias, m_scale, cute.size(accumulators)
        )
        has_vectors = m_bias is not None or m_scale is not None
        vectors_ahead = VECTOR_LOOKAHEAD_SUBTILES if has_vectors and not preloads else 0
        if cutlass.const_expr(preloads or vectors_ahead):
            if cutlass.const_expr(m_bias is not None):
                tile_bias = cute.make_rmem_tensor(preload_shape, m_bias.element_type)
            if cutlass.const_expr(m_scale is not None):
                tile_scale = cute.make_rmem_tensor(preload_shape, m_scale.element_type)
        vectors = ChannelVectors(
            m_bias,
            m_scale,
            coords,
            cute.make_rmem_tensor(rD_shape, self.acc_dtype),
            cute.make_rmem_tensor(rD_shape, self.acc_dtype),
            tile_bias,
            tile_scale,
        )
        source_regs = None
        subtiles = self.tile_mnk[1] // self.epi_tile[1]
        if cutlass.const_expr(self.preloads_source(cute.size(rD_shape) * subtiles)):
            source_regs = cute.make_rmem_tensor((cute.size(rD_shape), subtiles), self.out_dtype)
        return Sm90Epilogue(
            out=out,
            source=source,
            vectors=vectors,
            tRS_rAcc=self.accumulators_by_subtile(tiled_copy_r2s.retile(accumulators), rD_shape),
            tRS_rD=cute.make_rmem_tensor(rD_shape, self.acc_dtype),
            sD=sD,
            first_buffer=first_buffer,
            tile_tidx=tile_tidx,
            vectors_ahead=vectors_ahead,
            source_regs=source_regs,
        )

    @cute.jit
    def load_tile_vectors(
        self, parts: "Sm90Epilogue", args: EpilogueArgs, n_tile: cutlass.Int32,
        tile_tidx: cutlass.Int32,
    ):  # fmt: skip
        """Before output tile column ``n_tile``'s mainloop: its bias/scale into registers where
        they fit for the whole tile, else into L2 for the epilogue's loads."""
        tile_n0 = self.tile_first_channel(n_tile, args)
        if cutlass.const_expr(parts.vectors.preloaded and not parts.vectors_ahead):
            preload_channel_vectors(self.epilogue, parts.vectors, tile_n0, self.epi_tile[1])
        else:
            prefetch_channel_vectors(
                self.epilogue, args.bias, args.scale, tile_n0, self.tile_mnk[1], tile_tidx
            )

    def preloads_source(self, values: int) -> bool:
        """Trace time: whether a thread reads its ``values`` of a tile's C (thread-stored
        residual epilogues) before the tile's mainloop (``preload_tile_source``): where they
        fit ``SOURCE_PRELOAD_MAX_VALUES``, on im2col or gathered tiles of one epilogue each,
        not split by stream-K."""
        spec = self.epilogue
        return (
            spec.store_by_threads
            and spec.has_residual
            and not spec.bulk_tile_store
            and not self.tile_w
            and not self.pingpong
            and not self.stream_k
            and values <= SOURCE_PRELOAD_MAX_VALUES
        )

    @cute.jit
    def preload_tile_source(
        self, parts: "Sm90Epilogue", m_tile: cutlass.Int32, n_tile: cutlass.Int32,
        args: EpilogueArgs,
    ):  # fmt: skip
        """Read this thread's values of output tile ``(m_tile, n_tile)``'s C into
        ``parts.source_regs``, subtile by subtile in the epilogue's order: issued before the
        tile's mainloop, the loads land under it."""
        gC_tile = cute.zipped_divide(args.gC[(None, None, m_tile, n_tile)], self.epi_tiler)
        cD_tile = cute.zipped_divide(args.cD[(None, None, m_tile, n_tile)], self.epi_tiler)
        epi_tile_layout = self.epi_tile_layout(gC_tile)
        for epi_idx in cutlass.range_constexpr(cute.size(epi_tile_layout)):
            subtile = ((None, None), epi_tile_layout.get_hier_coord(epi_idx))
            read_source_by_threads(
                self.epilogue, parts.source_regs[(None, epi_idx)], parts.vectors.coords,
                gC_tile[subtile], cD_tile[subtile], args.d_shape,
            )  # fmt: skip

    @staticmethod
    def preloads_channel_vectors(
        shape: Tuple[int, int],
        m_bias: Optional[cute.Tensor],
        m_scale: Optional[cute.Tensor],
        accumulators: int,
    ) -> bool:
        """Trace time: whether the consumers load a tile's bias and scale into registers of
        ``shape`` (``(columns, subtile columns)`` per vector) before its mainloop: where they
        and the thread's ``accumulators`` fit ``PRELOAD_MAX_REGISTERS``; else each subtile
        loads its own after it."""
        vectors = [v for v in (m_bias, m_scale) if v is not None]
        bits = sum(v.element_type.width for v in vectors) * shape[0] * shape[1]
        return bool(vectors) and accumulators + bits / 32 <= PRELOAD_MAX_REGISTERS

    def r2s_tiled_copy(self, tiled_mma: cute.TiledMma) -> cute.TiledCopy:
        """The copy of accumulator fragments into an ``epi_tile`` staging subtile: stmatrix's
        8x8 matrices (16-bit rows) for 16-bit outputs, the fragment's own layout for 8- and
        32-bit ones, tiled over the MMA's rows and as many matrices per warp as one subtile
        row holds. A matrix row spans 16 8-bit values, so a 16-wide 8-bit subtile takes two:
        four would tile 32 columns, and their second 16 would fold onto the first (a
        stride-0 mode: half the values overwritten)."""
        copy_atom_r2s = sm90_utils.get_smem_store_op(
            LayoutEnum.ROW_MAJOR, self.out_dtype, self.acc_dtype
        )
        matrices = min(4, self.epi_tile[1] * self.out_dtype.width // 64)
        copy_atom_d = cute.make_copy_atom(
            cute.nvgpu.warp.StMatrix8x8x16bOp(False, matrices), self.out_dtype
        )
        tiled_copy_r2s = cute.make_tiled_copy_S(
            copy_atom_r2s, cute.make_tiled_copy_C_atom(copy_atom_d, tiled_mma)
        )
        tiler_n = cute.size(tiled_copy_r2s.tiler_mn[1])
        if self.epi_tile[1] % tiler_n:
            raise ValueError(
                f"the r2s copy tiles {tiler_n} columns, which do not divide the "
                f"{self.epi_tile[1]}-wide epilogue subtile"
            )
        return tiled_copy_r2s

    def pairs_group(self, tiled_copy_r2s: cute.TiledCopy, buffers: cute.Tensor) -> bool:
        """Trace time: whether every epilogue thread's value pairs in an 8- or 16-bit staging
        or C buffer (``value_pairs``) fall in ``affine_groups`` (so that ``copy_grouped`` may
        address them). The offsets are within a buffer: buffers start at multiples of 1024
        bytes, the longest swizzle period; ``epi_swizzle`` acts on byte addresses, as the
        buffers' pointers apply it."""
        width = buffers.element_type.width
        subtile = cute.make_identity_tensor(self.epi_tile)
        first_values = [
            tiled_copy_r2s.get_slice(t).partition_D(subtile)[0] for t in range(self.tile_threads)
        ]
        bases = [buffers.layout((*coord, 0)) * width // 8 for coord in first_values]
        one_buffer = tiled_copy_r2s.get_slice(0).partition_D(buffers)[(None, None, None, 0)]
        pairs = cute.recast_layout(2 * width, width, one_buffer.layout)
        offsets = [pairs(v) * width // 4 for v in range(cute.size(pairs))]
        return affine_groups(offsets, self.epi_swizzle, bases) is not None

    def value_pairs(self, smem: cute.Tensor) -> cute.Tensor:
        """An 8- or 16-bit SMEM partition of the output or C buffers whose values come in
        adjacent pairs (an accumulator fragment's), viewed as elements twice as wide: read
        so, each pair is one 2- or 4-byte load kept whole (8-bit elements would be split into
        bytes and packed again for the conversion: 4 byte permutes per pair, and the registers
        they hold). The pointer keeps the buffers' swizzle (``epi_swizzle``), which
        ``recast_tensor`` would drop."""
        width = smem.element_type.width
        swizzle = cute.make_swizzle(*self.epi_swizzle)
        pair_type = cutlass.Uint16 if width == 8 else cutlass.Uint32
        pairs = cute.recast_ptr(smem.iterator, swizzle_=swizzle, dtype=pair_type)
        return cute.make_tensor(pairs, cute.recast_layout(2 * width, width, smem.layout))

    @staticmethod
    def accumulators_by_subtile(acc: cute.Tensor, rD_shape: cute.Shape) -> cute.Tensor:
        """The retiled accumulators, ``((V, chunks), M_reps, 1)``, as
        ``(V, M_reps, chunks_per_subtile, subtiles)``: a subtile's values in ``tRS_rD``'s order
        are then consecutive. A subtile spans every M rep (tile_m 256: two 64-row blocks per
        warpgroup) and consecutive column chunks."""
        values = cute.size(rD_shape[0])
        m_reps, chunks_per_subtile = cute.size(rD_shape[1]), cute.size(rD_shape[2])
        chunks = cute.size(acc, mode=[0]) // values
        assert cute.size(acc, mode=[1]) == m_reps and chunks % chunks_per_subtile == 0
        return cute.make_tensor(
            acc.iterator,
            cute.make_layout(
                (values, m_reps, chunks_per_subtile, chunks // chunks_per_subtile),
                stride=(1, values * chunks, values, values * chunks_per_subtile),
            ),
        )

    @cute.jit
    def epilogue_tile(
        self,
        parts: "Sm90Epilogue",
        work: cutlass.Int32,
        scheduler: StaticTileScheduler,
        states: ConsumerStates,
        num_epi_tiles_done: cutlass.Int32,
        args: EpilogueArgs,
        warp_idx: cutlass.Int32,
    ) -> Tuple[ConsumerStates, cutlass.Int32]:
        """The epilogue of one output tile: subtiles of ``epi_tile`` through SMEM, stored by
        TMA (``store_subtile``), or by the threads (``store_subtile_by_threads``), the
        accumulator read from registers. Returns ``states`` with the source ring's position
        advanced, and the count of subtiles done."""
        if cutlass.const_expr(self.epilogue.bulk_tile_store):
            return states, self.bulk_epilogue_tile(
                parts, work, scheduler, num_epi_tiles_done, args, warp_idx
            )
        source_state, gD, alpha, beta = states.source, args.gD, args.alpha, args.beta
        m_tile, n_tile = scheduler.tile_coord(work)
        tRS_rAcc = parts.tRS_rAcc
        tRS_rD = parts.tRS_rD
        size_tRS_rD = cute.size(tRS_rD)
        gD_tile = cute.zipped_divide(gD[(None, None, m_tile, n_tile)], self.epi_tiler)
        out, bSG_gD, cD_tile, gC_tile = parts.out, None, None, None
        if cutlass.const_expr(self.epilogue.needs_output_coords):
            cD_tile = cute.zipped_divide(args.cD[(None, None, m_tile, n_tile)], self.epi_tiler)
        if cutlass.const_expr(self.epilogue.store_by_threads):
            if cutlass.const_expr(self.epilogue.has_residual):
                gC_tile = cute.zipped_divide(args.gC[(None, None, m_tile, n_tile)], self.epi_tiler)
        else:
            bSG_sD, bSG_gD = cpasync.tma_partition(
                parts.out.tma_atom,
                0,
                cute.make_layout(1),
                cute.group_modes(parts.sD, 0, 2),
                gD_tile,
            )
            out = parts.out._replace(smem_tma=bSG_sD)
        epi_tile_layout = self.epi_tile_layout(gD_tile)
        num_epi_tiles = cute.size(epi_tile_layout)
        subtile_columns = [epi_tile_layout.get_hier_coord(i)[1] for i in range(num_epi_tiles)]
        tile_n0 = self.tile_first_channel(n_tile, args)
        self.load_vectors_ahead(parts, tile_n0, subtile_columns, None)
        for epi_idx in cutlass.range_constexpr(num_epi_tiles):
            self.load_vectors_ahead(parts, tile_n0, subtile_columns, epi_idx)
            for v in cutlass.range_constexpr(size_tRS_rD):
                tRS_rD[v] = tRS_rAcc[epi_idx * size_tRS_rD + v]
            subtile_m, subtile_n = epi_tile_layout.get_hier_coord(epi_idx)
            subtile_n0 = tile_n0 + subtile_n * self.epi_tile[1]
            vectors = subtile_vectors(parts.vectors, subtile_n)
            if cutlass.const_expr(self.epilogue.store_by_threads):
                subtile = ((None, None), (subtile_m, subtile_n))  # (epi_m, epi_n)
                preloaded = None
                if cutlass.const_expr(parts.source_regs is not None):
                    preloaded = parts.source_regs[(None, epi_idx)]
                store_subtile_by_threads(
                    self.epilogue, tRS_rD.load(), alpha, beta, vectors, subtile_n0, out,
                    gD_tile[subtile], cD_tile[subtile], args.d_shape,
                    None if gC_tile is None else gC_tile[subtile], preloaded,
                )  # fmt: skip
            else:
                epi_buffer = (num_epi_tiles_done + epi_idx) % self.epi_stages
                if cutlass.const_expr(self.pingpong):
                    epi_buffer = epi_buffer + parts.first_buffer
                coord_subtile = None
                if cutlass.const_expr(self.epilogue.has_amax):
                    coord_subtile = cD_tile[((None, None), (subtile_m, subtile_n))]
                store_subtile(
                    self.epilogue, tRS_rD.load(), alpha, beta, vectors, subtile_n0,
                    parts.source, source_state, out, epi_buffer,
                    bSG_gD[(None, (subtile_m, subtile_n))], warp_idx, coord_subtile,
                    args.d_shape,
                )  # fmt: skip
                if cutlass.const_expr(self.epilogue.has_residual):
                    source_state.advance()
        return states._replace(source=source_state), num_epi_tiles_done + num_epi_tiles

    @cute.jit
    def tile_first_channel(self, n_tile: cutlass.Int32, args: EpilogueArgs) -> cutlass.Int32:
        """The first output channel of output tile column ``n_tile``: ``n_tile * tile_n``,
        or in a grouped conv its group's first plus its place in the group (a group's last
        tile may reach past the group: ``filter_gemm_view``)."""
        tile_n = self.tile_mnk[1]
        first = n_tile * tile_n
        if cutlass.const_expr(args.channel_group is not None):
            tiles_per_group, group_out, _ = args.channel_group
            group = n_tile // tiles_per_group
            first = group * group_out + (n_tile - group * tiles_per_group) * tile_n
        return first

    def load_vectors_ahead(
        self,
        parts: "Sm90Epilogue",
        tile_n0: cutlass.Int32,
        subtile_columns: List[int],
        epi_idx: Optional[int],
    ):
        """With ``parts.vectors_ahead`` (d), load into their registers the bias/scale of the
        subtile d ahead of subtile ``epi_idx`` of the output tile of first channel
        ``tile_n0``, or, before
        the first subtile (``epi_idx`` None), of the first d subtiles; ``subtile_columns``:
        each subtile's column, in the epilogue's order."""
        ahead = parts.vectors_ahead
        if ahead:
            first = 0 if epi_idx is None else epi_idx + ahead
            last = ahead if epi_idx is None else epi_idx + ahead + 1
            for subtile_n in subtile_columns[first:last]:
                preload_channel_vectors(
                    self.epilogue, parts.vectors, tile_n0, self.epi_tile[1],
                    (subtile_n,),
                )  # fmt: skip

    def bulk_staging_buffers(self) -> int:
        """Trace time: the dense tile copies (``tile_m x tile_n`` values) the staging
        buffers hold for ``EpilogueSpec.bulk_tile_store``."""
        buffers = self.config.tile_copies(self.plan)
        if buffers < 1:
            raise ValueError(
                "bulk_tile_store needs tiles along M (no halo tiles), one epilogue per tile "
                "(no ping-pong) and staging buffers that hold a whole tile"
            )
        return buffers

    @cute.jit
    def bulk_epilogue_tile(
        self,
        parts: "Sm90Epilogue",
        work: cutlass.Int32,
        scheduler: StaticTileScheduler,
        num_epi_tiles_done: cutlass.Int32,
        args: EpilogueArgs,
        warp_idx: cutlass.Int32,
    ) -> cutlass.Int32:
        """The epilogue of one output tile that holds whole output rows
        (``EpilogueSpec.bulk_tile_store``): each thread writes its values, subtile by subtile,
        into a dense copy of the tile's rows in a staging buffer (rows of K, as in the
        output), and ``bulk_store_tile`` moves the rows inside the output out in one bulk
        copy. Buffers alternate by tile; a buffer is written again once its copy has read
        it. Returns the count of subtiles done."""
        tile_m, tile_n = self.tile_mnk[0], self.tile_mnk[1]
        m_tile, n_tile = scheduler.tile_coord(work)
        num_rows, k = args.d_shape
        out = parts.out
        buffers = self.bulk_staging_buffers()
        num_epi_tiles = tile_n // self.epi_tile[1]
        buffer = num_epi_tiles_done // num_epi_tiles % buffers
        # The staging buffers unswizzled, as tile copies (1024-byte aligned, 16-byte sized).
        staging = cute.make_ptr(
            self.out_dtype, parts.sD.iterator.toint(), cute.AddressSpace.smem, assumed_align=16
        ) + buffer * (tile_m * tile_n)
        issuer = (warp_idx == out.store_warp) & (cute.arch.lane_idx() == 0)
        if issuer:
            cute.arch.cp_async_bulk_wait_group(buffers - 1, read=True)
        out.barrier.arrive_and_wait()
        staged = cute.make_tensor(staging, cute.make_layout((tile_m, tile_n), stride=(k, 1)))
        staged_tile = cute.zipped_divide(staged, self.epi_tiler)
        cD_tile = cute.zipped_divide(args.cD[(None, None, m_tile, n_tile)], self.epi_tiler)
        tRS_rD, size_tRS_rD = parts.tRS_rD, cute.size(parts.tRS_rD)
        subtile_columns = list(range(num_epi_tiles))  # one row of subtiles
        tile_n0 = self.tile_first_channel(n_tile, args)
        self.load_vectors_ahead(parts, tile_n0, subtile_columns, None)
        for epi_idx in cutlass.range_constexpr(num_epi_tiles):
            self.load_vectors_ahead(parts, tile_n0, subtile_columns, epi_idx)
            for v in cutlass.range_constexpr(size_tRS_rD):
                tRS_rD[v] = parts.tRS_rAcc[epi_idx * size_tRS_rD + v]
            subtile = ((None, None), (0, epi_idx))  # (epi_m, epi_n): one row of subtiles
            subtile_n0 = tile_n0 + epi_idx * self.epi_tile[1]
            store_subtile_by_threads(
                self.epilogue, tRS_rD.load(), args.alpha, args.beta,
                subtile_vectors(parts.vectors, epi_idx), subtile_n0, out, staged_tile[subtile],
                cD_tile[subtile], args.d_shape, None,  # no residual (EpilogueSpec checks)
            )  # fmt: skip
        cute.arch.fence_proxy("async.shared", space="cta")  # the copies before the bulk read
        out.barrier.arrive_and_wait()
        # The tile's rows in the output; none for the tiles past K of clusters along N.
        rows = cutlass.min(num_rows - m_tile * tile_m, tile_m)
        count = cutlass.select_(n_tile == 0, rows * k, 0)
        gmem = args.gD[(None, None, m_tile, n_tile)].iterator
        bulk_store_tile(staging, gmem, count, issuer, parts.tile_tidx)
        return num_epi_tiles_done + num_epi_tiles

    @staticmethod
    def epi_tile_layout(g_tile_divided: cute.Tensor) -> cute.Layout:
        """Order of the epilogue subtiles of one output tile, as (M, N) coordinates: N fastest
        (a halo tile's M subtile mode is (1, 1, 1): its coordinate 0 indexes it whole; a
        grouped conv's N subtile mode is (subtiles, 1): a flat coordinate indexes it)."""
        shape = (cute.size(g_tile_divided.shape[1][0]), cute.size(g_tile_divided.shape[1][1]))
        return cute.make_layout(shape, stride=(shape[1], 1))
