"""Programmatic dependent launch (PDL): a kernel's setup overlaps the previous kernel's tail.

A kernel launched with ``use_pdl=True`` may start while the kernel before it on the stream is
still running, once every CTA of that kernel has signalled ``launch_dependents`` (or exited).
Its setup (barrier init, TMA descriptor prefetch, the cluster sync) then runs on SMs the
previous kernel leaves free or has just left, instead of after the whole grid has drained:
in a chain of small convs (a model at batch 1, under a CUDA graph) that is a launch gap and a
prologue per layer. ``griddepcontrol.wait`` is a no-op for a kernel launched without PDL.
The helper kernels between the convs (the stems' staging, the pools, the channel scale, the
fp8 quantization) launch with PDL too: a kernel that never signals would hold the next
conv's launch until its last CTA exits.
"""

import cutlass
import cutlass.cute as cute

from .tile_scheduler import StaticTileScheduler


def wait_for_previous_grid() -> None:
    """End of the SMEM-only setup: wait until the previous kernel on the stream has finished
    and its writes are visible (our inputs, and the per-stream workspace it may share with us),
    then let the next PDL kernel start its own setup.

    Every thread calls this before its first global memory access: the wait orders only the
    calling thread's accesses. Signalling after the wait, not before, keeps at most one kernel
    waiting behind this one."""
    cute.arch.griddepcontrol_wait()
    cute.arch.griddepcontrol_launch_dependents()


@cute.jit
def wait_before_first_load(waits_late: bool, scheduler: StaticTileScheduler, work: cutlass.Int32):
    """``waits_late`` (trace time): on the CTA's first work item, wait for the previous grid
    here, its tile coordinates computed and no global memory touched yet (the producer warps
    that skip the wait at the end of the setup)."""
    if cutlass.const_expr(waits_late):
        if work == scheduler.first_work():
            wait_for_previous_grid()
