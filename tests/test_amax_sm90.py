"""GPU numerics of the output amax the epilogue keeps (``out_amax=``,
``EpilogueSpec.has_amax``): against the largest magnitude of a float32 reference, in every
schedule, with the TMA store and the threads' stores, a residual, fp8 inputs and an fp8
output, and a staged call.

The inputs and filter are non-negative and the last channel's bias is -100: its true outputs
are -100 plus a positive sum (magnitude below 100), while a value the kernel computes past
the output (an M-tail row or an N-tail column, whose sum is 0 and whose clamped bias is
the last channel's) has magnitude exactly 100. An amax that counted them would be 100.
"""

from __future__ import annotations

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfig
from cute_conv.testing import ACCUMULATION_RTOL_FP8, random_conv_inputs
from tests.test_compile_thread_store import CASES
from tests.test_epilogue_sm90 import reference

pytestmark = pytest.mark.gpu

PROBE = -100.0
RTOL_16BIT = 1e-4  # exact products, fp32 sums in another order than the reference's
E4M3 = torch.float8_e4m3fn


def probe_inputs(n, h, w, c, k, r, s):
    """Non-negative inputs and a bias whose last channel is ``PROBE`` (module docstring)."""
    x, flt = random_conv_inputs(n, h, w, c, k, r, s, dtype=torch.float32)
    bias = torch.randn(k, device="cuda") * 0.1
    bias[-1] = PROBE
    return x.abs(), flt.abs() / (r * s * c) ** 0.5, bias


def check_amax(amax: torch.Tensor, ref: torch.Tensor, rtol: float) -> None:
    expected = ref.abs().max()
    assert expected < abs(PROBE)  # the probe can tell a tail value from an output
    torch.testing.assert_close(amax, expected.reshape(1), rtol=rtol, atol=0.0)


def run_16bit(shape, geom, *, config=None, beta=None, order="after_activation",
              activation=None, out_dtype=torch.bfloat16):  # fmt: skip
    x, flt, bias = probe_inputs(*shape)
    x, flt = x.to(torch.bfloat16), flt.to(torch.bfloat16)
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    amax = torch.zeros(1, device="cuda")
    kwargs = dict(bias=bias, activation=activation, config=config, out_dtype=out_dtype,
                  out_amax=amax, **geom)  # fmt: skip
    source = None
    if beta is None:
        cute_conv.conv2d_fprop(x, flt, **kwargs)
    else:
        source = torch.rand(problem.output_shape, device="cuda").to(out_dtype)
        cute_conv.conv2d_fprop_with_residual(
            x, flt, source, beta=beta, residual_order=order, **kwargs
        )
    torch.cuda.synchronize()
    ref = reference(x, flt, geom, bias=bias, activation=activation, source=source,
                    beta=beta or 0.0, order=order)  # fmt: skip
    check_amax(amax, ref, RTOL_16BIT)
    return amax, ref


SCHEDULES = {name: c for name, c in CASES.items() if name != "halo"}
# N*P*Q = 200: an M tail in every tile shape; K = 72: an N tail.
TAILS = ((2, 10, 10, 32, 72, 3, 3), dict(padding=1))


@pytest.mark.parametrize("config", SCHEDULES.values(), ids=SCHEDULES.keys())
def test_amax_of_the_tma_stored_output_leaves_the_tails_out(config):
    run_16bit(*TAILS, config=config)


@pytest.mark.parametrize("config", SCHEDULES.values(), ids=SCHEDULES.keys())
def test_amax_of_the_thread_stored_output(config):
    shape, geom = TAILS
    run_16bit((*shape[:4], 37, *shape[5:]), geom, config=config)  # K=37: stored by threads


@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
@pytest.mark.parametrize("config", [None, Conv2dConfig(pingpong=True)], ids=["default", "pingpong"])
def test_amax_with_a_residual(order, config):
    run_16bit(*TAILS, config=config, beta=0.5, order=order, activation="relu")


def test_amax_with_halo_tiles():
    run_16bit((2, 56, 56, 64, 64, 3, 3), dict(padding=1),
              config=Conv2dConfig(tile_m=256, tile_n=64, tile_w=64, halo_h=6))  # fmt: skip


def test_amax_of_a_staged_call():
    run_16bit((2, 10, 10, 3, 72, 3, 3), dict(padding=1))  # C=3: padded to 8 on the host


def test_amax_of_an_fp8_output_is_in_real_units():
    shape, geom = TAILS
    x, flt, bias = probe_inputs(*shape)
    qx, x_scale = cute_conv.quantize_fp8(x)
    qf, w_scale = cute_conv.quantize_fp8(flt)
    ref = reference(qx.float() * x_scale, qf.float() * w_scale, geom, bias=bias)
    amax = torch.zeros(1, device="cuda")
    out_scale = torch.tensor(0.5, device="cuda")
    cute_conv.conv2d_fprop(qx, qf, bias=bias, x_scale=x_scale, w_scale=w_scale, out_dtype=E4M3,
                           out_scale=out_scale, out_amax=amax, **geom)  # fmt: skip
    torch.cuda.synchronize()
    check_amax(amax, ref, ACCUMULATION_RTOL_FP8)  # before the division by out_scale


def test_amax_accumulates_over_calls_and_propagates_nan():
    shape, geom = TAILS
    x, flt, bias = probe_inputs(*shape)
    x, flt = x.to(torch.bfloat16), flt.to(torch.bfloat16)
    amax = torch.full((1,), 1e6, device="cuda")
    cute_conv.conv2d_fprop(x, flt, bias=bias, out_amax=amax, **geom)
    assert amax.item() == 1e6  # raised, never lowered: not reset by the call
    x[0, 3, 3, 0] = float("nan")
    cute_conv.conv2d_fprop(x, flt, bias=bias, out_amax=amax, **geom)
    assert amax.isnan().all()


def test_amax_in_a_cuda_graph_is_raised_on_every_replay():
    shape, geom = TAILS
    x, flt, bias = probe_inputs(*shape)
    x, flt = x.to(torch.bfloat16), flt.to(torch.bfloat16)
    amax = torch.zeros(1, device="cuda")
    cute_conv.conv2d_fprop(x, flt, bias=bias, out_amax=amax, **geom)  # compiled, warmed up
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cute_conv.conv2d_fprop(x, flt, bias=bias, out_amax=amax, **geom)
    for scale in (1.0, 0.5):
        amax.zero_()
        x.mul_(scale)
        graph.replay()
        torch.cuda.synchronize()
        check_amax(amax, reference(x, flt, geom, bias=bias), RTOL_16BIT)
