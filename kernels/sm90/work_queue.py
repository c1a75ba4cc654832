"""Dynamic scheduling (``Conv2dConfig.dynamic_schedule``): after its first tile, a CTA's load
warp takes the next work items from a global counter, one ahead, and hands each to the
consumers and the source-load warp through a work queue in SMEM (``WORK_QUEUE_STAGES`` slots,
a ``PipelineAsync``); a work item past the last tile ends the roles. The last CTA to retire
resets the counters for the next launch."""

from dataclasses import dataclass
from typing import NamedTuple, Optional, Tuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline

from ..common.tile_scheduler import StaticTileScheduler
from .config import WORK_QUEUE_STAGES


class WorkQueue(NamedTuple):
    """Dynamic scheduling: the load warp hands work items to the other roles through
    ``items`` in SMEM, slot by slot (``pipeline``); ``counters`` are the global work counter
    and the count of CTAs done taking work (see ``Conv2dFpropSm90.request_work``)."""

    pipeline: pipeline.PipelineAsync
    items: cute.Tensor
    counters: cute.Tensor


@dataclass(frozen=True)
class Sm90WorkItems:
    """``WorkItems`` of the SM90 consumer and source-load roles: the static scheduler's order
    (data-parallel tiles or stream-K ranges), or with ``dynamic`` scheduling the work queue
    that the load warp fills. A work item is valid below ``end_work`` (the scheduler's
    ``end_work()``; the work queue's past-the-end item ends the roles the same way).
    Frozen: the DSL then reads it in the roles' loops rather than carrying it."""

    scheduler: StaticTileScheduler
    work_queue: Optional[WorkQueue]
    dynamic: bool
    end_work: cutlass.Int32

    @staticmethod
    def make(
        scheduler: StaticTileScheduler, work_queue: Optional[WorkQueue], dynamic: bool
    ) -> "Sm90WorkItems":
        return Sm90WorkItems(scheduler, work_queue, dynamic, scheduler.end_work())

    def initial_state(self) -> Optional[pipeline.PipelineState]:
        """Where this role reads the work queue next (None: static scheduling)."""
        if self.dynamic:
            return pipeline.make_pipeline_state(
                pipeline.PipelineUserType.Consumer, WORK_QUEUE_STAGES
            )
        return None

    @cute.jit
    def first(self, state: Optional[pipeline.PipelineState]):
        if cutlass.const_expr(self.dynamic):
            work, state = self._take(state)
        else:
            work = self.scheduler.first_work()
        return work, work < self.end_work, state

    @cute.jit
    def next(self, work: cutlass.Int32, state: Optional[pipeline.PipelineState]):
        if cutlass.const_expr(self.dynamic):
            work, state = self._take(state)
        else:
            work = self.scheduler.next_work(work)
        return work, work < self.end_work, state

    @cute.jit
    def _take(self, state: pipeline.PipelineState):
        """The work item in the queue slot of ``state``, and the advanced state."""
        self.work_queue.pipeline.consumer_wait(state)
        work = self.work_queue.items[state.index]
        self.work_queue.pipeline.consumer_release(state)
        state.advance()
        return work, state

    def tile_coord(self, work: cutlass.Int32) -> Tuple[cutlass.Int32, cutlass.Int32]:
        return self.scheduler.tile_coord(work)

    def k_tile_range(self, work: cutlass.Int32) -> Tuple[cutlass.Int32, cutlass.Int32]:
        """``(first, end)``: the k-tiles of its tile that ``work`` computes (stream-K)."""
        return self.scheduler.k_tile_range(work)


class WorkQueueMixin:
    """The work-queue methods of the SM90 kernel (mixed into ``Conv2dFpropSm90``)."""

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
