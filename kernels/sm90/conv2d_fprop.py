"""Conv2D forward propagation on Hopper (SM90): a persistent, warp-specialized implicit GEMM.

GEMM view (see ``kernels/common/im2col.py``): M = N*P*Q output pixels, N = K output channels,
K = (C, S, R) walked c-block fastest. The activation tile is loaded by TMA in im2col mode, the
filter tile by tiled TMA; padding, halos and M/K tails are zero-filled by the TMA unit, so the
mainloop has no predication. The output is written through SMEM by TMA stores, which clip the
M and K tails, or, where its rows are not whole 16-byte units
(``EpilogueSpec.store_by_threads``), by the consumer threads under bounds predicates, which
then read the residual C themselves too. The epilogue (``kernels/common/epilogue.py``) is fused:
``D = epilogue_fn(act(alpha * acc * scale + bias)) + beta * C``, its terms chosen at compile time.

The warp roles and pipelines are tabled in ``Conv2dFpropSm90``'s docstring. The kernel class
sets up and dispatches to one method per role; each feature's methods live in their own
module, mixed into the class: ``mainloop`` (im2col and halo operands, WGMMA mainloops),
``epilogue``, ``stream_k``, ``work_queue``, ``pingpong``; ``smem`` holds the shared-storage
struct, ``pipeline_checks`` the role table and arrive counts, ``config`` the SMEM plan.

Persistence: a static tile scheduler (``kernels/common/tile_scheduler.py``); every role walks
the same sequence of work items through ``Sm90WorkItems`` (the ``WorkItems`` interface the
SM100 roles walk the CLC responses with): whole output tiles, or with ``stream_k`` segments
of the k-tiles of a tile. Clusters of (cluster_m, cluster_n) CTAs multicast the activation tile along
N and the filter tile along M. With ``dynamic_schedule`` (single-CTA clusters) a CTA's first
tile is its grid index and the load warp takes the next ones from a global counter, one tile
ahead, handing each to the consumers and the source-load warp through the work queue
(PipelineAsync, ``WORK_QUEUE_STAGES`` SMEM slots; a value past the last tile ends the roles).

With ``programmatic_launch`` the kernel is launched with programmatic dependent launch
(``kernels/common/dependent_launch.py``): its setup overlaps the previous kernel's tail, and
every thread waits for that kernel before the roles start, except the load warp, which waits
in its first tile, after the tile's coordinates and before its first load
(``load_warp_waits_late``).
"""

import functools
from typing import Callable, NamedTuple, Optional, Tuple

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
from ..common.dependent_launch import wait_before_first_load, wait_for_previous_grid
from ..common.entry import FP8_TYPES, ConvKernelEntry, ConvLaunchParams, MainloopOperands
from ..common.epilogue import (
    EpilogueOperands,
    make_epilogue_operands,
    quantization_scalars,
)
from ..common.epilogue_store import publish_amax
from ..common.im2col import (
    ChannelBlocks,
    ConvGeometry,
    PixelDivisors,
    output_gemm_view,
    output_tile_view,
)
from ..common.pipelines import make_checked_pipeline
from ..common.tile_scheduler import GroupedRaster, StaticTileScheduler, plain_extent
from .config import HALO_SLACK_ROWS, WORK_COUNTERS, WORK_QUEUE_STAGES, Conv2dConfig
from .epilogue import EpilogueArgs, Sm90EpilogueMixin
from .gather import OperandGather
from .mainloop import (
    ConsumerStates,
    HaloGeometry,
    HaloLoader,
    Im2colLoader,
    MainloopMixin,
    ProducerStates,
)
from .pingpong import PingPongMixin, PingPongTurns
from .pipeline_checks import Sm90Roles, sm90_barrier_specs
from .smem import Sm90Smem, sm90_smem_struct
from .stream_k import StreamKFixup, StreamKFixupMixin, StreamKWorkspace
from .work_queue import Sm90WorkItems, WorkQueue, WorkQueueMixin

_REGISTER_FILE = 65536  # 32-bit registers of an SM, shared by the CTA's warpgroups
# Registers per producer thread after ``setmaxnreg``: the load warps need few; the gather
# warps' loads and index math spilled to local memory below ~104 (1.3 KB of stack at 40).
_PRODUCER_REGISTERS = 40
_GATHER_PRODUCER_REGISTERS = 104
_MAX_CONSUMER_REGISTERS = 232


class Sm90Pipelines(NamedTuple):
    """The kernel's pipelines (None where the config has no use for one)."""

    # A/B ring: load warp -> consumers (a PipelineAsync filled by the gather warps with
    # ``gather``)
    ab: pipeline.PipelineAsync
    halo: Optional[pipeline.PipelineTmaAsync]  # halos: load warp -> consumers
    source: Optional[pipeline.PipelineTmaAsync]  # residual C: source-load warp -> consumers
    work_queue: Optional[WorkQueue]  # dynamic scheduling: load warp -> all roles
    turns: Optional[PingPongTurns]  # ping-pong: consumer -> consumer


class Sm90SmemTiles(NamedTuple):
    """The CTA's staged SMEM operands."""

    sA: cute.Tensor  # the A ring (im2col tiles) or the halo ring
    sB: cute.Tensor  # the filter ring
    sD: cute.Tensor  # the epilogue's staging buffers
    sC: Optional[cute.Tensor]  # residual: the source ring


class ConsumerMainloop(NamedTuple):
    """What the consumers' WGMMAs need besides the rings."""

    tiled_mma: cute.TiledMma
    k_shape: Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32]  # (c-blocks, S, R)
    k_tile_cnt: cutlass.Int32  # k-tiles of a whole output tile
    halo: Optional[HaloGeometry]  # halo tiles: where each tap's rows start
    a_tap_layout: cute.ComposedLayout  # halo tiles: one tap's A view into a halo
    channels: ChannelBlocks  # the MMA k-blocks of each c-block that hold channels


