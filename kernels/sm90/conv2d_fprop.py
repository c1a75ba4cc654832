"""Conv2D forward propagation on Hopper (SM90): a persistent, warp-specialized implicit GEMM.

GEMM view (see ``kernels/common/im2col.py``): M = N*P*Q output pixels, N = K output channels,
K = (C, S, R) walked c-block fastest. The activation tile is loaded by TMA in im2col mode, the
filter tile by tiled TMA; padding, halos and M/K tails are zero-filled by the TMA unit, so the
mainloop has no predication. The output is written through SMEM by TMA stores, which clip the
M and K tails. The epilogue (``kernels/common/epilogue.py``) is fused:
``D = epilogue_fn(act(alpha * acc * scale + bias)) + beta * C``, its terms chosen at compile time.

Roles (384 threads; 512 with 192-row tiles):

  warpgroup 0 (producer, ``setmaxnreg`` down to 40)
    warp 0       load: im2col TMA of the activation + tiled TMA of the filter into the ring
    warp 1       source load (residual kernels only): TMA of the residual C, subtile by
                 subtile, into SMEM source buffers ahead of the epilogue
    warps 2-3    idle
  warpgroups 1-2 (consumers, ``setmaxnreg`` up to 232), or 1-3 with 192-row tiles (up to 152)
    WGMMA on a tile_m x tile_n accumulator (64 or 128 rows each), then the epilogue:
    registers (fp32 math, + beta * C read from SMEM) -> SMEM (stmatrix) -> TMA store (warp 4).
    Ping-pong (``pingpong``): each consumer warpgroup takes every other tile of the CTA with
    its own 128 x tile_n accumulator and runs that tile's epilogue alone (its own staging
    buffers, barrier and store warp: 4 or 8) while the other's mainloop has the tensor cores.

Pipelines and barriers:

  ab      PipelineTmaAsync: load warp -> consumers, ``ab_stages`` deep.
          full: 1 arrive (expect_tx = A + B tile bytes per CTA);
          empty: 1 arrive per consumer warp per CTA of the multicast group.
  source  PipelineTmaAsync: source-load warp -> consumers, ``source_stages`` deep.
          full: 1 arrive (expect_tx = one C subtile); empty: 1 arrive per consumer warp.
          Deep enough for a whole tile of C where SMEM allows, so the next tile's C is
          loaded during its mainloop rather than waited for in its epilogue.
  store   PipelineTmaStore: bulk-group accounting of the epilogue's TMA stores.
  turns   ping-pong only (``PingPongTurns``): a consumer waits for its turn before its
          mainloop and hands it over after, so it waits on its tile's ring stages only once
          the other has waited on all of its own (mbarrier phases tell ring laps apart within
          one lap); residual kernels take turns at the epilogue too, for the source ring.
  Epilogue named barrier: the consumer threads around each epilogue subtile (ping-pong: each
          warpgroup's own, ``Epilogue`` and ``EpilogueConsumer1``).
  EpilogueLoad named barrier (load warp + source-load warp): the source loads start only once
          the first tile's A/B loads are issued, so C does not compete with the mainloop fill.

Persistence: a static tile scheduler (``kernels/common/tile_scheduler.py``); every role walks
the same sequence of work items: whole output tiles, or with ``stream_k`` segments of the
k-tiles of a tile. Clusters of (cluster_m, cluster_n) CTAs multicast the activation tile along
N and the filter tile along M. With ``dynamic_schedule`` (single-CTA clusters) a CTA's first
tile is its grid index and the load warp takes the next ones from a global counter, one tile
ahead, handing each to the consumers and the source-load warp through the work queue
(PipelineAsync, ``WORK_QUEUE_STAGES`` SMEM slots; a value past the last tile ends the roles).

Halo tiles (``tile_w``, stride-1 convs, single-CTA clusters): an output tile is tile_h whole
output rows of tile_w >= Q columns. Per c-block the load warp brings the tile's input halo
(halo_h rows x tile_w columns from (p0 - pad_top, -pad_left), zero-filled outside the image) in
by one tiled TMA box into the ``halo`` ring (PipelineTmaAsync, ``_HALO_STAGES`` deep; ping-pong
``_HALO_STAGES_PINGPONG``, each consumer skipping the other's halos), and the filter tile of
every tap into the ab ring, which then carries B alone. Tap (r, s) reads the halo from row
``r * dil_h * tile_w + s * dil_w`` on: WGMMA descriptors may start at any 128-byte row of a
128B-swizzled buffer, since the swizzle is a function of the SMEM address. Columns q >= Q
read past their row (or into ``HALO_SLACK_ROWS`` of slack) and are clipped by the (channel,
q, p, n) output boxes.

Stream-K fixup (global memory, no SMEM): a CTA whose segment is a partial of a tile writes its
fp32 accumulators to its workspace slot (16-byte vectors), the consumer threads meet at the
epilogue barrier, and one thread publishes the slot (``fence.acq_rel.gpu`` + relaxed add to
the tile's flag). The tile's owner (the segment with its first k-tile) spins with acquire
loads until every later contributor has published, adds their slots in cluster order, resets
the flag to zero and runs the normal epilogue; the source-load warp loads C only for owners.
"""

from types import SimpleNamespace
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
from ..common.entry import ConvKernelEntry, ConvLaunchParams, ConvPointers
from ..common.epilogue import EpilogueSpec, make_epilogue_operands
from ..common.epilogue_store import (
    ChannelVectors,
    OutputSubtiles,
    SourceSubtiles,
    store_subtile,
)
from ..common.im2col import (
    activation_im2col_view,
    filter_gemm_view,
    fprop_im2col_params,
    output_gemm_view,
    output_tile_view,
)
from ..common.tile_scheduler import StaticTileScheduler
from .config import HALO_SLACK_ROWS, WORK_COUNTERS, WORK_QUEUE_STAGES, Conv2dConfig

_REGISTER_FILE = 65536  # 32-bit registers of an SM, shared by the CTA's warpgroups
_MAX_CONSUMER_REGISTERS = 232


class HaloGeometry(NamedTuple):
    """What halo tiles need of the geometry at run time."""

    tiles_h: cutlass.Int32  # output tiles per image
    pad_top: cutlass.Int32
    pad_left: cutlass.Int32
    dil_h: cutlass.Int32
    dil_w: cutlass.Int32


class PingPongTurns(NamedTuple):
    """Ping-pong: whose turn it is, per consumer warpgroup. A consumer waits for its turn
    before its mainloop and hands the turn over after it, so that it waits on the ring's
    stages of its tile only once the other has waited on all of its own: mbarrier phases
    tell laps of the ring apart only within one lap. Residual kernels order the epilogues
    likewise, for the source ring."""

    mainloop: pipeline.PipelineOrder
    epilogue: Optional[pipeline.PipelineOrder]


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


class WorkQueue(NamedTuple):
    """Dynamic scheduling: the load warp hands work items to the other roles through
    ``items`` in SMEM, slot by slot (``pipeline``); ``counters`` are the global work counter
    and the count of CTAs done taking work (see ``Conv2dFpropSm90.request_work``)."""

    pipeline: pipeline.PipelineAsync
    items: cute.Tensor
    counters: cute.Tensor


