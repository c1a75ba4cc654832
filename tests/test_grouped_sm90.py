"""GPU numerics of the grouped / depthwise CUDA-core kernel (``cute_conv.grouped_conv2d``)
against float32, into NaN-poisoned outputs: depthwise (the row window and the taps at run
time), grouped (group widths 4 to 256, a channel multiplier), strides, dilation, asymmetric padding, one to eight output pixels per
thread, two to eight threads per output vector (``channel_split``), every epilogue term (scale, bias,
each activation, both residual orders, in place), the channel norm (every shape, tails,
values far from zero), float16 and float32 outputs, CUDA-graph
replays, ``cute_conv.nn.Conv2d`` of grouped convs under torch.compile, and optimized models'
logits against torch's bf16 model's."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import cute_conv
from cute_conv.grouped import grouped_limits
from cute_conv.grouped_rule import channel_split_for, pixels_per_thread
from cute_conv.problem import Conv2dProblemShape
from cute_conv.reference import TORCH_ACTIVATIONS, conv2d_reference
from cute_conv.testing import compare_to_reference

pytestmark = pytest.mark.gpu

BF16 = torch.bfloat16

# (n, h, w, c, k, groups, r, geometry)
PROBLEMS = {
    "dw3x3": (2, 28, 28, 96, 96, 96, 3, dict(padding=1)),
    "dw5x5-s2": (3, 15, 17, 72, 72, 72, 5, dict(stride=2, padding=2)),
    "dw7x7": (1, 14, 14, 384, 384, 384, 7, dict(padding=3)),
    "dw3x3-dil2-asym": (2, 11, 9, 16, 16, 16, 3, dict(padding=((2, 1), (0, 3)), dilation=2)),
    # the row window (stride and dilation 1 along the row) past both edges of an odd width
    "dw5x5-window-asym": (2, 13, 11, 24, 24, 24, 5,
                          dict(stride=(2, 1), padding=((2, 1), (3, 1)), dilation=(2, 1))),
    # C not a multiple of 8 (ShuffleNetV2's 58 and 116): 2- and 4-channel threads
    "dw3x3-c58": (2, 14, 14, 58, 58, 58, 3, dict(padding=1)),
    "dw3x3-s2-c116": (2, 15, 15, 116, 116, 116, 3, dict(stride=2, padding=1)),
    "dw5x5-c20": (1, 9, 11, 20, 20, 20, 5, dict(padding=2)),
    "g24": (2, 14, 14, 120, 120, 5, 3, dict(padding=1)),
    "g24-s2": (1, 28, 28, 48, 48, 2, 3, dict(stride=2, padding=1)),
    "g4": (2, 10, 10, 128, 256, 32, 3, dict(padding=1)),
    "g8-k16": (1, 9, 7, 64, 128, 8, 3, dict(stride=(2, 1), padding=1)),
    "g256": (1, 6, 6, 512, 512, 2, 3, dict(padding=1)),
    "multiplier8": (2, 12, 12, 16, 128, 16, 3, dict(padding=1)),
    "g12-1x1": (2, 7, 7, 96, 64, 8, 1, {}),
}


def run_grouped(n, h, w, c, k, groups, r, geom, *, dtype=BF16, out_dtype=None, seed=0,
                wider=0, out_wider=0, **epi):  # fmt: skip
    """One call on fresh random inputs into a NaN-filled output, and its float32 check;
    ``wider``: the activation the first C channels of a tensor of C + wider (read in place);
    ``out_wider``: the output the last K channels of a tensor of K + out_wider (written in
    place, the others left NaN)."""
    gen = torch.Generator("cuda").manual_seed(seed)
    x = torch.randn(n, h, w, c + wider, device="cuda", generator=gen).to(dtype)[..., :c]
    flt = (torch.randn(k, r, r, c // groups, device="cuda", generator=gen) / (r * (c // groups) ** 0.5)).to(dtype)
    expected = conv2d_reference(x, flt, groups=groups, **geom) * epi.get("alpha", 1.0)
    kwargs = dict(groups=groups, **geom)
    if epi.get("scale"):
        kwargs["scale"] = torch.rand(k, device="cuda", generator=gen) + 0.5
        expected = expected * kwargs["scale"]
    if epi.get("bias"):
        kwargs["bias"] = torch.randn(k, device="cuda", generator=gen).to(dtype)
        expected = expected + kwargs["bias"].float()
    for name in ("alpha", "pixels", "channel_split"):
        if name in epi:
            kwargs[name] = epi[name]
    out_dtype = out_dtype or dtype
    n, p, q, _ = expected.shape
    buffer = torch.full((n, p, q, out_wider + k), float("nan"), device="cuda", dtype=out_dtype)
    out = buffer[..., out_wider:]
    activation = epi.get("activation")
    order = epi.get("order", "after_activation")
    source = None
    if "beta" in epi:
        source = torch.randn(expected.shape, device="cuda", generator=gen).to(out_dtype)
        if epi.get("in_place"):
            out = source
        residual = epi["beta"] * source.float()
        kwargs.update(source=source, beta=epi["beta"], residual_order=order)
    if epi.get("channel_norm_eps") is not None:
        kwargs["channel_norm_eps"] = eps = epi["channel_norm_eps"]
        expected = F.layer_norm(expected, expected.shape[-1:], eps=eps)
    if source is not None and order == "before_activation":
        expected = TORCH_ACTIVATIONS[activation](expected + residual)
    else:
        expected = TORCH_ACTIVATIONS[activation](expected)
        if source is not None:
            expected = expected + residual
    y = cute_conv.grouped_conv2d(x, flt, activation=activation, out=out, **kwargs)
    torch.cuda.synchronize()
    assert y is out
    report = compare_to_reference(y, expected)
    assert report.ok, str(report)
    assert buffer[..., :out_wider].isnan().all()


@pytest.mark.parametrize("problem", PROBLEMS.values(), ids=PROBLEMS.keys())
def test_grouped_shapes(problem):
    run_grouped(*problem, bias=True, activation="relu")


@pytest.mark.parametrize("wider", [8, 40])
@pytest.mark.parametrize("problem", ["dw3x3", "dw3x3-c58", "dw5x5-window-asym", "g24", "g4"])
def test_grouped_reads_a_channel_slice(problem, wider):
    """The activation a prefix of a wider tensor's channels (``optimize``'s concatenation
    buffers), with and without the channel norm."""
    run_grouped(*PROBLEMS[problem], wider=wider, bias=True, activation="relu", pixels=2)
    run_grouped(*PROBLEMS[problem], wider=wider, bias=True, channel_norm_eps=1e-6)


@pytest.mark.parametrize("problem", ["dw3x3", "dw5x5-s2", "g24", "g4"])
def test_grouped_writes_a_channel_slice(problem):
    """The output the last K channels of a wider tensor (a concatenation's part), with an
    activation, with the channel norm, and into a float32 output."""
    run_grouped(*PROBLEMS[problem], out_wider=16, bias=True, activation="relu", pixels=2)
    run_grouped(*PROBLEMS[problem], out_wider=8, bias=True, channel_norm_eps=1e-6)
    run_grouped(*PROBLEMS[problem], out_wider=8, out_dtype=torch.float32, bias=True)


@pytest.mark.parametrize("pixels", [2, 3, 8])
@pytest.mark.parametrize("problem", PROBLEMS.values(), ids=PROBLEMS.keys())
def test_grouped_shapes_with_several_pixels_per_thread(problem, pixels):
    """Rows whose width the pixels do not divide, strides and padding at both edges."""
    run_grouped(*problem, bias=True, activation="relu", pixels=pixels)


# Groups of 24, 48, 120 and 256 input channels: 3, 6, 15 and 32 activation vectors, so
# most splits leave the last parts a vector short.
SPLIT_PROBLEMS = {
    "g24": PROBLEMS["g24"],
    "g48": (1, 14, 13, 192, 192, 4, 3, dict(padding=1)),
    "g120-s2": (2, 9, 11, 240, 240, 2, 3, dict(stride=2, padding=(0, 1))),
    "g256": PROBLEMS["g256"],
}


@pytest.mark.parametrize("pixels", [1, 3])
@pytest.mark.parametrize("split", [2, 4, 8])
@pytest.mark.parametrize("problem", SPLIT_PROBLEMS.values(), ids=SPLIT_PROBLEMS.keys())
def test_grouped_channel_split(problem, split, pixels):
    """Adjacent threads sharing an output vector (``channel_split``), with a residual in
    both orders, on grids whose last CTA is partly past the output."""
    c, groups = problem[3], problem[5]
    if split > c // groups // 8:
        pytest.skip(f"{c // groups} channels per group: at most {c // groups // 8} parts")
    run_grouped(*problem, bias=True, activation="relu", pixels=pixels, channel_split=split)
    run_grouped(*problem, beta=0.5, bias=True, activation="silu", order="before_activation",
                pixels=pixels, channel_split=split)  # fmt: skip


@pytest.mark.parametrize("problem", ["g48", "g120-s2", "g256"])
def test_grouped_runs_the_rules_split(problem):
    """Without ``channel_split``, the rule's: more than one thread per output vector on
    these few-thread calls of wide groups."""
    n, h, w, c, k, groups, r, geom = SPLIT_PROBLEMS[problem]
    shape = Conv2dProblemShape(N=n, H=h, W=w, C=c, K=k, R=r, S=r, **geom)
    config = grouped_limits(c, k, groups)
    config = replace(config, pixels=pixels_per_thread(shape, config))
    assert channel_split_for(shape, config) > 1
    run_grouped(*SPLIT_PROBLEMS[problem], bias=True, activation="relu")
    run_grouped(*SPLIT_PROBLEMS[problem], beta=0.5, bias=True, activation="silu")


@pytest.mark.parametrize("problem", ["dw5x5-s2", "g4", "dw3x3-c58"])
def test_grouped_residual_with_several_pixels_per_thread(problem):
    run_grouped(*PROBLEMS[problem], beta=0.5, bias=True, activation="silu", pixels=4)


@pytest.mark.parametrize("pixels", [1, 3, 8])
@pytest.mark.parametrize(
    "problem",
    [
        *PROBLEMS.values(),
        (2, 9, 13, 8, 8, 8, 3, dict(padding=1)),  # one thread a pixel: 256 pixel groups a CTA
        (1, 7, 7, 2048, 2048, 2048, 7, dict(padding=3)),  # 256 threads a pixel
        (3, 10, 10, 88, 88, 88, 7, dict(padding=3)),  # 11 threads a pixel: groups across warps, idle threads
    ],
    ids=[*PROBLEMS.keys(), "dw-k8", "dw7x7-k2048", "dw7x7-k88"],
)
def test_grouped_channel_norm(problem, pixels):
    """Each output pixel normalized over its channels (a LayerNorm without affine), on
    whole rows and on the row tails that leave a thread's last pixels out."""
    run_grouped(*problem, bias=True, scale=True, alpha=0.5, pixels=pixels,
                channel_norm_eps=1e-6)  # fmt: skip


@pytest.mark.parametrize("activation", [a for a in TORCH_ACTIVATIONS if a])
@pytest.mark.parametrize("problem", ["dw3x3", "g24"])
def test_grouped_activations(problem, activation):
    run_grouped(*PROBLEMS[problem], scale=True, bias=True, activation=activation)


@pytest.mark.parametrize(
    "epi",
    [
        dict(alpha=0.5),
        dict(beta=1.0),
        dict(beta=-0.5, bias=True, activation="silu"),
        dict(beta=1.0, bias=True, activation="relu", order="before_activation"),
        dict(beta=1.0, bias=True, activation="hardswish", in_place=True),
    ],
    ids=["alpha", "residual", "beta-silu", "before-activation", "in-place"],
)
@pytest.mark.parametrize("problem", ["dw5x5-s2", "g4"])
def test_grouped_epilogues(problem, epi):
    run_grouped(*PROBLEMS[problem], **epi)


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32])
def test_grouped_dtypes(out_dtype):
    dtype = torch.float16 if out_dtype == torch.float16 else BF16
    run_grouped(*PROBLEMS["g24"], dtype=dtype, out_dtype=out_dtype, bias=True)
    run_grouped(*PROBLEMS["dw7x7"], dtype=dtype, out_dtype=out_dtype, bias=True,
                channel_norm_eps=1e-5)  # fmt: skip


