"""Scratch memory of the stream-K and dynamically scheduled kernels, one pair of buffers per
device and stream.

A stream-K kernel (``Conv2dConfig.stream_k``) sums the tiles it splits between SMs through
float32 partials (one tile per CTA of the grid) and int32 counters (one per output tile) that
it leaves at zero when it ends. A dynamically scheduled kernel (``dynamic_schedule``) needs
only its int32 work counters, also left at zero. Calls on one stream run in order, so they
share the stream's buffers; other streams get their own. Buffers only grow: the first call of
a new, larger size allocates (and zeroes the counters) on the call's stream, at least twice the
old size. Thread-safe: a buffer is grown once however many threads need it at once, and a
replaced one is kept, not freed, as another thread may hold its address for a launch it has
not issued yet (the allocator could hand freed memory to that stream's next tensor first);
the doubling keeps the replaced ones smaller, together, than the live one.

A launch captured into a CUDA graph does not take its stream's buffers: the graph may be
replayed on any stream, beside eager calls or other graphs on the stream it was captured on,
which would then share counters with it. Each capture (CUDA's capture sequence id) gets
buffers of its own instead, shared by the capture's launches on that stream, which run in
order, and kept for the life of the process: a graph holds their address for every replay, and
torch may hand freed graph-pool memory to another graph of the pool. The partials are
allocated while capturing (from the graph's memory pool). The counters are a spare made by an
eager call (zeroed, and waited for, outside any capture) where one is large enough: a capture
usually follows warm-up calls, and counters zeroed inside it would be a kernel that every
replay runs before the conv's (1-2 us on an H200, a twentieth of a small conv's time). Without
a spare they are allocated and zeroed in the capture, that kernel and all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

from .cuda_context import current_device, current_raw_stream
from .kernels.sm90.config import WORK_COUNTERS as DYNAMIC_SCHEDULE_COUNTERS
from .kernels.sm90.config import Conv2dConfig
from .problem import Conv2dProblemShape
from .schedule import cluster_tile_count

__all__ = [
    "DYNAMIC_SCHEDULE_COUNTERS",
    "capture_id",
    "kernel_workspace",
    "workspace_pointers",
    "workspace_size_sm90",
]

# (device, stream) or, while capturing, (device, stream, capture id) -> (partials, flags)
_buffers: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}
_replaced: list[torch.Tensor] = []
# device -> zeroed int32 counters for the next capture on the device that needs no more
_spare_flags: dict[int, torch.Tensor] = {}
_lock = threading.Lock()


def workspace_size_sm90(
    problem: Conv2dProblemShape, config: Conv2dConfig, max_clusters: int
) -> tuple[int, int] | None:
    """``(float32 partials, int32 flags)`` a launch of the SM90 kernel of ``config`` on the
    kernel problem ``problem`` with at most ``max_clusters`` clusters needs; None for a kernel
    with neither stream-K nor dynamic scheduling. The arch registry (``arch.ARCHS``) holds it
    as the SM90 kernel's ``workspace_size``."""
    if config.dynamic_schedule:
        return 0, DYNAMIC_SCHEDULE_COUNTERS
    if not config.stream_k:
        return None
    cluster_size = config.cluster_m * config.cluster_n
    partials = max_clusters * cluster_size * config.tile_m * config.tile_n
    return partials, cluster_tile_count(problem, config) * cluster_size


def kernel_workspace(
    device_index: int, stream: int, partial_floats: int, num_flags: int
) -> tuple[int, int]:
    """Device addresses of at least ``partial_floats`` float32 values and ``num_flags`` zeroed
    int32 counters for kernels launched on the raw CUDA stream ``stream`` (a capture's own,
    while ``stream`` is being captured into a CUDA graph)."""
    key: tuple[int, ...] = (device_index, stream)
    eager = (
        device_index == current_device()
        and stream == current_raw_stream(device_index)
        and not torch.cuda.is_current_stream_capturing()
    )  # the common case, in C calls; otherwise CUDA is asked about the stream itself
    capture = None if eager else capture_id(stream)
    if capture is not None:
        key += (capture,)
    buffers = _buffers.get(key)
    if buffers is None or buffers[0].numel() < partial_floats or buffers[1].numel() < num_flags:
        with _lock:
            buffers = _grow(key, partial_floats, num_flags)
    if capture is None and num_flags > 0:
        spare = _spare_flags.get(device_index)
        if spare is None or spare.numel() < buffers[1].numel():
            with _lock:
                _make_spare_flags(device_index, buffers[1].numel())
    return buffers[0].data_ptr(), buffers[1].data_ptr()


