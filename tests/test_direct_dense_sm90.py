"""GPU numerics of few-channel dense convs on the grouped kernel's direct form reading the
KRSC filter (``GroupedDirectConfig(filter_krsc=True)``, ``cute_conv.direct_rule``), against
float32 with the output inside a sentinel guard band (``test_thread_store_sm90.run_and_check``):
the stems the rule takes and configs past it (C of 1 to 16, K of 4 to 64 and K not a multiple
of 8 at 4, 2 and 1 channels per thread, strides, dilation, asymmetric padding, several pixels
per thread), every epilogue term it runs (scale, bias, activations, both residual orders, in
place), 16-bit and float32 outputs, a channel-slice output, a CUDA-graph replay, and the calls
the rule sends to it or leaves to the tensor cores."""

from __future__ import annotations

import pytest
import torch
from cute_conv.kernels.common.grouped_direct import output_vector

import cute_conv
import cute_conv.reference
from cute_conv import Conv2dConfig, GroupedDirectConfig
from cute_conv.testing import compare_to_reference, random_conv_inputs
from tests.test_pointwise_gemv_sm90 import plan_config
from tests.test_thread_store_sm90 import run_and_check

pytestmark = pytest.mark.gpu

# (n, h, w, c, k, r, s, geometry)
PROBLEMS = {
    "stem-3x3-s2": (2, 33, 29, 3, 32, 3, 3, dict(stride=2, padding=1)),
    "stem-k16": (1, 40, 40, 3, 16, 3, 3, dict(stride=2, padding=1)),
    "c1-dilated-1x7": (3, 12, 34, 1, 24, 1, 7, dict(stride=2, padding=((0, 0), (5, 0)),
                                                    dilation=(1, 3))),  # fmt: skip
    "c8-1x1": (2, 20, 17, 8, 8, 1, 1, {}),
    "c16-5x5": (1, 19, 23, 16, 64, 5, 5, dict(padding=2)),  # past the rule's bounds
    "c5-7x7": (2, 21, 18, 5, 24, 7, 7, dict(stride=(2, 3), padding=2)),
    # K not a multiple of 8: 4, 2 and 1 output channels per thread
    "c4-k4-1x1": (2, 20, 17, 4, 4, 1, 1, {}),
    "c3-k6-3x3": (2, 17, 19, 3, 6, 3, 3, dict(stride=2, padding=1)),
    "c13-k5-1x1": (3, 15, 21, 13, 5, 1, 1, {}),
    "c3-k13-5x5": (2, 24, 29, 3, 13, 5, 5, dict(stride=3, padding=((2, 6), (0, 0)),
                                                dilation=(3, 1))),  # fmt: skip
}


def direct(c: int, k: int, pixels: int = 1) -> GroupedDirectConfig:
    return GroupedDirectConfig(c, k, pixels=pixels, filter_krsc=True, vector=output_vector(k))


@pytest.mark.parametrize("pixels", [1, 2, 4, 8])
@pytest.mark.parametrize("problem", PROBLEMS.values(), ids=PROBLEMS.keys())
def test_direct_shapes(problem, pixels):
    n, h, w, c, k, r, s, geom = problem
    run_and_check(n, h, w, c, k, r, s, geom=geom, config=direct(c, k, pixels))


@pytest.mark.parametrize("c,k", [(3, 32), (4, 4), (13, 5)], ids=["k32", "k4", "k5"])
@pytest.mark.parametrize(
    "epilogue",
    [dict(bias=False, scale=False, activation=None, alpha=1.0), dict(activation="silu"),
     dict(beta=0.5), dict(beta=-1.0, in_place=True), dict(beta=0.5, order="before_activation"),
     dict(out_dtype=torch.float32), dict(out_dtype=torch.float16, beta=1.0)],
    ids=["linear", "silu", "residual", "in-place", "pre-act", "fp32", "fp16"],
)  # fmt: skip
def test_direct_epilogues(epilogue, c, k):
    run_and_check(2, 30, 30, c, k, 3, 3, geom=dict(stride=2, padding=1), config=direct(c, k, 4),
                  **epilogue)  # fmt: skip