def test_grouped_channel_norm_of_values_far_from_zero():
    """A bias of 100 under unit-scale values: the mean is subtracted before the squares are
    summed (two passes), so the variance keeps its digits."""
    n, h, w, c, k, groups, r, geom = PROBLEMS["dw7x7"]
    gen = torch.Generator("cuda").manual_seed(3)
    x = torch.randn(n, h, w, c, device="cuda", generator=gen).to(BF16)
    flt = (torch.randn(k, r, r, 1, device="cuda", generator=gen) / r).to(BF16)
    bias = 100.0 + torch.randn(k, device="cuda", generator=gen)
    z = conv2d_reference(x, flt, groups=groups, **geom) + bias
    expected = F.layer_norm(z.double(), (k,), eps=1e-6).float()
    out = torch.full(expected.shape, float("nan"), device="cuda", dtype=torch.float32)
    cute_conv.grouped_conv2d(x, flt, groups=groups, bias=bias, channel_norm_eps=1e-6, out=out,
                             **geom)  # fmt: skip
    torch.cuda.synchronize()
    report = compare_to_reference(out, expected)
    assert report.ok, str(report)


def test_grouped_replays_in_a_cuda_graph():
    conv = nn.Conv2d(96, 96, 3, padding=1, groups=96).to(BF16).cuda()
    module = cute_conv.nn.Conv2d.from_torch(conv, activation="relu6").eval()
    x = torch.randn(4, 96, 20, 20, device="cuda").to(BF16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            module(x)  # warm-up: compile, stage the weight
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = module(x)
        x.copy_(torch.randn_like(x))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        expected = F.relu6(conv.float()(x.float()))
    report = compare_to_reference(y, expected)
    assert report.ok, str(report)


@pytest.mark.parametrize(
    "channels, batch", [(512, 32), (128, 2)], ids=["16-per-group", "4-per-group"]
)
def test_cudnn_path_fused_relu_computes_the_module_and_replays(monkeypatch, channels, batch):
    """Past the rule's bound, or out of the grouped kernel's limits (ResNeXt's 4 output
    channels per group), a ReLU module on a power-of-two group width runs cuDNN's fused
    conv + bias + ReLU (scale folded into the weight, bias in bf16), eager and in a graph."""
    torch.manual_seed(2)
    conv = nn.Conv2d(channels, channels, 3, padding=1, groups=32, bias=False).to(BF16).cuda()
    bn = nn.BatchNorm2d(channels).cuda().eval()
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    module = cute_conv.nn.Conv2d.from_torch(conv, bn.to(BF16), nn.ReLU()).eval()
    fused_calls = []
    fused = torch.cudnn_convolution_relu
    monkeypatch.setattr(torch, "cudnn_convolution_relu", lambda *a: fused_calls.append(1) or fused(*a))
    x = torch.randn(batch, channels, 28, 28, device="cuda").to(BF16)
    x = x.to(memory_format=torch.channels_last)
    with torch.no_grad():
        expected = F.relu(bn.float()(conv.float()(x.float())))
        y = module(x)
        assert fused_calls, "the fused cuDNN op did not run"
        report = compare_to_reference(y, expected)
        assert report.ok, str(report)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            replayed = module(x)
        replayed.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
    report = compare_to_reference(replayed, expected)
    assert report.ok, str(report)


def test_grouped_module_under_torch_compile_and_autograd():
    torch.manual_seed(1)
    # 8 channels a group: the CUDA-core kernel's (the tensor cores take 16 and more).
    conv = nn.Conv2d(32, 32, 3, padding=1, groups=4).to(BF16).cuda()
    module = cute_conv.nn.Conv2d.from_torch(conv, activation="silu")
    assert not module._tensor_cores_take
    x = torch.randn(2, 32, 12, 12, device="cuda").to(BF16).to(memory_format=torch.channels_last)
    compiled = torch.compile(module, fullgraph=True)
    with torch.no_grad():
        y = compiled(x)
        expected = F.silu(conv.float()(x.float()))
    report = compare_to_reference(y, expected)
    assert report.ok, str(report)
    # gradients: torch's grouped conv backward, checked against torch's module in float32
    x32 = x.float().requires_grad_()
    leaf = x.detach().requires_grad_()
    module(leaf).float().sum().backward()
    F.silu(conv.float()(x32)).sum().backward()
    assert compare_to_reference(leaf.grad, x32.grad).ok
    assert module.weight.grad is not None


@pytest.mark.parametrize("name", ["regnet_y_400mf", "mobilenet_v3_small", "efficientnet_b0"])
def test_optimized_models_logits_no_worse_than_torch_bf16(name):
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)().eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    reference_model = model.cuda().to(memory_format=torch.channels_last)
    x = torch.randn(4, 3, 128, 128, device="cuda").to(memory_format=torch.channels_last)
    with torch.no_grad():
        reference = reference_model(x)
        bf16 = reference_model.to(BF16)
        torch_bf16 = bf16(x.to(BF16)).float()
        gm = cute_conv.optimize(bf16)
        assert any(isinstance(m, cute_conv.nn.Conv2d) and m.groups > 1 for m in gm.modules())
        ours = gm(x.to(BF16)).float()

    def rel(y):
        return ((y - reference).norm() / reference.norm()).item()

    assert rel(ours) <= 1.1 * rel(torch_bf16), (rel(ours), rel(torch_bf16))
