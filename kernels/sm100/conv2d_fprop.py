"""Conv2D forward propagation on Blackwell (SM100): the seed's ``Conv2dFpropKernel``.

A persistent, warp-specialized implicit GEMM (GEMM view in ``kernels/common/im2col.py``):
M = N*P*Q output pixels, N = K output channels, K = (C, S, R) walked c-block fastest. The
activation tile is loaded by TMA in im2col mode, the filter tile by tiled TMA; padding, halos
and M/K tails are zero-filled by the TMA unit. ``tcgen05.mma`` accumulates in tensor memory
(TMEM), 1-SM (MMA 128xN) or 2-SM (a CTA pair shares one 256xN MMA). The fused epilogue is the
Hopper kernel's (``kernels/common/epilogue.py``), fed from TMEM:
``D = epilogue_fn(act(alpha * acc * scale + bias)) + beta * C``.

With ``programmatic_launch`` the kernel is launched with programmatic dependent launch
(``kernels/common/dependent_launch.py``), as on SM90: its setup overlaps the previous kernel's
tail, and every thread waits for that kernel before the roles start.

Compile-verified only: this kernel has been compiled for ``sm_100a`` and its PTX checked; it has
never run on a Blackwell GPU.

The A operand uses the rank-generic im2col atom (``cpasync.make_im2col_tma_atom``, a 4-D
``(C, W, H, N)`` descriptor, as on SM90) rather than ``cute.nvgpu.make_im2col_tma_atom_A``,
which only builds 5-D descriptors and so would narrow the corner range to [-16, 15] and the
filter span to 31. Its SMEM layout is handed over as the ``(BM, BK)`` row-major equivalent of
the MMA's K-major layout: with ``BK`` one swizzle row wide the two are the same function.

Where this differs from the seed (Modular's SM100 conv), and why:

- The load-order barrier is arrived once, after the first tile's prologue (as CUTLASS does),
  not per tile: a single per-tile mbarrier has no back-pressure, so a load warp two tiles ahead
  of the epilogue-load warp would alias its phase.
- The accumulator-empty and TMEM-dealloc barriers take one elected arrive per epilogue warp
  (``4 * cta_group``) instead of one per thread (``128 * cta_group``); the same ordering.
- TMEM: ``acc_stages * MMA_N`` columns rounded up to a power of two, not always all 512.
- ``block_swizzle`` is the grouped rasterization of the SM90 scheduler, not a serpentine walk;
  work items run along grid x, so more than 65535 clusters can be launched.
- The source ring defaults to one output tile of subtiles (the seed's ``MMA_N / OutputN``),
  halved while the A/B ring would keep fewer than 3 stages.
- No ``setmaxnreg``: 256 threads x 255 registers fit the register file (ptxas: no spills in
  the tested configs; 46-174 registers with 32-column subtiles, up to 255 with 64).
"""

from typing import Optional, Tuple

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, tcgen05
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait
from cutlass.tensor_utils import LayoutEnum

from ..common.dependent_launch import wait_for_previous_grid
from ..common.entry import FP8_TYPES, ConvKernelEntry, ConvLaunchParams, MainloopOperands
from ..common.epilogue import EpilogueOperands, make_epilogue_operands, quantization_scalars
from ..common.im2col import (
    ChannelBlocks,
    activation_im2col_view,
    filter_gemm_view,
    fprop_im2col_params,
    im2col_tile_at_origin,
)
from ..common.pipelines import make_checked_pipeline
from .config import SMEM_CAPACITY_SM100, Conv2dConfigSm100
from .epilogue import NamedBarrierSm100, OutputTiles, Sm100EpilogueMixin
from .pipeline_checks import WarpRoles, conv2d_barrier_specs
from .smem import Conv2dSmem, conv2d_smem_struct
from .tile_scheduler import ClcTileScheduler, ClcWorkItems

__all__ = ["Conv2dFpropKernel", "SMEM_CAPACITY_SM100"]


