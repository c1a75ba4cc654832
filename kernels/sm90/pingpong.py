"""Ping-pong (``Conv2dConfig.pingpong``): the two consumer warpgroups take the CTA's tiles in
turn, each with its own accumulator, barrier, store warp and staging buffers, so that one's
epilogue runs under the other's mainloop."""

from typing import NamedTuple, Optional

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline

from .mainloop import ConsumerStates
from .work_queue import Sm90WorkItems


class PingPongTurns(NamedTuple):
    """Ping-pong: whose turn it is, per consumer warpgroup. A consumer waits for its turn
    before its mainloop and hands the turn over after it, so that it waits on the ring's
    stages of its tile only once the other has waited on all of its own: mbarrier phases
    tell laps of the ring apart only within one lap. Residual kernels order the epilogues
    likewise, for the source ring."""

    mainloop: pipeline.PipelineOrder
    epilogue: Optional[pipeline.PipelineOrder]


class PingPongMixin:
    """The ping-pong methods of the SM90 kernel (mixed into ``Conv2dFpropSm90``)."""

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
        epilogue = turn(barriers + 2) if self.epilogue.loads_source_by_tma else None
        return PingPongTurns(mainloop, epilogue)

    def skip_tile(
        self,
        items: Sm90WorkItems,
        work: cutlass.Int32,
        states: ConsumerStates,
        k_tile_cnt: cutlass.Int32,
        c_blocks: cutlass.Int32,
    ):
        """Ping-pong (static scheduling): pass over the other consumer's tile ``work``:
        ``(work, valid)`` of the work item after it, and ``states`` advanced past its
        k-tiles, C subtiles and halos."""
        source_subtiles = self.tile_mnk[1] // self.epi_tile[1]
        states.advance_past_tile(
            k_tile_cnt,
            source_subtiles if self.epilogue.loads_source_by_tma else None,
            c_blocks if self.tile_w else None,
        )
        work, valid, _ = items.next(work, None)
        return work, valid, states