def workspace_pointers(
    workspace: tuple[int, int] | None, device_index: int, stream: int
) -> tuple[int, int]:
    """The kernel's last two pointers: the stream-K / dynamic scheduling workspace of sizes
    ``workspace`` (``workspace_size_sm90``) on the raw stream ``stream``, or null pointers
    where the kernel needs none."""
    if workspace is None:
        return 0, 0
    return kernel_workspace(device_index, stream, *workspace)


def capture_id(stream: int) -> int | None:
    """The id of the CUDA graph capture under way on the raw stream ``stream`` (unique over
    the process's lifetime), or None where none is."""
    from cuda.bindings import runtime

    err, status, capture, *_ = runtime.cudaStreamGetCaptureInfo(stream)
    active = runtime.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive
    if err != runtime.cudaError_t.cudaSuccess or status != active:
        return None
    return int(capture)


def _grow(key: tuple[int, ...], partial_floats: int, num_flags: int):
    device_index, stream = key[:2]
    old_partials, old_flags = _buffers.get(key, (None, None))
    device = torch.device("cuda", device_index)
    if old_flags is None and len(key) > 2:  # a capture's first counters: a spare if one fits
        spare = _spare_flags.get(device_index)
        if spare is not None and spare.numel() >= num_flags:
            old_flags = _spare_flags.pop(device_index)
    # On the call's stream: the counters are zeroed before the kernels that use them.
    with torch.cuda.device(device), torch.cuda.stream(torch.cuda.ExternalStream(stream)):
        partials = _at_least(
            old_partials,
            partial_floats,
            lambda n: torch.empty(n, dtype=torch.float32, device=device),
        )
        flags = _at_least(
            old_flags, num_flags, lambda n: torch.zeros(n, dtype=torch.int32, device=device)
        )
    new = partials, flags
    _buffers[key] = new
    return new


def _make_spare_flags(device_index: int, num_flags: int) -> None:
    """Zeroed counters of at least ``num_flags`` for the device's next capture, zeroed on a
    stream of their own and waited for: a graph may be replayed on any stream. Made in
    relaxed capture mode, so that a capture another thread has under way (in global mode)
    does not forbid this thread's allocation and wait. Call under ``_lock``, outside any
    capture on the calling thread."""
    from cuda.bindings import runtime

    spare = _spare_flags.get(device_index)
    if spare is not None and spare.numel() >= num_flags:
        return  # another thread made one first
    device = torch.device("cuda", device_index)
    relaxed = runtime.cudaStreamCaptureMode.cudaStreamCaptureModeRelaxed
    _, mode = runtime.cudaThreadExchangeStreamCaptureMode(relaxed)
    try:
        zeroing = torch.cuda.Stream(device)
        with torch.cuda.device(device), torch.cuda.stream(zeroing):
            flags = torch.zeros(num_flags, dtype=torch.int32, device=device)
        zeroing.synchronize()
    finally:
        runtime.cudaThreadExchangeStreamCaptureMode(mode)
    _spare_flags[device_index] = flags  # one it replaces was never handed out: freed


def _at_least(
    old: torch.Tensor | None, size: int, allocate: Callable[[int], torch.Tensor]
) -> torch.Tensor:
    """``old`` if it holds ``size`` elements (the other buffer needs growing, or another
    thread grew this one first), else a new buffer of ``size`` and at least twice ``old``'s,
    ``old`` kept in ``_replaced``. Call under ``_lock``."""
    if old is not None and old.numel() >= size:
        return old
    if old is not None:
        _replaced.append(old)
        size = max(size, 2 * old.numel())
    return allocate(size)