@pytest.mark.parametrize("k", [32, 5, 4], ids=lambda k: f"k{k}")
def test_direct_writes_a_channel_slice_in_place(k):
    offset = 8  # 16 bytes: the output's base alignment
    x, flt = random_conv_inputs(2, 24, 24, 3, k, 3, 3)
    buffer = torch.full((2, 12, 12, 48), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = buffer[..., offset:offset + k]
    cute_conv.conv2d_fprop(x, flt, stride=2, padding=1, out=out, config=direct(3, k, 2))
    ref = cute_conv.reference.conv2d_reference(x, flt, stride=2, padding=1)
    assert compare_to_reference(out, ref).ok
    assert buffer[..., :offset].isnan().all() and buffer[..., offset + k:].isnan().all()


def test_direct_replays_in_a_cuda_graph():
    x, flt = random_conv_inputs(1, 64, 64, 3, 32, 3, 3)
    out = torch.empty(1, 32, 32, 32, device="cuda", dtype=torch.bfloat16)
    cute_conv.conv2d_fprop(x, flt, stride=2, padding=1, out=out)  # compiles outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cute_conv.conv2d_fprop(x, flt, stride=2, padding=1, out=out)
    x.copy_(torch.randn_like(x))
    flt.copy_(torch.randn_like(flt) / 5)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref = cute_conv.reference.conv2d_reference(x, flt, stride=2, padding=1)
    assert compare_to_reference(out, ref).ok


def test_the_rule_sends_few_channel_stems_to_the_direct_form():
    config, plan = plan_config(1, 224, 224, 3, 32, 3, stride=2, padding=1)
    assert isinstance(config, GroupedDirectConfig) and config.filter_krsc
    assert not plan.needs_staging and plan.staging.kernel_problem.C == 3  # read unpadded
    for shape, geom in [((1, 224, 224, 3, 64, 7), dict(stride=2, padding=3)),
                        ((32, 224, 224, 3, 32, 3), dict(stride=2, padding=1))]:  # fmt: skip
        config, _ = plan_config(*shape, **geom)
        assert isinstance(config, Conv2dConfig), shape
    run_and_check(1, 224, 224, 3, 32, 3, 3, geom=dict(stride=2, padding=1))  # the default call
    run_and_check(1, 224, 224, 3, 32, 3, 3, geom=dict(stride=2, padding=1), beta=1.0)  # residual


@pytest.mark.parametrize("c,k,vector", [(4, 4, 4), (13, 5, 1), (5, 46, 2)],
                         ids=["k4", "k5", "k46"])  # fmt: skip
def test_the_rule_sends_few_output_channels_to_the_direct_form(c, k, vector):
    config, plan = plan_config(2, 48, 48, c, k, 1)  # 4,608 output pixels
    assert isinstance(config, GroupedDirectConfig) and config.vector == vector
    assert not plan.needs_staging
    run_and_check(2, 48, 48, c, k, 1, 1)  # the default call
    run_and_check(2, 48, 48, c, k, 1, 1, beta=1.0)


def test_staged_convs_past_the_k_bound_run_on_the_tensor_cores():
    config, _ = plan_config(2, 48, 48, 5, 86, 1)  # K past DIRECT_STAGED_MAX_K
    assert isinstance(config, Conv2dConfig)
    run_and_check(2, 48, 48, 5, 86, 1, 1)  # the default call
    run_and_check(2, 48, 48, 5, 86, 1, 1, beta=1.0)


def test_one_channel_in_and_out_runs_on_the_tensor_cores():
    config, _ = plan_config(1, 64, 64, 1, 1, 3, padding=1)  # a 3x3 of one channel in and out
    assert isinstance(config, Conv2dConfig)
    run_and_check(1, 64, 64, 1, 1, 3, 3, geom=dict(padding=1))  # the default call


def test_unstaged_few_channel_convs_take_the_direct_form_only_at_k8_on_many_pixels():
    # C=16: the tensor cores read it as it is, and ran it faster (the validation corpus's).
    config, plan = plan_config(1, 112, 112, 16, 64, 1)
    assert isinstance(config, Conv2dConfig) and not plan.needs_staging
    config, _ = plan_config(8, 64, 64, 8, 8, 1)  # K = 8 on 32,768 output pixels
    assert isinstance(config, GroupedDirectConfig)
    run_and_check(1, 112, 112, 16, 64, 1, 1)  # the default call
    run_and_check(1, 112, 112, 16, 64, 1, 1, beta=1.0)


def test_an_epilogue_function_leaves_the_stem_to_the_tensor_cores():
    x, flt = random_conv_inputs(1, 64, 64, 3, 32, 3, 3)
    out = cute_conv.conv2d_fprop(x, flt, stride=2, padding=1, epilogue_fn=lambda y: y * 0.5)
    ref = cute_conv.reference.conv2d_reference(x, flt, stride=2, padding=1) * 0.5
    assert compare_to_reference(out, ref).ok


def test_a_direct_config_that_does_not_fit_is_refused_before_the_launch():
    x, flt = random_conv_inputs(1, 16, 16, 3, 32, 3, 3)
    out = torch.full((1, 14, 14, 32), float("nan"), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="group_in=3, group_out=32"):
        cute_conv.conv2d_fprop(x, flt, out=out, config=direct(3, 16))
    with pytest.raises(ValueError, match="filter_krsc=True"):
        cute_conv.conv2d_fprop(x, flt, out=out, config=GroupedDirectConfig(3, 32))
    with pytest.raises(ValueError, match="epilogue_fn"):
        cute_conv.conv2d_fprop(x, flt, out=out, config=direct(3, 32), epilogue_fn=lambda y: y)
    assert out.isnan().all()  # nothing written