class Conv2dFpropSm90(ConvKernelEntry):
    """One compiled configuration of the SM90 conv fprop kernel.

    :param act_dtype, filter_dtype: input types (BFloat16 or Float16, equal).
    :param out_dtype: BFloat16, Float16 or Float32.
    :param config: tile, cluster, ring depth, rasterization and schedule options (stream-K,
        dynamic scheduling, halo tiles, ping-pong); see ``Conv2dConfig``.
    :param epilogue: the fused epilogue terms, see ``EpilogueSpec``.
    """

    num_threads_per_warpgroup = 128
    load_warp_id = 0
    producer_registers = 40

    def __init__(
        self,
        act_dtype: Type[cutlass.Numeric],
        filter_dtype: Type[cutlass.Numeric],
        out_dtype: Type[cutlass.Numeric],
        config: Conv2dConfig,
        epilogue: Optional[EpilogueSpec] = None,
    ):
        if act_dtype not in (cutlass.BFloat16, cutlass.Float16) or filter_dtype != act_dtype:
            raise TypeError(
                f"act_dtype and filter_dtype must both be BFloat16 or both Float16, "
                f"got {act_dtype} and {filter_dtype}"
            )
        if out_dtype not in (cutlass.BFloat16, cutlass.Float16, cutlass.Float32):
            raise TypeError(f"out_dtype must be BFloat16, Float16 or Float32, got {out_dtype}")
        if not isinstance(config, Conv2dConfig):
            raise TypeError(f"config must be a Conv2dConfig, got {type(config).__name__}")
        self.act_dtype = act_dtype
        self.filter_dtype = filter_dtype
        self.out_dtype = out_dtype
        self.acc_dtype = cutlass.Float32
        self.config = config
        self.epilogue = epilogue or EpilogueSpec()
        self.plan = config.plan(act_dtype, out_dtype, self.epilogue.has_residual)
        self.tile_mnk = config.tile_shape_mnk
        self.cluster_mn = config.cluster_shape_mn
        self.swizzle = config.swizzle
        self.raster_along_m = config.raster_along_m
        self.stream_k = config.stream_k
        self.dynamic_schedule = config.dynamic_schedule
        self.pingpong = config.pingpong
        self.tile_w = config.tile_w
        self.halo_h = config.halo_h
        tile_m = config.tile_m
        self.tile_h = tile_m // config.tile_w if config.tile_w else 0
        self.halo_stages = config.halo_stages

        self.num_consumer_warpgroups = config.num_consumer_warpgroups
        self.num_consumer_threads = self.num_consumer_warpgroups * self.num_threads_per_warpgroup
        self.threads_per_cta = self.num_threads_per_warpgroup * (1 + self.num_consumer_warpgroups)
        self.consumer_registers = self._consumer_register_budget()
        # The consumer threads that compute and store one output tile, and how many epilogues
        # run at once, each with its own staging buffers, barrier and store warp.
        self.tile_threads = (
            self.num_threads_per_warpgroup if config.pingpong else self.num_consumer_threads
        )
        self.num_epilogues = config.num_epilogues
        self.source_load_warp_id = 1
        self.epi_store_warp_id = 4  # first warp of the first consumer warpgroup
        self.cluster_size = config.cluster_m * config.cluster_n
        self.num_mcast_a = config.cluster_n  # the activation tile is shared along cluster N
        self.num_mcast_b = config.cluster_m  # the filter tile is shared along cluster M

        self.epi_stages = self.plan.epi_stages
        self.source_stages = self.plan.source_stages
        self.ab_stages = self.plan.ab_stages
        epi_n = self.plan.epi_n
        self.epi_tile = (tile_m, epi_n)
        # How the output and C tiles are divided into subtiles: halo tiles are
        # (tile_w, tile_h, 1) boxes of the (Q, P, N) output pixels.
        self.epi_tiler = (
            ((config.tile_w, self.tile_h, 1), epi_n) if config.tile_w else self.epi_tile
        )

    def _consumer_register_budget(self) -> int:
        """Registers per consumer thread after ``setmaxnreg``: what the register file
        (64K) leaves beside the producer warpgroup's, in steps of 8, at most 232 (two
        consumer warpgroups: 232, three: 152)."""
        free = _REGISTER_FILE - self.num_threads_per_warpgroup * self.producer_registers
        return min(free // self.num_consumer_threads // 8 * 8, _MAX_CONSUMER_REGISTERS)

    def _halo_rows(self) -> int:
        """SMEM rows of one halo stage."""
        return self.halo_h * self.tile_w

    def smem_bytes(self) -> int:
        """Shared memory the kernel asks for (ring + halos + epilogue staging + barriers)."""
        return self.plan.smem_bytes

    # ------------------------------------------------------------------------------------------
    # Trace-time attributes: MMA, SMEM layouts
    # ------------------------------------------------------------------------------------------

    def _setup_attributes(self):
        tile_m, tile_n, tile_k = self.tile_mnk
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.act_dtype,
            self.filter_dtype,
            OperandMajorMode.K,
            OperandMajorMode.K,
            self.acc_dtype,
            # Cooperative: one m64 atom per consumer warpgroup. Ping-pong: one warpgroup's
            # atom repeats over the tile's 128 rows.
            (1 if self.pingpong else self.num_consumer_warpgroups, 1, 1),
            tiler_mn=(64, tile_n),
        )
        # The A ring: im2col tiles, or halos of (halo_h * tile_w) rows.
        a_rows = self._halo_rows() if self.tile_w else tile_m
        self.a_smem_layout_staged = sm90_utils.make_smem_layout_a(
            LayoutEnum.ROW_MAJOR,
            (a_rows, tile_n, tile_k),
            self.act_dtype,
            self.halo_stages or self.ab_stages,
        )
        # One tap's A operand: tile_m rows of a halo, from any row (the 128-byte swizzle is a
        # function of the SMEM address, so WGMMA descriptors may start at any 128-byte row).
        self.a_tap_layout = sm90_utils.make_smem_layout_a(
            LayoutEnum.ROW_MAJOR, self.tile_mnk, self.act_dtype, 1
        )
        self.b_smem_layout_staged = sm90_utils.make_smem_layout_b(
            LayoutEnum.ROW_MAJOR, self.tile_mnk, self.filter_dtype, self.ab_stages
        )
        # Ping-pong: consumer c stages its subtiles in buffers [c * epi_stages, (c+1) * ...).
        self.epi_smem_layout_staged = sm90_utils.make_smem_layout_epi(
            self.out_dtype,
            LayoutEnum.ROW_MAJOR,
            self.epi_tile,
            self.epi_stages * self.num_epilogues,
        )
        # Source C subtiles share the output's SMEM layout, so one TMA box shape serves both.
        self.source_smem_layout_staged = sm90_utils.make_smem_layout_epi(
            self.out_dtype, LayoutEnum.ROW_MAJOR, self.epi_tile, max(self.source_stages, 1)
        )
        self.cta_layout_mnk = cute.make_layout((*self.cluster_mn, 1))

    # ------------------------------------------------------------------------------------------
    # Host JIT entry: build views, TMA atoms, shared storage; launch
    # ------------------------------------------------------------------------------------------

    @cute.jit
    def launch(self, params: ConvLaunchParams, stream: cuda.CUstream):
        """Launch on raw device pointers (see ``ConvLaunchParams``); bias and scale are vectors
        of length K in the epilogue spec's ``vector_dtype``. Stream-K only:
        ``pointers.partials`` has room for one tile_m x tile_n float32 partial per CTA of the
        grid (``max_clusters`` clusters); ``pointers.flags`` holds one zero-initialized int32
        counter per output tile (left at zero). Dynamic scheduling only: ``pointers.flags``
        holds ``WORK_COUNTERS`` zeroed int32 counters (left at zero)."""
        ptrs, geom, max_clusters = params.pointers, params.geometry, params.max_clusters
        self._setup_attributes()
        tile_m, tile_n, tile_k = self.tile_mnk

        a_smem_layout = cute.slice_(self.a_smem_layout_staged, (None, None, 0))
        b_smem_layout = cute.slice_(self.b_smem_layout_staged, (None, None, 0))
        epi_smem_layout = cute.slice_(self.epi_smem_layout_staged, (None, None, 0))

        if cutlass.const_expr(self.tile_w):
            # A halo: a (tile_k channels, tile_w columns, halo_h rows, 1 image) box.
            tma_atom_a, tma_tensor_a = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileG2SOp(),
                activation_im2col_view(ptrs.act, geom),
                a_smem_layout,
                ((self.tile_w, self.halo_h, 1), tile_k),
            )
        else:
            a_op = (
                cpasync.CopyBulkTensorIm2ColG2SMulticastOp()
                if cutlass.const_expr(self.num_mcast_a > 1)
                else cpasync.CopyBulkTensorIm2ColG2SOp()
            )
            tma_atom_a, tma_tensor_a = cpasync.make_im2col_tma_atom(
                a_op,
                activation_im2col_view(ptrs.act, geom),
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
            filter_gemm_view(ptrs.filter, geom),
            b_smem_layout,
            (tile_n, (tile_k, 1, 1)),  # hierarchical K keeps the tiler static for runtime C
            num_multicast=self.num_mcast_b,
        )
        tma_atom_d, tma_tensor_d, tma_atom_c, tma_tensor_c, m_bias, m_scale = (
            make_epilogue_operands(
                self.epilogue, geom, ptrs, epi_smem_layout,
                cute.slice_(self.source_smem_layout_staged, (None, None, 0)), self.epi_tiler,
                output_tile_view if self.tile_w else output_gemm_view,
            )
        )  # fmt: skip

        queue_stages = WORK_QUEUE_STAGES if self.dynamic_schedule else 1

        @cute.struct
        class SharedStorage:
            ab_mbar: cute.struct.MemRange[cutlass.Int64, self.ab_stages * 2]
            # The work queue of dynamic scheduling: the load warp's work items on their way to
            # the other roles (one unused slot without; it fits in sA's alignment padding).
            work_mbar: cute.struct.MemRange[cutlass.Int64, queue_stages * 2]
            work_items: cute.struct.MemRange[cutlass.Int32, queue_stages]
            halo_mbar: cute.struct.MemRange[cutlass.Int64, max(self.halo_stages, 1) * 2]
            sA: cute.struct.Align[
                cute.struct.MemRange[
                    self.act_dtype,
                    cute.cosize(self.a_smem_layout_staged)
                    + (HALO_SLACK_ROWS * tile_k if self.tile_w else 0),
                ],
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
            source_mbar: cute.struct.MemRange[cutlass.Int64, max(self.source_stages, 1) * 2]
            sC: cute.struct.Align[
                cute.struct.MemRange[
                    self.out_dtype,
                    cute.cosize(self.source_smem_layout_staged) if self.source_stages else 8,
                ],
                1024,
            ]
            # Ping-pong: the mainloop and the epilogue turns of the two consumers.
            turn_mbar: cute.struct.MemRange[cutlass.Int64, 4 if self.pingpong else 1]

        self.shared_storage = SharedStorage

        halo = None
        if cutlass.const_expr(self.tile_w):
            # Output tiles of tile_h whole rows of tile_w >= Q columns, tiles_h per image.
            tiles_h = (geom.p + self.tile_h - 1) // self.tile_h
            halo = HaloGeometry(tiles_h, geom.pad_top, geom.pad_left, geom.dil_h, geom.dil_w)
            num_tiles_m = geom.n * tiles_h
        else:
            num_tiles_m = (geom.n * geom.p * geom.q + tile_m - 1) // tile_m
        num_tiles_n = (geom.k + tile_n - 1) // tile_n
        cm, cn = self.cluster_mn
        num_work = ((num_tiles_m + cm - 1) // cm) * ((num_tiles_n + cn - 1) // cn)
        m_partials, m_flags = None, None
        if cutlass.const_expr(self.stream_k):
            k_tiles = (geom.c + tile_k - 1) // tile_k * geom.s * geom.r
            num_clusters = cutlass.max(cutlass.min(num_work * k_tiles, max_clusters), 1)
            m_partials, m_flags = self.stream_k_workspace(ptrs, max_clusters, num_work)
        else:
            num_clusters = cutlass.max(cutlass.min(num_work, max_clusters), 1)
        if cutlass.const_expr(self.dynamic_schedule):
            m_flags = cute.make_tensor(ptrs.flags, cute.make_layout(WORK_COUNTERS))

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
            params.alpha,
            params.beta,
            self.tiled_mma,
            self.cta_layout_mnk,
            self.a_smem_layout_staged,
            self.b_smem_layout_staged,
            self.epi_smem_layout_staged,
            self.source_smem_layout_staged,
            num_tiles_m,
            num_tiles_n,
            m_partials,
            m_flags,
            halo,
            self.a_tap_layout,
        ).launch(
            grid=(cm, cn, num_clusters),
            block=[self.threads_per_cta, 1, 1],
            cluster=(cm, cn, 1),
            min_blocks_per_mp=1,
            stream=stream,
        )

    def stream_k_workspace(
        self,
        ptrs: ConvPointers,
        max_clusters: cutlass.Int32,
        num_work: cutlass.Int32,
    ) -> Tuple[cute.Tensor, cute.Tensor]:
        """Stream-K views: partials ``(4, values / 4, consumer thread, slot)``, a thread's
        values 4 at a time so that a warp's 16-byte accesses are contiguous, a slot per CTA;
        flags, one per output tile."""
        tile_m, tile_n, _ = self.tile_mnk
        threads = self.num_consumer_threads
        values = tile_m * tile_n // threads
        m_partials = cute.make_tensor(
            ptrs.partials,
            cute.make_layout(
                (4, values // 4, threads, max_clusters * self.cluster_size),
                stride=(1, 4 * threads, 4, tile_m * tile_n),
            ),
        )
        m_flags = cute.make_tensor(ptrs.flags, cute.make_layout(num_work * self.cluster_size))
        return m_partials, m_flags

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
        m_partials: Optional[cute.Tensor],
        m_flags: Optional[cute.Tensor],
        halo: Optional[HaloGeometry],
        a_tap_layout: cute.ComposedLayout,
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
        a_bytes = cute.size_in_bytes(self.act_dtype, a_smem_layout)
        tma_copy_bytes = cute.size_in_bytes(self.filter_dtype, b_smem_layout)
        if cutlass.const_expr(not self.tile_w):
            tma_copy_bytes += a_bytes  # the ring carries A too, except with halo tiles
        # Each warp of the consumers owning a tile releases a stage once for every CTA whose
        # TMA wrote into it (all consumer warps; ping-pong: the 4 of the tile's warpgroup).
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
        halo_pipeline = None
        if cutlass.const_expr(self.tile_w):
            halo_pipeline = pipeline.PipelineTmaAsync.create(
                barrier_storage=storage.halo_mbar.data_ptr(),
                num_stages=self.halo_stages,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
                consumer_group=pipeline.CooperativeGroup(
                    pipeline.Agent.Thread, self.tile_threads // 32
                ),
                tx_count=a_bytes,
                defer_sync=True,
            )
        source_pipeline = None
        if cutlass.const_expr(self.epilogue.has_residual):
            source_pipeline = pipeline.PipelineTmaAsync.create(
                barrier_storage=storage.source_mbar.data_ptr(),
                num_stages=self.source_stages,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
                consumer_group=pipeline.CooperativeGroup(
                    pipeline.Agent.Thread, self.tile_threads // 32
                ),
                tx_count=cute.size_in_bytes(
                    self.out_dtype, cute.slice_(source_smem_layout_staged, (None, None, 0))
                ),
                defer_sync=True,
            )
        work_queue = None
        if cutlass.const_expr(self.dynamic_schedule):
            work_queue = WorkQueue(
                pipeline=pipeline.PipelineAsync.create(
                    barrier_storage=storage.work_mbar.data_ptr(),
                    num_stages=WORK_QUEUE_STAGES,
                    producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
                    # Every thread of the consumer warpgroups and of the source-load warp.
                    consumer_group=pipeline.CooperativeGroup(
                        pipeline.Agent.Thread,
                        self.num_consumer_threads + (32 if self.epilogue.has_residual else 0),
                    ),
                    defer_sync=True,
                ),
                items=storage.work_items.get_tensor(cute.make_layout(WORK_QUEUE_STAGES)),
                counters=m_flags,
            )
        turns = None
        if cutlass.const_expr(self.pingpong):
            turns = self.make_turns(storage.turn_mbar.data_ptr(), warp_idx)
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

        # im2col: (tile_m, (tile_k,1,1), m_tiles, (c_blocks, S, R)); halo tiles: the
        # coordinates ((w, h, n), c), boxed per tile by the load warp.
        gA = mA_mk
        if cutlass.const_expr(not self.tile_w):
            gA = cute.local_tile(mA_mk, (tile_m, (tile_k, 1, 1)), (None, None))
        # (tile_n, (tile_k,1,1), n_tiles, (c_blocks, S, R))
        gB = cute.local_tile(mB_nk, (tile_n, (tile_k, 1, 1)), (None, None))
        # (tile_m, tile_n, m_tiles, n_tiles); tile_m is (tile_w, tile_h, 1) with halo tiles
        tiler_mn = (self.epi_tiler[0], tile_n)
        gD = cute.local_tile(mD_mn, tiler_mn, (None, None))
        gC = None
        if cutlass.const_expr(self.epilogue.has_residual):
            gC = cute.local_tile(mC_mn, tiler_mn, (None, None))
        k_tile_cnt = cute.size(gB, mode=[3])

        scheduler = StaticTileScheduler(
            num_tiles_m, num_tiles_n, k_tile_cnt, self.cluster_mn, self.swizzle,
            self.raster_along_m, self.stream_k,
        )  # fmt: skip

        pipeline_init_wait(cluster_shape_mn=self.cluster_mn)

        # ////////////////////////////////////////////////////////////////////////////////////
        #  PRODUCER WARPGROUP
        # ////////////////////////////////////////////////////////////////////////////////////
        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(self.producer_registers)
            if warp_idx == self.load_warp_id:
                self.load(
                    ab_pipeline,
                    halo_pipeline,
                    halo,
                    tma_atom_a,
                    tma_atom_b,
                    gA,
                    gB,
                    sA,
                    sB,
                    cta_layout_mnk,
                    cluster_coord_mnk,
                    scheduler,
                    work_queue,
                )
            if cutlass.const_expr(self.epilogue.has_residual):
                if warp_idx == self.source_load_warp_id:
                    self.load_source(source_pipeline, tma_atom_c, gC, sC, scheduler, work_queue)

        # ////////////////////////////////////////////////////////////////////////////////////
        #  CONSUMER WARPGROUPS: MMA + EPILOGUE
        # ////////////////////////////////////////////////////////////////////////////////////
        if warp_idx >= 4:
            cute.arch.setmaxregister_increase(self.consumer_registers)
            self.mma_and_epilogue(
                ab_pipeline,
                halo_pipeline,
                halo,
                a_tap_layout,
                (
                    cute.size(gB, mode=[3, 0]),
                    cute.size(gB, mode=[3, 1]),
                    cute.size(gB, mode=[3, 2]),
                ),
                source_pipeline,
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
                m_partials,
                m_flags,
                work_queue,
                turns,
            )

    def make_turns(self, barriers: cute.Pointer, warp_idx: cutlass.Int32) -> PingPongTurns:
        """Ping-pong: the mainloop turns (``barriers[0:2]``, one mbarrier per consumer) and, in
        residual kernels, the epilogue turns (``barriers[2:4]``)."""

        def turn(first_barrier: cute.Pointer) -> pipeline.PipelineOrder:
            return pipeline.PipelineOrder.create(
                barrier_storage=first_barrier,
                depth=1,
                length=self.num_consumer_warpgroups,
                group_id=warp_idx // 4 - 1,  # the consumer warpgroup (producer: unused)
                producer_group=pipeline.CooperativeGroup(
                    pipeline.Agent.Thread, self.num_threads_per_warpgroup
                ),
                defer_sync=True,
            )

        mainloop = turn(barriers)
        epilogue = turn(barriers + 2) if self.epilogue.has_residual else None
        return PingPongTurns(mainloop, epilogue)

    @cute.jit
    def load(
        self,
        ab_pipeline: pipeline.PipelineTmaAsync,
        halo_pipeline: Optional[pipeline.PipelineTmaAsync],
        halo: Optional[HaloGeometry],
        tma_atom_a: cute.CopyAtom,
        tma_atom_b: cute.CopyAtom,
        gA: cute.Tensor,
        gB: cute.Tensor,
        sA: cute.Tensor,
        sB: cute.Tensor,
        cta_layout_mnk: cute.Layout,
        cluster_coord_mnk: cute.Coord,
        scheduler: StaticTileScheduler,
        work_queue: Optional[WorkQueue],
    ):
        """Load warp: fills the A/B ring for every k-tile of every output tile of this CTA
        (with halo tiles: the halo ring once per c-block, the ring with B per k-tile); with
        ``dynamic_schedule`` it also takes the work items and hands them to the other roles
        through the work queue."""
        tAsA, tAgA = None, None
        if cutlass.const_expr(not self.tile_w):
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

        c_blocks = cute.size(gB, mode=[3, 0])
        taps_s = cute.size(gB, mode=[3, 1])
        taps_r = cute.size(gB, mode=[3, 2])
        producer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, self.ab_stages
        )
        halo_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, max(self.halo_stages, 1)
        )
        queue_state = None
        if cutlass.const_expr(self.dynamic_schedule):
            queue_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Producer, WORK_QUEUE_STAGES
            )
        end_work = scheduler.end_work()
        work = scheduler.first_work()
        ticket = cutlass.Int32(0)
        while work < end_work:
            if cutlass.const_expr(self.dynamic_schedule):
                queue_state = self.publish_work(work_queue, queue_state, work)
                # Ask for the next work item now: the atomic's round trip overlaps this
                # tile's loads, its result is first needed after them.
                ticket = self.request_work(work_queue)
            m_tile, n_tile = scheduler.tile_coord(work)
            mcast_masks = (a_mcast_mask, b_mcast_mask)
            if cutlass.const_expr(not self.tile_w):
                ab_gmem = (tAgA[(None, m_tile, None)], tBgB[(None, n_tile, None)])
                ab_smem = (tAsA, tBsB)
            # Walk the hierarchical k mode (c-block, s, r) by nested loops or carries: indexing
            # it with a linear k-tile would cost runtime divisions by C/TK and S per load.
            if cutlass.const_expr(self.tile_w):
                tBgB_tile = tBgB[(None, n_tile, None)]
                tHsA, tHgA = self.partition_halo(tma_atom_a, gA, sA, halo, m_tile)
                for c_block in range(c_blocks):
                    halo_pipeline.producer_acquire(halo_state)
                    cute.copy(
                        tma_atom_a,
                        tHgA[(None, c_block)],
                        tHsA[(None, halo_state.index)],
                        tma_bar_ptr=halo_pipeline.producer_get_barrier(halo_state),
                    )
                    halo_pipeline.producer_commit(halo_state)
                    halo_state.advance()
                    for r in range(taps_r):
                        for s in range(taps_s):
                            self.load_k_tile(
                                ab_pipeline, producer_state, (tma_atom_b,), (tBgB_tile,),
                                (tBsB,), (b_mcast_mask,), (c_block, s, r),
                            )  # fmt: skip
                            producer_state.advance()
            elif cutlass.const_expr(self.stream_k):
                k_first, k_end = scheduler.k_tile_range(work)
                c_block = k_first % c_blocks
                s = (k_first // c_blocks) % taps_s
                r = k_first // (c_blocks * taps_s)
                for _ in range(k_first, k_end):
                    self.load_k_tile(
                        ab_pipeline, producer_state, (tma_atom_a, tma_atom_b),
                        ab_gmem, ab_smem, mcast_masks, (c_block, s, r),
                    )  # fmt: skip
                    producer_state.advance()
                    c_block += 1
                    if c_block == c_blocks:
                        c_block = cutlass.Int32(0)
                        s += 1
                        if s == taps_s:
                            s = cutlass.Int32(0)
                            r += 1
            else:
                # Whole tiles: nested loops issue 1-4% faster than the carries (H200).
                for r in range(taps_r):
                    for s in range(taps_s):
                        for c_block in range(c_blocks):
                            self.load_k_tile(
                                ab_pipeline, producer_state, (tma_atom_a, tma_atom_b),
                                ab_gmem, ab_smem, mcast_masks, (c_block, s, r),
                            )  # fmt: skip
                            producer_state.advance()
            if cutlass.const_expr(self.epilogue.has_residual):
                # The first tile's A/B loads are out: let the source loads begin.
                if work == scheduler.first_work():
                    self.epilogue_load_barrier().arrive()
            if cutlass.const_expr(self.dynamic_schedule):
                work = self.claim_work(ticket)
            else:
                work = scheduler.next_work(work)
        if cutlass.const_expr(self.dynamic_schedule):
            self.publish_work(work_queue, queue_state, work)  # past the end: the roles stop
            self.retire_from_work_queue(work_queue)
        ab_pipeline.producer_tail(producer_state)
        if cutlass.const_expr(self.tile_w):
            halo_pipeline.producer_tail(halo_state)

    @cute.jit
    def partition_halo(
        self,
        tma_atom_a: cute.CopyAtom,
        mA: cute.Tensor,
        sA: cute.Tensor,
        halo: HaloGeometry,
        m_tile: cutlass.Int32,
    ) -> Tuple[cute.Tensor, cute.Tensor]:
        """Halo tiles (load warp): the TMA views of output tile ``m_tile``'s halo boxes,
        ``(TMA, halo stage)`` in SMEM and ``(TMA, c-block)`` in the activation: input rows
        from ``p0 - pad_top``, columns from ``-pad_left`` (TMA zero-fills what lies outside)."""
        image = m_tile // halo.tiles_h
        p0 = (m_tile - image * halo.tiles_h) * self.tile_h
        origin = ((-halo.pad_left, p0 - halo.pad_top, image), 0)
        box = ((self.tile_w, self.halo_h, 1), self.tile_mnk[2])
        gA_halo = cute.local_tile(cute.domain_offset(origin, mA), box, (0, None))
        return cpasync.tma_partition(
            tma_atom_a,
            0,
            cute.make_layout(1),
            cute.group_modes(sA, 0, 2),
            cute.group_modes(gA_halo, 0, 2),
        )

    @cute.jit
    def request_work(self, work_queue: WorkQueue) -> cutlass.Int32:
        """Dynamic scheduling (load warp): take a ticket from the global counter (lane 0's
        value counts; see ``claim_work``)."""
        ticket = cutlass.Int32(0)
        if cute.arch.lane_idx() == 0:
            ticket = cute.arch.atomic_add(
                work_queue.counters.iterator, cutlass.Int32(1), sem="relaxed", scope="gpu"
            )
        return ticket

    @cute.jit
    def claim_work(self, ticket: cutlass.Int32) -> cutlass.Int32:
        """Dynamic scheduling (load warp): the work item of lane 0's ticket. Every CTA starts
        on the work item of its grid index; the counter hands out the rest."""
        return cute.arch.shuffle_sync(ticket, 0) + cutlass.Int32(cute.arch.grid_dim()[2])

    @cute.jit
    def publish_work(
        self, work_queue: WorkQueue, state: pipeline.PipelineState, work
    ) -> pipeline.PipelineState:
        """Dynamic scheduling (load warp): put ``work`` in queue slot ``state``; returns the
        advanced state."""
        work_queue.pipeline.producer_acquire(state)
        if cute.arch.lane_idx() == 0:
            work_queue.items[state.index] = work
            work_queue.pipeline.producer_commit(state)
        state.advance()
        return state

    def make_queue_consumer_state(self) -> Optional[pipeline.PipelineState]:
        """Where a consumer of the work queue reads next (None: static scheduling)."""
        if self.dynamic_schedule:
            return pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Consumer, WORK_QUEUE_STAGES
            )
        return None

    @cute.jit
    def next_work_item(
        self,
        scheduler: StaticTileScheduler,
        work_queue: Optional[WorkQueue],
        queue_state: Optional[pipeline.PipelineState],
        work: Optional[cutlass.Int32] = None,
    ) -> Tuple[cutlass.Int32, Optional[pipeline.PipelineState]]:
        """Consumer and source-load roles: the work item after ``work`` (the first when
        None), from the work queue with ``dynamic_schedule``, and the advanced queue state."""
        if cutlass.const_expr(self.dynamic_schedule):
            work_queue.pipeline.consumer_wait(queue_state)
            work = work_queue.items[queue_state.index]
            work_queue.pipeline.consumer_release(queue_state)
            queue_state.advance()
        elif cutlass.const_expr(work is None):
            work = scheduler.first_work()
        else:
            work = scheduler.next_work(work)
        return work, queue_state

    @cute.jit
    def retire_from_work_queue(self, work_queue: WorkQueue):
        """Dynamic scheduling (load warp, after its last take): count this CTA out; the last
        CTA out resets both counters to zero for the next launch, since no CTA takes work
        after it has counted itself out."""
        if cute.arch.lane_idx() == 0:
            counters = work_queue.counters.iterator
            done = cute.arch.atomic_add(counters + 1, cutlass.Int32(1), sem="acq_rel", scope="gpu")
            if done == cutlass.Int32(cute.arch.grid_dim()[2]) - 1:
                cute.arch.store(counters, cutlass.Int32(0), sem="relaxed", scope="gpu")
                cute.arch.store(counters + 1, cutlass.Int32(0), sem="relaxed", scope="gpu")

    @cute.jit
    def load_k_tile(
        self,
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

    def epilogue_load_barrier(self) -> pipeline.NamedBarrier:
        """Orders the source loads after the mainloop prologue (load + source-load warps)."""
        return pipeline.NamedBarrier(barrier_id=int(NamedBarrierConv.EpilogueLoad), num_threads=64)

    @cute.jit
    def load_source(
        self,
        source_pipeline: pipeline.PipelineTmaAsync,
        tma_atom_c: cute.CopyAtom,
        gC: cute.Tensor,
        sC: cute.Tensor,
        scheduler: StaticTileScheduler,
        work_queue: Optional[WorkQueue],
    ):
        """Source-load warp: TMA-loads the residual C subtile by subtile, in epilogue order."""
        self.epilogue_load_barrier().arrive_and_wait()
        producer_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Producer, self.source_stages
        )
        queue_state = self.make_queue_consumer_state()
        end_work = scheduler.end_work()
        work, queue_state = self.next_work_item(scheduler, work_queue, queue_state)
        while work < end_work:
            k_first, _ = scheduler.k_tile_range(work)
            if k_first == 0:  # a stream-K partial has no epilogue, so no C
                m_tile, n_tile = scheduler.tile_coord(work)
                gC_tile = cute.zipped_divide(gC[(None, None, m_tile, n_tile)], self.epi_tiler)
                bGS_sC, bGS_gC = cpasync.tma_partition(
                    tma_atom_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), gC_tile
                )
                epi_tile_layout = self.epi_tile_layout(gC_tile)
                if cutlass.const_expr(self.source_stages < cute.size(epi_tile_layout)):
                    # The ring holds part of a tile of C: bring all of it into L2 now, so that
                    # the loads issued as the epilogue frees buffers hit L2 rather than DRAM.
                    with cute.arch.elect_one():
                        cute.prefetch(tma_atom_c, bGS_gC)
                for epi_idx in cutlass.range_constexpr(cute.size(epi_tile_layout)):
                    source_pipeline.producer_acquire(producer_state)
                    cute.copy(
                        tma_atom_c,
                        bGS_gC[(None, epi_tile_layout.get_hier_coord(epi_idx))],
                        bGS_sC[(None, producer_state.index)],
                        tma_bar_ptr=source_pipeline.producer_get_barrier(producer_state),
                    )
                    source_pipeline.producer_commit(producer_state)
                    producer_state.advance()
            work, queue_state = self.next_work_item(scheduler, work_queue, queue_state, work)
        source_pipeline.producer_tail(producer_state)

    @staticmethod
    def epi_tile_layout(g_tile_divided: cute.Tensor) -> cute.Layout:
        """Order of the epilogue subtiles of one output tile, as (M, N) coordinates: N fastest
        (a halo tile's M subtile mode is (1, 1, 1): its coordinate 0 indexes it whole)."""
        shape = (cute.size(g_tile_divided.shape[1][0]), g_tile_divided.shape[1][1])
        return cute.make_layout(shape, stride=(shape[1], 1))

    @cute.jit
    def mma_and_epilogue(
        self,
        ab_pipeline: pipeline.PipelineTmaAsync,
        halo_pipeline: Optional[pipeline.PipelineTmaAsync],
        halo: Optional[HaloGeometry],
        a_tap_layout: cute.ComposedLayout,
        k_shape: Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32],
        source_pipeline: Optional[pipeline.PipelineTmaAsync],
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
        m_partials: Optional[cute.Tensor],
        m_flags: Optional[cute.Tensor],
        work_queue: Optional[WorkQueue],
        turns: Optional[PingPongTurns],
    ):
        """Consumer warpgroups: WGMMA over the ring, then the epilogue of each output tile
        (ping-pong: of every other tile, each warpgroup in its turn)."""
        tidx, _, _ = cute.arch.thread_idx()
        consumer_tidx = tidx - self.num_threads_per_warpgroup
        warpgroup_idx = cute.arch.make_warp_uniform(consumer_tidx // self.num_threads_per_warpgroup)
        # This thread's index among the threads of its tiles: cooperative, the tile's rows are
        # split between the warpgroups; ping-pong, a warpgroup is the whole tiled MMA.
        tile_tidx = consumer_tidx
        mma_slice = warpgroup_idx * self.num_threads_per_warpgroup
        if cutlass.const_expr(self.pingpong):
            tile_tidx = consumer_tidx - mma_slice
            mma_slice = 0
        thr_mma = tiled_mma.get_slice(mma_slice)
        tCrA = None  # with halo tiles, A fragments are made per tap (mainloop_over_halos)
        if cutlass.const_expr(not self.tile_w):
            tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc_shape = thr_mma.partition_shape_C(cute.select(self.tile_mnk, mode=[0, 1]))
        accumulators = cute.make_rmem_tensor(acc_shape, self.acc_dtype)
        epilogue = self.make_epilogue_context(
            tiled_mma, tile_tidx, warpgroup_idx, sD, sC, accumulators, tma_atom_d,
            source_pipeline, m_bias, m_scale,
        )  # fmt: skip
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)

        read_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, self.ab_stages
        )
        release_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, self.ab_stages
        )
        source_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, max(self.source_stages, 1)
        )
        halo_state = pipeline.make_pipeline_state(
            pipeline.PipelineUserType.Consumer, max(self.halo_stages, 1)
        )
        num_epi_tiles_done = cutlass.Int32(0)
        # Stream-K: what this thread needs to write or add a partial tile.
        fixup = SimpleNamespace(
            acc=self.accumulators_by_vector(accumulators),
            partials=m_partials,
            flags=m_flags,
            tidx=consumer_tidx,
            barrier=epilogue.out.barrier,
        )
        queue_state = self.make_queue_consumer_state()
        end_work = scheduler.end_work()
        work, queue_state = self.next_work_item(scheduler, work_queue, queue_state)
        mainloop_turn, epilogue_turn = None, None
        if cutlass.const_expr(self.pingpong):
            # Consumer 0 has the first turn (its phase 1 passes a fresh barrier).
            mainloop_turn = pipeline.PipelineState(
                1, cutlass.Int32(0), cutlass.Int32(0), cutlass.Int32(warpgroup_idx == 0)
            )
            epilogue_turn = mainloop_turn.clone()
            # Consumer 1 takes the second tile, and each takes every other one after that.
            if warpgroup_idx == 1:
                work, read_state, release_state, source_state, halo_state = self.skip_tile(
                    scheduler, work, read_state, release_state, source_state, halo_state,
                    k_tile_cnt, k_shape[0],
                )  # fmt: skip
        while work < end_work:
            k_first, k_end = scheduler.k_tile_range(work)
            if cutlass.const_expr(self.pingpong):
                turns.mainloop.wait(mainloop_turn)
            if cutlass.const_expr(self.tile_w):
                read_state, release_state, halo_state = self.mainloop_over_halos(
                    ab_pipeline, halo_pipeline, tiled_mma, thr_mma, accumulators, sA,
                    a_tap_layout, tCrB, read_state, release_state, halo_state, halo, k_shape,
                )  # fmt: skip
            else:
                read_state, release_state = self.mainloop(
                    ab_pipeline, tiled_mma, accumulators, tCrA, tCrB,
                    read_state, release_state, k_end - k_first,
                )  # fmt: skip
            if cutlass.const_expr(self.pingpong):
                mainloop_turn = turns.mainloop.arrive(mainloop_turn)
            if cutlass.const_expr(self.stream_k):
                if k_first > 0:
                    self.store_partial(fixup, scheduler, work)
                elif k_end < k_tile_cnt:
                    self.add_partials(fixup, scheduler, work)
            if k_first == 0:
                if cutlass.const_expr(self.pingpong and self.epilogue.has_residual):
                    turns.epilogue.wait(epilogue_turn)
                source_state, num_epi_tiles_done = self.epilogue_tile(
                    epilogue, work, scheduler, source_state, num_epi_tiles_done, gD, alpha,
                    beta, warp_idx,
                )  # fmt: skip
                if cutlass.const_expr(self.pingpong and self.epilogue.has_residual):
                    epilogue_turn = turns.epilogue.arrive(epilogue_turn)
            work, queue_state = self.next_work_item(scheduler, work_queue, queue_state, work)
            if cutlass.const_expr(self.pingpong):
                work, read_state, release_state, source_state, halo_state = self.skip_tile(
                    scheduler, work, read_state, release_state, source_state, halo_state,
                    k_tile_cnt, k_shape[0],
                )  # fmt: skip
        epilogue.out.store_pipeline.producer_tail()

    @cute.jit
    def skip_tile(
        self,
        scheduler: StaticTileScheduler,
        work: cutlass.Int32,
        read_state: pipeline.PipelineState,
        release_state: pipeline.PipelineState,
        source_state: pipeline.PipelineState,
        halo_state: pipeline.PipelineState,
        k_tile_cnt: cutlass.Int32,
        c_blocks: cutlass.Int32,
    ):
        """Ping-pong: pass over the other consumer's tile ``work``: the work item after it,
        and the ring positions of its k-tiles, of its C subtiles and of its halos (one per
        c-block; the rings carry every tile of the CTA in order)."""
        read_state.advance(k_tile_cnt)
        release_state.advance(k_tile_cnt)
        if cutlass.const_expr(self.epilogue.has_residual):
            source_state.advance(self.tile_mnk[1] // self.epi_tile[1])
        if cutlass.const_expr(self.tile_w):
            halo_state.advance(c_blocks)
        return scheduler.next_work(work), read_state, release_state, source_state, halo_state

    def partial_slot(self, cluster: cutlass.Int32):
        """Stream-K: the workspace slot of this CTA's partial when ``cluster`` computes it."""
        return cluster * self.cluster_size + cute.arch.block_idx_in_cluster()

    def tile_flag(self, flags: cute.Tensor, scheduler: StaticTileScheduler, work):
        """Stream-K: the counter of partials written for this CTA's tile of ``work``."""
        index = scheduler.tile_index(work) * self.cluster_size + cute.arch.block_idx_in_cluster()
        return flags.iterator + index

    @staticmethod
    def accumulators_by_vector(accumulators: cute.Tensor) -> cute.Tensor:
        """The accumulator registers as ``(4, n/4)``: the order a thread's partial is written
        and read in (any fixed order will do; 4 makes 16-byte accesses)."""
        return cute.make_tensor(
            accumulators.iterator, cute.make_layout((4, cute.size(accumulators) // 4))
        )

    @cute.jit
    def store_partial(self, fixup: SimpleNamespace, scheduler: StaticTileScheduler, work):
        """Stream-K: write this CTA's partial accumulators to its workspace slot, then count
        them in the tile's flag (all consumer threads' stores before the release)."""
        slot = self.partial_slot(cutlass.Int32(cute.arch.block_idx()[2]))
        cute.autovec_copy(fixup.acc, fixup.partials[(None, None, fixup.tidx, slot)])
        fixup.barrier.arrive_and_wait()
        if fixup.tidx == 0:
            cute.arch.fence_acq_rel_gpu()
            cute.arch.red(
                self.tile_flag(fixup.flags, scheduler, work), cutlass.Int32(1),
                op="add", dtype="s32", sem="relaxed", scope="gpu",
            )  # fmt: skip

    @cute.jit
    def add_partials(self, fixup: SimpleNamespace, scheduler: StaticTileScheduler, work):
        """Stream-K owner of a tile: wait for the partials of the clusters after this one
        that share the tile, add them in cluster order (a fixed order: the result does not
        depend on timing), and reset the flag for the next launch."""
        first = cutlass.Int32(cute.arch.block_idx()[2]) + 1
        tile_end = (scheduler.tile_index(work) + 1) * scheduler.k_tiles
        last = scheduler.range_owner(tile_end - 1)
        flag = self.tile_flag(fixup.flags, scheduler, work)
        if fixup.tidx == 0:
            written = cute.arch.load(flag, cutlass.Int32, sem="acquire", scope="gpu")
            while written != last - first + 1:
                written = cute.arch.load(flag, cutlass.Int32, sem="acquire", scope="gpu")
            cute.arch.store(flag, cutlass.Int32(0), sem="relaxed", scope="gpu")
        fixup.barrier.arrive_and_wait()
        acc = fixup.acc
        partial = cute.make_rmem_tensor((4,), self.acc_dtype)
        for cluster in range(first, last + 1):
            thr_partial = fixup.partials[(None, None, fixup.tidx, self.partial_slot(cluster))]
            for i in cutlass.range_constexpr(cute.size(acc, mode=[1])):
                cute.autovec_copy(thr_partial[(None, i)], partial)
                for v in cutlass.range_constexpr(4):
                    acc[v, i] = acc[v, i] + partial[v]

    @cute.jit
    def mainloop(
        self,
        ab_pipeline: pipeline.PipelineTmaAsync,
        tiled_mma: cute.TiledMma,
        accumulators: cute.Tensor,
        tCrA: cute.Tensor,
        tCrB: cute.Tensor,
        read_state: pipeline.PipelineState,
        release_state: pipeline.PipelineState,
        k_tile_cnt: cutlass.Int32,
    ) -> Tuple[pipeline.PipelineState, pipeline.PipelineState]:
        """One tile's WGMMAs over the ring: one k-tile batch in flight, each ring stage
        released once the batch that read it is done. Returns the advanced states."""
        accumulators.fill(0.0)
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
        warpgroup.wait_group(0)
        ab_pipeline.consumer_release(release_state)
        release_state.advance()
        return read_state, release_state

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
        read_state: pipeline.PipelineState,
        release_state: pipeline.PipelineState,
        halo_state: pipeline.PipelineState,
        halo: HaloGeometry,
        k_shape: Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32],
    ) -> Tuple[pipeline.PipelineState, pipeline.PipelineState, pipeline.PipelineState]:
        """One tile's WGMMAs with halo tiles: per c-block, one halo from the halo ring and
        a filter tile per tap from the ring; tap (r, s) reads the halo from row
        ``r * dil_h * tile_w + s * dil_w`` on. One k-tile batch in flight, as in ``mainloop``;
        a halo is released once the last batch that read it is done."""
        c_blocks, taps_s, taps_r = k_shape
        tap_layout = a_tap_layout.outer
        accumulators.fill(0.0)
        warpgroup.fence()
        for _ in range(c_blocks):
            halo_pipeline.consumer_wait(halo_state)
            halo_rows = sA[(None, None, halo_state.index)].iterator
            batches = cutlass.Int32(0)
            for r in range(taps_r):
                for s in range(taps_s):
                    shift = r * halo.dil_h * self.tile_w + s * halo.dil_w
                    sA_tap = cute.make_tensor(halo_rows + shift * self.tile_mnk[2], tap_layout)
                    tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA_tap))
                    ab_pipeline.consumer_wait(read_state)
                    self.mma_k_tile(tiled_mma, accumulators, tCrA, tCrB, read_state.index, 0)
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
        return read_state, release_state, halo_state

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
    ) -> "Sm90Epilogue":
        """This thread's epilogue partitions: accumulator registers -> SMEM staging buffer
        (stmatrix) -> TMA store, and its view of the C buffers, bias and scale."""
        copy_atom_r2s = sm90_utils.get_smem_store_op(
            LayoutEnum.ROW_MAJOR, self.out_dtype, self.acc_dtype
        )
        copy_atom_d = cute.make_copy_atom(
            cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.out_dtype
        )
        tiled_copy_r2s = cute.make_tiled_copy_S(
            copy_atom_r2s, cute.make_tiled_copy_C_atom(copy_atom_d, tiled_mma)
        )
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
        out = OutputSubtiles(
            regs=regs_out,
            regs_copy=regs_out,
            tiled_copy=tiled_copy_r2s,
            smem=thr_copy_r2s.partition_D(sD),  # (R2S, R2S_M, R2S_N, PIPE_D)
            tma_atom=tma_atom_d,
            smem_tma=None,  # per tile, with its global side (epilogue_tile)
            barrier=pipeline.NamedBarrier(barrier_id=barrier_id, num_threads=self.tile_threads),
            store_pipeline=pipeline.PipelineTmaStore.create(
                num_stages=self.epi_stages,
                producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.tile_threads),
            ),
            store_warp=store_warp,
        )
        source = None
        if self.epilogue.has_residual:
            regs_c = cute.make_rmem_tensor(rD_shape, self.out_dtype)
            # This thread's values in C's buffers: the r2s partition, in tRS_rD's order.
            source = SourceSubtiles(
                source_pipeline, None, thr_copy_r2s.partition_S(sC), regs_c, regs_c
            )
        vectors = ChannelVectors(
            m_bias,
            m_scale,
            # The (m, n) position inside a subtile of each of this thread's values: what bias
            # and scale are indexed by. The source side of the r2s copy is the register
            # fragment, so partition_S of a subtile-shaped tensor lines up with tRS_rD.
            thr_copy_r2s.partition_S(cute.make_identity_tensor(self.epi_tile)),
            cute.make_rmem_tensor(rD_shape, self.acc_dtype),
            cute.make_rmem_tensor(rD_shape, self.acc_dtype),
        )
        return Sm90Epilogue(
            out=out,
            source=source,
            vectors=vectors,
            tRS_rAcc=self.accumulators_by_subtile(tiled_copy_r2s.retile(accumulators), rD_shape),
            tRS_rD=cute.make_rmem_tensor(rD_shape, self.acc_dtype),
            sD=sD,
            first_buffer=first_buffer,
        )

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
        source_state: pipeline.PipelineState,
        num_epi_tiles_done: cutlass.Int32,
        gD: cute.Tensor,
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
        warp_idx: cutlass.Int32,
    ) -> Tuple[pipeline.PipelineState, cutlass.Int32]:
        """The epilogue of one output tile: subtiles of ``epi_tile`` through SMEM, stored by
        TMA (``store_subtile``), the accumulator read from registers. Returns the advanced
        source state and count of subtiles done."""
        tile_n = self.tile_mnk[1]
        m_tile, n_tile = scheduler.tile_coord(work)
        tRS_rAcc = parts.tRS_rAcc
        tRS_rD = parts.tRS_rD
        size_tRS_rD = cute.size(tRS_rD)
        gD_tile = cute.zipped_divide(gD[(None, None, m_tile, n_tile)], self.epi_tiler)
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
        for epi_idx in cutlass.range_constexpr(num_epi_tiles):
            for v in cutlass.range_constexpr(size_tRS_rD):
                tRS_rD[v] = tRS_rAcc[epi_idx * size_tRS_rD + v]
            subtile_m, subtile_n = epi_tile_layout.get_hier_coord(epi_idx)
            epi_buffer = (num_epi_tiles_done + epi_idx) % self.epi_stages
            if cutlass.const_expr(self.pingpong):
                epi_buffer = epi_buffer + parts.first_buffer
            store_subtile(
                self.epilogue, tRS_rD.load(), alpha, beta, parts.vectors,
                n_tile * tile_n + subtile_n * self.epi_tile[1], parts.source, source_state,
                out, epi_buffer, bSG_gD[(None, (subtile_m, subtile_n))], warp_idx,
            )  # fmt: skip
            if cutlass.const_expr(self.epilogue.has_residual):
                source_state.advance()
        return source_state, num_epi_tiles_done + num_epi_tiles

    @cute.jit
    def mma_k_tile(
        self,
        tiled_mma: cute.TiledMma,
        accumulators: cute.Tensor,
        tCrA: cute.Tensor,
        tCrB: cute.Tensor,
        stage: cutlass.Int32,
        a_stage: Optional[cutlass.Int32] = None,
    ):
        """Issue the WGMMAs of one k-tile (from ring stage ``stage``; A from ``a_stage`` when
        given: a halo tap's one-stage view) as one commit group."""
        a_stage = stage if cutlass.const_expr(a_stage is None) else a_stage
        for k_block in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            a_kb, b_kb = (None, None, k_block, a_stage), (None, None, k_block, stage)
            cute.gemm(tiled_mma, accumulators, tCrA[a_kb], tCrB[b_kb], accumulators)
        warpgroup.commit_group()
