"""GPU numerics of half-step tile widths (48, 80, ..., 240: 16-wide epilogue subtiles)
against a float32 reference, the output inside a sentinel guard band
(``test_thread_store_sm90.run_and_check``): every width, K tails inside the last tile,
clusters, stream-K, residuals in both orders, thread-stored outputs (K not a multiple of 8),
gathered operands, fp8 inputs, fp32 outputs, default calls (bf16 and fp8) that take such a
width and one with an e4m3 output that does not."""

from __future__ import annotations

import pytest
import torch
from cute_conv.kernels.sm90.config import TILE_N_CHOICES

import cute_conv
from cute_conv import Conv2dConfig
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs
from tests.test_fp8_sm90 import run_fp8
from tests.test_thread_store_sm90 import run_and_check

pytestmark = pytest.mark.gpu

E4M3 = torch.float8_e4m3fn

HALF_STEPS = tuple(n for n in TILE_N_CHOICES if n % 32)


@pytest.mark.parametrize("tile_n", HALF_STEPS)
def test_every_half_step_width(tile_n):
    # K = 1.5 tiles: one whole tile and one half-filled one.
    run_and_check(2, 12, 12, 64, tile_n + tile_n // 2, 3, 3, geom=dict(padding=1),
                  config=Conv2dConfig(tile_n=tile_n))  # fmt: skip


CONFIGS = {
    "128x80-1x2": Conv2dConfig(tile_n=80, cluster_n=2),
    "128x208-2x1": Conv2dConfig(tile_n=208, cluster_m=2),
    "128x80-stream-k": Conv2dConfig(tile_n=80, stream_k=True),
    "128x176-split-3": Conv2dConfig(tile_n=176, stream_k=True, stream_k_split=3),
    "192x80": Conv2dConfig(tile_m=192, tile_n=80),
    "256x48-2x1": Conv2dConfig(tile_m=256, tile_n=48, cluster_m=2),
    "128x112-dynamic": Conv2dConfig(tile_n=112, dynamic_schedule=True),
}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_half_step_schedules(config):
    run_and_check(2, 20, 20, 128, 320, 3, 3, geom=dict(padding=1), config=config)


@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
@pytest.mark.parametrize("k", [160, 84], ids=["tma-store", "thread-store"])
def test_half_step_tiles_with_a_residual(order, k):
    run_and_check(2, 20, 20, 64, k, 3, 3, geom=dict(padding=1), config=Conv2dConfig(tile_n=80),
                  beta=0.5, order=order)  # fmt: skip


def test_half_step_tiles_gathered():
    # C = 30: the operands gathered in 2-channel loads instead of a channel pad.
    config = Conv2dConfig(tile_n=80, tile_k=32, gather=True, gather_vector=2)
    run_and_check(2, 20, 20, 30, 160, 3, 3, geom=dict(padding=1), config=config)


def test_half_step_fp8_tiles():
    # bf16 output (e4m3: test_half_step_tiles_store_e4m3).
    run_fp8((2, 20, 20, 128, 240, 3, 3, dict(padding=1)), config=Conv2dConfig(tile_n=80,
            tile_k=128))  # fmt: skip


@pytest.mark.parametrize("tile_n", [80, 208])
def test_half_step_tiles_store_e4m3(tile_n):
    # 8-bit values in 16-wide subtiles: the copy into SMEM tiles 16 columns, not 32
    # (tests/test_epilogue_r2s_copy.py).
    run_fp8((2, 20, 20, 128, tile_n + tile_n // 2, 3, 3, dict(padding=1)), out_dtype=E4M3,
            config=Conv2dConfig(tile_n=tile_n, tile_k=128))  # fmt: skip


def test_half_step_tiles_with_fp32_output():
    run_and_check(2, 12, 12, 64, 200, 3, 3, geom=dict(padding=1), out_dtype=torch.float32,
                  config=Conv2dConfig(tile_n=80))  # fmt: skip


def test_a_default_call_takes_a_half_step_width():
    # SDXL's 1x1 C=2560 -> 1280 conv at 32x32: the heuristic's 128x80 tiles.
    problem = cute_conv.Conv2dProblemShape(N=1, H=32, W=32, C=2560, K=1280, R=1, S=1)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    if cute_conv.default_config(problem, num_sms).tile_n % 32 == 0:
        pytest.skip(f"on {num_sms} SMs the heuristic takes a whole-step width here")
    run_and_check(1, 32, 32, 2560, 1280, 1, 1, bias=False, scale=False, activation=None,
                  alpha=1.0)  # fmt: skip


def test_a_default_fp8_call_takes_a_half_step_width():
    problem = cute_conv.Conv2dProblemShape(N=1, H=32, W=32, C=2560, K=1280, R=1, S=1)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    if cute_conv.default_config(problem, num_sms, element_bytes=1).tile_n % 32 == 0:
        pytest.skip(f"on {num_sms} SMs the heuristic takes a whole-step width here")
    run_fp8((1, 32, 32, 2560, 1280, 1, 1, {}))


def test_a_default_call_with_e4m3_output_keeps_whole_steps():
    # Half steps were not measured with 8-bit outputs: the call passes its output width to
    # the heuristic, which keeps 128x96 here (128x80 for a 16-bit output).
    x, flt = random_conv_inputs(1, 32, 32, 2560, 1280, 1, 1)
    ref = conv2d_reference(x, flt)
    out_scale = (ref.abs().max() / 400).reshape(1).float()
    out = cute_conv.conv2d_fprop(x, flt, out_dtype=torch.float8_e4m3fn, out_scale=out_scale)
    report = compare_to_reference(out, ref / out_scale)
    assert report.ok, report
