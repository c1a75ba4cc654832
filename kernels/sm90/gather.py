"""The gathered activation (``Conv2dConfig.gather_a``): im2col A tiles loaded by threads.

TMA reads global rows only in 16-byte units, so an activation whose C is not a multiple of 8
(16-bit) has no im2col TMA view. With ``gather_a`` two producer warps build each A tile of
the ring themselves: per k-tile (c-block, s, r), every (output pixel, 8-channel run) of the
tile is one unit of work, loaded element by element under its bounds predicate (zero for
padding, channels past C and rows past M) and stored to the 128B-swizzled stage, then made
visible to WGMMA (the async proxy) by a proxy fence before the thread arrives on the stage's
``gather`` barrier. The filter still comes by TMA, in the ``ab`` ring; the two rings advance
together, one stage per k-tile, so a stage index names the same k-tile in both.
"""

from dataclasses import dataclass
from typing import Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline

from ..common.im2col import ConvGeometry
from ..common.tile_scheduler import StaticTileScheduler

# The filter of a gathered conv is padded to a multiple of this many channels (16-byte rows,
# TMA's unit): the host's staging pads it, the kernel's filter view assumes it.
GATHER_FILTER_CHANNELS = 8
# Channels of one unit of work: a 16-byte chunk of a swizzled A row (the 128-byte swizzle
# permutes whole chunks, so a run's elements stay adjacent).
RUN_CHANNELS = 8


@dataclass(frozen=True)
class ActivationGather:
    """The gather warps' view of the operands: the activation as ``((w, h, n), c)`` (its
    real C), the A ring and its ``gather`` pipeline (``PipelineAsync``, every gather thread
    arriving), the geometry and the k-tile walk ``(c-blocks, S, R)`` (c-blocks of the
    filter's padded C, which may exceed the activation's)."""

    gather_pipeline: pipeline.PipelineAsync
    mA: cute.Tensor
    sA: cute.Tensor  # (tile_m, tile_k, ring stage)
    geometry: ConvGeometry
    k_shape: Tuple[cutlass.Int32, cutlass.Int32, cutlass.Int32]
    tile_m: int
    tile_k: int
    threads: int

    @cute.jit
    def gather_tile(
        self,
        state: pipeline.PipelineState,
        scheduler: StaticTileScheduler,
        work: cutlass.Int32,
        tidx: cutlass.Int32,
    ) -> pipeline.PipelineState:
        """Gather every k-tile of work item ``work``'s output tile into the ring, in the
        order the load warp loads its filter tiles; ``tidx``: this thread's index among the
        gather threads. Returns the advanced state."""
        m_tile, _ = scheduler.tile_coord(work)
        c_blocks, taps_s, taps_r = self.k_shape
        for r in range(taps_r):
            for s in range(taps_s):
                for c_block in range(c_blocks):
                    self.gather_pipeline.producer_acquire(state)
                    self._gather_k_tile(state.index, m_tile, c_block, s, r, tidx)
                    # The stores are generic-proxy writes; WGMMA reads through the async proxy.
                    cute.arch.fence_proxy("async.shared", space="cta")
                    self.gather_pipeline.producer_commit(state)
                    state.advance()
        return state

    @cute.jit
    def _gather_k_tile(
        self,
        stage: cutlass.Int32,
        m_tile: cutlass.Int32,
        c_block: cutlass.Int32,
        s: cutlass.Int32,
        r: cutlass.Int32,
        tidx: cutlass.Int32,
    ):
        """This thread's units of one A tile: unit ``i * threads + tidx`` is row ``unit //
        runs`` and channels ``RUN_CHANNELS * (unit % runs)`` on, so that neighbouring threads
        read neighbouring channels and pixels."""
        g = self.geometry
        runs = self.tile_k // RUN_CHANNELS
        m_rows = g.n * g.p * g.q
        tap_h = r * g.dil_h - g.pad_top
        tap_w = s * g.dil_w - g.pad_left
        c_tile = c_block * self.tile_k
        values = cute.make_rmem_tensor(RUN_CHANNELS, self.mA.element_type)
        for i in cutlass.range_constexpr(self.tile_m * runs // self.threads):
            unit = i * self.threads + tidx
            row = unit // runs
            col = (unit % runs) * RUN_CHANNELS
            m = m_tile * self.tile_m + row
            q = m % g.q
            p = (m // g.q) % g.p
            n = m // (g.q * g.p)
            h = p * g.stride_h + tap_h
            w = q * g.stride_w + tap_w
            inside = (m < m_rows) & (h >= 0) & (h < g.h) & (w >= 0) & (w < g.w)
            for j in cutlass.range_constexpr(RUN_CHANNELS):
                c = c_tile + col + j
                values[j] = self.mA.element_type(0)
                if inside & (c < g.c):
                    values[j] = self.mA[((w, h, n), c)]
            for j in cutlass.range_constexpr(RUN_CHANNELS):
                self.sA[(row, col + j, stage)] = values[j]
