"""Dynamic persistent tile scheduling with cluster launch control (CLC), for the SM100 kernel.

The grid covers every output tile: ``(cluster_m * num_clusters, 1, 1)`` CTAs in clusters of
``(cluster_m, 1, 1)``, one cluster per work item (one MMA tile, which the CTAs of a 2-SM pair
share). A cluster first computes the work item of its own launch position; afterwards the
scheduler warp of its CTA 0 asks the hardware, with ``clusterlaunchcontrol.try_cancel``, to
cancel a cluster that has not started yet and hands that cluster's work item to every role of
every CTA of the cluster through the CLC response ring. A failed cancel (no cluster left) ends
the persistent loop. So the grid is as large as the problem, but runs as persistently as the
hardware lets it: idle SMs take work, busy ones steal the rest.

Work items are linear cluster indices along grid x (2**31 - 1 clusters, where grid y/z would
stop at 65535). ``tile_coord`` maps one to an MMA tile with the same grouped rasterization as
the SM90 ``StaticTileScheduler`` (``GroupedRaster``): bands ``block_swizzle`` clusters wide across the raster's minor
direction, so clusters that run together share filter and activation tiles in L2.
"""

from dataclasses import dataclass
from typing import List, Protocol, Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cutlass_dsl import extract_mlir_values, new_from_mlir_values

from ..common.tile_scheduler import GroupedRaster, TileScheduler, select_int32

__all__ = ["ClcScheduler", "ClcTileScheduler", "ClcWorkItems"]

CLC_RESPONSE_INT32S = 4  # a response is 16 bytes


class ClcScheduler(TileScheduler, Protocol):
    """What the roles of the SM100 kernel need from a tile scheduler: the shared
    ``TileScheduler`` and the CLC query and response."""

    def initial_work(self) -> Tuple[cutlass.Int32, cutlass.Boolean]:
        """This cluster's first work item (its launch position) and whether it is valid."""

    def issue_query(self, mbarrier: cute.Pointer, stage: cutlass.Int32) -> None:
        """Scheduler warp: request the next work item into response slot ``stage``."""

    def read_response(self, stage: cutlass.Int32) -> Tuple[cutlass.Int32, cutlass.Boolean]:
        """Any role: the work item in response slot ``stage`` and whether it is valid."""


class ClcTileScheduler:
    """CLC work distribution plus the work-item -> tile mapping.

    Compile-time: ``cluster_m``, ``block_swizzle``, ``raster_along_m``. Runtime (loop-carried
    through the roles' persistent loops): the MMA tile counts and the response pointer.
    """

    def __init__(
        self,
        num_tiles_m: cutlass.Int32,
        num_tiles_n: cutlass.Int32,
        responses: cute.Pointer,
        cluster_m: int,
        block_swizzle: int,
        raster_along_m: bool,
    ):
        self.num_tiles_m = num_tiles_m
        self.num_tiles_n = num_tiles_n
        self.responses = responses
        self.cluster_m = cluster_m
        self.block_swizzle = block_swizzle
        self.raster_along_m = raster_along_m

    def __extract_mlir_values__(self) -> List:
        return extract_mlir_values([self.num_tiles_m, self.num_tiles_n, self.responses])

    def __new_from_mlir_values__(self, values: List) -> "ClcTileScheduler":
        num_tiles_m, num_tiles_n, responses = new_from_mlir_values(
            [self.num_tiles_m, self.num_tiles_n, self.responses], values
        )
        return ClcTileScheduler(
            num_tiles_m,
            num_tiles_n,
            responses,
            self.cluster_m,
            self.block_swizzle,
            self.raster_along_m,
        )

    @staticmethod
    def grid_shape(num_work: cutlass.Int32, cluster_m: int) -> Tuple:
        """One cluster of ``cluster_m`` CTAs per work item, all along grid x."""
        return (num_work * cluster_m, 1, 1)

    @cute.jit
    def initial_work(self) -> Tuple[cutlass.Int32, cutlass.Boolean]:
        bidx, _, _ = cute.arch.block_idx()
        return cutlass.Int32(bidx) // self.cluster_m, cutlass.Boolean(True)

    def _response(self, stage: cutlass.Int32) -> cute.Pointer:
        # Slots are 16 bytes apart from a 16-byte aligned base: tell the compiler, so the
        # response is read with one 128-bit load.
        offset = cute.assume(stage * CLC_RESPONSE_INT32S, divby=CLC_RESPONSE_INT32S)
        return self.responses + offset

    @cute.jit
    def issue_query(self, mbarrier: cute.Pointer, stage: cutlass.Int32) -> None:
        # The multicast form writes the response into every CTA of the cluster at the same
        # SMEM offset and completes the transaction on each CTA's own mbarrier.
        with cute.arch.elect_one():
            cute.arch.issue_clc_query(mbarrier, self._response(stage), multicast=self.cluster_m > 1)

    @cute.jit
    def read_response(self, stage: cutlass.Int32) -> Tuple[cutlass.Int32, cutlass.Boolean]:
        ctaid_x, _, _, is_canceled = cute.arch.clc_response(self._response(stage))
        # The response was read through the generic proxy; the next try_cancel writes the
        # slot through the async proxy.
        cute.arch.fence_proxy("async.shared", space="cta")
        return ctaid_x // self.cluster_m, is_canceled != 0

    @cute.jit
    def tile_coord(self, work: cutlass.Int32) -> Tuple[cutlass.Int32, cutlass.Int32]:
        raster = GroupedRaster(
            self.num_tiles_m, self.num_tiles_n, self.block_swizzle, self.raster_along_m
        )
        return raster.coord(work, select_int32)


@dataclass(frozen=True)
class ClcWorkItems:
    """``WorkItems`` of the SM100 roles: the cluster's launch position first, then each
    response of the CLC ring in turn (the scheduler warp fills it, one query per tile).
    Frozen: the DSL then reads it in the roles' loops rather than carrying it."""

    scheduler: ClcTileScheduler
    clc_pipeline: pipeline.PipelineClcFetchAsync
    clc_stages: int

    def initial_state(self) -> pipeline.PipelineState:
        return pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.clc_stages)

    @cute.jit
    def first(self, state: pipeline.PipelineState):
        work, valid = self.scheduler.initial_work()
        return work, valid, state

    @cute.jit
    def next(self, work: cutlass.Int32, state: pipeline.PipelineState):
        self.clc_pipeline.consumer_wait(state)
        work, valid = self.scheduler.read_response(state.index)
        self.clc_pipeline.consumer_release(state)
        state.advance()
        return work, valid, state

    def tile_coord(self, work: cutlass.Int32) -> Tuple[cutlass.Int32, cutlass.Int32]:
        return self.scheduler.tile_coord(work)
