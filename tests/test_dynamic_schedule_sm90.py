"""Dynamic tile scheduling on the GPU: every tile computed once, counters left at zero."""

from __future__ import annotations

import pytest
import torch

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs
from tests.repeated_calls import assert_repeated_calls_match

pytestmark = pytest.mark.gpu

Config = cute_conv.Conv2dConfig
DYNAMIC_CONFIGS = [
    Config(tile_n=128, dynamic_schedule=True),
    Config(tile_n=256, dynamic_schedule=True),
    Config(tile_m=256, tile_n=64, dynamic_schedule=True),
    Config(tile_n=96, tile_k=32, dynamic_schedule=True),
    Config(tile_m=192, tile_n=128, dynamic_schedule=True),
]
# (N, H, W, C, K, R, S, padding): many waves of tiles (most taken from the counter), M and K
# tails, fewer tiles than SMs (nothing taken from the counter), a 3x3 conv.
SHAPES = [
    (32, 28, 28, 64, 256, 1, 1, 0),
    (5, 19, 23, 200, 328, 1, 1, 0),
    (1, 5, 5, 64, 96, 1, 1, 0),
    (8, 14, 14, 128, 128, 3, 3, 1),
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[:7])))
@pytest.mark.parametrize(
    "config", DYNAMIC_CONFIGS, ids=lambda c: f"m{c.tile_m}n{c.tile_n}k{c.tile_k}"
)
def test_dynamic_schedule_matches_the_reference(shape, config):
    n, h, w, c, k, r, s, pad = shape
    act, flt = random_conv_inputs(n, h, w, c, k, r, s)
    assert_repeated_calls_match(act, flt, pad, config)


def test_dynamic_schedule_on_two_streams_at_once():
    """Each stream has its own counters: kernels running at once must not take each other's
    tiles."""
    config = DYNAMIC_CONFIGS[0]
    act, flt = random_conv_inputs(32, 28, 28, 64, 256, 1, 1)
    ref = conv2d_reference(act, flt)
    streams = [torch.cuda.Stream() for _ in range(2)]
    outs = [
        torch.full(ref.shape, float("nan"), dtype=torch.bfloat16, device="cuda") for _ in streams
    ]
    torch.cuda.synchronize()
    for _ in range(5):
        for stream, out in zip(streams, outs, strict=True):
            with torch.cuda.stream(stream):
                cute_conv.conv2d_fprop(act, flt, out=out, config=config)
    torch.cuda.synchronize()
    for out in outs:
        assert compare_to_reference(out, ref).ok


def test_residual_epilogue_with_dynamic_scheduling():
    """The default of a residual 1x1 conv of many waves (128-wide tiles, 3136 of them, past
    ``MIN_WAVES_DYNAMIC`` waves of 132 SMs): dynamically scheduled, the C tiles loaded for
    whichever output tile the counter hands out."""
    act, flt = random_conv_inputs(64, 56, 56, 64, 256, 1, 1)  # 256 wide plain, 128 fused
    problem = cute_conv.Conv2dProblemShape.from_shapes(act.shape, flt.shape)
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    config = cute_conv.default_config(problem, sm_count, has_residual=True)
    assert config.dynamic_schedule
    bias = torch.randn(256, device="cuda").to(torch.bfloat16)
    source = torch.randn(problem.output_shape, device="cuda").to(torch.bfloat16)
    ref = torch.relu(conv2d_reference(act, flt) + bias.float()) + source.float()
    out = torch.empty_like(source)
    for _ in range(3):  # the counters must be back at zero for the next call
        out.fill_(float("nan"))
        cute_conv.conv2d_fprop_with_residual(
            act, flt, source, bias=bias, activation="relu", out=out, config=config
        )
        assert compare_to_reference(out, ref).ok
