"""The SM100 epilogue warps: TMEM -> registers (``tcgen05.ld``) -> ``store_subtile``
(``kernels/common/epilogue_store.py``: fp32 math, + beta * C from SMEM, st.shared, TMA store),
or ``store_subtile_by_threads`` for outputs TMA cannot address, mixed into
``Conv2dFpropKernel``."""

import enum
from typing import NamedTuple, Optional

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.tensor_utils import LayoutEnum
from cutlass.utils.gemm.sm100 import transform_partitioned_tensor_layout

from ..common.barriers import NamedBarrierConv
from ..common.epilogue import prefetch_channel_vectors
from ..common.epilogue_store import (
    ChannelVectors,
    OutputSubtiles,
    SourceSubtiles,
    publish_amax,
    running_amax,
    store_subtile,
    store_subtile_by_threads,
)
from .tile_scheduler import ClcWorkItems


class NamedBarrierSm100(enum.IntEnum):
    """Hardware named barriers of the SM100 kernel (0 is ``__syncthreads``)."""

    # The 4 epilogue warps around each output subtile (as on SM90).
    Epilogue = int(NamedBarrierConv.Epilogue)
    # The MMA warp publishes the TMEM address it allocated; the epilogue warps read it.
    TmemAllocation = max(int(b) for b in NamedBarrierConv) + 1


class OutputTiles(NamedTuple):
    """This CTA's MMA partitions of the output's tiles, ``(MMA, MMA_M, MMA_N, RestM, RestN)``:
    as the TMA store's tensor, or (``EpilogueSpec.store_by_threads``) in memory, with their
    output coordinates, the output's shape and the residual source in memory (else None)."""

    tCgD: cute.Tensor
    tCcD: Optional[cute.Tensor]
    d_shape: Optional[cute.Shape]
    tCgC: Optional[cute.Tensor]


