"""Stream-K fixup (``Conv2dConfig.stream_k``), through global memory, no SMEM.

A CTA whose segment is a partial of a tile writes its fp32 accumulators to its workspace slot
(16-byte vectors), the consumer threads meet at the epilogue barrier, and one thread publishes
the slot (``fence.acq_rel.gpu`` + relaxed add to the tile's flag). The tile's owner (the
segment with its first k-tile) spins with acquire loads until every later contributor has
published, adds their slots in cluster order (a fixed order, so the sum does not depend on
timing), resets the flag to zero for the next launch and runs the normal epilogue; the
source-load warp loads C only for owners.
"""

from typing import NamedTuple, Optional

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline

from ..common.entry import ConvPointers
from ..common.tile_scheduler import StaticTileScheduler


class StreamKWorkspace(NamedTuple):
    """Stream-K's global scratch (None without stream-K)."""

    partials: Optional[cute.Tensor]  # (4, values / 4, consumer thread, slot) fp32 partials
    flags: Optional[cute.Tensor]  # one int32 counter per output tile


class StreamKFixup(NamedTuple):
    """What a consumer thread needs to write or add a partial tile."""

    acc: cute.Tensor  # its accumulators as (4, n/4): see accumulators_by_vector
    partials: cute.Tensor  # (4, values / 4, consumer thread, slot) fp32 workspace
    flags: cute.Tensor  # one int32 counter per output tile
    tidx: cutlass.Int32  # the thread's index among the consumer threads
    barrier: pipeline.NamedBarrier  # the consumer threads of a tile


class StreamKFixupMixin:
    """The stream-K fixup methods of the SM90 kernel (mixed into ``Conv2dFpropSm90``)."""

    def stream_k_workspace(
        self,
        ptrs: ConvPointers,
        max_clusters: cutlass.Int32,
        num_work: cutlass.Int32,
    ) -> StreamKWorkspace:
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
        return StreamKWorkspace(m_partials, m_flags)

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
    def store_partial(self, fixup: StreamKFixup, scheduler: StaticTileScheduler, work):
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
    def add_partials(self, fixup: StreamKFixup, scheduler: StaticTileScheduler, work):
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
