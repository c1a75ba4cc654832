"""Scratch memory of the stream-K and dynamically scheduled kernels, one pair of buffers per
device and stream.

A stream-K kernel (``Conv2dConfig.stream_k``) sums the tiles it splits between SMs through
float32 partials (one tile per CTA of the grid) and int32 counters (one per output tile) that
it leaves at zero when it ends. A dynamically scheduled kernel (``dynamic_schedule``) needs
only its int32 work counters, also left at zero. Calls on one stream run in order, so they
share the stream's buffers; other streams get their own. Buffers only grow: the first call of
a new, larger size allocates (and zeroes the counters) on the call's stream.
"""

from __future__ import annotations

import threading

import torch

from .config import Conv2dConfig
from .kernels.sm90.conv2d_fprop import WORK_COUNTERS as DYNAMIC_SCHEDULE_COUNTERS
from .problem import Conv2dProblemShape

__all__ = ["DYNAMIC_SCHEDULE_COUNTERS", "kernel_workspace", "kernel_workspace_size"]

_buffers: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
_lock = threading.Lock()


def kernel_workspace_size(
    problem: Conv2dProblemShape, config: object, max_clusters: int
) -> tuple[int, int] | None:
    """``(float32 partials, int32 flags)`` a launch of ``config`` on the kernel problem
    ``problem`` with at most ``max_clusters`` clusters needs; None for a kernel with neither
    stream-K nor dynamic scheduling."""
    if not isinstance(config, Conv2dConfig):
        return None
    if config.dynamic_schedule:
        return 0, DYNAMIC_SCHEDULE_COUNTERS
    if not config.stream_k:
        return None
    cluster_size = config.cluster_m * config.cluster_n
    tiles_m = -(-problem.gemm_m // config.tile_m)
    tiles_n = -(-problem.K // config.tile_n)
    cluster_tiles = -(-tiles_m // config.cluster_m) * -(-tiles_n // config.cluster_n)
    partials = max_clusters * cluster_size * config.tile_m * config.tile_n
    return partials, cluster_tiles * cluster_size


def kernel_workspace(
    device_index: int, stream: int, partial_floats: int, num_flags: int
) -> tuple[int, int]:
    """Device addresses of at least ``partial_floats`` float32 values and ``num_flags`` zeroed
    int32 counters for kernels launched on the raw CUDA stream ``stream``."""
    key = (device_index, stream)
    buffers = _buffers.get(key)
    if buffers is None or buffers[0].numel() < partial_floats or buffers[1].numel() < num_flags:
        with _lock:
            buffers = _grow(key, partial_floats, num_flags)
    return buffers[0].data_ptr(), buffers[1].data_ptr()


def _grow(key: tuple[int, int], partial_floats: int, num_flags: int):
    device_index, stream = key
    old = _buffers.get(key)
    if old is not None:
        partial_floats = max(partial_floats, old[0].numel())
        num_flags = max(num_flags, old[1].numel())
    device = torch.device("cuda", device_index)
    # Allocated on the call's stream: the caching allocator hands the old buffers, once
    # dropped, only to later work of this stream, after the kernels that still use them.
    with torch.cuda.device(device), torch.cuda.stream(torch.cuda.ExternalStream(stream)):
        new = (
            torch.empty(partial_floats, dtype=torch.float32, device=device),
            torch.zeros(num_flags, dtype=torch.int32, device=device),
        )
    _buffers[key] = new
    return new