class Sm100EpilogueMixin:
    """The epilogue-warp methods of the SM100 kernel."""

    def _epi_subtiles(self, tCgX: cute.Tensor) -> cute.Tensor:
        """A partition_C'd tile as (OutputM, OutputN, EPI_M, EPI_N, RestM, RestN)."""
        return cute.flat_divide(transform_partitioned_tensor_layout(tCgX), self.epi_tile)

    def _epilogue_subtiles(
        self,
        tiled_copy_t2r: cute.TiledCopy,
        tTR_cD: cute.Tensor,
        tidx: cutlass.Int32,
        tma_atom_d: Optional[cute.CopyAtom],
        tCgD: cute.Tensor,
        sD: cute.Tensor,
        sC: Optional[cute.Tensor],
        source_pipeline: Optional[pipeline.PipelineTmaAsync],
        m_bias: Optional[cute.Tensor],
        m_scale: Optional[cute.Tensor],
    ):
        """This thread's ``store_subtile`` partitions, in the TMEM load's thread/value order:
        ``(OutputSubtiles, SourceSubtiles or None, ChannelVectors)`` and the TMA store's
        global side, ``((ATOM_V, REST_V), EPI_M, EPI_N, RestM, RestN)`` (None where the
        threads store)."""
        epi = self.epilogue
        tTR_rD = cute.make_rmem_tensor(tTR_cD.shape, self.out_dtype)
        tTR_rBias = cute.make_rmem_tensor(tTR_cD.shape, self.acc_dtype)
        tTR_rScale = cute.make_rmem_tensor(tTR_cD.shape, self.acc_dtype)
        # Registers -> SMEM: each thread holds one row of 32 columns (tcgen05.ld 32x32b), so
        # this is a vectorised st.shared per thread, not stmatrix.
        tiled_copy_r2s = cute.make_tiled_copy_D(
            sm100_utils.get_smem_store_op(
                LayoutEnum.ROW_MAJOR, self.out_dtype, self.acc_dtype, tiled_copy_t2r
            ),
            tiled_copy_t2r,
        )
        # Residual: SMEM -> registers, in the same thread/value order as the accumulator.
        source = None
        if cutlass.const_expr(epi.loads_source_by_tma):
            tiled_copy_s2r = cute.make_tiled_copy_D(
                cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.out_dtype), tiled_copy_t2r
            )
            tTR_rC = cute.make_rmem_tensor(tTR_cD.shape, self.out_dtype)
            source = SourceSubtiles(
                pipeline=source_pipeline,
                tiled_copy=tiled_copy_s2r,
                # (S2R, S2R_M, S2R_N, SRC_STAGE)
                smem=tiled_copy_s2r.get_slice(tidx).partition_D(sC),
                regs_copy=tiled_copy_s2r.retile(tTR_rC),
                regs=tTR_rC,
            )
        # SMEM -> GMEM: ((ATOM_V, REST_V), EPI_M, EPI_N, RestM, RestN)
        bSG_sD, bSG_gD = None, None
        if cutlass.const_expr(not epi.store_by_threads):
            bSG_sD, bSG_gD = cpasync.tma_partition(
                tma_atom_d,
                0,
                cute.make_layout(1),
                cute.group_modes(sD, 0, 2),
                cute.group_modes(self._epi_subtiles(tCgD), 0, 2),
            )
        out = OutputSubtiles(
            regs=tTR_rD,
            regs_copy=tiled_copy_r2s.retile(tTR_rD),
            tiled_copy=tiled_copy_r2s,
            smem=tiled_copy_r2s.get_slice(tidx).partition_D(sD),  # (R2S, R2S_M, R2S_N, STAGE)
            tma_atom=tma_atom_d,
            smem_tma=bSG_sD,
            barrier=pipeline.NamedBarrier(
                barrier_id=int(NamedBarrierSm100.Epilogue),
                num_threads=self.barrier_specs["named.epilogue"].count,
            ),
            store_pipeline=pipeline.PipelineTmaStore.create(
                num_stages=self.output_stages,
                producer_group=pipeline.CooperativeGroup(
                    pipeline.Agent.Thread, self.roles.epilogue_threads
                ),
            ),
            store_warp=self.roles.epilogue[0],
        )
        vectors = ChannelVectors(m_bias, m_scale, tTR_cD, tTR_rBias, tTR_rScale)
        return out, source, vectors, bSG_gD

    @cute.jit
    def epilogue_store(
        self,
        acc_pipeline: pipeline.PipelineUmmaAsync,
        source_pipeline: Optional[pipeline.PipelineTmaAsync],
        work_items: ClcWorkItems,
        tma_atom_d: Optional[cute.CopyAtom],
        tCtAcc_fake: cute.Tensor,
        output: OutputTiles,
        sD: cute.Tensor,
        sC: Optional[cute.Tensor],
        m_bias: Optional[cute.Tensor],
        m_scale: Optional[cute.Tensor],
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
        out_factor: Optional[cutlass.Float32],
        m_amax: Optional[cute.Tensor],
        tmem: cutlass.memory.TmemAllocator,
        tmem_dealloc_barrier: cute.Pointer,
        cta_rank_in_cluster: cutlass.Int32,
        warp_idx: cutlass.Int32,
    ):
        """Epilogue warps: TMEM -> registers -> fused epilogue -> SMEM -> TMA store (or
        -> global memory by each thread, ``store_by_threads``); with ``m_amax``, each warp
        adds its values' amax to it at the end."""
        epi = self.epilogue
        tidx, _, _ = cute.arch.thread_idx()
        tmem.wait_for_alloc()
        tmem_ptr = tmem.retrieve_ptr(self.acc_dtype)
        # ((OutputM, 1), (MMA_N, 1), ACC_STAGE) -> (OutputM, OutputN, 1, EPI_N, ACC_STAGE)
        tAcc_epi = cute.flat_divide(
            transform_partitioned_tensor_layout(cute.make_tensor(tmem_ptr, tCtAcc_fake.layout)),
            self.epi_tile,
        )
        # TMEM -> registers: warp w reads TMEM lanes (rows) 32w..32w+31 of each subtile.
        bm, _, _ = self.block_tile
        tiled_copy_t2r = tcgen05.make_tmem_copy(
            sm100_utils.get_tmem_load_op(
                (bm, self.mma_tiler[1], self.mma_tiler[2]),
                LayoutEnum.ROW_MAJOR,
                self.out_dtype,
                self.acc_dtype,
                self.epi_tile,
                self.use_2cta,
            ),
            tAcc_epi[(None, None, 0, 0, 0)],
        )
        thr_copy_t2r = tiled_copy_t2r.get_slice(tidx)
        tTR_tAcc = thr_copy_t2r.partition_S(tAcc_epi)  # (T2R, T2R_M, T2R_N, 1, EPI_N, STAGE)
        # The (m, n) inside a subtile of each of this thread's values: what bias and scale
        # are indexed by.
        tTR_cD = thr_copy_t2r.partition_D(cute.make_identity_tensor(self.epi_tile))
        tTR_rAcc = cute.make_rmem_tensor(tTR_cD.shape, self.acc_dtype)
        out, source, vectors, bSG_gD = self._epilogue_subtiles(
            tiled_copy_t2r, tTR_cD, tidx, tma_atom_d, output.tCgD, sD, sC, source_pipeline,
            m_bias, m_scale,
        )  # fmt: skip
        # (OutputM, OutputN, EPI_M, EPI_N, RestM, RestN) views of the output's coordinates
        # (for the bounds predicates) and, stored by threads, of the output and the source.
        gD_epi, cD_epi, gC_epi = None, None, None
        if cutlass.const_expr(epi.needs_output_coords):
            cD_epi = self._epi_subtiles(output.tCcD)
        if cutlass.const_expr(epi.store_by_threads):
            gD_epi = self._epi_subtiles(output.tCgD)
            if cutlass.const_expr(epi.has_residual):
                gC_epi = self._epi_subtiles(output.tCgC)
        out = out._replace(out_factor=out_factor, amax=running_amax(epi))
        acc_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, self.acc_stages
        )
        src_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, max(self.source_stages, 1)
        )
        mma_n = self.mma_tiler[1]
        epi_n = self.epi_tile[1]
        subtiles_done = cutlass.Int32(0)
        work, valid, clc_state = work_items.first(work_items.initial_state())
        while valid:
            tile_m, tile_n = work_items.tile_coord(work)
            # The tile's bias and scale into L2 while its MMAs run: read after them otherwise.
            prefetch_channel_vectors(epi, m_bias, m_scale, tile_n * mma_n, mma_n, tidx)
            bSG_gD_tile = None
            if cutlass.const_expr(not epi.store_by_threads):
                bSG_gD_tile = bSG_gD[(None, 0, None, tile_m, tile_n)]  # ((ATOM_V, REST_V), EPI_N)
            tTR_tAcc_tile = tTR_tAcc[(None, None, None, 0, None, acc_state.index)]
            acc_pipeline.consumer_wait(acc_state)
            for subtile in range(self.num_subtiles):
                cute.copy(tiled_copy_t2r, tTR_tAcc_tile[(None, None, None, subtile)], tTR_rAcc)
                if subtile == self.num_subtiles - 1:
                    # The tile's last TMEM load is complete: the MMA may refill the buffer.
                    cute.arch.fence_view_async_tmem_load()
                    with cute.arch.elect_one():
                        acc_pipeline.consumer_release(acc_state)
                subtile_n0 = tile_n * mma_n + subtile * epi_n
                at = (None, None, 0, subtile, tile_m, tile_n)  # (OutputM, OutputN)
                if cutlass.const_expr(epi.store_by_threads):
                    store_subtile_by_threads(
                        epi, tTR_rAcc.load(), alpha, beta, vectors, subtile_n0, out,
                        gD_epi[at], cD_epi[at], output.d_shape,
                        None if gC_epi is None else gC_epi[at],
                    )  # fmt: skip
                else:
                    store_subtile(
                        epi, tTR_rAcc.load(), alpha, beta, vectors, subtile_n0, source,
                        src_state, out, (subtiles_done + subtile) % self.output_stages,
                        bSG_gD_tile[(None, subtile)], warp_idx,
                        None if cD_epi is None else cD_epi[at], output.d_shape,
                    )  # fmt: skip
                    if cutlass.const_expr(epi.has_residual):
                        src_state.advance()
            acc_state.advance()
            subtiles_done += self.num_subtiles
            work, valid, clc_state = work_items.next(work, clc_state)

        out.store_pipeline.producer_tail()
        if cutlass.const_expr(epi.has_amax):
            publish_amax(out.amax, m_amax)
        # Done with TMEM: tell the MMA warps of both CTAs of the pair.
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive(tmem_dealloc_barrier)
            if cutlass.const_expr(self.use_2cta):
                cute.arch.mbarrier_arrive(tmem_dealloc_barrier, cta_rank_in_cluster ^ 1)
