"""Conv2D forward propagation on Hopper (SM90): a persistent, warp-specialized implicit GEMM.

GEMM view (see ``kernels/common/im2col.py``): M = N*P*Q output pixels, N = K output channels,
K = (C, S, R) walked c-block fastest. The activation tile is loaded by TMA in im2col mode, the
filter tile by tiled TMA; padding, halos and M/K tails are zero-filled by the TMA unit, so the
mainloop has no predication. The output is written through SMEM by TMA stores, which clip the
M and K tails. The epilogue (``kernels/common/epilogue.py``) is fused:
``D = epilogue_fn(act(alpha * acc * scale + bias)) + beta * C``, its terms chosen at compile time.

Roles (384 threads), by consumer schedule (``pingpong``). Consumer 0 is warpgroup 1 (warps
4-7), consumer 1 is warpgroup 2 (warps 8-11); w0, w1, w2, ... are this CTA's output tiles in
scheduler order.

  warpgroup 0 (producer, ``setmaxnreg`` down to 40)
    warp 0       load: im2col TMA of the activation + tiled TMA of the filter into the ring,
                 every k-tile of w0, then of w1, ... (both schedules)
    warp 1       source load (residual kernels only): TMA of the residual C, subtile by
                 subtile, into SMEM source buffers ahead of the epilogue; ping-pong: the C of
                 consumer 0's tiles (w0, w2, ...) only
    warp 2       ping-pong residual kernels: source load of consumer 1's tiles (w1, w3, ...);
                 otherwise idle
    warp 3       idle
  warpgroups 1-2 (consumers, ``setmaxnreg`` up to 232)
    cooperative  both consumers on every tile: WGMMA on a 128 x tile_n accumulator (64 rows
                 each), then both run its epilogue (256 threads; TMA stores from warp 4).
    ping-pong    each consumer owns whole tiles: consumer 0 takes w0, w2, ..., consumer 1
                 takes w1, w3, ... Its mainloop runs WGMMA on its own 128 x tile_n accumulator
                 (two m64 atoms; tile_n <= 128 keeps it at <= 128 registers per thread), then it
                 runs that tile's epilogue alone (128 threads; TMA stores from its first warp,
                 4 or 8) while the other consumer's mainloop has the tensor cores. The two
                 mainloops never interleave: see ``order`` below.
    epilogue     registers (fp32 math, + beta * C read from SMEM) -> SMEM (stmatrix) -> TMA
                 store, subtile by subtile (``epilogue_tile``, shared by both schedules).

Pipelines and barriers:

  ab      PipelineTmaAsync: load warp -> consumers, ``ab_stages`` deep, one ring in tile order.
          full: 1 arrive (expect_tx = A + B tile bytes per CTA).
          empty: 1 arrive per releasing consumer warp per CTA of the multicast group.
          Cooperative: all 8 consumer warps release every k-tile. Ping-pong: only the 4 warps
          of the consumer that owns the tile, and each consumer's pipeline states skip the
          other's k_tile_cnt k-tiles after each of its tiles (consumer 1 starts k_tile_cnt in).
  source  PipelineTmaAsync: source-load warp -> consumers, ``source_stages`` (S) deep.
          full: 1 arrive (expect_tx = one C subtile); empty: 1 arrive per consumer warp.
          Ping-pong: two rings in one barrier array (see ``_source_slot``), slots [0, S) for
          consumer 0 and [S, 2S) for consumer 1, each with its own loader warp and released
          by its consumer's 4 warps. Not one ring in tile order with skipping as for ab: its
          single loader would issue consumer 1's C only after consumer 0 has freed slots by
          consuming its own, i.e. about one mainloop before it is needed, which for the
          short-K convs ping-pong is for is less than a load's latency. With a ring each, a
          consumer's C is prefetched as soon as its previous epilogue frees a slot, and
          neither epilogue waits on the other.
  store   PipelineTmaStore: bulk-group accounting of the epilogue's TMA stores (per store
          warp; ping-pong: one per consumer, each over its own staging buffers).
  order   ping-pong only: ``PipelineOrder`` (two mbarriers, 128 arrives each). A consumer
          waits on it before its mainloop and arrives for the other once its last WGMMAs are
          issued, so mainloops alternate w0, w1, w2, ... in the ring's order and a mainloop
          overlaps the other consumer's epilogue. Epilogues are not ordered: each consumer
          has its own staging and source buffers, store warp and barrier.
  Epilogue named barriers: the threads of one epilogue around each subtile. Cooperative:
          ``Epilogue``, 256 threads. Ping-pong: ``Epilogue`` for consumer 0 and
          ``EpilogueConsumer1`` for consumer 1, 128 threads each.
  EpilogueLoad named barrier (load warp + source-load warps): the source loads start only
          once the first tile's A/B loads are issued, so C does not compete with the fill.

SMEM: the A/B ring, then ``_EPI_STAGES`` epilogue subtile buffers (output staging + source C)
per epilogue: one set (cooperative) or one per consumer (ping-pong); ``_compute_ab_stages``
gives the ring what is left.

Persistence: a static tile scheduler (``kernels/common/tile_scheduler.py``); every role walks
the same sequence of output tiles (a ping-pong consumer and its source-load warp every other
one). Clusters of (cluster_m, cluster_n) CTAs multicast the activation tile along N and the
filter tile along M; every CTA of a cluster gives its tile of w_i to the same consumer, so a
ring slot's empty barrier hears from 4 warps of each CTA that its load fed.
"""

from typing import NamedTuple, Optional, Tuple, Type

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup
from cutlass.pipeline import pipeline_init_arrive, pipeline_init_wait
from cutlass.tensor_utils import LayoutEnum

from ..common.barriers import NamedBarrierConv
from ..common.epilogue import EpilogueSpec, apply_epilogue
from ..common.im2col import (
    ConvGeometry,
    activation_im2col_view,
    filter_gemm_view,
    fprop_im2col_params,
    output_gemm_view,
)
from ..common.tile_scheduler import StaticTileScheduler

SMEM_CAPACITY_SM90 = 232448  # bytes of dynamic SMEM one CTA may use on H100/H200
_MBARRIER_BYTES_RESERVED = 1024
_MAX_AB_STAGES = 16  # small k-tiles would fit more; past this, latency is long hidden
_EPI_STAGES = 4  # subtile buffers per epilogue; a residual kernel splits them 2 + 2 with C


def _offset(index, first):
    """``first + index``; ``index`` itself where ``first`` is the Python int 0 (the
    cooperative kernel and consumer 0), which keeps that code free of a runtime add."""
    if isinstance(first, int) and first == 0:
        return index
    return first + index


