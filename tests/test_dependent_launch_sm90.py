"""GPU: chains of convs launched with programmatic dependent launch (the default).

Each kernel of a chain may start its setup while the previous one runs. Every conv here reads
the buffer the previous conv wrote (read after write) and writes the buffer the previous conv
read (write after read), and the stream-K and dynamic stages share the stream's workspace, so
an access before ``griddepcontrol.wait`` would read stale or half-written data. Small maps
keep the grids small, so the next kernel's CTAs do start on the SMs left free. Every stage is
checked against a float32 reference of its own input, taken from a run synchronized between
stages, in which nothing overlaps.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfig
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs

pytestmark = pytest.mark.gpu

N, H, W, CHANNELS = 2, 14, 14, 256  # 8 tiles of 128x128 per conv, 36 k-tiles
STAGES = (
    Conv2dConfig(),
    Conv2dConfig(stream_k=True),
    Conv2dConfig(dynamic_schedule=True),
    Conv2dConfig(stream_k=True),
    Conv2dConfig(pingpong=True),
    Conv2dConfig(),
)


def _chain(first, filters, buffers, *, configs=STAGES, synchronize=False) -> torch.Tensor:
    """Run the stages from ``first``, ping-ponging between the two buffers."""
    buffers[0].copy_(first)
    for i, (flt, config) in enumerate(zip(filters, configs, strict=True)):
        cute_conv.conv2d_fprop(buffers[i % 2], flt, padding=1, out=buffers[(i + 1) % 2],
                               config=config)  # fmt: skip
        if synchronize:
            torch.cuda.synchronize()
    return buffers[len(configs) % 2]


def _inputs():
    first, _ = random_conv_inputs(N, H, W, CHANNELS, CHANNELS, 3, 3)
    filters = [random_conv_inputs(1, 1, 1, CHANNELS, CHANNELS, 3, 3)[1] for _ in STAGES]
    buffers = [torch.empty_like(first) for _ in range(2)]
    return first, filters, buffers


def _last_stage_reference(first, filters, buffers) -> torch.Tensor:
    """The float32 reference of the last stage, on its input from a run synchronized between
    stages; every stage is checked on the way."""
    buffers[0].copy_(first)
    for i, (flt, config) in enumerate(zip(filters, STAGES, strict=True)):
        src = buffers[i % 2]
        out = cute_conv.conv2d_fprop(src, flt, padding=1, config=config)
        torch.cuda.synchronize()
        ref = conv2d_reference(src, flt, padding=1)
        report = compare_to_reference(out, ref)
        assert report.ok, f"stage {i} ({config}): {report}"
        buffers[(i + 1) % 2].copy_(out)
    return ref


def _poison(buffers) -> None:
    for b in buffers:
        b.fill_(float("nan"))


def test_eager_chain_back_to_back():
    first, filters, buffers = _inputs()
    ref = _last_stage_reference(first, filters, buffers)
    _poison(buffers)
    out = _chain(first, filters, buffers)
    torch.cuda.synchronize()
    report = compare_to_reference(out, ref)
    assert report.ok, str(report)


def test_chain_replayed_as_a_cuda_graph():
    first, filters, buffers = _inputs()
    ref = _last_stage_reference(first, filters, buffers)
    _chain(first, filters, buffers, synchronize=True)  # compiled and warm before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _chain(first, filters, buffers)
    for _ in range(3):
        _poison(buffers)
        graph.replay()
        torch.cuda.synchronize()
        report = compare_to_reference(buffers[len(STAGES) % 2], ref)
        assert report.ok, str(report)


def test_plain_launch_gives_the_same_result():
    first, filters, buffers = _inputs()
    programmatic = _chain(first, filters, buffers).clone()
    plain = [dataclasses.replace(c, programmatic_launch=False) for c in STAGES]
    assert torch.equal(_chain(first, filters, buffers, configs=plain), programmatic)
