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
# Gathered operands (C not a multiple of 8): the gather warps wait in their first tile.
GATHER_CHANNELS = 12
GATHER_STAGES = (
    Conv2dConfig(tile_m=64, tile_n=32, tile_k=16, gather=True, gather_vector=2),
    Conv2dConfig(tile_m=64, tile_n=32, tile_k=16, gather=True, gather_vector=4),
    Conv2dConfig(tile_n=64, tile_k=16, gather=True, gather_vector=4),
    Conv2dConfig(tile_m=64, tile_n=32, tile_k=16, gather=True, gather_vector=2),
)
# Residual stages whose four gather warps' warp 1 loads C: each stage's C is its input, the
# previous stage's output, so warp 1's first C load must wait for the previous grid too.
SOURCE_GATHER_STAGES = (
    Conv2dConfig(tile_m=64, tile_n=64, tile_k=16, gather=True, gather_vector=4),
    Conv2dConfig(tile_m=128, tile_n=64, tile_k=16, gather=True, gather_vector=2),
) * 2


def _conv(src, flt, out, config) -> torch.Tensor:
    return cute_conv.conv2d_fprop(src, flt, padding=1, out=out, config=config)


def _conv_reference(src, flt) -> torch.Tensor:
    return conv2d_reference(src, flt, padding=1)


def _residual_conv(src, flt, out, config) -> torch.Tensor:
    """``relu(conv(x)) + x``: C is the stage's input."""
    return cute_conv.conv2d_fprop_with_residual(
        src, flt, src, padding=1, activation="relu", out=out, config=config
    )


def _residual_reference(src, flt) -> torch.Tensor:
    return conv2d_reference(src, flt, padding=1).relu() + src.float()


def _chain(
    first, filters, buffers, *, configs=STAGES, stage=_conv, synchronize=False
) -> torch.Tensor:
    """Run the stages (``stage(src, filter, out, config)``) from ``first``, ping-ponging
    between the two buffers."""
    buffers[0].copy_(first)
    for i, (flt, config) in enumerate(zip(filters, configs, strict=True)):
        stage(buffers[i % 2], flt, buffers[(i + 1) % 2], config)
        if synchronize:
            torch.cuda.synchronize()
    return buffers[len(configs) % 2]


def _inputs(channels=CHANNELS, stages=STAGES):
    first, _ = random_conv_inputs(N, H, W, channels, channels, 3, 3)
    filters = [random_conv_inputs(1, 1, 1, channels, channels, 3, 3)[1] for _ in stages]
    buffers = [torch.empty_like(first) for _ in range(2)]
    return first, filters, buffers


def _last_stage_reference(
    first, filters, buffers, stages=STAGES, stage=_conv, reference=_conv_reference
) -> torch.Tensor:
    """The float32 reference of the last stage, on its input from a run synchronized between
    stages; every stage is checked on the way."""
    buffers[0].copy_(first)
    for i, (flt, config) in enumerate(zip(filters, stages, strict=True)):
        src = buffers[i % 2]
        out = stage(src, flt, None, config)
        torch.cuda.synchronize()
        ref = reference(src, flt)
        report = compare_to_reference(out, ref)
        assert report.ok, f"stage {i} ({config}): {report}"
        buffers[(i + 1) % 2].copy_(out)
    return ref


def _poison(buffers) -> None:
    for b in buffers:
        b.fill_(float("nan"))


def _check_graph_replays(channels, stages, stage=_conv, reference=_conv_reference) -> None:
    """The chain of ``stages`` captured in a CUDA graph, replayed three times into poisoned
    buffers: the last stage's output matches the reference each time."""
    first, filters, buffers = _inputs(channels, stages)
    ref = _last_stage_reference(first, filters, buffers, stages, stage, reference)
    # Compiled and warm before capture.
    _chain(first, filters, buffers, configs=stages, stage=stage, synchronize=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _chain(first, filters, buffers, configs=stages, stage=stage)
    for _ in range(3):
        _poison(buffers)
        graph.replay()
        torch.cuda.synchronize()
        report = compare_to_reference(buffers[len(stages) % 2], ref)
        assert report.ok, str(report)


def test_eager_chain_back_to_back():
    first, filters, buffers = _inputs()
    ref = _last_stage_reference(first, filters, buffers)
    _poison(buffers)
    out = _chain(first, filters, buffers)
    torch.cuda.synchronize()
    report = compare_to_reference(out, ref)
    assert report.ok, str(report)


def test_chain_replayed_as_a_cuda_graph():
    _check_graph_replays(CHANNELS, STAGES)


def test_plain_launch_gives_the_same_result():
    first, filters, buffers = _inputs()
    programmatic = _chain(first, filters, buffers).clone()
    plain = [dataclasses.replace(c, programmatic_launch=False) for c in STAGES]
    assert torch.equal(_chain(first, filters, buffers, configs=plain), programmatic)


def test_gathered_chain_replayed_as_a_cuda_graph():
    _check_graph_replays(GATHER_CHANNELS, GATHER_STAGES)


def test_gathered_residual_chain_replayed_as_a_cuda_graph():
    from kernels.sm90.pipeline_checks import Sm90Roles

    for config in SOURCE_GATHER_STAGES:
        assert Sm90Roles.of(config, loads_source_by_tma=True).source_loader_gathers
    _check_graph_replays(GATHER_CHANNELS, SOURCE_GATHER_STAGES, _residual_conv, _residual_reference)