class Conv2dFpropKernel(Sm100EpilogueMixin, ConvKernelEntry):
    """One compiled configuration of the SM100 conv fprop kernel.

    Warp roles (256 threads, one CTA per SM; a 2-SM config runs CTA pairs in 2x1 clusters):

      warps 0-3  epilogue: the tile's bias/scale prefetched into L2 while its MMAs run, then
                 TMEM -> registers (tcgen05.ld) -> alpha, scale, bias, activation,
                 epilogue_fn -> + beta * C (from SMEM) -> SMEM (st.shared.v4) -> TMA store;
                 with ``store_by_threads`` (output rows not 16-byte units) C read and D
                 written by each thread, predicated
      warp 4     scheduler (CTA 0 of the cluster only): clusterlaunchcontrol.try_cancel
      warp 5     TMA load: im2col activation tile + filter tile per k-tile
      warp 6     MMA: allocates TMEM, issues tcgen05.mma (leader CTA of a pair), frees TMEM
      warp 7     epilogue load: TMA of the residual C subtiles; exits at once without residual
                 or with ``store_by_threads``

    Pipelines and barriers (arrive counts per phase; ``pipeline_checks.py`` derives them from
    the roles and checks the DSL objects against them at trace time). "pair" is the CTA pair
    of a 2-SM MMA (just the CTA for 1-SM), cs the cluster size (= cta_group):

      input         PipelineTmaUmma, ``stages`` deep: load -> MMA.
                    full: 1 (leader's load warp, expect_tx = A+B bytes of the pair);
                    empty: 1 (leader's tcgen05.commit, multicast to the pair).
      accumulator   PipelineUmmaAsync, ``acc_stages`` TMEM buffers: MMA -> epilogue.
                    full: 1 (leader's tcgen05.commit, multicast to the pair);
                    empty: 4 * cta_group (one elected lane per epilogue warp of the pair,
                    after the tile's last TMEM load, on the leader's barrier).
      clc           PipelineClcFetchAsync, ``clc_stages`` responses: scheduler -> all roles.
                    full: 1 (scheduler lane d arrives with expect_tx 16 on CTA d);
                    empty: 32 * (1 + cs * (6 + residual)) (every thread that reads a
                    response: scheduler; load, MMA, 4 epilogue and epilogue-load warps).
      clc_throttle  PipelineAsync, ``clc_stages``: load (CTA 0) -> scheduler. full: 32 (load
                    warp, once per tile it starts); empty: 32 (scheduler, once per query).
                    The scheduler steals the next cluster only once this one's loads begin.
      epi_load      PipelineTmaAsync, ``source_stages``: epilogue load -> epilogue (residual).
                    full: 1 (expect_tx = one C subtile); empty: 4 (lane 0 per epilogue warp).
      store         PipelineTmaStore, ``output_stages``: bulk-group accounting of D stores.
      load_order    1 mbarrier (residual): the load warp arrives once, when the first tile's
                    prologue (min(stages, k-tiles) loads) is issued; the epilogue-load warp
                    waits before its first C load, so C does not compete with the first fill.
      tmem_dealloc  1 mbarrier: 4 * cta_group (one elected lane per epilogue warp of the pair,
                    after its last TMEM load); the MMA warp waits, then frees TMEM.
      named         Epilogue (128 threads), TmemAllocation (160: MMA + epilogue warps).
    """

    config_class = Conv2dConfigSm100
    roles = WarpRoles()
    threads_per_cta = roles.threads_per_cta

    def _configure(self) -> None:
        config, act_dtype, out_dtype = self.config, self.act_dtype, self.out_dtype
        epilogue = self.epilogue
        self.plan = config.plan(act_dtype, out_dtype, epilogue.loads_source_by_tma)

        self.cta_group = config.cta_group
        self.use_2cta = config.cta_group == 2
        self.cluster_shape_mn = config.cluster_shape_mn
        self.cluster_size = config.cluster_m * config.cluster_n
        self.mma_tiler = (config.mma_m, config.mma_n, config.tile_k)
        self.block_tile = config.block_tile_shape
        self.epi_tile = config.output_tile_shape
        self.num_subtiles = config.mma_n // config.epi_n
        self.ab_stages = self.plan.ab_stages
        self.acc_stages = config.acc_stages
        self.clc_stages = config.clc_stages
        self.output_stages = config.output_stages
        self.source_stages = self.plan.source_stages
        self.num_tmem_cols = self.plan.tmem_columns
        self.barrier_specs = conv2d_barrier_specs(
            cta_group=self.cta_group,
            cluster_size=self.cluster_size,
            has_residual=epilogue.loads_source_by_tma,
            roles=self.roles,
        )
        bm, bn, bk = self.block_tile
        om, on = self.epi_tile
        self.smem_struct = conv2d_smem_struct(
            act_dtype=act_dtype,
            out_dtype=out_dtype,
            act_elems=bm * bk * self.ab_stages,
            filter_elems=bn * bk * self.ab_stages,
            out_elems=om * on * self.output_stages,
            src_elems=om * on * self.source_stages,
            ab_stages=self.ab_stages,
            acc_stages=self.acc_stages,
            clc_stages=self.clc_stages,
            src_stages=self.source_stages,
        )

    def smem_bytes(self) -> int:
        """Shared memory the kernel asks for: ``sizeof(Conv2dSmem)``."""
        return self.plan.smem_bytes

    def tmem_columns(self) -> int:
        return self.plan.tmem_columns

    # ------------------------------------------------------------------------------------------
    # Trace-time attributes: MMA, SMEM layouts
    # ------------------------------------------------------------------------------------------

    def _setup_attributes(self):
        cta_group = tcgen05.CtaGroup.TWO if self.use_2cta else tcgen05.CtaGroup.ONE
        self.tiled_mma = sm100_utils.make_trivial_tiled_mma(
            self.act_dtype,
            self.filter_dtype,
            OperandMajorMode.K,
            OperandMajorMode.K,
            self.acc_dtype,
            cta_group,
            self.mma_tiler[:2],
        )
        self.cta_group_enum = cta_group
        self.a_smem_layout_staged = sm100_utils.make_smem_layout_a(
            self.tiled_mma, self.mma_tiler, self.act_dtype, self.ab_stages
        )
        self.b_smem_layout_staged = sm100_utils.make_smem_layout_b(
            self.tiled_mma, self.mma_tiler, self.filter_dtype, self.ab_stages
        )
        self.epi_smem_layout_staged = sm100_utils.make_smem_layout_epi(
            self.out_dtype, LayoutEnum.ROW_MAJOR, self.epi_tile, self.output_stages
        )
        # Source C subtiles share the output's SMEM layout, so one TMA box shape serves both.
        self.src_smem_layout_staged = sm100_utils.make_smem_layout_epi(
            self.out_dtype, LayoutEnum.ROW_MAJOR, self.epi_tile, max(self.source_stages, 1)
        )
        self.cluster_layout_vmnk = cute.tiled_divide(
            cute.make_layout((*self.cluster_shape_mn, 1)), (self.tiled_mma.thr_id.shape,)
        )
        # The host sized Conv2dSmem from element counts: they must be the layouts' sizes.
        bm, bn, bk = self.block_tile
        om, on = self.epi_tile
        expected = {
            "act": (self.a_smem_layout_staged, bm * bk * self.ab_stages),
            "filter": (self.b_smem_layout_staged, bn * bk * self.ab_stages),
            "out": (self.epi_smem_layout_staged, om * on * self.output_stages),
        }
        for name, (layout, elems) in expected.items():
            if cute.cosize(layout.outer) != elems:
                raise ValueError(
                    f"SMEM layout of the {name} tiles spans {cute.cosize(layout.outer)} "
                    f"elements, Conv2dSmem reserves {elems}"
                )
        if self.smem_struct.__sizeof__() > SMEM_CAPACITY_SM100:
            raise ValueError(
                f"Conv2dSmem takes {self.smem_struct.__sizeof__()} bytes, over the "
                f"{SMEM_CAPACITY_SM100}-byte SMEM limit"
            )

    def _act_tma_smem_layout(self) -> cute.ComposedLayout:
        """One A stage as a row-major ``(BM, BK)`` tile with the MMA layout's swizzle.

        The MMA form ``((BM, 16), 1, BK/16)`` maps ``(m, k)`` to ``m * BK + k`` (then swizzles)
        when ``BK`` is one swizzle row, which ``Conv2dConfigSm100`` guarantees; the im2col
        atom needs the tile's own ``(BM, BK)`` shape.
        """
        bm, _, bk = self.block_tile
        mma_k = self.tiled_mma.shape_mnk[2]
        stage = cute.slice_(self.a_smem_layout_staged, (None, None, None, 0)).outer
        expected = (((bm, mma_k), 1, bk // mma_k), ((bk, 1), 0, mma_k))
        if (stage.shape, stage.stride) != expected:
            raise ValueError(
                f"the A stage layout {stage} is not the K-major ((BM, {mma_k}), 1, BK/{mma_k}) "
                f"form the im2col atom's (BM, BK) row-major view assumes"
            )
        return cute.make_composed_layout(
            self.a_smem_layout_staged.inner, 0, cute.make_layout((bm, bk), stride=(bk, 1))
        )

    # ------------------------------------------------------------------------------------------
    # Host JIT entry: views, TMA atoms, grid; launch
    # ------------------------------------------------------------------------------------------

    @cute.jit
    def launch(self, params: ConvLaunchParams, stream: cuda.CUstream):
        """Launch on raw device pointers (see ``ConvLaunchParams``), as the SM90 kernel does.
        ``max_clusters`` and the stream-K workspace (``pointers.partials``, ``pointers.flags``)
        are unused: the grid covers every tile and cluster launch control makes it
        persistent."""
        ptrs, geom = params.pointers, params.geometry
        self._setup_attributes()
        tiled_mma = self.tiled_mma
        bm, _, bk = self.block_tile

        tma_atom_a, tma_tensor_a = cpasync.make_im2col_tma_atom(
            cpasync.CopyBulkTensorIm2ColG2SOp(self.cta_group_enum),
            activation_im2col_view(ptrs.act, geom),
            self._act_tma_smem_layout(),
            (bm, bk),  # this CTA's rows; the activation's K mode is c alone: a flat tiler
            **fprop_im2col_params(geom),
        )
        tma_atom_b, tma_tensor_b = cute.nvgpu.make_tiled_tma_atom_B(
            sm100_utils.cluster_shape_to_tma_atom_B((*self.cluster_shape_mn, 1), tiled_mma.thr_id),
            filter_gemm_view(ptrs.filter, geom),
            cute.slice_(self.b_smem_layout_staged, (None, None, None, 0)),
            # hierarchical K keeps the tiler static for runtime C
            (self.mma_tiler[0], self.mma_tiler[1], (bk, 1, 1)),
            tiled_mma,
            self.cluster_layout_vmnk.shape,
        )
        epi_smem_layout = cute.slice_(self.epi_smem_layout_staged, (None, None, 0))
        epi_operands = make_epilogue_operands(
            self.epilogue, geom, ptrs, epi_smem_layout,
            cute.slice_(self.src_smem_layout_staged, (None, None, 0)), self.epi_tile,
            dequantize=self.act_dtype in FP8_TYPES,
            quantize_output=self.out_dtype in FP8_TYPES,
        )  # fmt: skip

        mma_m, mma_n, _ = self.mma_tiler
        num_tiles_m = (geom.n * geom.p * geom.q + mma_m - 1) // mma_m
        num_tiles_n = (geom.k + mma_n - 1) // mma_n
        grid = ClcTileScheduler.grid_shape(
            cutlass.max(num_tiles_m * num_tiles_n, 1), self.cluster_shape_mn[0]
        )
        ab_operands = MainloopOperands(tma_atom_a, tma_tensor_a, tma_atom_b, tma_tensor_b)
        kernel = self.kernel(
            tiled_mma, ab_operands, epi_operands, params.alpha, params.beta,
            self.cluster_layout_vmnk, self.a_smem_layout_staged, self.b_smem_layout_staged,
            self.epi_smem_layout_staged, self.src_smem_layout_staged, num_tiles_m, num_tiles_n,
        )  # fmt: skip
        kernel.launch(
            grid=grid,
            block=[self.threads_per_cta, 1, 1],
            cluster=(*self.cluster_shape_mn, 1),
            stream=stream,
            use_pdl=self.config.programmatic_launch,
        )

    # ------------------------------------------------------------------------------------------
    # Device kernel: shared setup, then one method per role
    # ------------------------------------------------------------------------------------------

    @cute.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
        ab_operands: MainloopOperands,
        epi_operands: EpilogueOperands,
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
        cluster_layout_vmnk: cute.Layout,
        a_smem_layout_staged: cute.ComposedLayout,
        b_smem_layout_staged: cute.ComposedLayout,
        epi_smem_layout_staged: cute.ComposedLayout,
        src_smem_layout_staged: cute.ComposedLayout,
        num_tiles_m: cutlass.Int32,
        num_tiles_n: cutlass.Int32,
    ):
        tma_atom_a, mA_mk, tma_atom_b, mB_nk = ab_operands
        tma_atom_d, mD_mn, tma_atom_c, mC_mn, m_bias, m_scale = epi_operands[:6]
        roles = self.roles
        loads_source = self.epilogue.loads_source_by_tma  # the epilogue-load warp's C ring
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == roles.load:
            for atom in (tma_atom_a, tma_atom_b, tma_atom_d, tma_atom_c):
                if cutlass.const_expr(atom is not None):
                    cpasync.prefetch_descriptor(atom)

        bidx, _, _ = cute.arch.block_idx()
        mma_coord_v = bidx % cute.size(tiled_mma.thr_id.shape)
        is_leader_cta = mma_coord_v == 0
        cta_rank_in_cluster = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        is_first_cta_in_cluster = cta_rank_in_cluster == 0

        smem = Conv2dSmem.allocate(
            self.smem_struct,
            a_smem_layout_staged,
            b_smem_layout_staged,
            epi_smem_layout_staged,
            src_smem_layout_staged,
            self.clc_stages,
        )
        ab_pipeline, acc_pipeline, clc_pipeline, throttle_pipeline, source_pipeline = (
            self._make_pipelines(smem, cluster_layout_vmnk)
        )
        # The two single mbarriers of Conv2dSmem (the pipelines initialise their own).
        if warp_idx == roles.epilogue[0]:
            with cute.arch.elect_one():
                cute.arch.mbarrier_init(
                    smem.tmem_dealloc_barrier(), self.barrier_specs["tmem_dealloc"].count
                )
                if cutlass.const_expr(loads_source):
                    cute.arch.mbarrier_init(
                        smem.get_load_order_barrier(), self.barrier_specs["load_order"].count
                    )
        tmem = self._tmem_allocator(smem)
        pipeline_init_arrive(cluster_shape_mn=self.cluster_shape_mn, is_relaxed=True)

        sA = smem.act_tiles()
        sB = smem.filter_tiles()
        sD = smem.out_tiles()
        sC = smem.src_tiles() if cutlass.const_expr(loads_source) else None

        tCgA, tCgB, tCgD, tCgC, tCtAcc_fake = self._tile_views(
            tiled_mma, mma_coord_v, mA_mk, mB_nk, mD_mn, mC_mn
        )
        output = OutputTiles(tCgD, None, None, None)
        if cutlass.const_expr(self.epilogue.needs_output_coords):
            # The output coordinates of tCgD's elements (the bounds predicates), and stored by
            # threads, the residual source in memory, partitioned as tCgD.
            coords = cute.make_identity_tensor(mD_mn.shape)
            tCcD = self._tile_views_c(tiled_mma, mma_coord_v, coords)
            tCgC_in_memory = tCgC if cutlass.const_expr(self.epilogue.store_by_threads) else None
            output = OutputTiles(tCgD, tCcD, mD_mn.shape, tCgC_in_memory)

        scheduler = ClcTileScheduler(
            num_tiles_m,
            num_tiles_n,
            smem.clc_responses(),
            self.cluster_shape_mn[0],
            self.config.block_swizzle,
            self.config.raster_along_m,
        )
        work_items = ClcWorkItems(scheduler, clc_pipeline, self.clc_stages)
        pipeline_init_wait(cluster_shape_mn=self.cluster_shape_mn)
        if cutlass.const_expr(self.config.programmatic_launch):
            wait_for_previous_grid()  # the setup above touched SMEM, TMEM and parameters only

        # ////////////////////////////////////////////////////////////////////////////////////
        #  SCHEDULER (warp 4, CTA 0 of the cluster)
        # ////////////////////////////////////////////////////////////////////////////////////
        if warp_idx == roles.scheduler:
            if is_first_cta_in_cluster:
                self.schedule(work_items, throttle_pipeline)

        # ////////////////////////////////////////////////////////////////////////////////////
        #  TMA LOAD (warp 5)
        # ////////////////////////////////////////////////////////////////////////////////////
        if warp_idx == roles.load:
            self.load(
                ab_pipeline, work_items, throttle_pipeline, tma_atom_a, tma_atom_b, tCgA, tCgB,
                sA, sB, smem.get_load_order_barrier(), is_first_cta_in_cluster,
            )  # fmt: skip

        # ////////////////////////////////////////////////////////////////////////////////////
        #  MMA (warp 6)
        # ////////////////////////////////////////////////////////////////////////////////////
        if warp_idx == roles.mma:
            c_blocks = cute.size(tCgA, mode=[4, 0])
            channels = ChannelBlocks.of(mB_nk, tiled_mma, c_blocks, self.mma_tiler[2])
            self.mma(
                ab_pipeline, acc_pipeline, work_items, tiled_mma, sA, sB, tCtAcc_fake, tCgA,
                tmem, smem.tmem_dealloc_barrier(), is_leader_cta, channels,
            )  # fmt: skip

        # ////////////////////////////////////////////////////////////////////////////////////
        #  EPILOGUE LOAD (warp 7): residual kernels only
        # ////////////////////////////////////////////////////////////////////////////////////
        if cutlass.const_expr(loads_source):
            if warp_idx == roles.epi_load:
                self.load_source(
                    source_pipeline, work_items, tma_atom_c, tCgC, sC,
                    smem.get_load_order_barrier(),
                )  # fmt: skip

        # ////////////////////////////////////////////////////////////////////////////////////
        #  EPILOGUE (warps 0-3)
        # ////////////////////////////////////////////////////////////////////////////////////
        if warp_idx <= roles.epilogue[-1]:
            alpha, beta, out_factor = quantization_scalars(alpha, beta, epi_operands)
            self.epilogue_store(
                acc_pipeline, source_pipeline, work_items, tma_atom_d, tCtAcc_fake, output, sD,
                sC, m_bias, m_scale, alpha, beta, out_factor, epi_operands.m_amax, tmem,
                smem.tmem_dealloc_barrier(), cta_rank_in_cluster, warp_idx,
            )  # fmt: skip

    def _tmem_allocator(self, smem: Conv2dSmem) -> cutlass.memory.TmemAllocator:
        """The TMEM allocator the MMA warp allocates with and the epilogue warps read."""
        return cutlass.memory.TmemAllocator(
            smem.tmem_address(),
            barrier_for_retrieve=pipeline.NamedBarrier(
                barrier_id=int(NamedBarrierSm100.TmemAllocation),
                num_threads=self.barrier_specs["named.tmem_allocation"].count,
            ),
            allocator_warp_id=self.roles.mma,
            is_two_cta=self.use_2cta,
            two_cta_tmem_dealloc_mbar_ptr=smem.tmem_dealloc_barrier(),
            initialize_mbarrier=False,  # initialised above, with the epilogue's count
        )

    def _tile_views(
        self,
        tiled_mma: cute.TiledMma,
        mma_coord_v: cutlass.Int32,
        mA_mk: cute.Tensor,
        mB_nk: cute.Tensor,
        mD_mn: cute.Tensor,
        mC_mn: Optional[cute.Tensor],
    ) -> Tuple:
        """This CTA's MMA partitions of the operands' tiles, ``(tCgA, tCgB, tCgD, tCgC)``
        (tCgC None without a residual), and the accumulator layout the MMA warp allocates in
        TMEM, checked against the host's plan."""
        mma_m, mma_n, bk = self.mma_tiler
        thr_mma = tiled_mma.get_slice(mma_coord_v)
        k_tiler = (bk, 1, 1)  # one filter tap per k-tile
        # (MMA, MMA_M, MMA_K, RestM, RestK=(c_blocks, S, R)): this CTA's rows of each MMA tile
        tCgA = thr_mma.partition_A(cute.local_tile(mA_mk, (mma_m, k_tiler), (None, None)))
        # (MMA, MMA_N, MMA_K, RestN, RestK): this CTA's filter rows (half of N on 2-SM)
        tCgB = thr_mma.partition_B(cute.local_tile(mB_nk, (mma_n, k_tiler), (None, None)))
        # (MMA, MMA_M, MMA_N, RestM, RestN): this CTA's output rows, all MMA_N columns
        tCgD = self._tile_views_c(tiled_mma, mma_coord_v, mD_mn)
        tCgC = None
        if cutlass.const_expr(self.epilogue.has_residual):
            tCgC = self._tile_views_c(tiled_mma, mma_coord_v, mC_mn)
        # (MMA, MMA_M, MMA_N, ACC_STAGE): the accumulator layout; the MMA warp allocates it
        acc_shape = tiled_mma.partition_shape_C((mma_m, mma_n))
        tCtAcc_fake = tiled_mma.make_fragment_C(cute.append(acc_shape, self.acc_stages))
        tmem_cols = cutlass.memory.get_num_tmem_alloc_cols(tCtAcc_fake)
        if cutlass.const_expr(tmem_cols != self.num_tmem_cols):
            raise ValueError(
                f"the accumulators take {tmem_cols} TMEM columns, the host planned "
                f"{self.num_tmem_cols}"
            )
        return tCgA, tCgB, tCgD, tCgC, tCtAcc_fake

    def _tile_views_c(
        self, tiled_mma: cute.TiledMma, mma_coord_v: cutlass.Int32, m_mn: cute.Tensor
    ) -> cute.Tensor:
        """This CTA's MMA partition of an output-shaped tensor's tiles (the output, the
        source, or their coordinates): (MMA, MMA_M, MMA_N, RestM, RestN)."""
        mma_m, mma_n, _ = self.mma_tiler
        thr_mma = tiled_mma.get_slice(mma_coord_v)
        return thr_mma.partition_C(cute.local_tile(m_mn, (mma_m, mma_n), (None, None)))

    def _make_pipelines(self, smem: Conv2dSmem, cluster_layout_vmnk: cute.Layout):
        """Create (and check) every pipeline; barrier init is deferred to one cluster sync."""
        specs, cluster = self.barrier_specs, dict(cta_layout_vmnk=cluster_layout_vmnk)
        bm, bn, bk = self.block_tile
        ab_bytes = (bm + bn) * bk * self.act_dtype.width // 8 * self.cta_group
        ab_pipeline = make_checked_pipeline(
            pipeline.PipelineTmaUmma, specs, "input", smem.input_barriers(), self.ab_stages,
            tx_count=ab_bytes, **cluster,
        )  # fmt: skip
        acc_pipeline = make_checked_pipeline(
            pipeline.PipelineUmmaAsync, specs, "accumulator", smem.accumulator_barriers(),
            self.acc_stages, **cluster,
        )  # fmt: skip
        clc_pipeline = make_checked_pipeline(
            pipeline.PipelineClcFetchAsync, specs, "clc", smem.clc_barriers(), self.clc_stages,
            tx_count=16, **cluster,
        )  # fmt: skip
        throttle_pipeline = make_checked_pipeline(
            pipeline.PipelineAsync, specs, "clc_throttle", smem.clc_throttle_barriers(),
            self.clc_stages,
        )  # fmt: skip
        source_pipeline = None
        if cutlass.const_expr(self.epilogue.loads_source_by_tma):
            om, on = self.epi_tile
            source_pipeline = make_checked_pipeline(
                pipeline.PipelineTmaAsync, specs, "epi_load", smem.epi_load_barriers(),
                self.source_stages, tx_count=om * on * self.out_dtype.width // 8,
            )  # fmt: skip
        return ab_pipeline, acc_pipeline, clc_pipeline, throttle_pipeline, source_pipeline

    # ------------------------------------------------------------------------------------------
    # Roles
    # ------------------------------------------------------------------------------------------

    @cute.jit
    def schedule(self, work_items: ClcWorkItems, throttle_pipeline: pipeline.PipelineAsync):
        """Scheduler warp (CTA 0): one try_cancel per tile the load warp starts; it walks
        the responses like every role, to know when they end."""
        clc_pipeline, scheduler = work_items.clc_pipeline, work_items.scheduler
        query_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, self.clc_stages
        )
        throttle_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, self.clc_stages
        )
        work, valid, clc_state = work_items.first(work_items.initial_state())
        while valid:
            # Steal the next cluster only once the load warp has begun this tile.
            throttle_pipeline.consumer_wait(throttle_state)
            throttle_pipeline.consumer_release(throttle_state)
            throttle_state.advance()
            # Wait for the response slot to be free and arm every CTA's full barrier.
            clc_pipeline.producer_acquire(query_state)
            scheduler.issue_query(clc_pipeline.producer_get_barrier(query_state), query_state.index)
            query_state.advance()
            work, valid, clc_state = work_items.next(work, clc_state)
        clc_pipeline.producer_tail(query_state)

    @cute.jit
    def load(
        self,
        ab_pipeline: pipeline.PipelineTmaUmma,
        work_items: ClcWorkItems,
        throttle_pipeline: pipeline.PipelineAsync,
        tma_atom_a: cute.CopyAtom,
        tma_atom_b: cute.CopyAtom,
        tCgA: cute.Tensor,
        tCgB: cute.Tensor,
        sA: cute.Tensor,
        sB: cute.Tensor,
        load_order_barrier: cute.Pointer,
        is_first_cta_in_cluster: cutlass.Boolean,
    ):
        """TMA load warp: fills the A/B ring for every k-tile of every tile of this CTA."""
        # Each CTA loads its own A rows and B rows; a 2-SM load signals the leader's barrier.
        tAsA, tAgA = cpasync.tma_partition(
            tma_atom_a,
            0,
            cute.make_layout(1),
            cute.group_modes(sA, 0, 3),
            cute.group_modes(tCgA, 0, 3),
        )
        tBsB, tBgB = cpasync.tma_partition(
            tma_atom_b,
            0,
            cute.make_layout(1),
            cute.group_modes(sB, 0, 3),
            cute.group_modes(tCgB, 0, 3),
        )
        c_blocks = cute.size(tAgA, mode=[2, 0])
        taps_s = cute.size(tAgA, mode=[2, 1])
        taps_r = cute.size(tAgA, mode=[2, 2])
        prologue = cutlass.min(c_blocks * taps_s * taps_r, self.ab_stages)

        ab_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stages)
        throttle_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, self.clc_stages
        )
        loads_issued = cutlass.Int32(0)
        work, valid, clc_state = work_items.first(work_items.initial_state())
        while valid:
            if is_first_cta_in_cluster:
                throttle_pipeline.producer_acquire(throttle_state)
                throttle_pipeline.producer_commit(throttle_state)
                throttle_state.advance()
            tile_m, tile_n = work_items.tile_coord(work)
            tAgA_m = im2col_tile_at_origin(tAgA[(None, tile_m, None)])
            tBgB_n = tBgB[(None, tile_n, None)]
            # Walk the hierarchical k mode (c-block, s, r) with nested loops: indexing it
            # with a linear k-tile would cost runtime divisions by C/BK and S per load.
            for tap_r in range(taps_r):
                for tap_s in range(taps_s):
                    for c_block in range(c_blocks):
                        k_coord = (c_block, tap_s, tap_r)
                        ab_pipeline.producer_acquire(ab_state)
                        barrier = ab_pipeline.producer_get_barrier(ab_state)
                        cute.copy(
                            tma_atom_a,
                            tAgA_m[(None, k_coord)],
                            tAsA[(None, ab_state.index)],
                            tma_bar_ptr=barrier,
                        )
                        cute.copy(
                            tma_atom_b,
                            tBgB_n[(None, k_coord)],
                            tBsB[(None, ab_state.index)],
                            tma_bar_ptr=barrier,
                        )
                        ab_state.advance()
                        loads_issued += 1
                        if cutlass.const_expr(self.epilogue.loads_source_by_tma):
                            # The first tile's prologue is out: the C loads may begin.
                            if loads_issued == prologue:
                                with cute.arch.elect_one():
                                    cute.arch.mbarrier_arrive(load_order_barrier)
            work, valid, clc_state = work_items.next(work, clc_state)
        # Wait for the last MMAs to release every stage: on 2-SM the peer's tcgen05.commit
        # still signals this CTA's barriers, so it must not exit first.
        ab_pipeline.producer_tail(ab_state)
        if is_first_cta_in_cluster:
            throttle_pipeline.producer_tail(throttle_state)

    @cute.jit
    def mma(
        self,
        ab_pipeline: pipeline.PipelineTmaUmma,
        acc_pipeline: pipeline.PipelineUmmaAsync,
        work_items: ClcWorkItems,
        tiled_mma: cute.TiledMma,
        sA: cute.Tensor,
        sB: cute.Tensor,
        tCtAcc_fake: cute.Tensor,
        tCgA: cute.Tensor,
        tmem: cutlass.memory.TmemAllocator,
        tmem_dealloc_barrier: cute.Pointer,
        is_leader_cta: cutlass.Boolean,
        channels: ChannelBlocks,
    ):
        """MMA warp: owns TMEM; the leader CTA of a pair issues every tcgen05.mma (but those
        of the MMA k-blocks past C in each tap's last c-block: ``channels``)."""
        tmem.allocate(self.num_tmem_cols)
        tmem.wait_for_alloc()
        # Release the right to allocate early, so that the next CTA on this SM can start.
        tmem.relinquish_alloc_permit()
        tmem_ptr = tmem.retrieve_ptr(self.acc_dtype)
        tCtAcc_base = cute.make_tensor(tmem_ptr, tCtAcc_fake.layout)

        tCrA = tiled_mma.make_fragment_A(sA)  # (MMA, MMA_M, MMA_K, STAGE)
        tCrB = tiled_mma.make_fragment_B(sB)  # (MMA, MMA_N, MMA_K, STAGE)
        num_k_blocks = cute.size(tCrA, mode=[2])
        k_tile_cnt = cute.size(tCgA, mode=[4])

        ab_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.ab_stages)
        acc_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, self.acc_stages
        )
        work, valid, clc_state = work_items.first(work_items.initial_state())
        while valid:
            if is_leader_cta:
                acc_pipeline.producer_acquire(acc_state)
                tCtAcc = tCtAcc_base[(None, None, None, acc_state.index)]
                c_block = cutlass.Int32(0)
                for k_tile in range(k_tile_cnt):
                    ab_pipeline.consumer_wait(ab_state)
                    k_blocks = channels.k_blocks_of(c_block, num_k_blocks)
                    for k_block in cutlass.range_constexpr(num_k_blocks):
                        # The first MMA of a tile overwrites the accumulator.
                        accumulate = k_tile != 0 if k_block == 0 else True
                        tiled_mma.set(tcgen05.Field.ACCUMULATE, accumulate)
                        kb = (None, None, k_block, ab_state.index)
                        if cutlass.const_expr(k_block == 0):
                            cute.gemm(tiled_mma, tCtAcc, tCrA[kb], tCrB[kb], tCtAcc)
                        elif k_block < k_blocks:  # past C: zeros, skipped
                            cute.gemm(tiled_mma, tCtAcc, tCrA[kb], tCrB[kb], tCtAcc)
                    c_block = channels.next_c_block(c_block)
                    # tcgen05.commit: the stage is free once these MMAs have read it.
                    ab_pipeline.consumer_release(ab_state)
                    ab_state.advance()
                acc_pipeline.producer_commit(acc_state)
            acc_state.advance()
            work, valid, clc_state = work_items.next(work, clc_state)
        # The leader waits for both CTAs' epilogues to release every accumulator stage ...
        acc_pipeline.producer_tail(acc_state)
        # ... and every CTA frees its TMEM once the epilogues of the pair are done with it.
        cute.arch.mbarrier_wait(tmem_dealloc_barrier, 0)
        cute.arch.dealloc_tmem(tmem_ptr, self.num_tmem_cols, is_two_cta=self.use_2cta)

    @cute.jit
    def load_source(
        self,
        source_pipeline: pipeline.PipelineTmaAsync,
        work_items: ClcWorkItems,
        tma_atom_c: cute.CopyAtom,
        tCgC: cute.Tensor,
        sC: cute.Tensor,
        load_order_barrier: cute.Pointer,
    ):
        """Epilogue-load warp: TMA-loads the residual C subtile by subtile, in epilogue order."""
        # ((ATOM_V, REST_V), EPI_M, EPI_N, RestM, RestN)
        bGS_sC, bGS_gC = cpasync.tma_partition(
            tma_atom_c,
            0,
            cute.make_layout(1),
            cute.group_modes(sC, 0, 2),
            cute.group_modes(self._epi_subtiles(tCgC), 0, 2),
        )
        cute.arch.mbarrier_wait(load_order_barrier, 0)
        src_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, self.source_stages
        )
        work, valid, clc_state = work_items.first(work_items.initial_state())
        while valid:
            tile_m, tile_n = work_items.tile_coord(work)
            bGS_gC_tile = bGS_gC[(None, 0, None, tile_m, tile_n)]
            for subtile in range(self.num_subtiles):
                source_pipeline.producer_acquire(src_state)
                cute.copy(
                    tma_atom_c,
                    bGS_gC_tile[(None, subtile)],
                    bGS_sC[(None, src_state.index)],
                    tma_bar_ptr=source_pipeline.producer_get_barrier(src_state),
                )
                src_state.advance()
            work, valid, clc_state = work_items.next(work, clc_state)
        source_pipeline.producer_tail(src_state)
