"""The CUDA device and stream a call runs on, read at the cost of a C call.

Torch's public accessors build Python objects on every call (``torch.cuda.current_stream``:
a Stream, ~3 us; ``torch.cuda.device``: a context manager that looks up the device index
twice): too much for a path that launches a kernel of a few microseconds. Torch's C
accessors are used where the torch build has them, the public ones otherwise.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Callable

import torch

from .validation import check_compute_capability

__all__ = ["current_device", "current_raw_stream", "device_arch", "on_device"]


def _public_raw_stream(device_index: int) -> int:
    """The ``cudaStream_t`` of the current torch stream of a device, by the public API."""
    return torch.cuda.current_stream(device_index).cuda_stream


# The current stream's handle (the one Triton launches with) and the current device: 0.1 us
# where the public API takes microseconds (the C device getter initializes CUDA itself).
current_raw_stream: Callable[[int], int] = getattr(
    torch._C, "_cuda_getCurrentRawStream", _public_raw_stream
)
current_device: Callable[[], int] = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)


def on_device(device_index: int) -> contextlib.AbstractContextManager:
    """Make ``device_index`` current for a launch: no context switch when it already is."""
    if device_index == current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device_index)


@functools.lru_cache(maxsize=None)
def device_arch(device_index: int) -> str:
    """The arch name of a CUDA device (``check_compute_capability``), looked up once."""
    capability = torch.cuda.get_device_capability(device_index)
    return check_compute_capability(capability, torch.device("cuda", device_index))