class Conv2dFpropSm90(
    MainloopMixin,
    Sm90EpilogueMixin,
    StreamKFixupMixin,
    WorkQueueMixin,
    PingPongMixin,
    ConvKernelEntry,
):
    """One compiled configuration of the SM90 conv fprop kernel.

    Warp roles (``Sm90Roles``; 384 threads, 256 with 64-row tiles, 512 with 192-row ones):

      warpgroup 0 (producer, ``setmaxnreg`` down to 40; 104 with ``gather``)
        warp 0      ``load``: im2col TMA of the activation + tiled TMA of the filter into the
                    ring (halo tiles: a halo per c-block + the filter per tap); with the work
                    queue it also takes the work items and hands them out
        warp 1      ``load_source`` (residual kernels): TMA of the residual C, subtile by
                    subtile, into the source ring ahead of the epilogue (with four gather
                    warps, between its gathers: ``load_tile_source``)
        warps 2-3   ``gather_operands`` (``gather``): the im2col A and the filter tiles by
                    plain loads and SMEM stores into the ring, in place of warp 0's TMA
                    (warps 0-3 where the tiles are large enough and the loads vectors,
                    ``gather_warps_for``); idle otherwise
      warpgroups 1-2 (consumers, ``setmaxnreg`` up to 232), 1 with 64-row tiles, or 1-3 with
                    192-row tiles (152)
                    ``mma_and_epilogue``: the tile's bias/scale loaded into registers
                    (``preload_channel_vectors``; wide tiles: prefetched into L2,
                    ``prefetch_channel_vectors``), WGMMA on a tile_m x tile_n register
                    accumulator (64 or 128 rows per warpgroup), then ``epilogue_tile``: registers ->
                    ``store_subtile`` (fp32 math, + beta * C from SMEM, stmatrix, TMA store
                    by warp 4), or ``store_subtile_by_threads`` (C read and D written by
                    each thread, predicated; no source-load warp, C ring or staging).
                    Ping-pong: each warpgroup takes every other tile with its own 128 x
                    tile_n accumulator and epilogue (store warp 4 or 8).

    Pipelines and barriers, arrive counts per phase (``pipeline_checks.sm90_barrier_specs``
    derives them from the roles; ``_make_pipelines`` builds the pipelines from them and checks
    the DSL objects against them at trace time). "tile warps": the consumer warps that own a
    tile (8; 4 with 64-row tiles, 12 with 192-row ones; ping-pong: 4); "mcast": the CTAs whose TMA writes one
    stage (cluster_m + cluster_n - 1):

      ab      PipelineTmaAsync, ``ab_stages``: load -> consumers.
              full: 1 (expect_tx = A + B bytes per CTA; B alone with halo tiles);
              empty: tile warps x mcast (lane 0 of each warp, to every writing CTA).
              With ``gather``: PipelineAsync, gather warps -> consumers; full: every
              gather thread (64 or 128), after a proxy fence, or with 8-byte vectors once
              its cp.async copies land (the consumers fence after the wait); empty: every
              thread of the tile's consumers.
      halo    PipelineTmaAsync, ``halo_stages`` (halo tiles): load -> consumers.
              full: 1 (expect_tx = one halo); empty: tile warps.
      source  PipelineTmaAsync, ``source_stages`` (residual): source load -> consumers.
              full: 1 (expect_tx = one C subtile); empty: tile warps. Deep enough for a
              whole tile of C where SMEM allows, so the next tile's C loads during its
              mainloop.
      work    PipelineAsync, ``WORK_QUEUE_STAGES`` (dynamic scheduling): load -> all roles.
              full: 1 (lane 0 of the load warp); empty: every consumer thread (+ the 32 of
              the source-load warp).
      turns   PipelineOrder (ping-pong): consumer -> consumer; a consumer waits for its turn
              before its mainloop (and, with a residual, its epilogue) and hands it over
              after, so that mbarrier phases only ever tell apart laps within one lap.
      store   PipelineTmaStore: bulk-group accounting of the epilogue's TMA stores.
      named   Epilogue: the tile's consumer threads around each subtile (ping-pong: each
              warpgroup's own, ``Epilogue`` / ``EpilogueConsumer1``); EpilogueLoad (64:
              load, or with ``gather`` the first gather warp, + source-load warps): C loads
              start once the first tile's A/B loads are issued (gathered: before them).

    :param act_dtype, filter_dtype: input types: BFloat16 or Float16 (equal), or each
        Float8E4M3FN or Float8E5M2 (see ``ConvKernelEntry``).
    :param out_dtype: BFloat16, Float16, Float32 or Float8E4M3FN (saturating).
    :param config: tile, cluster, ring depth, rasterization and schedule options (stream-K,
        dynamic scheduling, halo tiles, ping-pong); see ``Conv2dConfig``.
    :param epilogue: the fused epilogue terms, see ``EpilogueSpec``.
    """

    config_class = Conv2dConfig
    num_threads_per_warpgroup = 128

    def _configure(self) -> None:
        config, act_dtype, out_dtype = self.config, self.act_dtype, self.out_dtype
        self.plan = config.plan(act_dtype, out_dtype, self.epilogue.loads_source_by_tma)
        self.tile_mnk = config.tile_shape_mnk
        self.cluster_mn = config.cluster_shape_mn
        self.swizzle = config.swizzle
        self.raster_along_m = config.raster_along_m
        self.stream_k = config.stream_k
        self.dynamic_schedule = config.dynamic_schedule
        self.pingpong = config.pingpong
        self.programmatic_launch = config.programmatic_launch
        # PDL: the load warp waits for the previous grid right before its first TMA load
        # (``OperandLoader.load_tile``), so that its first tile's raster and im2col arithmetic
        # runs under the previous kernel's tail instead of after it; the gather warps
        # likewise before their first gathered loads (``OperandGather.gather_tile``). Not with
        # the work queue, whose global counters the load warp touches before its first tile,
        # nor with 16-bit gathers: ptxas then serializes two of a k-tile's loads behind
        # others (tests/test_gather.py, 128x64x16 tiles).
        self.load_warp_waits_late = (
            config.programmatic_launch and not config.gather and not config.dynamic_schedule
        )
        self.gather_warps_wait_late = (
            config.programmatic_launch and config.gather and config.gather_vector > 1
        )
        self.tile_w = config.tile_w
        self.halo_h = config.halo_h
        self.halo_pitch = config.halo_pitch
        tile_m = config.tile_m
        self.tile_h = tile_m // config.tile_w if config.tile_w else 0
        self.halo_stages = config.halo_stages
        self.gather = config.gather
        self.groups = config.groups
        self.gather_vector = config.gather_vector
        self.pack_taps = config.pack_taps
        self.producer_registers = (
            _GATHER_PRODUCER_REGISTERS if config.gather else _PRODUCER_REGISTERS
        )

        # Warp roles and the arrive counts of every barrier, derived from them.
        self.roles = Sm90Roles.of(config, self.epilogue.loads_source_by_tma)
        self.barrier_specs = sm90_barrier_specs(config, self.epilogue.loads_source_by_tma)
        self.num_consumer_warpgroups = config.num_consumer_warpgroups
        self.num_consumer_threads = self.roles.consumer_threads
        self.threads_per_cta = self.roles.threads_per_cta
        self.consumer_registers = self._consumer_register_budget()
        # The consumer threads that compute and store one output tile, and how many epilogues
        # run at once, each with its own staging buffers, barrier and store warp.
        self.tile_threads = self.roles.tile_threads
        self.num_epilogues = config.num_epilogues
        self.load_warp_id = self.roles.load
        self.source_load_warp_id = self.roles.source_load
        self.first_gather_warp_id = self.roles.first_gather_warp
        self.gather_threads = self.roles.gather_threads
        self.epi_store_warp_id = self.roles.first_consumer_warp  # first of the first consumer
        self.cluster_size = config.cluster_m * config.cluster_n
        self.num_mcast_a = config.cluster_n  # the activation tile is shared along cluster N
        self.num_mcast_b = config.cluster_m  # the filter tile is shared along cluster M

        self.epi_stages = self.plan.epi_stages
        self.source_stages = self.plan.source_stages
        self.ab_stages = self.plan.ab_stages
        epi_n = self.plan.epi_n
        self.epi_tile = (tile_m, epi_n)
        # A tile's output channels: tile_n of K, or of a grouped conv's (k in the group,
        # group) (filter_gemm_view): the tile and its subtiles stay in one group.
        self.n_tiler = config.tile_n if self.groups == 1 else (config.tile_n, 1)
        # How the output and C tiles are divided into subtiles: halo tiles are
        # (tile_w, tile_h, 1) boxes of the (Q, P, N) output pixels; a grouped conv's
        # subtiles are (epi_n, 1) of its (k in the group, group) channels.
        if config.tile_w:
            self.epi_tiler = ((config.tile_w, self.tile_h, 1), epi_n)
        elif self.groups > 1:
            self.epi_tiler = (tile_m, (epi_n, 1))
        else:
            self.epi_tiler = self.epi_tile

    def _output_view(self) -> Callable:
        """How the epilogue views the output (and C): halo tiles' ``((q, p, n), k)``, else
        the ``(N*P*Q, K)`` GEMM view, a grouped conv's K as (k in the group, group)."""
        if self.tile_w:
            return output_tile_view
        if self.groups > 1:
            return functools.partial(output_gemm_view, groups=self.groups)
        return output_gemm_view

    def _consumer_register_budget(self) -> int:
        """Registers per consumer thread after ``setmaxnreg``: what the register file
        (64K) leaves beside the producer warpgroup's, in steps of 8, at most 232 (two
        consumer warpgroups: 232, three: 152; with ``gather``: 200, 136)."""
        free = _REGISTER_FILE - self.num_threads_per_warpgroup * self.producer_registers
        return min(free // self.num_consumer_threads // 8 * 8, _MAX_CONSUMER_REGISTERS)

    def _halo_rows(self) -> int:
        """SMEM rows of one halo stage."""
        return self.halo_h * self.halo_pitch

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
        self.a_tap_layout = self._tap_layout()
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
        # The output and C buffers' swizzle as static (bits, base, shift), on byte addresses as
        # their pointers apply it: the epilogue views them as value pairs (value_pairs).
        swizzle = self.epi_smem_layout_staged.inner
        self.epi_swizzle = (swizzle.num_bits, swizzle.num_base, swizzle.num_shift)
        assert self.source_smem_layout_staged.inner == swizzle
        self.cta_layout_mnk = cute.make_layout((*self.cluster_mn, 1))
        self.shared_storage = sm90_smem_struct(
            act_dtype=self.act_dtype,
            filter_dtype=self.filter_dtype,
            out_dtype=self.out_dtype,
            # Halo tiles: slack rows after the last halo, read by tap shifts past column Q.
            act_elems=cute.cosize(self.a_smem_layout_staged)
            + (HALO_SLACK_ROWS * tile_k if self.tile_w else 0),
            filter_elems=cute.cosize(self.b_smem_layout_staged),
            out_elems=cute.cosize(self.epi_smem_layout_staged),
            source_elems=cute.cosize(self.source_smem_layout_staged),
            ab_stages=self.ab_stages,
            queue_stages=WORK_QUEUE_STAGES if self.dynamic_schedule else 1,
            halo_stages=self.halo_stages,
            source_stages=self.source_stages,
            # Ping-pong: the mainloop and the epilogue turns of the two consumers.
            turn_barriers=4 if self.pingpong else 1,
        )

    def _tap_layout(self) -> cute.ComposedLayout:
        """One filter tap's A view into a halo, from its first row: tile_m contiguous rows,
        or with a pitched halo, tile_h runs of tile_w rows ``halo_pitch`` rows apart (each
        run whole 64-row WGMMA atoms, whose 8-row core matrices stay evenly strided)."""
        tile = sm90_utils.make_smem_layout_a(LayoutEnum.ROW_MAJOR, self.tile_mnk, self.act_dtype, 1)
        if cutlass.const_expr(self.halo_pitch == self.tile_w or self.tile_h == 1):
            return tile  # contiguous rows (one tile row: the pitch never applies)
        # The tile's layout with its M mode's 64-row atoms (8 core matrices of 8 rows, one
        # tile row each) halo_pitch rows apart; the K mode and the one stage as the tile's.
        row = self.tile_mnk[2]  # elements per 128-byte row
        outer = tile.outer
        rows = cute.make_layout(
            ((8, 8, self.tile_h), outer.shape[1], 1),
            stride=((row, 8 * row, self.halo_pitch * row), outer.stride[1], 0),
        )
        return cute.make_composed_layout(tile.inner, 0, rows)

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

        epi_smem_layout = cute.slice_(self.epi_smem_layout_staged, (None, None, 0))
        ab_operands = MainloopOperands(*self.make_operand_atoms(ptrs.act, ptrs.filter, geom))
        epi_operands = make_epilogue_operands(
            self.epilogue, geom, ptrs, epi_smem_layout,
            cute.slice_(self.source_smem_layout_staged, (None, None, 0)), self.epi_tiler,
            self._output_view(),
            dequantize=self.act_dtype in FP8_TYPES,
            quantize_output=self.out_dtype in FP8_TYPES,
        )  # fmt: skip

        halo = None
        if cutlass.const_expr(self.tile_w):
            # Output tiles of tile_h rows of tile_w columns, tiles_w across an output row (one
            # unless the halo is pitched: whole rows) and tiles_h down an image.
            tiles_w = (geom.q + self.tile_w - 1) // self.tile_w
            tiles_h = (geom.p + self.tile_h - 1) // self.tile_h
            halo = HaloGeometry(
                cute.fast_divmod_create_divisor_v2(tiles_w),
                cute.fast_divmod_create_divisor_v2(tiles_h),
                geom.pad_top, geom.pad_left, geom.dil_h, geom.dil_w,
            )  # fmt: skip
            num_tiles_m = geom.n * tiles_h * tiles_w
        else:
            num_tiles_m = (geom.n * geom.p * geom.q + tile_m - 1) // tile_m
        num_tiles_n = (geom.k + tile_n - 1) // tile_n
        # A grouped conv: n tiles per group, output channels per group, images.
        channel_group = None
        if cutlass.const_expr(self.groups > 1):
            group_out = geom.k // self.groups
            tiles_per_group = (group_out + tile_n - 1) // tile_n
            channel_group = (tiles_per_group, group_out, geom.n)
            num_tiles_n = tiles_per_group * self.groups
        cm, cn = self.cluster_mn
        # The divisors are made here, on the host: the kernel's roles only multiply and shift.
        # Not for the gather warps, whose loads of a group then share registers (ptxas, 104
        # registers a thread) and no longer fly together.
        divisor = cute.fast_divmod_create_divisor_v2
        raster = GroupedRaster(
            (num_tiles_m + cm - 1) // cm, (num_tiles_n + cn - 1) // cn, self.swizzle,
            self.raster_along_m, plain_extent if self.gather else divisor,
        )  # fmt: skip
        num_work = raster.num_tiles()
        pixel_divisors = None
        if cutlass.const_expr(not self.tile_w and not self.gather):
            pixel_divisors = PixelDivisors(divisor(geom.q), divisor(geom.p))
        m_partials, m_flags = None, None
        if cutlass.const_expr(self.stream_k):
            k_tiles = (geom.c + tile_k - 1) // tile_k * geom.s * geom.r
            num_clusters = cutlass.max(cutlass.min(num_work * k_tiles, max_clusters), 1)
            m_partials, m_flags = self.stream_k_workspace(ptrs, max_clusters, num_work)
        else:
            num_clusters = cutlass.max(cutlass.min(num_work, max_clusters), 1)
        if cutlass.const_expr(self.dynamic_schedule):
            m_flags = cute.make_tensor(ptrs.flags, cute.make_layout(WORK_COUNTERS))

        kernel = self.kernel(
            ab_operands, epi_operands, params.alpha, params.beta, self.tiled_mma,
            self.cta_layout_mnk, self.a_smem_layout_staged, self.b_smem_layout_staged,
            self.epi_smem_layout_staged, self.source_smem_layout_staged, raster,
            pixel_divisors, m_partials, m_flags, halo, self.a_tap_layout,
            geom if self.gather else None, channel_group,
        )  # fmt: skip
        kernel.launch(
            grid=(cm, cn, num_clusters),
            block=[self.threads_per_cta, 1, 1],
            cluster=self.config.launch_cluster,
            min_blocks_per_mp=1,
            stream=stream,
            use_pdl=self.programmatic_launch,
        )

    # ------------------------------------------------------------------------------------------
    # Device kernel: shared setup, then one method per role
    # ------------------------------------------------------------------------------------------

    @cute.kernel
    def kernel(
        self,
        ab_operands: MainloopOperands,
        epi_operands: EpilogueOperands,
        alpha: cutlass.Float32,
        beta: cutlass.Float32,
        tiled_mma: cute.TiledMma,
        cta_layout_mnk: cute.Layout,
        a_smem_layout_staged: cute.ComposedLayout,
        b_smem_layout_staged: cute.ComposedLayout,
        epi_smem_layout_staged: cute.ComposedLayout,
        source_smem_layout_staged: cute.ComposedLayout,
        raster: GroupedRaster,
        pixel_divisors: Optional[PixelDivisors],
        m_partials: Optional[cute.Tensor],
        m_flags: Optional[cute.Tensor],
        halo: Optional[HaloGeometry],
        a_tap_layout: cute.ComposedLayout,
        gather_geometry: Optional[ConvGeometry],
        channel_group: Optional[Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32]],
    ):
        tma_atom_a, mA_mk, tma_atom_b, mB_nk = ab_operands
        tma_atom_d, mD_mn, tma_atom_c, mC_mn, m_bias, m_scale = epi_operands[:6]
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == self.load_warp_id:
            for atom in (tma_atom_a, tma_atom_b, tma_atom_d, tma_atom_c):
                if cutlass.const_expr(atom is not None):
                    cpasync.prefetch_descriptor(atom)

        cta_rank_in_cluster = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        cluster_coord_mnk = cta_layout_mnk.get_flat_coord(cta_rank_in_cluster)

        smem = Sm90Smem.allocate(
            self.shared_storage,
            a_smem_layout_staged,
            b_smem_layout_staged,
            epi_smem_layout_staged,
            source_smem_layout_staged,
        )
        pipes = self._make_pipelines(smem, cta_layout_mnk, m_flags, warp_idx)
        pipeline_init_arrive(cluster_shape_mn=self.cluster_mn, is_relaxed=True)
        sA, sB, sD = smem.act_tiles(), smem.filter_tiles(), smem.out_tiles()
        sC = smem.source_tiles() if cutlass.const_expr(self.epilogue.loads_source_by_tma) else None

        gA, gB, gD, gC, cD = self._tile_views(mA_mk, mB_nk, mD_mn, mC_mn)
        d_shape = mD_mn.shape if cutlass.const_expr(self.epilogue.needs_output_coords) else None
        k_tile_cnt = cute.size(gB, mode=[3])
        k_shape = (
            cute.size(gB, mode=[3, 0]),
            cute.size(gB, mode=[3, 1]),
            cute.size(gB, mode=[3, 2]),
        )
        halo_tiles = (halo.tiles_w, halo.tiles_h) if cutlass.const_expr(self.tile_w) else None
        scheduler = StaticTileScheduler(
            raster, k_tile_cnt, self.cluster_mn, self.stream_k, halo_tiles
        )

        pipeline_init_wait(cluster_shape_mn=self.cluster_mn)
        if cutlass.const_expr(self.load_warp_waits_late):
            if warp_idx != self.load_warp_id:
                wait_for_previous_grid()  # the setup above touched SMEM and parameters only
        elif cutlass.const_expr(self.gather_warps_wait_late):
            if warp_idx < self.first_gather_warp_id or warp_idx >= 4:
                wait_for_previous_grid()
        elif cutlass.const_expr(self.programmatic_launch):
            wait_for_previous_grid()

        # ////////////////////////////////////////////////////////////////////////////////////
        #  PRODUCER WARPGROUP
        # ////////////////////////////////////////////////////////////////////////////////////
        if warp_idx < 4:
            cute.arch.setmaxregister_decrease(self.producer_registers)
            if cutlass.const_expr(not self.gather):
                if warp_idx == self.load_warp_id:
                    self.load(
                        pipes, halo, tma_atom_a, tma_atom_b, gA, gB, sA, sB, cta_layout_mnk,
                        cluster_coord_mnk, scheduler, pixel_divisors, channel_group,
                    )  # fmt: skip
            if cutlass.const_expr(
                self.epilogue.loads_source_by_tma and not self.roles.source_loader_gathers
            ):
                if warp_idx == self.source_load_warp_id:
                    self.load_source(pipes.source, tma_atom_c, gC, sC, scheduler, pipes.work_queue)
            if cutlass.const_expr(self.gather):
                if warp_idx >= self.first_gather_warp_id:
                    source = None
                    if cutlass.const_expr(self.roles.source_loader_gathers):
                        source = (pipes.source, tma_atom_c, gC, sC)
                    self.gather_operands(
                        pipes.ab, (gA, mB_nk), (sA, sB), gather_geometry, k_shape, scheduler,
                        source,
                    )  # fmt: skip

        # ////////////////////////////////////////////////////////////////////////////////////
        #  CONSUMER WARPGROUPS: MMA + EPILOGUE
        # ////////////////////////////////////////////////////////////////////////////////////
        if warp_idx >= 4:
            cute.arch.setmaxregister_increase(self.consumer_registers)
            alpha, beta, out_factor = quantization_scalars(alpha, beta, epi_operands)
            self.mma_and_epilogue(
                pipes,
                Sm90SmemTiles(sA, sB, sD, sC),
                ConsumerMainloop(
                    tiled_mma, k_shape, k_tile_cnt, halo, a_tap_layout,
                    ChannelBlocks.of(mB_nk, tiled_mma, k_shape[0], self.tile_mnk[2]),
                ),  # fmt: skip
                EpilogueArgs(
                    tma_atom_d, gD, cD, d_shape, gC, m_bias, m_scale, alpha, beta, out_factor,
                    epi_operands.m_amax, channel_group,
                ),  # fmt: skip
                # With dynamic scheduling m_flags holds the work counters instead.
                StreamKWorkspace(m_partials, m_flags if self.stream_k else None),
                scheduler,
                warp_idx,
            )

    def _tile_views(
        self,
        mA_mk: cute.Tensor,
        mB_nk: cute.Tensor,
        mD_mn: cute.Tensor,
        mC_mn: Optional[cute.Tensor],
    ) -> Tuple[cute.Tensor, cute.Tensor, cute.Tensor, Optional[cute.Tensor], Optional[cute.Tensor]]:
        """The operands divided into CTA tiles: ``(gA, gB, gD, gC, cD)`` (gC None without a
        residual; cD, the output coordinates of gD's elements for the epilogue's bounds
        predicates, None unless it needs them: ``EpilogueSpec.needs_output_coords``)."""
        tile_m, tile_n, tile_k = self.tile_mnk
        # im2col: (tile_m, (tile_k,1,1), m_tiles, (c_blocks, S, R)); halo tiles: the
        # coordinates ((w, h, n), c), boxed per tile by the load warp; gathered operands: the
        # same coordinates, read element by element by the gather warps.
        gA = mA_mk
        if cutlass.const_expr(not (self.tile_w or self.gather)):
            gA = cute.local_tile(mA_mk, (tile_m, (tile_k, 1, 1)), (None, None))
        # (tile_n, (tile_k,1,1), n_tiles, (c_blocks, S, R)); grouped: tile_n and n_tiles
        # are (tile_n, 1) and (tiles per group, groups)
        gB = cute.local_tile(mB_nk, (self.n_tiler, (tile_k, 1, 1)), (None, None))
        # (tile_m, tile_n, m_tiles, n_tiles); tile_m is (tile_w, tile_h, 1) with halo tiles
        tiler_mn = (self.epi_tiler[0], self.n_tiler)
        gD = cute.local_tile(mD_mn, tiler_mn, (None, None))
        gC, cD = None, None
        if cutlass.const_expr(self.epilogue.has_residual):
            gC = cute.local_tile(mC_mn, tiler_mn, (None, None))
        if cutlass.const_expr(self.epilogue.needs_output_coords):
            cD = cute.local_tile(cute.make_identity_tensor(mD_mn.shape), tiler_mn, (None, None))
        return gA, gB, gD, gC, cD

    def _make_pipelines(
        self,
        smem: Sm90Smem,
        cta_layout_mnk: cute.Layout,
        m_flags: Optional[cute.Tensor],
        warp_idx: cutlass.Int32,
    ) -> Sm90Pipelines:
        """Create (and check) every pipeline; barrier init is deferred to one cluster sync.
        The arrive counts come from ``self.barrier_specs`` (the role table)."""
        specs = self.barrier_specs
        a_layout, b_layout, _, source_layout = smem.layouts
        a_bytes = cute.size_in_bytes(self.act_dtype, cute.slice_(a_layout, (None, None, 0)))
        ab_bytes = cute.size_in_bytes(self.filter_dtype, cute.slice_(b_layout, (None, None, 0)))
        if cutlass.const_expr(not self.tile_w):
            ab_bytes += a_bytes  # the ring carries A too, except with halo tiles
        if cutlass.const_expr(self.gather):  # filled by threads: arrivals, no transactions
            ab = make_checked_pipeline(
                pipeline.PipelineAsync, specs, "ab", smem.ab_barriers(), self.ab_stages
            )
        else:
            ab = make_checked_pipeline(
                pipeline.PipelineTmaAsync, specs, "ab", smem.ab_barriers(), self.ab_stages,
                tx_count=ab_bytes, cta_layout_vmnk=cute.make_layout((1, *cta_layout_mnk.shape)),
            )  # fmt: skip
        halo = None
        if cutlass.const_expr(self.tile_w):
            halo = make_checked_pipeline(
                pipeline.PipelineTmaAsync, specs, "halo", smem.halo_barriers(),
                self.halo_stages, tx_count=a_bytes,
            )  # fmt: skip
        source = None
        if cutlass.const_expr(self.epilogue.loads_source_by_tma):
            source_bytes = cute.size_in_bytes(
                self.out_dtype, cute.slice_(source_layout, (None, None, 0))
            )
            source = make_checked_pipeline(
                pipeline.PipelineTmaAsync, specs, "source", smem.source_barriers(),
                self.source_stages, tx_count=source_bytes,
            )  # fmt: skip
        work_queue = None
        if cutlass.const_expr(self.dynamic_schedule):
            work = make_checked_pipeline(
                pipeline.PipelineAsync, specs, "work", smem.work_barriers(), WORK_QUEUE_STAGES
            )
            work_queue = WorkQueue(work, smem.work_items(WORK_QUEUE_STAGES), m_flags)
        turns = None
        if cutlass.const_expr(self.pingpong):
            turns = self.make_turns(smem.turn_barriers(), warp_idx)
        return Sm90Pipelines(ab, halo, source, work_queue, turns)

    @cute.jit
    def load(
        self,
        pipes: Sm90Pipelines,
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
        pixel_divisors: Optional[PixelDivisors],
        channel_group: Optional[Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32]],
    ):
        """Load warp: fills the A/B ring for every k-tile of every output tile of this CTA
        (with halo tiles: the halo ring once per c-block, the ring with B per k-tile), through
        an ``OperandLoader`` (``Im2colLoader`` or ``HaloLoader``); with
        ``dynamic_schedule`` it also takes the work items and hands them to the other roles
        through the work queue."""
        ab_pipeline, halo_pipeline, work_queue = pipes.ab, pipes.halo, pipes.work_queue
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

        k_shape = (
            cute.size(gB, mode=[3, 0]),
            cute.size(gB, mode=[3, 1]),
            cute.size(gB, mode=[3, 2]),
        )
        tma_atoms = (tma_atom_a, tma_atom_b)
        if cutlass.const_expr(self.tile_w):
            halo_box = ((self.halo_pitch, self.halo_h, 1), self.tile_mnk[2])
            loader = HaloLoader(
                ab_pipeline, halo_pipeline, tma_atoms, gA, sA, tBgB, tBsB, b_mcast_mask, halo,
                k_shape, halo_box, (self.tile_w, self.tile_h), self.load_warp_waits_late,
            )  # fmt: skip
        else:
            loader = Im2colLoader(
                ab_pipeline, tma_atoms, (tAgA, tBgB), (tAsA, tBsB),
                (a_mcast_mask, b_mcast_mask), k_shape, pixel_divisors,
                self.load_warp_waits_late, channel_group,
            )  # fmt: skip
        Producer = pipeline.PipelineUserType.Producer
        ab_state = pipeline.make_pipeline_state(Producer, self.ab_stages)
        states = ProducerStates(
            ab_state, pipeline.make_pipeline_state(Producer, max(self.halo_stages, 1))
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
            states = loader.load_tile(states, scheduler, work)
            self.open_source_loads(scheduler, work)
            if cutlass.const_expr(self.dynamic_schedule):
                work = self.claim_work(ticket)
            else:
                work = scheduler.next_work(work)
        if cutlass.const_expr(self.dynamic_schedule):
            self.publish_work(work_queue, queue_state, work)  # past the end: the roles stop
            self.retire_from_work_queue(work_queue)
        ab_pipeline.producer_tail(states.ab)
        if cutlass.const_expr(self.tile_w):
            halo_pipeline.producer_tail(states.halo)

    @cute.jit
    def gather_operands(
        self,
        ab_pipeline: pipeline.PipelineAsync,
        gmem: Tuple[cute.Tensor, cute.Tensor],
        smem_tiles: Tuple[cute.Tensor, cute.Tensor],
        geometry: ConvGeometry,
        k_shape: Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32],
        scheduler: StaticTileScheduler,
        source: Optional[Tuple] = None,
    ):
        """Gather warps (``gather``): the A and filter tiles of every k-tile of every output
        tile of this CTA, into the ring (``OperandGather``); ``gmem``: the activation's and
        the filter's views, ``smem_tiles``: the A and B rings. The first gather warp opens the
        source loads (``open_source_loads``) in the load warp's place, before its first tile:
        a gathered k-tile is in the ring only after its loads' round trip, so opening them
        after the tile, as the load warp does, would leave C's loads to the epilogue. Where
        warp 1 gathers too (``source``: the source pipeline, C's TMA atom, gC, sC;
        ``Sm90Roles.source_loader_gathers``) it loads C itself: the first tile's before its
        gathers (the ring is empty), the others' after them, so that waiting for a C buffer
        to come free does not hold up the next tile's operands."""
        tidx, _, _ = cute.arch.thread_idx()
        tidx = tidx - self.first_gather_warp_id * cute.arch.WARP_SIZE
        gather = OperandGather(
            ab_pipeline, *gmem, *smem_tiles, geometry, k_shape, self.tile_mnk,
            self.gather_threads, self.gather_vector, self.gather_warps_wait_late,
            self.pack_taps,
        )  # fmt: skip
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.ab_stages)
        source_state, source_items = None, None
        if cutlass.const_expr(source is not None):
            source_pipeline, tma_atom_c, gC, sC = source
            source_state = pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Producer, self.source_stages
            )
            source_items = Sm90WorkItems.make(scheduler, None, False)
        # Warp 1's lanes load C where it gathers too (warp-uniform).
        loads_source = (
            tidx // cute.arch.WARP_SIZE == self.source_load_warp_id - self.first_gather_warp_id
        )
        end_work = scheduler.end_work()
        work = scheduler.first_work()
        while work < end_work:
            first = work == scheduler.first_work()
            if cutlass.const_expr(source is None):
                if tidx < cute.arch.WARP_SIZE:  # the first gather warp stands for the load warp
                    self.open_source_loads(scheduler, work)
            else:
                if loads_source:
                    if first:
                        # C may be the previous grid's output: under PDL wait before it
                        # (gather_tile's own wait is then a no-op).
                        wait_before_first_load(self.gather_warps_wait_late, scheduler, work)
                        source_state = self.load_tile_source(
                            source_pipeline, source_state, tma_atom_c, gC, sC, source_items, work
                        )
            state = gather.gather_tile(state, scheduler, work, tidx)
            if cutlass.const_expr(source is not None):
                if loads_source:
                    if not first:
                        source_state = self.load_tile_source(
                            source_pipeline, source_state, tma_atom_c, gC, sC, source_items, work
                        )
            work = scheduler.next_work(work)
        ab_pipeline.producer_tail(state)
        if cutlass.const_expr(source is not None):
            if loads_source:
                source_pipeline.producer_tail(source_state)

    @cute.jit
    def open_source_loads(self, scheduler: StaticTileScheduler, work: cutlass.Int32):
        """Residual kernels, after work item ``work``'s A/B loads are issued: if it is this
        CTA's first, let the source loads begin (one warp's arrival on EpilogueLoad)."""
        if cutlass.const_expr(self.epilogue.loads_source_by_tma):
            if work == scheduler.first_work():
                self.epilogue_load_barrier().arrive()

    def epilogue_load_barrier(self) -> pipeline.NamedBarrier:
        """Orders the source loads after the mainloop prologue (load + source-load warps)."""
        return pipeline.NamedBarrier(
            barrier_id=int(NamedBarrierConv.EpilogueLoad),
            num_threads=self.barrier_specs["named.epilogue_load"].count,
        )

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
        items = Sm90WorkItems.make(scheduler, work_queue, self.dynamic_schedule)
        work, valid, queue_state = items.first(items.initial_state())
        while valid:
            producer_state = self.load_tile_source(
                source_pipeline, producer_state, tma_atom_c, gC, sC, items, work
            )
            work, valid, queue_state = items.next(work, queue_state)
        source_pipeline.producer_tail(producer_state)

    @cute.jit
    def load_tile_source(
        self,
        source_pipeline: pipeline.PipelineTmaAsync,
        producer_state: pipeline.PipelineState,
        tma_atom_c: cute.CopyAtom,
        gC: cute.Tensor,
        sC: cute.Tensor,
        items: Sm90WorkItems,
        work: cutlass.Int32,
    ) -> pipeline.PipelineState:
        """One warp: work item ``work``'s C subtiles into the source ring, in epilogue order
        (none for a stream-K partial, which has no epilogue); returns the advanced state."""
        k_first, _ = items.k_tile_range(work)
        if k_first == 0:
            m_tile, n_tile = items.tile_coord(work)
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
        return producer_state

    def _consumer_thread(self, tiled_mma: cute.TiledMma) -> Tuple:
        """A consumer thread's ``(index among the consumer threads, warpgroup, index among
        its tile's threads, MMA slice)``: cooperative, the tile's rows are split between the
        warpgroups; ping-pong, a warpgroup is the whole tiled MMA."""
        tidx, _, _ = cute.arch.thread_idx()
        consumer_tidx = tidx - self.num_threads_per_warpgroup
        warpgroup_idx = cute.arch.make_warp_uniform(consumer_tidx // self.num_threads_per_warpgroup)
        tile_tidx = consumer_tidx
        mma_slice = warpgroup_idx * self.num_threads_per_warpgroup
        if self.pingpong:
            tile_tidx = consumer_tidx - mma_slice
            mma_slice = 0
        return consumer_tidx, warpgroup_idx, tile_tidx, tiled_mma.get_slice(mma_slice)

    @cute.jit
    def mma_and_epilogue(
        self,
        pipes: Sm90Pipelines,
        smem_tiles: Sm90SmemTiles,
        mma: ConsumerMainloop,
        epi_args: EpilogueArgs,
        stream_k: StreamKWorkspace,
        scheduler: StaticTileScheduler,
        warp_idx: cutlass.Int32,
    ):
        """Consumer warpgroups: WGMMA over the ring, then the epilogue of each output tile
        (ping-pong: of every other tile, each warpgroup in its turn)."""
        ab_pipeline, halo_pipeline, source_pipeline = pipes.ab, pipes.halo, pipes.source
        work_queue, turns = pipes.work_queue, pipes.turns
        sA, sB, sD, sC = smem_tiles
        tiled_mma, k_shape, k_tile_cnt = mma.tiled_mma, mma.k_shape, mma.k_tile_cnt
        consumer_tidx, warpgroup_idx, tile_tidx, thr_mma = self._consumer_thread(tiled_mma)
        tCrA = None  # with halo tiles, A fragments are made per tap (mainloop_over_halos)
        if cutlass.const_expr(not self.tile_w):
            tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc_shape = thr_mma.partition_shape_C(cute.select(self.tile_mnk, mode=[0, 1]))
        accumulators = cute.make_rmem_tensor(acc_shape, self.acc_dtype)
        epilogue = self.make_epilogue_context(
            tiled_mma, tile_tidx, warpgroup_idx, sD, sC, accumulators, epi_args.tma_atom_d,
            source_pipeline, epi_args.bias, epi_args.scale, epi_args.out_factor,
        )  # fmt: skip
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)

        states = ConsumerStates.start(
            self.ab_stages, max(self.source_stages, 1), max(self.halo_stages, 1)
        )
        num_epi_tiles_done = cutlass.Int32(0)
        # Stream-K: what this thread needs to write or add a partial tile.
        fixup = StreamKFixup(
            acc=self.accumulators_by_vector(accumulators),
            partials=stream_k.partials,
            flags=stream_k.flags,
            tidx=consumer_tidx,
            barrier=epilogue.out.barrier,
        )
        items = Sm90WorkItems.make(scheduler, work_queue, self.dynamic_schedule)
        work, valid, queue_state = items.first(items.initial_state())
        mainloop_turn, epilogue_turn = None, None
        if cutlass.const_expr(self.pingpong):
            # Consumer 0 has the first turn (its phase 1 passes a fresh barrier).
            mainloop_turn = pipeline.PipelineState(
                1, cutlass.Int32(0), cutlass.Int32(0), cutlass.Int32(warpgroup_idx == 0)
            )
            epilogue_turn = mainloop_turn.clone()
            # Consumer 1 takes the second tile, and each takes every other one after that.
            if warpgroup_idx == 1:
                work, valid, states = self.skip_tile(items, work, states, k_tile_cnt, k_shape[0])
        preloads_source = epilogue.source_regs is not None  # trace time
        # The tile column whose bias/scale the registers hold (or L2 has): a tile of the
        # same column, the next of a persistent CTA where K fits one tile, loads none.
        vectors_n_tile = cutlass.Int32(-1)
        while valid:
            k_first, k_end = items.k_tile_range(work)
            if cutlass.const_expr(self.epilogue.has_channel_vectors or preloads_source):
                # This warpgroup runs the tile's epilogue: load its bias (and thread-read C).
                if k_first == 0:
                    m_tile, n_tile = items.tile_coord(work)
                    if cutlass.const_expr(self.epilogue.has_channel_vectors):
                        if n_tile != vectors_n_tile:
                            self.load_tile_vectors(epilogue, epi_args, n_tile, tile_tidx)
                            vectors_n_tile = n_tile
                    if cutlass.const_expr(preloads_source):
                        self.preload_tile_source(epilogue, m_tile, n_tile, epi_args)
            if cutlass.const_expr(self.pingpong):
                turns.mainloop.wait(mainloop_turn)
            if cutlass.const_expr(self.tile_w):
                states = self.mainloop_over_halos(
                    ab_pipeline, halo_pipeline, tiled_mma, thr_mma, accumulators, sA,
                    mma.a_tap_layout, tCrB, states, mma.halo, k_shape, mma.channels,
                )  # fmt: skip
            else:
                states = self.mainloop(
                    ab_pipeline, tiled_mma, accumulators, tCrA, tCrB, states, (k_first, k_end),
                    mma.channels,
                )  # fmt: skip
            if cutlass.const_expr(self.pingpong):
                mainloop_turn = turns.mainloop.arrive(mainloop_turn)
            if cutlass.const_expr(self.stream_k):
                if k_first > 0:
                    self.store_partial(fixup, scheduler, work)
                elif k_end < k_tile_cnt:
                    self.add_partials(fixup, scheduler, work)
            if k_first == 0:
                if cutlass.const_expr(self.pingpong and self.epilogue.loads_source_by_tma):
                    turns.epilogue.wait(epilogue_turn)
                states, num_epi_tiles_done = self.epilogue_tile(
                    epilogue, work, scheduler, states, num_epi_tiles_done, epi_args, warp_idx
                )
                if cutlass.const_expr(self.pingpong and self.epilogue.loads_source_by_tma):
                    epilogue_turn = turns.epilogue.arrive(epilogue_turn)
            work, valid, queue_state = items.next(work, queue_state)
            if cutlass.const_expr(self.pingpong):
                work, valid, states = self.skip_tile(items, work, states, k_tile_cnt, k_shape[0])
        epilogue.out.store_pipeline.producer_tail()
        if cutlass.const_expr(self.epilogue.has_amax):
            publish_amax(epilogue.out.amax, epi_args.amax)
