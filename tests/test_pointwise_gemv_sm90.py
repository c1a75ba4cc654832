"""GPU numerics of the CUDA-core kernel of few-row 1x1 convs (``PointwiseGemv``), against
float32 with the output inside a sentinel guard band (``test_thread_store_sm90.run_and_check``):
every vector width, rows per CTA and channels per warp, tails in M, K and C, strides, every
epilogue term (scale, bias, activations, a user function, both residual orders, in place),
16-bit and float32 outputs, the amax and the source's device scale, CUDA-graph replays, and
the calls the rule sends to it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import cute_conv
import cute_conv.reference
from cute_conv import PointwiseGemvConfig
from cute_conv.dispatch import _plan
from cute_conv.gemv_rule import widest_vector
from cute_conv.testing import compare_to_reference, random_conv_inputs
from tests.test_amax_sm90 import run_16bit
from tests.test_thread_store_sm90 import run_and_check

pytestmark = pytest.mark.gpu

# (n, h, w, c, k, geometry): M = N*P*Q of 1 to 4096 (tails of every rows per CTA), K not a
# multiple of a CTA's channels, C past several rounds of 32 lanes x unroll vectors, strides.
PROBLEMS = {
    "m1-c888": (1, 1, 1, 888, 84, {}),
    "m3-c40": (3, 1, 1, 40, 37, {}),
    "m8-c2048": (8, 1, 1, 2048, 96, {}),
    "m13-c24": (1, 13, 1, 24, 130, {}),
    "m24-s2": (1, 16, 6, 304, 100, dict(stride=2)),
    "m40-s3x1": (2, 10, 7, 16, 9, dict(stride=(3, 1))),
    "m4096": (4, 32, 32, 64, 40, {}),  # past the rule, as a user's config may take it
}
CONFIGS = {
    "r1c2u2": PointwiseGemvConfig(rows=1, channels_per_warp=2, unroll=2),
    "r2c4u1": PointwiseGemvConfig(rows=2, channels_per_warp=4, unroll=1),
    "r4c1u4": PointwiseGemvConfig(rows=4, channels_per_warp=1, unroll=4),
    "r8c2u2": PointwiseGemvConfig(rows=8, channels_per_warp=2, unroll=2),
    "r4c8u1": PointwiseGemvConfig(rows=4, channels_per_warp=8, unroll=1),
}


def with_vector(config: PointwiseGemvConfig, c: int) -> PointwiseGemvConfig:
    return dataclasses.replace(config, vector=widest_vector(c))


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
@pytest.mark.parametrize("problem", PROBLEMS.values(), ids=PROBLEMS.keys())
def test_gemv_shapes(problem, config):
    n, h, w, c, k, geom = problem
    run_and_check(n, h, w, c, k, 1, 1, geom=geom, config=with_vector(config, c))


@pytest.mark.parametrize("c,vector", [(26, 2), (36, 4), (13, 1), (64, 2), (64, 1)])
def test_gemv_vector_widths(c, vector):
    # Narrower vectors than C allows, and the odd C of 1-channel loads.
    run_and_check(5, 1, 1, c, 70, 1, 1, config=PointwiseGemvConfig(vector=vector, rows=2))


@pytest.mark.parametrize(
    "epilogue",
    [dict(bias=False, scale=False, activation=None, alpha=1.0), dict(activation="silu"),
     dict(activation="gelu_tanh", scale=False), dict(beta=0.5), dict(beta=-1.0, in_place=True),
     dict(beta=0.5, order="before_activation"), dict(out_dtype=torch.float32),
     dict(out_dtype=torch.float16, beta=1.0)],
    ids=["linear", "silu", "gelu-tanh", "residual", "in-place", "pre-act", "fp32", "fp16"],
)  # fmt: skip
def test_gemv_epilogues(epilogue):
    run_and_check(8, 1, 1, 336, 84, 1, 1, config=PointwiseGemvConfig(), **epilogue)


def test_gemv_epilogue_function():
    x, flt = random_conv_inputs(4, 1, 1, 120, 30, 1, 1)
    out = cute_conv.conv2d_fprop(x, flt, epilogue_fn=lambda y: y * 0.5 + 1.0)
    ref = cute_conv.reference.conv2d_reference(x, flt) * 0.5 + 1.0
    assert compare_to_reference(out, ref).ok


@pytest.mark.parametrize("beta", [None, 0.5])
def test_gemv_amax_leaves_the_tails_out(beta):
    # M = 3, K = 37: the clamped rows and channels of a CTA are computed, never counted.
    run_16bit((3, 1, 1, 64, 37, 1, 1), {}, config=PointwiseGemvConfig(rows=4), beta=beta)


def test_gemv_source_scale_is_beta_read_from_the_device():
    x, w = random_conv_inputs(8, 1, 1, 120, 30, 1, 1)
    source = torch.randn(8, 1, 1, 30, device="cuda").to(torch.bfloat16)
    scale = torch.tensor(0.375, device="cuda")
    kwargs = dict(activation="relu", residual_order="before_activation")
    by_beta = cute_conv.conv2d_fprop_with_residual(x, w, source, beta=0.5 * 0.375, **kwargs)
    by_device = cute_conv.conv2d_fprop_with_residual(
        x, w, source, beta=0.5, source_scale=scale, **kwargs
    )
    assert torch.equal(by_device.float(), by_beta.float())


def test_gemv_replays_in_a_cuda_graph():
    x, flt = random_conv_inputs(8, 1, 1, 222, 888, 1, 1)
    out = torch.empty(8, 1, 1, 888, device="cuda", dtype=torch.bfloat16)
    cute_conv.conv2d_fprop(x, flt, out=out)  # compiles outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cute_conv.conv2d_fprop(x, flt, out=out)
    x.copy_(torch.randn_like(x))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert compare_to_reference(out, cute_conv.reference.conv2d_reference(x, flt)).ok


def plan_config(n, h, w, c, k, r=1, **geom):
    x = torch.empty(n, h, w, c, device="cuda", dtype=torch.bfloat16)
    flt = torch.empty(k, r, r, c, device="cuda", dtype=torch.bfloat16)
    args = (geom.get("stride", 1), geom.get("padding", 0), 1, 1.0, 0.0, "after_activation",
            None, None, None, None)  # fmt: skip
    plan = _plan(x, flt, None, None, None, None, args, None)
    return plan.kernel.key.config, plan


def test_the_rule_sends_few_row_1x1s_to_the_gemv_and_the_rest_to_tensor_cores():
    config, plan = plan_config(1, 1, 1, 222, 888)
    assert config == PointwiseGemvConfig(vector=2)
    assert not plan.needs_staging and plan.staging.kernel_problem.C == 222  # read unpadded
    config, _ = plan_config(32, 1, 1, 30, 120)
    assert config == PointwiseGemvConfig(vector=2, rows=4)
    for shape in [(64, 1, 1, 64, 64), (1, 3, 3, 64, 64, 3), (1, 1, 1, 13, 64)]:
        config, _ = plan_config(*shape)
        assert isinstance(config, cute_conv.Conv2dConfig), shape
    run_and_check(1, 1, 1, 222, 888, 1, 1)  # the default call itself


def test_a_gemv_config_that_does_not_fit_is_refused_before_the_launch():
    x, flt = random_conv_inputs(1, 1, 1, 36, 64, 1, 1)
    out = torch.full((1, 1, 1, 64), float("nan"), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="C=36 must be a multiple"):
        cute_conv.conv2d_fprop(x, flt, out=out, config=PointwiseGemvConfig(vector=8))
    x3, flt3 = random_conv_inputs(1, 4, 4, 16, 64, 3, 3)
    with pytest.raises(ValueError, match="1x1 convs"):
        cute_conv.conv2d_fprop(x3, flt3, config=PointwiseGemvConfig())
    assert out.isnan().all()  # nothing written
