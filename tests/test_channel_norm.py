"""``ChannelLayerNorm`` (what ``optimize`` makes of torchvision's ``LayerNorm2d``) against a
float32 ``F.layer_norm`` over the channels: on the CPU through the kernels' reference forward
(``kernel_calls``), its arguments' errors, inputs it leaves to torch; on a GPU, the grouped
kernel's norm and the affine (bf16, fp16, with and without an affine, C up to 2048, a 1x1
map), gradients, ``torch.compile(fullgraph=True)`` and a CUDA-graph replay."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cute_conv.channel_norm import (
    KERNEL_MAX_CHANNELS,
    KERNEL_MIN_ELEMENTS,
    ChannelLayerNorm,
    runs_norm_kernel,
)
from cute_conv.testing import compare_to_reference
from tests.gpu import requires_sm90
from tests.test_nn import kernel_calls  # noqa: F401 - a fixture

EPS = 1e-6


def layer_norm_2d(x, weight, bias, eps=EPS):
    """torchvision's ``LayerNorm2d`` forward, in float64."""
    w, b = (None if t is None else t.double() for t in (weight, bias))
    nhwc = F.layer_norm(x.double().permute(0, 2, 3, 1), x.shape[1:2], w, b, eps)
    return nhwc.permute(0, 3, 1, 2)


def affine(channels: int, device="cpu"):
    gen = torch.Generator(device).manual_seed(channels)
    weight = torch.rand(channels, generator=gen, device=device) + 0.5
    bias = torch.randn(channels, generator=gen, device=device)
    return weight.bfloat16(), bias.bfloat16()


@pytest.mark.parametrize("with_affine", [True, False])
def test_computes_layer_norm_2d_through_the_kernel_calls(kernel_calls, with_affine):  # noqa: F811
    weight, bias = affine(24) if with_affine else (None, None)
    norm = ChannelLayerNorm(24, EPS, weight, bias)
    x = (torch.randn(2, 24, 5, 7) * 3 + 2).bfloat16().contiguous(memory_format=torch.channels_last)
    ours = norm.kernel_forward(x)
    assert len(kernel_calls) == 1  # the identity depthwise conv, normalizing
    assert ours.dtype == torch.bfloat16 and ours.is_contiguous(memory_format=torch.channels_last)
    report = compare_to_reference(ours, layer_norm_2d(x, weight, bias))
    assert report.ok, report


def test_the_rule_bounds_channels_and_elements():
    assert runs_norm_kernel(KERNEL_MAX_CHANNELS, KERNEL_MIN_ELEMENTS)
    assert not runs_norm_kernel(KERNEL_MAX_CHANNELS + 8, 100 * KERNEL_MIN_ELEMENTS)
    assert not runs_norm_kernel(96, KERNEL_MIN_ELEMENTS - 1)


@pytest.mark.parametrize(
    ("shape", "on_kernel"),
    [((1, 96, 150, 150), True), ((1, 96, 140, 140), False), ((1, 384, 80, 80), False)],
    ids=str,
)
def test_forward_takes_the_kernel_where_the_rule_does(kernel_calls, shape, on_kernel):  # noqa: F811
    weight, bias = affine(shape[1])
    norm = ChannelLayerNorm(shape[1], EPS, weight, bias)
    x = torch.randn(shape).bfloat16().contiguous(memory_format=torch.channels_last)
    ours = norm(x)
    assert len(kernel_calls) == int(on_kernel)
    assert ours.is_contiguous(memory_format=torch.channels_last)
    report = compare_to_reference(ours, layer_norm_2d(x, weight, bias))
    assert report.ok, report


def test_inputs_of_another_dtype_go_to_torch():
    norm = ChannelLayerNorm(16, EPS)
    x = torch.randn(2, 16, 3, 3)  # float32 into a bfloat16 module
    expected = F.layer_norm(x.permute(0, 2, 3, 1), (16,), eps=EPS)
    assert torch.equal(norm(x), expected.permute(0, 3, 1, 2))