class EpilogueFragments(NamedTuple):
    """One consumer thread's epilogue partitions, built once and used for every tile."""

    tiled_copy_r2s: cute.TiledCopy
    tRS_rAcc: cute.Tensor  # the accumulator, retiled for the register -> SMEM copy
    tRS_sD: cute.Tensor  # (R2S, R2S_M, R2S_N, PIPE_D): this thread's part of each buffer
    tRS_rD: cute.Tensor  # one subtile's fp32 values
    tRS_rD_out: cute.Tensor  # ... converted to the output type
    tRS_cD: cute.Tensor  # (m, n) inside the subtile of each value of tRS_rD
    tRS_sC: Optional[cute.Tensor]  # residual only: this thread's values in the source buffers
    tRS_rC: Optional[cute.Tensor]
    tRS_rBias: cute.Tensor
    tRS_rScale: cute.Tensor


class Conv2dFpropSm90:
    """Compile-time configuration of one SM90 conv fprop kernel.

    :param act_dtype, filter_dtype: input types (BFloat16 or Float16, equal).
    :param out_dtype: BFloat16, Float16 or Float32.
    :param tile_mnk: CTA tile (tile_m, tile_n, tile_k); tile_m = 128 (two 64-row warpgroups).
    :param cluster_mn: CTAs per cluster along M (filter multicast) and N (activation multicast).
    :param stages: depth of the A/B ring; 0 means as many as fit in SMEM.
    :param swizzle, raster_along_m: tile rasterization, see ``StaticTileScheduler``.
    :param epilogue: the fused epilogue terms, see ``EpilogueSpec``.
    :param pingpong: consumer schedule. False (cooperative): both consumer warpgroups work on
        every tile, 64 rows each, and both run its epilogue, so the tensor cores idle during
        every epilogue. True (ping-pong): the consumers take whole tiles in turn and one's
        epilogue overlaps the other's mainloop, which pays off where the epilogue is a large
        share of a tile's time (short K, e.g. 1x1 convs with C*R*S = 256).

    Ping-pong design. As in CUTLASS's ping-pong kernel, a consumer owns the whole CTA tile,
    128 x tile_n, with its own accumulator: a tiled MMA of one warpgroup (atom layout (1,1,1))
    whose 64 x tile_n atom tiles the 128 rows twice. The alternative, 64 x tile_n per consumer,
    would halve tile_m: the activation TMA box, the SMEM layouts, the scheduler's tiles and the
    epilogue's subtiles would all change, and each filter k-tile would feed half the MMA work.
    Keeping the CTA tile means the producer, the TMA atoms, the A/B/epilogue SMEM layouts, the
    scheduler and the epilogue code are the cooperative kernel's, unchanged; the price is that
    a whole 128 x tile_n fp32 accumulator (tile_n registers per thread) lives in one
    warpgroup, so ping-pong takes tile_n 64 or 128 only (128 registers of 232 leave the
    epilogue the same room as the cooperative 128 x 256 tile has).
    """

    num_threads_per_warpgroup = 128
    load_warp_id = 0
    producer_registers = 40
    consumer_registers = 232

    def __init__(
        self,
        act_dtype: Type[cutlass.Numeric],
        filter_dtype: Type[cutlass.Numeric],
        out_dtype: Type[cutlass.Numeric],
        tile_mnk: Tuple[int, int, int],
        cluster_mn: Tuple[int, int],
        stages: int = 0,
        swizzle: int = 1,
        raster_along_m: bool = True,
        epilogue: Optional[EpilogueSpec] = None,
        pingpong: bool = False,
    ):
        if act_dtype not in (cutlass.BFloat16, cutlass.Float16) or filter_dtype != act_dtype:
            raise TypeError(
                f"act_dtype and filter_dtype must both be BFloat16 or both Float16, "
                f"got {act_dtype} and {filter_dtype}"
            )
        if out_dtype not in (cutlass.BFloat16, cutlass.Float16, cutlass.Float32):
            raise TypeError(f"out_dtype must be BFloat16, Float16 or Float32, got {out_dtype}")
        tile_m, tile_n, tile_k = tile_mnk
        if tile_m != 128:
            raise ValueError(f"tile_m must be 128 on SM90 (two 64-row warpgroups), got {tile_m}")
        if tile_n not in (64, 128, 192, 256):
            raise ValueError(f"tile_n must be one of 64, 128, 192, 256, got {tile_n}")
        if tile_k * act_dtype.width // 8 not in (32, 64, 128):
            raise ValueError(
                f"tile_k must span a 32-, 64- or 128-byte swizzle row (16, 32 or 64 16-bit "
                f"channels), got {tile_k}"
            )
        if not isinstance(pingpong, bool):
            raise TypeError(f"pingpong must be a bool, got {pingpong!r}")
        if pingpong and tile_n > 128:
            raise ValueError(
                f"pingpong=True needs tile_n 64 or 128 (each consumer warpgroup holds a whole "
                f"128 x tile_n fp32 accumulator, tile_n registers per thread), got "
                f"tile_mnk={tile_mnk}"
            )
        self.act_dtype = act_dtype
        self.filter_dtype = filter_dtype
        self.out_dtype = out_dtype
        self.acc_dtype = cutlass.Float32
        self.tile_mnk = tile_mnk
        self.cluster_mn = cluster_mn
        self.swizzle = swizzle
        self.raster_along_m = raster_along_m
        self.epilogue = epilogue or EpilogueSpec()
        self.pingpong = pingpong

        self.num_consumer_warpgroups = 2
        self.num_consumer_threads = self.num_consumer_warpgroups * self.num_threads_per_warpgroup
        self.threads_per_cta = self.num_threads_per_warpgroup * (1 + self.num_consumer_warpgroups)
        # The consumer threads that compute and store one output tile, and how many epilogues
        # (each with its own staging/source buffers, store warp and source-load warp) run.
        self.tile_threads = (
            self.num_threads_per_warpgroup if pingpong else self.num_consumer_threads
        )
        self.num_epilogues = self.num_consumer_warpgroups if pingpong else 1
        self.source_load_warp_id = 1  # ping-pong: + 1 for consumer 1's tiles
        self.epi_store_warp_id = 4  # first warp of consumer 0; ping-pong: + 4 for consumer 1
        self.num_mcast_a = cluster_mn[1]  # the activation tile is shared along cluster N
        self.num_mcast_b = cluster_mn[0]  # the filter tile is shared along cluster M

        self.epi_tile = (tile_m, 32)
        self.source_stages = _EPI_STAGES // 2 if self.epilogue.has_residual else 0
        self.epi_stages = _EPI_STAGES - self.source_stages
        self.ab_stages = self._compute_ab_stages(stages)

    # ------------------------------------------------------------------------------------------
    # Host-side helpers
    # ------------------------------------------------------------------------------------------

    def _ab_bytes_per_stage(self) -> int:
        tile_m, tile_n, tile_k = self.tile_mnk
        return (tile_m + tile_n) * tile_k * self.act_dtype.width // 8

    def _epi_bytes(self) -> int:
        """Output staging plus source buffers: ``_EPI_STAGES`` subtiles per epilogue."""
        subtile_bytes = self.epi_tile[0] * self.epi_tile[1] * self.out_dtype.width // 8
        return subtile_bytes * _EPI_STAGES * self.num_epilogues

    def _compute_ab_stages(self, stages: int) -> int:
        budget = SMEM_CAPACITY_SM90 - _MBARRIER_BYTES_RESERVED - self._epi_bytes()
        fit = min(budget // self._ab_bytes_per_stage(), _MAX_AB_STAGES)
        if stages == 0:
            stages = fit
        if stages < 2 or stages > fit:
            raise ValueError(
                f"stages={stages} does not fit: tile {self.tile_mnk} with {self.out_dtype} "
                f"output{' and two ping-pong epilogues' if self.pingpong else ''} leaves room "
                f"for 2..{fit} stages in {SMEM_CAPACITY_SM90} bytes of SMEM"
            )
        return stages

    def smem_bytes(self) -> int:
        """Shared memory the kernel asks for (ring + epilogue staging + barriers)."""
        return (
            self.ab_stages * self._ab_bytes_per_stage()
            + self._epi_bytes()
            + _MBARRIER_BYTES_RESERVED
        )

    def _setup_attributes(self):
        tile_m, tile_n, tile_k = self.tile_mnk
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.act_dtype,
            self.filter_dtype,
            OperandMajorMode.K,
            OperandMajorMode.K,
            self.acc_dtype,
            # Cooperative: one m64 atom per consumer warpgroup. Ping-pong: one warpgroup's atom
            # repeats over the tile's 128 rows.
            (1 if self.pingpong else self.num_consumer_warpgroups, 1, 1),
            tiler_mn=(64, tile_n),
        )
        self.a_smem_layout_staged = sm90_utils.make_smem_layout_a(
            LayoutEnum.ROW_MAJOR, self.tile_mnk, self.act_dtype, self.ab_stages
        )
        self.b_smem_layout_staged = sm90_utils.make_smem_layout_b(
            LayoutEnum.ROW_MAJOR, self.tile_mnk, self.filter_dtype, self.ab_stages
        )
        # One set of staging buffers per epilogue: consumer c of a ping-pong kernel owns
        # buffers [c * epi_stages, (c + 1) * epi_stages), likewise for the source buffers.
        self.epi_smem_layout_staged = sm90_utils.make_smem_layout_epi(
            self.out_dtype,
            LayoutEnum.ROW_MAJOR,
            self.epi_tile,
            self.epi_stages * self.num_epilogues,
        )
        # Source C subtiles share the output's SMEM layout, so one TMA box shape serves both.
        self.source_smem_layout_staged = sm90_utils.make_smem_layout_epi(
            self.out_dtype,
            LayoutEnum.ROW_MAJOR,
            self.epi_tile,
            max(self.source_stages, 1) * self.num_epilogues,
        )
        self.cta_layout_mnk = cute.make_layout((*self.cluster_mn, 1))

    def _shared_storage_type(self):
        """The kernel's SMEM struct. Plain Python (not traced): fields may be conditional."""
        source_slots = max(self.source_stages, 1) * self.num_epilogues

        @cute.struct
        class SharedStorage:
            ab_mbar: cute.struct.MemRange[cutlass.Int64, self.ab_stages * 2]
            sA: cute.struct.Align[
                cute.struct.MemRange[self.act_dtype, cute.cosize(self.a_smem_layout_staged)],
                1024,
            ]
            sB: cute.struct.Align[
                cute.struct.MemRange[self.filter_dtype, cute.cosize(self.b_smem_layout_staged)],
                1024,
            ]
            sD: cute.struct.Align[
                cute.struct.MemRange[self.out_dtype, cute.cosize(self.epi_smem_layout_staged)],
                1024,
            ]
            # Without a residual these hold one unused slot: the struct's shape stays fixed.
            source_mbar: cute.struct.MemRange[cutlass.Int64, source_slots * 2]
            sC: cute.struct.Align[
                cute.struct.MemRange[
                    self.out_dtype,
                    cute.cosize(self.source_smem_layout_staged) if self.source_stages else 8,
                ],
                1024,
            ]
            if self.pingpong:
                # PipelineOrder of the two consumers' mainloops: one mbarrier per consumer.
                order_mbar: cute.struct.MemRange[cutlass.Int64, self.num_consumer_warpgroups]

        return SharedStorage

    # ------------------------------------------------------------------------------------------
    # Host JIT entry: build views, TMA atoms, shared storage; launch
    # ------------------------------------------------------------------------------------------

    @cute.jit
    def __call__(
        self,
        act_ptr: cute.Pointer,
        filter_ptr: cute.Pointer,
        out_ptr: cute.Pointer,
        source_ptr: cute.Pointer,
        bias_ptr: cute.Pointer,
        scale_ptr: cute.Pointer,
        n: cutlass.Int32,
        h: cutlass.Int32,
        w: cutlass.Int32,
        c: cutlass.Int32,
        k: cutlass.Int32,
        r: cutlass.Int32,
        s: cutlass.Int32,
        p: cutlass.Int32,
        q: cutlass.Int32,
        pad_top: cutlass.Int32,
        pad_bottom: cutlass.Int32,
        pad_left: cutlass.Int32,
        pad_right: cutlass.Int32,
        stride_h: cutlass.Int32,
        stride_w: cutlass.Int32,
        dil_h: cutlass.Int32,
        dil_w: cutlass.Int32,
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
        max_clusters: cutlass.Int32,
        stream: cuda.CUstream,
    ):
        """Launch on raw device pointers. Pointers of terms the epilogue spec leaves out are
        never dereferenced (pass 0); bias and scale are fp32 vectors of length K."""
        geom = ConvGeometry(
            n, h, w, c, k, r, s, p, q,
            pad_top, pad_bottom, pad_left, pad_right, stride_h, stride_w, dil_h, dil_w,
        )  # fmt: skip
        self._setup_attributes()
        tile_m, tile_n, tile_k = self.tile_mnk

        a_smem_layout = cute.slice_(self.a_smem_layout_staged, (None, None, 0))
        b_smem_layout = cute.slice_(self.b_smem_layout_staged, (None, None, 0))
        epi_smem_layout = cute.slice_(self.epi_smem_layout_staged, (None, None, 0))

        a_op = (
            cpasync.CopyBulkTensorIm2ColG2SMulticastOp()
            if cutlass.const_expr(self.num_mcast_a > 1)
            else cpasync.CopyBulkTensorIm2ColG2SOp()
        )
        tma_atom_a, tma_tensor_a = cpasync.make_im2col_tma_atom(
            a_op,
            activation_im2col_view(act_ptr, geom),
            a_smem_layout,
            (tile_m, tile_k),  # the activation's K mode is c alone: a flat tiler here
            num_multicast=self.num_mcast_a,
            **fprop_im2col_params(geom),
        )
        b_op = (
            cpasync.CopyBulkTensorTileG2SMulticastOp()
            if cutlass.const_expr(self.num_mcast_b > 1)
            else cpasync.CopyBulkTensorTileG2SOp()
        )
        tma_atom_b, tma_tensor_b = cpasync.make_tiled_tma_atom(
            b_op,
            filter_gemm_view(filter_ptr, geom),
            b_smem_layout,
            (tile_n, (tile_k, 1, 1)),  # hierarchical K keeps the tiler static for runtime C
            num_multicast=self.num_mcast_b,
        )
        tma_atom_d, tma_tensor_d = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(),
            output_gemm_view(out_ptr, geom),
            epi_smem_layout,
            self.epi_tile,
        )
        tma_atom_c, tma_tensor_c = None, None
        if cutlass.const_expr(self.epilogue.has_residual):
            tma_atom_c, tma_tensor_c = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileG2SOp(),
                output_gemm_view(source_ptr, geom),
                cute.slice_(self.source_smem_layout_staged, (None, None, 0)),
                self.epi_tile,
            )
        channel_vector = cute.make_layout(k)
        m_bias = cute.make_tensor(bias_ptr, channel_vector) if self.epilogue.has_bias else None
        m_scale = cute.make_tensor(scale_ptr, channel_vector) if self.epilogue.has_scale else None

        self.shared_storage = self._shared_storage_type()

        gemm_m = n * p * q
        num_tiles_m = (gemm_m + tile_m - 1) // tile_m
        num_tiles_n = (k + tile_n - 1) // tile_n
        cm, cn = self.cluster_mn
        num_work = ((num_tiles_m + cm - 1) // cm) * ((num_tiles_n + cn - 1) // cn)
        num_clusters = cutlass.max(cutlass.min(num_work, max_clusters), 1)

        self.kernel(
            tma_atom_a,
            tma_tensor_a,
            tma_atom_b,
            tma_tensor_b,
            tma_atom_d,
            tma_tensor_d,
            tma_atom_c,
            tma_tensor_c,
            m_bias,
            m_scale,
            alpha,
            beta,
            self.tiled_mma,
            self.cta_layout_mnk,
            self.a_smem_layout_staged,
            self.b_smem_layout_staged,
            self.epi_smem_layout_staged,
            self.source_smem_layout_staged,
            num_tiles_m,
            num_tiles_n,
        ).launch(
            grid=(cm, cn, num_clusters),
            block=[self.threads_per_cta, 1, 1],
            cluster=(cm, cn, 1),
            min_blocks_per_mp=1,
            stream=stream,
        )

    # ------------------------------------------------------------------------------------------
    # Device kernel: shared setup, then one method per role
    # ------------------------------------------------------------------------------------------

    @cute.kernel
    def kernel(
        self,
        tma_atom_a: cute.CopyAtom,
        mA_mk: cute.Tensor,
        tma_atom_b: cute.CopyAtom,
        mB_nk: cute.Tensor,
        tma_atom_d: cute.CopyAtom,
        mD_mn: cute.Tensor,
        tma_atom_c: Optional[cute.CopyAtom],
        mC_mn: Optional[cute.Tensor],
        m_bias: Optional[cute.Tensor],
        m_scale: Optional[cute.Tensor],
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
        tiled_mma: cute.TiledMma,
        cta_layout_mnk: cute.Layout,
        a_smem_layout_staged: cute.ComposedLayout,
        b_smem_layout_staged: cute.ComposedLayout,
        epi_smem_layout_staged: cute.ComposedLayout,
        source_smem_layout_staged: cute.ComposedLayout,
        num_tiles_m: cutlass.Int32,
        num_tiles_n: cutlass.Int32,
    ):
        tile_m, tile_n, tile_k = self.tile_mnk
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == self.load_warp_id:
            cpasync.prefetch_descriptor(tma_atom_a)
            cpasync.prefetch_descriptor(tma_atom_b)
            cpasync.prefetch_descriptor(tma_atom_d)
            if cutlass.const_expr(self.epilogue.has_residual):
                cpasync.prefetch_descriptor(tma_atom_c)

        cta_rank_in_cluster = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord_mnk = cta_layout_mnk.get_flat_coord(cta_rank_in_cluster)

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(self.shared_storage)

        a_smem_layout = cute.slice_(a_smem_layout_staged, (None, None, 0))
        b_smem_layout = cute.slice_(b_smem_layout_staged, (None, None, 0))
        tma_copy_bytes = cute.size_in_bytes(self.act_dtype, a_smem_layout) + cute.size_in_bytes(
            self.filter_dtype, b_smem_layout
        )
        # Each warp of the consumer(s) owning the tile releases a stage once for every CTA whose
        # TMA wrote into it: 8 warps cooperative, the 4 of one warpgroup ping-pong.
        mcast_size = self.num_mcast_a + self.num_mcast_b - 1
        ab_pipeline = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ab_mbar.data_ptr(),
            num_stages=self.ab_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, mcast_size * self.tile_threads // 32
            ),
            tx_count=tma_copy_bytes,
            cta_layout_vmnk=cute.make_layout((1, *cta_layout_mnk.shape)),
            defer_sync=True,
        )
        source_pipeline = None
        if cutlass.const_expr(self.epilogue.has_residual):
            # Ping-pong: one barrier array holds both consumers' rings (see ``_source_slot``).
            source_pipeline = pipeline.PipelineTmaAsync.create(
                barrier_storage=storage.source_mbar.data_ptr(),
                num_stages=self.source_stages * self.num_epilogues,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
                consumer_group=pipeline.CooperativeGroup(
                    pipeline.Agent.Thread, self.tile_threads // 32
                ),
                tx_count=cute.size_in_bytes(
                    self.out_dtype, cute.slice_(source_smem_layout_staged, (None, None, 0))
                ),
                defer_sync=True,
            )
        mma_order = None
        if cutlass.const_expr(self.pingpong):
            # Consumer c waits on barrier c and arrives on the other's; consumer 0 goes first.
            # (Producer warps get group -1 here and never use it.)
            mma_order = pipeline.PipelineOrder.create(
                barrier_storage=storage.order_mbar.data_ptr(),
                depth=1,
                length=self.num_consumer_warpgroups,
                group_id=warp_idx // 4 - 1,
                producer_group=pipeline.CooperativeGroup(
                    pipeline.Agent.Thread, self.num_threads_per_warpgroup
                ),
                defer_sync=True,
            )
        pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)

        sA = storage.sA.get_tensor(a_smem_layout_staged.outer, swizzle=a_smem_layout_staged.inner)
        sB = storage.sB.get_tensor(b_smem_layout_staged.outer, swizzle=b_smem_layout_staged.inner)
        sD = storage.sD.get_tensor(
            epi_smem_layout_staged.outer, swizzle=epi_smem_layout_staged.inner
        )
        sC = None
        if cutlass.const_expr(self.epilogue.has_residual):
            sC = storage.sC.get_tensor(
                source_smem_layout_staged.outer, swizzle=source_smem_layout_staged.inner
            )

        # (tile_m, (tile_k,1,1), m_tiles, (c_blocks, S, R))
        gA = cute.local_tile(mA_mk, (tile_m, (tile_k, 1, 1)), (None, None))
        # (tile_n, (tile_k,1,1), n_tiles, (c_blocks, S, R))
        gB = cute.local_tile(mB_nk, (tile_n, (tile_k, 1, 1)), (None, None))
        # (tile_m, tile_n, m_tiles, n_tiles)
        gD = cute.local_tile(mD_mn, (tile_m, tile_n), (None, None))
        gC = None
        if cutlass.const_expr(self.epilogue.has_residual):
            gC = cute.local_tile(mC_mn, (tile_m, tile_n), (None, None))
        k_tile_cnt = cute.size(gA, mode=[3])

        scheduler = StaticTileScheduler(
            num_tiles_m, num_tiles_n, self.cluster_mn, self.swizzle, self.raster_along_m
        )

        pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        # ////////////////////////////////////////////////////////////////////////////////////
        #  PRODUCER WARPGROUP
        # ////////////////////////////////////////////////////////////////////////////////////
        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(self.producer_registers)
            if warp_idx == self.load_warp_id:
                self.load(
                    ab_pipeline,
                    tma_atom_a,
                    tma_atom_b,
                    gA,
                    gB,
                    sA,
                    sB,
                    cta_layout_mnk,
                    cluster_coord_mnk,
                    scheduler,
                )
            if cutlass.const_expr(self.epilogue.has_residual):
                if warp_idx == self.source_load_warp_id:
                    self.load_source(source_pipeline, tma_atom_c, gC, sC, scheduler, 0)
                if cutlass.const_expr(self.pingpong):
                    if warp_idx == self.source_load_warp_id + 1:
                        self.load_source(source_pipeline, tma_atom_c, gC, sC, scheduler, 1)

        # ////////////////////////////////////////////////////////////////////////////////////
        #  CONSUMER WARPGROUPS: MMA + EPILOGUE
        # ////////////////////////////////////////////////////////////////////////////////////
        if warp_idx >= 4:
            cute.arch.setmaxregister_increase(self.consumer_registers)
            self.mma_and_epilogue(
                ab_pipeline,
                source_pipeline,
                mma_order,
                tiled_mma,
                tma_atom_d,
                sA,
                sB,
                sD,
                sC,
                gD,
                m_bias,
                m_scale,
                alpha,
                beta,
                k_tile_cnt,
                scheduler,
                warp_idx,
            )

    @cute.jit
    def load(
        self,
        ab_pipeline: pipeline.PipelineTmaAsync,
        tma_atom_a: cute.CopyAtom,
        tma_atom_b: cute.CopyAtom,
        gA: cute.Tensor,
        gB: cute.Tensor,
        sA: cute.Tensor,
        sB: cute.Tensor,
        cta_layout_mnk: cute.Layout,
        cluster_coord_mnk: cute.Coord,
        scheduler: StaticTileScheduler,
    ):
        """Load warp: fills the A/B ring for every k-tile of every output tile of this CTA."""
        # Each CTA of a multicast group issues its slice of the box; TMA delivers it to all.
        tAsA, tAgA = cpasync.tma_partition(
            tma_atom_a,
            cluster_coord_mnk[1],
            cute.make_layout(cute.slice_(cta_layout_mnk, (0, None, 0)).shape),
            cute.group_modes(sA, 0, 2),
            cute.group_modes(gA, 0, 2),
        )
        tBsB, tBgB = cpasync.tma_partition(
            tma_atom_b,
            cluster_coord_mnk[0],
            cute.make_layout(cute.slice_(cta_layout_mnk, (None, 0, 0)).shape),
            cute.group_modes(sB, 0, 2),
            cute.group_modes(gB, 0, 2),
        )
        a_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord_mnk, mode=1)
        b_mcast_mask = cute.make_layout_image_mask(cta_layout_mnk, cluster_coord_mnk, mode=0)
        a_mcast_mask = a_mcast_mask if self.num_mcast_a > 1 else 0
        b_mcast_mask = b_mcast_mask if self.num_mcast_b > 1 else 0

        c_blocks = cute.size(gA, mode=[3, 0])
        taps_s = cute.size(gA, mode=[3, 1])
        taps_r = cute.size(gA, mode=[3, 2])
        producer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, self.ab_stages
        )
        num_work = scheduler.num_work
        work = scheduler.first_work()
        while work < num_work:
            m_tile, n_tile = scheduler.tile_coord(work)
            tAgA_m = tAgA[(None, m_tile, None)]
            tBgB_n = tBgB[(None, n_tile, None)]
            # Walk the hierarchical k mode (c-block, s, r) with nested loops: indexing it
            # with a linear k-tile would cost runtime divisions by C/TK and S per load.
            for r in range(taps_r):
                for s in range(taps_s):
                    for c_block in range(c_blocks):
                        k_coord = (c_block, s, r)
                        ab_pipeline.producer_acquire(producer_state)
                        barrier = ab_pipeline.producer_get_barrier(producer_state)
                        cute.copy(
                            tma_atom_a,
                            tAgA_m[(None, k_coord)],
                            tAsA[(None, producer_state.index)],
                            tma_bar_ptr=barrier,
                            mcast_mask=a_mcast_mask,
                        )
                        cute.copy(
                            tma_atom_b,
                            tBgB_n[(None, k_coord)],
                            tBsB[(None, producer_state.index)],
                            tma_bar_ptr=barrier,
                            mcast_mask=b_mcast_mask,
                        )
                        ab_pipeline.producer_commit(producer_state)
                        producer_state.advance()
            if cutlass.const_expr(self.epilogue.has_residual):
                # The first tile's A/B loads are out: let the source loads begin.
                if work == scheduler.first_work():
                    self.epilogue_load_barrier().arrive()
            work = scheduler.next_work(work)
        ab_pipeline.producer_tail(producer_state)

    def epilogue_load_barrier(self) -> pipeline.NamedBarrier:
        """Orders the source loads after the mainloop prologue (load + source-load warps)."""
        return pipeline.NamedBarrier(
            barrier_id=int(NamedBarrierConv.EpilogueLoad), num_threads=32 * (1 + self.num_epilogues)
        )

    @staticmethod
    def _source_slot(state: pipeline.PipelineState, first_slot) -> pipeline.PipelineState:
        """``state`` of one consumer's ring as a slot of the shared source barrier array.

        Ping-pong keeps both consumers' source rings in one ``PipelineTmaAsync`` of
        ``2 * source_stages`` stages: consumer c's ring is slots ``[c * S, (c + 1) * S)``. Its
        state walks ``S`` slots (index and phase wrap there); the pipeline's wait, release,
        acquire and barrier lookups only read index and phase, so a copy with the index
        shifted by ``first_slot`` addresses the right mbarrier. ``first_slot`` 0 (a Python
        int: cooperative, or ping-pong consumer 0 seen by its loader) returns ``state``.
        """
        if isinstance(first_slot, int) and first_slot == 0:
            return state
        return pipeline.PipelineState(
            state.stages, state.count, state.index + first_slot, state.phase
        )

    @cute.jit
    def load_source(
        self,
        source_pipeline: pipeline.PipelineTmaAsync,
        tma_atom_c: cute.CopyAtom,
        gC: cute.Tensor,
        sC: cute.Tensor,
        scheduler: StaticTileScheduler,
        consumer: cutlass.Constexpr[int],
    ):
        """Source-load warp: TMA-loads the residual C subtile by subtile, in epilogue order.

        ``consumer``: whose tiles (cooperative: 0, every tile; ping-pong: consumer 0's or
        consumer 1's, every other tile, into that consumer's ring and buffers).
        """
        self.epilogue_load_barrier().arrive_and_wait()
        producer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, self.source_stages
        )
        first_slot = consumer * self.source_stages
        num_work = scheduler.num_work
        work = scheduler.first_work()
        if cutlass.const_expr(consumer > 0):
            work = scheduler.next_work(work, consumer)
        while work < num_work:
            m_tile, n_tile = scheduler.tile_coord(work)
            gC_tile = cute.zipped_divide(gC[(None, None, m_tile, n_tile)], self.epi_tile)
            bGS_sC, bGS_gC = cpasync.tma_partition(
                tma_atom_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC_tile
            )
            epi_tile_layout = self.epi_tile_layout(gC_tile)
            for epi_idx in cutlass.range_constexpr(cute.size(epi_tile_layout)):
                slot = self._source_slot(producer_state, first_slot)
                source_pipeline.producer_acquire(slot)
                cute.copy(
                    tma_atom_c,
                    bGS_gC[(None, epi_tile_layout.get_hier_coord(epi_idx))],
                    bGS_sC[(None, slot.index)],
                    tma_bar_ptr=source_pipeline.producer_get_barrier(slot),
                )
                source_pipeline.producer_commit(slot)
                producer_state.advance()
            work = scheduler.next_work(work, self.num_epilogues)
        if cutlass.const_expr(self.pingpong):
            # ``producer_tail`` would walk all 2 * S slots from this ring's state: wait for
            # this ring's S slots to be released instead.
            for _ in cutlass.range_constexpr(self.source_stages):
                slot = self._source_slot(producer_state, first_slot)
                source_pipeline.sync_object_empty.wait(slot.index, slot.phase)
                producer_state.advance()
        else:
            source_pipeline.producer_tail(producer_state)

    @staticmethod
    def epi_tile_layout(g_tile_divided: cute.Tensor) -> cute.Layout:
        """Order of the epilogue subtiles of one output tile: N fastest."""
        shape = g_tile_divided.shape[1]
        return cute.make_layout(shape, stride=(shape[1], 1))

    @cute.jit
    def mma_and_epilogue(
        self,
        ab_pipeline: pipeline.PipelineTmaAsync,
        source_pipeline: Optional[pipeline.PipelineTmaAsync],
        mma_order: Optional[pipeline.PipelineOrder],
        tiled_mma: cute.TiledMma,
        tma_atom_d: cute.CopyAtom,
        sA: cute.Tensor,
        sB: cute.Tensor,
        sD: cute.Tensor,
        sC: Optional[cute.Tensor],
        gD: cute.Tensor,
        m_bias: Optional[cute.Tensor],
        m_scale: Optional[cute.Tensor],
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
        k_tile_cnt: cutlass.Int32,
        scheduler: StaticTileScheduler,
        warp_idx: cutlass.Int32,
    ):
        """Consumer warpgroups: WGMMA over the ring, then the epilogue of each output tile.

        Cooperative: both warpgroups on every tile. Ping-pong: this warpgroup's tiles only
        (every other one), its mainloops ordered after the other's by ``mma_order``.
        """
        epi = self.epilogue
        tidx, _, _ = cute.arch.thread_idx()
        consumer_tidx = tidx - self.num_threads_per_warpgroup
        warpgroup_idx = cute.arch.make_warp_uniform(consumer_tidx // self.num_threads_per_warpgroup)
        if cutlass.const_expr(self.pingpong):
            # This warpgroup alone computes and stores its tiles.
            mma_tidx = 0
            epi_tidx = consumer_tidx - warpgroup_idx * self.num_threads_per_warpgroup
        else:
            mma_tidx = warpgroup_idx * self.num_threads_per_warpgroup
            epi_tidx = consumer_tidx
        thr_mma = tiled_mma.get_slice(mma_tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc_shape = thr_mma.partition_shape_C(cute.select(self.tile_mnk, mode=[0, 1]))
        accumulators = cute.make_rmem_tensor(acc_shape, self.acc_dtype)

        # Epilogue partitions: accumulator registers -> SMEM staging buffer (stmatrix).
        copy_atom_r2s = sm90_utils.get_smem_store_op(
            LayoutEnum.ROW_MAJOR, self.out_dtype, self.acc_dtype
        )
        copy_atom_d = cute.make_copy_atom(
            cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.out_dtype
        )
        tiled_copy_r2s = cute.make_tiled_copy_S(
            copy_atom_r2s, cute.make_tiled_copy_C_atom(copy_atom_d, tiled_mma)
        )
        thr_copy_r2s = tiled_copy_r2s.get_slice(epi_tidx)
        tRS_sD = thr_copy_r2s.partition_D(sD)  # (R2S, R2S_M, R2S_N, PIPE_D)
        tRS_rAcc = tiled_copy_r2s.retile(accumulators)
        rD_shape = cute.shape(thr_copy_r2s.partition_S(sD))[:3]
        tRS_rD = cute.make_rmem_tensor(rD_shape, self.acc_dtype)
        tRS_rD_out = cute.make_rmem_tensor(rD_shape, self.out_dtype)
        # The (m, n) position inside a subtile of each of this thread's values: what bias and
        # scale are indexed by. The source side of the r2s copy is the register fragment, so
        # partition_S of a subtile-shaped tensor lines up element for element with tRS_rD.
        tRS_cD = thr_copy_r2s.partition_S(cute.make_identity_tensor(self.epi_tile))
        tRS_sC = None
        tRS_rC = None
        if cutlass.const_expr(epi.has_residual):
            tRS_sC = thr_copy_r2s.partition_S(sC)  # this thread's values, in C's buffers
            tRS_rC = cute.make_rmem_tensor(rD_shape, self.out_dtype)
        frags = EpilogueFragments(
            tiled_copy_r2s,
            tRS_rAcc,
            tRS_sD,
            tRS_rD,
            tRS_rD_out,
            tRS_cD,
            tRS_sC,
            tRS_rC,
            tRS_rBias=cute.make_rmem_tensor(rD_shape, self.acc_dtype),
            tRS_rScale=cute.make_rmem_tensor(rD_shape, self.acc_dtype),
        )

        # This thread's epilogue: its barrier, store warp and first staging/source buffers.
        epilogue_barrier_id = int(NamedBarrierConv.Epilogue)
        store_warp_id = self.epi_store_warp_id
        first_epi_buffer = 0
        first_source_slot = 0
        if cutlass.const_expr(self.pingpong):
            epilogue_barrier_id = cutlass.select_(
                warpgroup_idx == 0,
                int(NamedBarrierConv.Epilogue),
                int(NamedBarrierConv.EpilogueConsumer1),
            )
            store_warp_id = self.epi_store_warp_id + warpgroup_idx * 4
            first_epi_buffer = warpgroup_idx * self.epi_stages
            first_source_slot = warpgroup_idx * self.source_stages
        epilogue_barrier = pipeline.NamedBarrier(
            barrier_id=epilogue_barrier_id, num_threads=self.tile_threads
        )
        store_pipeline = pipeline.PipelineTmaStore.create(
            num_stages=self.epi_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.tile_threads),
        )

        read_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, self.ab_stages
        )
        release_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, self.ab_stages
        )
        source_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, max(self.source_stages, 1)
        )
        num_epi_tiles_done = cutlass.Int32(0)
        num_work = scheduler.num_work
        work = scheduler.first_work()
        order_state = None
        if cutlass.const_expr(self.pingpong):
            # Consumer 1 starts at w1, whose k-tiles follow w0's in the ring.
            work = scheduler.next_work(work, warpgroup_idx)
            read_state.advance(warpgroup_idx * k_tile_cnt)
            release_state.advance(warpgroup_idx * k_tile_cnt)
            order_state = mma_order.state.clone()
        while work < num_work:
            m_tile, n_tile = scheduler.tile_coord(work)

            # ---- mainloop: keep one WGMMA batch in flight, release the stage behind it ----
            accumulators.fill(0.0)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            if cutlass.const_expr(self.pingpong):
                # The other consumer has issued its tile's mainloop. Besides keeping the
                # mainloops apart, this wait is what makes the skipping ring states safe: it
                # comes before this tile's first consumer_wait, so every earlier k-tile is
                # loaded, and a slot's full barrier is at most one phase short of the k-tile
                # waited for. Without it a parity wait could pass on a slot still holding the
                # k-tile 2 * ab_stages earlier (same parity).
                mma_order.wait(order_state)
            warpgroup.fence()
            ab_pipeline.consumer_wait(read_state)
            self.mma_k_tile(tiled_mma, accumulators, tCrA, tCrB, read_state.index)
            read_state.advance()
            for _ in range(1, k_tile_cnt):
                ab_pipeline.consumer_wait(read_state)
                self.mma_k_tile(tiled_mma, accumulators, tCrA, tCrB, read_state.index)
                read_state.advance()
                warpgroup.wait_group(1)
                ab_pipeline.consumer_release(release_state)
                release_state.advance()
            if cutlass.const_expr(self.pingpong):
                # Every WGMMA of this tile is issued: the other consumer's mainloop may start
                # (and queue behind these on the tensor cores).
                mma_order.arrive(order_state)
            warpgroup.wait_group(0)
            ab_pipeline.consumer_release(release_state)
            release_state.advance()
            if cutlass.const_expr(self.pingpong):
                # Skip the other consumer's next tile in the ring.
                read_state.advance(k_tile_cnt)
                release_state.advance(k_tile_cnt)

            source_state, num_epi_tiles_done = self.epilogue_tile(
                frags,
                tma_atom_d,
                sD,
                gD[(None, None, m_tile, n_tile)],
                n_tile,
                m_bias,
                m_scale,
                alpha,
                beta,
                source_pipeline,
                source_state,
                first_source_slot,
                first_epi_buffer,
                num_epi_tiles_done,
                epilogue_barrier,
                store_pipeline,
                warp_idx == store_warp_id,
            )
            work = scheduler.next_work(work, self.num_epilogues)

        store_pipeline.producer_tail()

    @cute.jit
    def epilogue_tile(
        self,
        frags: "EpilogueFragments",
        tma_atom_d: cute.CopyAtom,
        sD: cute.Tensor,
        gD_tile: cute.Tensor,
        n_tile: cutlass.Int32,
        m_bias: Optional[cute.Tensor],
        m_scale: Optional[cute.Tensor],
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
        source_pipeline: Optional[pipeline.PipelineTmaAsync],
        source_state: pipeline.PipelineState,
        first_source_slot,
        first_epi_buffer,
        num_epi_tiles_done: cutlass.Int32,
        epilogue_barrier: pipeline.NamedBarrier,
        store_pipeline: pipeline.PipelineTmaStore,
        is_store_warp: cutlass.Boolean,
    ):
        """The epilogue of one output tile, by the threads that computed it (both schedules).

        Subtiles of ``epi_tile`` go registers -> fp32 epilogue math (+ beta * C from the source
        ring) -> SMEM staging buffer -> TMA store issued by the store warp. Staging buffers
        rotate over this epilogue's ``epi_stages`` from ``first_epi_buffer``; source slots
        are this epilogue's ring from ``first_source_slot`` (see ``_source_slot``).
        Returns the advanced ``(source_state, num_epi_tiles_done)``.
        """
        tile_n = self.tile_mnk[1]
        epi = self.epilogue
        tRS_rD = frags.tRS_rD
        gD_tile = cute.zipped_divide(gD_tile, self.epi_tile)
        bSG_sD, bSG_gD = cpasync.tma_partition(
            tma_atom_d,
            0,
            cute.make_layout(1),
            cute.group_modes(sD, 0, 2),
            gD_tile,
        )
        epi_tile_layout = self.epi_tile_layout(gD_tile)
        num_epi_tiles = cute.size(epi_tile_layout)
        for epi_idx in cutlass.range_constexpr(num_epi_tiles):
            self.gather_subtile(frags.tRS_rAcc, tRS_rD, epi_idx)
            if cutlass.const_expr(epi.has_channel_vectors):
                subtile_n = epi_tile_layout.get_hier_coord(epi_idx)[1]
                subtile_n0 = n_tile * tile_n + subtile_n * self.epi_tile[1]
                self.load_channel_vectors(
                    m_bias, m_scale, frags.tRS_cD, subtile_n0, frags.tRS_rBias, frags.tRS_rScale
                )
            y = apply_epilogue(
                epi, tRS_rD.load(), alpha, frags.tRS_rScale.load(), frags.tRS_rBias.load()
            )
            if cutlass.const_expr(epi.has_residual):
                slot = self._source_slot(source_state, first_source_slot)
                source_pipeline.consumer_wait(slot)
                cute.autovec_copy(frags.tRS_sC[(None, None, None, slot.index)], frags.tRS_rC)
                # Registers hold C now: hand the buffer back to the source-load warp.
                source_pipeline.consumer_release(slot)
                source_state.advance()
                y = y + beta * frags.tRS_rC.load().to(self.acc_dtype)
            frags.tRS_rD_out.store(y.to(self.out_dtype))
            epi_buffer = _offset((num_epi_tiles_done + epi_idx) % self.epi_stages, first_epi_buffer)
            cute.copy(
                frags.tiled_copy_r2s, frags.tRS_rD_out, frags.tRS_sD[(None, None, None, epi_buffer)]
            )
            # Make the generic-proxy SMEM writes visible to the TMA (async proxy).
            cute.arch.fence_proxy("async.shared", space="cta")
            epilogue_barrier.arrive_and_wait()
            if is_store_warp:
                cute.copy(
                    tma_atom_d,
                    bSG_sD[(None, epi_buffer)],
                    bSG_gD[(None, epi_tile_layout.get_hier_coord(epi_idx))],
                )
                store_pipeline.producer_commit()
                store_pipeline.producer_acquire()
            epilogue_barrier.arrive_and_wait()
        return source_state, num_epi_tiles_done + num_epi_tiles

    @cute.jit
    def gather_subtile(self, tRS_rAcc: cute.Tensor, tRS_rD: cute.Tensor, epi_idx: int):
        """Copy subtile ``epi_idx``'s accumulator values into ``tRS_rD`` (R2S, R2S_M, R2S_N).

        The retiled accumulator is ((R2S, R2S_N of the whole tile), MMA_M, 1): the tile's
        column groups sit inside mode 0, after each group's R2S values, and the m64 atoms
        (one cooperative, two ping-pong) in mode 1. Subtile ``epi_idx`` (full height, N
        fastest) is column groups ``[epi_idx * R2S_N, (epi_idx + 1) * R2S_N)``.
        """
        num_v = cute.size(tRS_rD, mode=[0])
        num_m = cute.size(tRS_rD, mode=[1])
        num_n = cute.size(tRS_rD, mode=[2])
        assert num_m == cute.size(tRS_rAcc, mode=[1]) and cute.size(tRS_rAcc, mode=[2]) == 1
        for n in cutlass.range_constexpr(num_n):
            for m in cutlass.range_constexpr(num_m):
                for v in cutlass.range_constexpr(num_v):
                    tRS_rD[v, m, n] = tRS_rAcc[(epi_idx * num_n + n) * num_v + v, m, 0]

    @cute.jit
    def load_channel_vectors(
        self,
        m_bias: Optional[cute.Tensor],
        m_scale: Optional[cute.Tensor],
        tRS_cD: cute.Tensor,
        subtile_n0: cutlass.Int32,
        tRS_rBias: cute.Tensor,
        tRS_rScale: cute.Tensor,
    ):
        """Per-channel bias/scale for this thread's values of one subtile (fp32, from L1/L2)."""
        ref = m_bias if cutlass.const_expr(self.epilogue.has_bias) else m_scale
        last_channel = cute.size(ref) - 1
        for v in cutlass.range_constexpr(cute.size(tRS_rBias)):
            # Clamped: values past K (the N tail) are computed but clipped by the TMA store.
            channel = cutlass.min(subtile_n0 + tRS_cD[v][1], last_channel)
            if cutlass.const_expr(self.epilogue.has_bias):
                tRS_rBias[v] = m_bias[channel]
            if cutlass.const_expr(self.epilogue.has_scale):
                tRS_rScale[v] = m_scale[channel]

    @cute.jit
    def mma_k_tile(
        self,
        tiled_mma: cute.TiledMma,
        accumulators: cute.Tensor,
        tCrA: cute.Tensor,
        tCrB: cute.Tensor,
        stage: cutlass.Int32,
    ):
        """Issue the WGMMAs of one k-tile (from ring stage ``stage``) as one commit group."""
        for k_block in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            kb = (None, None, k_block, stage)
            cute.gemm(tiled_mma, accumulators, tCrA[kb], tCrB[kb], accumulators)
        warpgroup.commit_group()