@pytest.mark.parametrize(
    ("channels", "kwargs", "match"),
    [
        (13, {}, "multiple of 2"),
        (1026, {}, r"at most 512 \(1026 is not a multiple of 8\)"),  # 2-channel threads
        (4096, {}, "at most 2048"),
        (16, {"weight": torch.ones(8)}, r"weight must have shape \(16,\)"),
        (16, {"bias": torch.ones(16, 1)}, r"bias must have shape \(16,\)"),
        (16, {"eps": -1.0}, "channel_norm_eps"),
    ],
)
def test_bad_arguments_raise_value_errors(channels, kwargs, match):
    eps = kwargs.pop("eps", EPS)
    with pytest.raises(ValueError, match=match):
        ChannelLayerNorm(channels, eps, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtype": torch.float32}, "float32"),
        ({"eps": "1e-6"}, "channel_norm_eps must be a float or None"),
        ({"weight": [1.0] * 16}, "weight must be a tensor or None, got list"),
    ],
)
def test_bad_types_raise_type_errors(kwargs, match):
    eps = kwargs.pop("eps", EPS)
    with pytest.raises(TypeError, match=match):
        ChannelLayerNorm(16, eps, **kwargs)


# ------------------------------------------------------------------------------ on the GPU


@requires_sm90
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("with_affine", [True, False])
@pytest.mark.parametrize(
    "shape", [(4, 96, 56, 56), (8, 768, 1, 1), (2, 2048, 7, 7), (3, 40, 9, 13)], ids=str
)
def test_matches_float32_layer_norm_2d(shape, with_affine, dtype):
    c = shape[1]
    weight, bias = (t.to(dtype) for t in affine(c, "cuda")) if with_affine else (None, None)
    norm = ChannelLayerNorm(c, EPS, weight, bias, dtype=dtype, device="cuda")
    x = torch.randn(shape, device="cuda") * 4 + 3
    x = x.to(dtype).contiguous(memory_format=torch.channels_last)
    expected = layer_norm_2d(x, weight, bias)
    for ours in (norm.kernel_forward(x), norm(x)):  # the kernel, and what the rule picks
        assert ours.dtype == dtype and ours.is_contiguous(memory_format=torch.channels_last)
        report = compare_to_reference(ours, expected)
        assert report.ok, report


@requires_sm90
def test_gradients_compile_and_graph_replay():
    weight, bias = affine(96, "cuda")
    norm = ChannelLayerNorm(96, EPS, weight, bias, device="cuda")
    x = (torch.randn(2, 96, 112, 112, device="cuda") * 2 + 1).bfloat16()
    x = x.contiguous(memory_format=torch.channels_last)
    assert runs_norm_kernel(96, x.numel())  # forward takes the kernel
    expected = layer_norm_2d(x, weight, bias)
    leaf, w32, b32 = (t.detach().float().requires_grad_() for t in (x, norm.weight, norm.bias))
    torch_norm = F.layer_norm(leaf.permute(0, 2, 3, 1), (96,), w32, b32, EPS)
    grad_out = torch.randn_like(torch_norm)
    torch_norm.backward(grad_out)
    ours_in = x.detach().clone().requires_grad_()
    norm(ours_in).backward(grad_out.permute(0, 3, 1, 2).bfloat16())
    for ours, reference in ((ours_in.grad, leaf.grad), (norm.weight.grad, w32.grad),
                            (norm.bias.grad, b32.grad)):  # fmt: skip
        report = compare_to_reference(ours, reference)
        assert report.ok, report
    with torch.no_grad():
        compiled = torch.compile(norm, fullgraph=True)
        assert compare_to_reference(compiled(x), expected).ok
        static = torch.zeros_like(x)
        norm(static)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = norm(static)
        static.copy_(x)
        graph.replay()
        assert compare_to_reference(out, expected).ok
