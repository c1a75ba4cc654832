"""The grouped / depthwise conv path without a GPU: its limits and errors (before any launch),
the kernel compiled for sm_90a and sm_100a (16-byte loads and store, no shared memory, the
wait for the previous grid), the op's fake output under torch.compile's tracing, its gradients
against torch's grouped conv, ``cute_conv.nn.Conv2d``'s grouped forward (the kernel call
replaced by its float32 reference, see tests/test_nn.py), and the rule that sends large calls
to cuDNN instead (``cute_conv.grouped_rule``), whose torch path runs here as it is."""

from __future__ import annotations

import dataclasses
import re
import types

import pytest
import torch
import torch.nn.functional as F
from cute_conv.kernels.common.epilogue import EpilogueSpec
from cute_conv.kernels.common.grouped_direct import GroupedDirectConfig
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import cute_conv
from cute_conv.compile import kernel_scalars
from cute_conv.grouped import grouped_conv2d, grouped_limits, stage_filter
from cute_conv.grouped_rule import (
    FITTED_PIXELS,
    FITTED_SPLIT,
    ChannelSplitRule,
    channel_split_for,
    pixels_per_thread,
    runs_grouped_kernel,
)
from cute_conv.plan_cache import PlanCache
from cute_conv.problem import Conv2dProblemShape
from cute_conv.testing import compare_to_reference
from cute_conv.validation import channel_slice_stride
from tests.test_autograd import reference_forward_on_cpu
from tests.test_nn import kernel_calls, random_bn  # noqa: F401 - the fixture

BF16 = torch.bfloat16


@pytest.mark.parametrize(
    "c, k, groups, config",
    [
        (96, 96, 96, GroupedDirectConfig(1, 1)),  # depthwise
        (116, 116, 116, GroupedDirectConfig(1, 1, vector=4)),  # ShuffleNetV2's odd depthwise
        (58, 58, 58, GroupedDirectConfig(1, 1, vector=2)),
        (48, 48, 2, GroupedDirectConfig(24, 24)),  # RegNet's group width 24
        (128, 256, 32, GroupedDirectConfig(4, 8)),  # ResNeXt-50 layer2's
        (16, 128, 16, GroupedDirectConfig(1, 8)),  # a channel multiplier of 8
        (512, 512, 2, GroupedDirectConfig(256, 256)),  # the widest group
    ],
)
def test_grouped_limits_return_the_config(c, k, groups, config):
    assert grouped_limits(c, k, groups) == config


@pytest.mark.parametrize(
    "c, k, groups, match",
    [
        (96, 96, 5, "groups=5 must divide in_channels=96 and out_channels=96"),
        (128, 128, 32, "groups=32: 4 output channels per group; .*multiple of 8"),
        (57, 57, 57, "a depthwise conv of 57 channels: the kernel needs a multiple of 2"),
        (1024, 1024, 2, "512 input channels per group; the grouped kernel takes at most 256"),
        (16, 16, 0, "groups must be a positive int, got 0"),
    ],
)
def test_grouped_limits_name_the_limit(c, k, groups, match):
    with pytest.raises(ValueError, match=match):
        grouped_limits(c, k, groups)


def _call_inputs(n=2, h=9, w=8, c=48, k=48, groups=2, r=3):
    x = torch.randn(n, h, w, c, dtype=BF16)
    flt = torch.randn(k, r, r, c // groups, dtype=BF16)
    return x, flt


@pytest.mark.parametrize(
    "change, error, match",
    [
        (dict(groups=2.0), TypeError, "groups must be an int, got float"),
        (dict(groups=5), ValueError, "groups=5 must divide"),
        (dict(x_dtype=torch.float32), TypeError, "activation has dtype torch.float32"),
        (dict(filter_c=12), ValueError, "filter has 12 input channels per group; activation's C=48"),
        (dict(padding=-1), ValueError, "padding must be >= 0"),
        (dict(stride=0), ValueError, "stride must be >= 1"),
        (dict(h=1, padding=0), ValueError, "does not fit the padded 1x8 input"),
        (dict(activation="swish"), ValueError, "activation"),
        (dict(bias_len=7), ValueError, r"bias has shape \(7,\)"),
        (dict(source_shape=(2, 9, 8, 40)), ValueError, "source has shape"),
        (dict(out_shape=(2, 9, 8, 40)), ValueError, "out has shape"),
        (dict(out_pitch=(52, torch.float32)), ValueError, "52 channels; its pixel stride"),
        (dict(out_pitch=(52, BF16)), ValueError, r"channel slice of one \(\[N, P, Q, L\]"),
        (dict(cpu=True), ValueError, "activation is on cpu; cute_conv runs on CUDA tensors"),
        (dict(pixels=2.0), TypeError, "pixels must be an int or None, got float"),
        (dict(pixels=9), ValueError, r"pixels must be in 1 \.\. 8, got 9"),
        (dict(channel_split=2.0), TypeError, "channel_split must be an int or None, got float"),
        (dict(channel_split=3), ValueError, r"channel_split must be one of \(1, 2, 4, 8\), got 3"),
        (dict(channel_split=4), ValueError, "channel_split=4: at most 3 at group_in=24"),
        (dict(channel_split=2, channel_norm_eps=1e-6), ValueError,
         "channel_split=2: the grouped form only"),
        (dict(channel_norm_eps="1e-6"), TypeError, "channel_norm_eps must be a float or None"),
        (dict(channel_norm_eps=True), TypeError, "channel_norm_eps must be a float or None"),
        (dict(channel_norm_eps=-1e-6), ValueError, "channel_norm_eps must be a finite float >= 0"),
        (dict(channel_norm_eps=float("nan")), ValueError, "finite float >= 0, got nan"),
        (dict(channel_norm_eps=1e-6, activation="relu"), ValueError,
         "pass no activation and no source"),
        (dict(channel_norm_eps=1e-6, source_shape=(2, 9, 8, 48)), ValueError,
         "pass no activation and no source"),
        (dict(channel_norm_eps=1e-6, k=2056, groups=257), ValueError,
         "K=2056; the kernel normalizes at most 2048"),
    ],
)
def test_bad_calls_are_refused_before_anything_is_written(change, error, match):
    groups = change.get("groups", 2)
    x, flt = _call_inputs(h=change.get("h", 9))
    if "k" in change:  # a wide depthwise-like conv: 2 input channels per group
        x, flt = _call_inputs(c=change["k"], k=change["k"], groups=groups)
    if "x_dtype" in change:
        x = x.to(change["x_dtype"])
    if "filter_c" in change:
        flt = torch.randn(48, 3, 3, change["filter_c"], dtype=BF16)
    kwargs = dict(groups=groups, padding=change.get("padding", 1), stride=change.get("stride", 1))
    for name in ("activation", "pixels", "channel_norm_eps", "channel_split"):
        if name in change:
            kwargs[name] = change[name]
    if "bias_len" in change:
        kwargs["bias"] = torch.zeros(change["bias_len"])
    if "source_shape" in change:
        kwargs["source"] = torch.zeros(change["source_shape"], dtype=BF16)
    out = torch.full(change.get("out_shape", (2, 9, 8, 48)), float("nan"), dtype=BF16)
    if "out_pitch" in change:  # a channel slice of a tensor of this many channels
        pitch, dtype = change["out_pitch"]
        out = torch.full((2, 9, 8, pitch), float("nan"), dtype=dtype)[..., :48]
    if "out_shape" in change or "cpu" in change or "out_pitch" in change:
        kwargs["out"] = out
    with pytest.raises(error, match=match):
        grouped_conv2d(x, flt, **kwargs)
    assert out.isnan().all()  # nothing written


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize(
    "config, activation",
    [
        (GroupedDirectConfig(1, 1), "hardswish"),
        (GroupedDirectConfig(24, 24), "relu"),
        (GroupedDirectConfig(4, 8), None),
        (GroupedDirectConfig(1, 16), "silu"),
        (GroupedDirectConfig(1, 1, pixels=4), "relu"),
        (GroupedDirectConfig(24, 24, pixels=2), None),
        (GroupedDirectConfig(1, 1, pixels=2, window=7), "relu"),
    ],
    ids=["depthwise", "g24", "g4", "multiplier", "depthwise-4-pixels", "g24-2-pixels",
         "depthwise-window"],  # fmt: skip
)
def test_the_kernel_compiles_to_vector_loads_and_a_store_per_pixel(arch, config, activation):
    spec = EpilogueSpec(has_bias=True, activation=activation, vector_dtype="bfloat16")
    kernel = cute_conv.compile_kernel(arch, config=config, epilogue=spec)
    ptx = kernel.ptx
    assert kernel.smem_bytes == 0 and ".shared" not in ptx
    loads = re.findall(r"ld\.global(?:\.\w+)*?\.v(\d)\.[a-z]+(\d+)", ptx)
    load_bytes = {int(lanes) * int(bits) // 8 for lanes, bits in loads}
    # the filter vectors (16 bytes) and the activation vectors (16, or 8 of 4 channels)
    assert len(loads) >= 3 and 16 in load_bytes and load_bytes <= {8, 16}
    stores = re.findall(r"st\.global(?:\.\w+)*?\.v(\d)\.[a-z]+(\d+)", ptx)
    assert [int(lanes) * int(bits) // 8 for lanes, bits in stores] == [16] * config.pixels
    assert "griddepcontrol.wait" in ptx
    if config.window:
        # a filter row's input columns loaded once each, a filter vector per tap, and the
        # bias once for all the thread's pixels
        columns = config.pixels + config.window - 1
        assert len(loads) == columns + config.window + 1
    # each input channel multiplied into the thread's 8 output channels at each of its pixels:
    # fused multiply-adds (sm_90a), or multiplies of float pairs (sm_100a's f32x2)
    products = len(re.findall(r"fma\.rn\.f32 ", ptx)) + 2 * len(re.findall(r"mul\.f32x2", ptx))
    assert products >= 8 * config.group_in * config.pixels


@pytest.mark.parametrize(
    "config, one_cta",
    [
        (GroupedDirectConfig(24, 24), True),
        (GroupedDirectConfig(8, 8, pixels=4), True),
        (GroupedDirectConfig(32, 32), True),
        (GroupedDirectConfig(120, 120), True),
        (GroupedDirectConfig(1, 1, pixels=2, window=7), False),  # depthwise
        (GroupedDirectConfig(16, 16, pixels=4, filter_krsc=True), False),  # the dense direct form
    ],
    ids=["g24", "g8-4-pixels", "g32", "g120", "depthwise", "krsc"],
)
def test_the_staged_grouped_form_asks_ptxas_for_one_cta_per_sm(config, one_cta):
    ptx = cute_conv.compile_kernel("sm_90a", config=config, epilogue=EpilogueSpec()).ptx
    assert (".minnctapersm 1" in ptx) is one_cta
    assert ".maxnreg" not in ptx


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("vector", [4, 2])
@pytest.mark.parametrize(
    "config",
    [GroupedDirectConfig(1, 1), GroupedDirectConfig(1, 1, pixels=2, window=3),
     GroupedDirectConfig(1, 1, pixels=2, channel_norm_eps=1e-6)],
    ids=["depthwise", "window", "norm"],
)  # fmt: skip
def test_depthwise_vectors_load_and_store_their_width(arch, vector, config):
    """A depthwise thread of 4 or 2 channels (C not a multiple of 8): every activation,
    filter and bias load, and each pixel's one store, are ``vector`` channels wide (8 or 4
    bytes); a multiply-add per channel and tap."""
    config = dataclasses.replace(config, vector=vector)
    activation = None if config.channel_norm_eps is not None else "relu"
    spec = EpilogueSpec(has_bias=True, activation=activation, vector_dtype="bfloat16")
    ptx = cute_conv.compile_kernel(arch, config=config, epilogue=spec).ptx
    width = 2 * vector  # bytes
    loads = re.findall(r"ld\.global(?:\.v(\d))?\.b(\d+)", ptx)
    assert loads and {int(lanes or 1) * int(bits) // 8 for lanes, bits in loads} == {width}
    stores = re.findall(r"st\.global(?:\.v(\d))?\.b(\d+)", ptx)
    assert [int(lanes or 1) * int(bits) // 8 for lanes, bits in stores] == [width] * config.pixels
    products = len(re.findall(r"fma\.rn\.f32 ", ptx)) + 2 * len(re.findall(r"mul\.f32x2", ptx))
    assert products >= vector * config.pixels


@pytest.mark.parametrize(
    "config",
    [GroupedDirectConfig(3, 32, pixels=4, filter_krsc=True), GroupedDirectConfig(1, 1, pixels=2)],
    ids=["dense-krsc", "depthwise"],
)  # fmt: skip
def test_the_residual_is_loaded_before_the_sums(config):
    """Each pixel's source vector is loaded before the first multiply-add, so that its
    latency hides behind them (in the epilogue each load would wait on the previous pixel's
    store, which may write the same memory): against the kernel without a residual, exactly
    ``pixels`` more 16-byte loads, all of them before the sums."""

    def wide_loads(has_residual: bool) -> tuple[int, int]:
        """(16-byte loads before the first multiply-add, 16-byte loads in all)"""
        spec = EpilogueSpec(has_bias=True, activation="relu", has_residual=has_residual,
                            vector_dtype="bfloat16")  # fmt: skip
        ptx = cute_conv.compile_kernel("sm_90a", config=config, epilogue=spec).ptx
        lines = ptx.splitlines()
        first_product = next(i for i, line in enumerate(lines) if "fma.rn.f32" in line)
        wide = [i for i, line in enumerate(lines) if re.search(r"ld\.global\S*\.v4\.b32", line)]
        return sum(i < first_product for i in wide), len(wide)

    (early, total), (early_plain, total_plain) = wide_loads(True), wide_loads(False)
    assert early - early_plain == config.pixels and total - total_plain == config.pixels


@pytest.mark.parametrize(
    "config,batch",
    [(GroupedDirectConfig(24, 24), 24), (GroupedDirectConfig(24, 24, pixels=2), 24),
     (GroupedDirectConfig(64, 64), 32), (GroupedDirectConfig(24, 24, pixels=4), 8)],
    ids=["g24-p1", "g24-p2", "g64-p1", "g24-p4"],
)  # fmt: skip
def test_a_tap_loads_a_batch_of_filter_vectors_before_its_multiply_adds(config, batch):
    """In the PTX of the grouped form, the first tap's first ``batch`` input channels' filter
    vectors and the pixels' activation vectors for them are all loaded before its first
    multiply-add (``FILTER_BATCH``, at most ``BATCH_PIXELS / pixels`` channels)."""
    spec = EpilogueSpec(has_bias=True, activation="relu", vector_dtype="bfloat16")
    ptx = cute_conv.compile_kernel("sm_90a", config=config, epilogue=spec).ptx
    lines = ptx.splitlines()
    first_product = next(i for i, line in enumerate(lines) if "fma.rn.f32" in line)
    wide = sum(bool(re.search(r"ld\.global\S*\.v4\.b32", line)) for line in lines[:first_product])
    assert wide == batch + config.pixels * batch // config.in_vector


def test_config_vectors_other_than_depthwise_raise():
    with pytest.raises(ValueError, match="vector=4: group_out=24 takes vector=8"):
        GroupedDirectConfig(24, 24, vector=4)
    with pytest.raises(ValueError, match="vector=3: one of"):
        GroupedDirectConfig(1, 1, vector=3)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize(
    "config",
    [GroupedDirectConfig(1, 1, pixels=4, window=7, channel_norm_eps=1e-6),
     GroupedDirectConfig(24, 24, pixels=2, channel_norm_eps=1e-5)],
    ids=["depthwise-window", "g24"],
)  # fmt: skip
def test_the_channel_norm_reduces_in_shared_memory(arch, config):
    """256-thread CTAs; per pixel and pass (the sum, then the squared deviations) five
    shuffles within a warp and one float32 atomic add into shared memory, each pass behind a
    CTA barrier; an rsqrt, and the pixel's one 16-byte store."""
    spec = EpilogueSpec(has_bias=True, vector_dtype="bfloat16")
    kernel = cute_conv.compile_kernel(arch, config=config, epilogue=spec)
    ptx = kernel.ptx
    assert kernel.smem_bytes == 2 * config.pixels * 256 * 4 and ".reqntid 256, 1, 1" in ptx
    assert len(re.findall(r"atom\.shared\.cta\.add\.f32", ptx)) == 2 * config.pixels
    assert len(re.findall(r"shfl\.sync\.down", ptx)) == 10 * config.pixels
    assert len(re.findall(r"\bbar(?:rier)?\.sync", ptx)) == 3  # the zeroing, then one per pass
    assert len(re.findall(r"rsqrt\.approx", ptx)) == config.pixels
    stores = re.findall(r"st\.global(?:\.\w+)*?\.v(\d)\.[a-z]+(\d+)", ptx)
    assert [int(lanes) * int(bits) // 8 for lanes, bits in stores] == [16] * config.pixels


def test_the_kernel_refuses_what_its_epilogue_does_not_run():
    spec = EpilogueSpec(has_amax=True)
    with pytest.raises(ValueError, match="no amax, source scale or epilogue_fn"):
        cute_conv.compile_kernel("sm_90a", config=GroupedDirectConfig(1, 1), epilogue=spec)
    with pytest.raises(TypeError, match="16-bit inputs"):
        cute_conv.compile_kernel(
            "sm_90a", act_dtype="float8_e4m3fn", config=GroupedDirectConfig(1, 1)
        )
    normalizing = GroupedDirectConfig(1, 1, channel_norm_eps=1e-6)
    with pytest.raises(ValueError, match="no activation or residual with channel_norm_eps"):
        cute_conv.compile_kernel("sm_90a", config=normalizing,
                                 epilogue=EpilogueSpec(activation="relu"))  # fmt: skip
    with pytest.raises(ValueError, match="channel_norm_eps must be None or a finite float"):
        GroupedDirectConfig(1, 1, channel_norm_eps=-1.0)


def test_the_op_traces_to_the_output_shape_and_dtype():
    with FakeTensorMode():
        x = torch.empty(2, 14, 14, 48, dtype=BF16, device="cuda")
        staged = torch.empty(3, 3, 24, 48, dtype=BF16, device="cuda")
        y = torch.ops.cute_conv.grouped_conv2d(
            x, staged, None, None, None, 2, [2, 2], [1, 1, 1, 1], [1, 1], 1.0, 0.0,
            "after_activation", "relu",
        )  # fmt: skip
        assert y.shape == (2, 7, 7, 48) and y.dtype == BF16
        with pytest.raises(ValueError, match="groups=5 must divide"):
            torch.ops.cute_conv.grouped_conv2d(
                x, staged, None, None, None, 5, [1, 1], [1, 1, 1, 1], [1, 1], 1.0, 0.0,
                "after_activation", None,
            )  # fmt: skip


@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
@pytest.mark.parametrize("shape", [(48, 48, 2), (16, 16, 16)], ids=["g24", "depthwise"])
def test_gradients_are_torch_grouped_conv_s(shape, order):
    """Through the op and its registered autograd (forward: the float64 reference on a CPU),
    every input's gradient matches torch's own autograd of the grouped conv."""
    c, k, groups = shape
    gen = torch.Generator().manual_seed(4)
    *inputs, grad_out = _float64_operands(c, k, groups, (4, 3), gen)
    source = torch.randn(2, 4, 3, k, dtype=torch.float64, generator=gen)
    geom = dict(stride=2, padding=((1, 2), (1, 0)), dilation=1)

    def ours(x, flt, bias, scale, source):
        return grouped_conv2d(
            x, stage_filter(flt), filter_layout="rsck", groups=groups, bias=bias, scale=scale,
            activation="silu", source=source, beta=0.5, residual_order=order, alpha=0.75,
            **geom,
        )  # fmt: skip

    def torchs(x, flt, bias, scale, source):
        x_nchw = F.pad(x.permute(0, 3, 1, 2), (1, 0, 1, 2))
        z = F.conv2d(x_nchw, flt.permute(0, 3, 1, 2), stride=2, groups=groups)
        z = z.permute(0, 2, 3, 1) * 0.75 * scale + bias
        if order == "before_activation":
            return F.silu(z + 0.5 * source)
        return F.silu(z) + 0.5 * source

    _assert_same_gradients(ours, torchs, (*inputs, source), grad_out)


def _float64_operands(c, k, groups, out_hw, gen):
    """A 2x7x6 NHWC ``x``, a 3x3 filter, bias, scale and an output gradient of ``out_hw``
    pixels, float64."""
    x = torch.randn(2, 7, 6, c, dtype=torch.float64, generator=gen)
    flt = torch.randn(k, 3, 3, c // groups, dtype=torch.float64, generator=gen) / 4
    bias = torch.randn(k, dtype=torch.float64, generator=gen)
    scale = torch.rand(k, dtype=torch.float64, generator=gen) + 0.5
    grad_out = torch.randn(2, *out_hw, k, dtype=torch.float64, generator=gen)
    return x, flt, bias, scale, grad_out


def _assert_same_gradients(ours, torchs, inputs, grad_out):
    """Both functions' gradients of ``inputs`` (x, filter, bias, scale[, source]) for
    ``grad_out``, ours through the op's autograd with its CPU reference forward."""
    grads = []
    for fn in (ours, torchs):
        leaves = [t.clone().requires_grad_() for t in inputs]
        with reference_forward_on_cpu():
            out = fn(*leaves)
        out.backward(grad_out)
        grads.append([leaf.grad for leaf in leaves])
    names = ("x", "filter", "bias", "scale", "source")[: len(inputs)]
    for name, got, want in zip(names, *grads, strict=True):
        torch.testing.assert_close(got, want, msg=name)


@pytest.mark.parametrize("shape", [(48, 48, 2), (16, 16, 16)], ids=["g24", "depthwise"])
def test_channel_norm_gradients_are_torch_layer_norm_s(shape):
    """With ``channel_norm_eps``, through the op's autograd, against torch's autograd of the
    grouped conv followed by ``F.layer_norm`` over the channels."""
    c, k, groups = shape
    *inputs, grad_out = _float64_operands(c, k, groups, (7, 6), torch.Generator().manual_seed(5))

    def ours(x, flt, bias, scale):
        return grouped_conv2d(x, stage_filter(flt), filter_layout="rsck", groups=groups,
                              padding=1, bias=bias, scale=scale, alpha=0.75,
                              channel_norm_eps=1e-5)  # fmt: skip

    def torchs(x, flt, bias, scale):
        z = F.conv2d(x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2), padding=1, groups=groups)
        z = z.permute(0, 2, 3, 1) * 0.75 * scale + bias
        return F.layer_norm(z, (k,), eps=1e-5)

    _assert_same_gradients(ours, torchs, inputs, grad_out)


@pytest.mark.parametrize(
    "channels, batch, size, kernel",
    [(96, 2, 16, True), (96, 32, 64, True), (20, 2, 16, True), (21, 2, 16, False)],
    ids=["kernel", "kernel-past-the-plain-bound", "kernel-4-channel-vectors", "cudnn-out-of-limits"],
)
def test_module_normalizes_channels_on_either_path(kernel_calls, channels, batch, size, kernel):  # noqa: F811
    """``Conv2d(channel_norm_eps=...)``: the kernel's call (its float32 reference here), at any
    size (the rule's bound is for plain calls), or, out of the kernel's limits (C=21), cuDNN's
    conv and torch's layer norm: the same function."""
    torch.manual_seed(7)
    conv = nn.Conv2d(channels, channels, 7, padding=3, groups=channels).to(BF16)
    module = cute_conv.nn.Conv2d.from_torch(conv).eval()
    module.normalize_channels(1e-6)
    assert "channel_norm(conv + bias, eps=1e-06)" in repr(module)
    x = torch.randn(batch, channels, size, size).to(BF16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        y = module(x)
        with pytest.raises(ValueError, match="takes no identity"):
            module(x, torch.zeros_like(y))
    assert len(kernel_calls) == int(kernel)
    z = conv.float()(x.float()).permute(0, 2, 3, 1)
    expected = F.layer_norm(z, (channels,), eps=1e-6).permute(0, 3, 1, 2)
    check = compare_to_reference(y, expected)
    assert check.ok, str(check)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(groups=1), ValueError, "only a grouped Conv2d"),
        (dict(activation="relu"), ValueError, "takes no activation, got 'relu'"),
        (dict(channel_norm_eps=-1.0), ValueError, "finite float >= 0, got -1.0"),
        (dict(channel_norm_eps="x"), TypeError, "a float or None, got str"),
        (dict(in_channels=4096, out_channels=4096, groups=4096), ValueError,
         "out_channels=4096; the kernel normalizes at most 2048"),
    ],
)  # fmt: skip
def test_module_channel_norm_names_the_limit(kwargs, error, match):
    args = dict(in_channels=64, out_channels=64, kernel_size=3, groups=64, channel_norm_eps=1e-6)
    with pytest.raises(error, match=match):
        cute_conv.nn.Conv2d(**(args | kwargs), device="meta")


def test_module_from_torch_runs_the_grouped_path(kernel_calls):  # noqa: F811
    torch.manual_seed(5)
    # 8 channels a group: narrower than the tensor cores take (tensor_cores_take).
    conv = nn.Conv2d(32, 32, 3, stride=2, padding=1, groups=4, bias=False).to(BF16)
    bn = random_bn(32, BF16)
    module = cute_conv.nn.Conv2d.from_torch(conv, bn, nn.ReLU()).eval()
    assert module.groups == 4 and module.weight.shape == (32, 3, 3, 8)
    assert "groups=4" in repr(module)
    x = torch.randn(2, 32, 9, 8).to(BF16).to(memory_format=torch.channels_last)
    identity = torch.randn(2, 32, 5, 4).to(BF16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        y = module(x, identity)
        module(x)
    (x_nhwc, staged, source), (_, staged_again, _) = kernel_calls
    assert x_nhwc.data_ptr() == x.data_ptr() and source.data_ptr() == identity.data_ptr()
    # The weight is stored as the kernel reads it: no call stages it.
    assert staged.shape == (3, 3, 8, 32) and staged.is_contiguous()
    assert staged.data_ptr() == staged_again.data_ptr() == module.weight.data_ptr()
    expected = F.relu(bn.float()(conv.float()(x.float()))) + identity.float()
    check = compare_to_reference(y, expected)
    assert check.ok, str(check)
    state = {name: t.clone().contiguous() for name, t in module.state_dict().items()}
    module.load_state_dict(state)  # copies in place: the layout stays
    assert module.weight.permute(1, 2, 3, 0).is_contiguous()
    # A KRSC-contiguous weight given by the user is staged once, and again when it changes.
    module.weight = nn.Parameter(module.weight.detach().contiguous(), requires_grad=False)
    with torch.no_grad():
        module(x)
        module(x)
        first, second = kernel_calls[-2][1], kernel_calls[-1][1]
        assert first is second and first.data_ptr() != module.weight.data_ptr()
        module.weight.mul_(2)
        module(x)
    assert kernel_calls[-1][1] is not first
    torch.testing.assert_close(kernel_calls[-1][1], first * 2)


def test_groups_outside_the_kernels_limits_store_the_filter_as_cudnn_reads_it():
    """ResNeXt's 4 output channels per group run only on cuDNN: KRSC contiguous, which its
    path hands to cuDNN without a copy."""
    conv = nn.Conv2d(128, 128, 3, padding=1, groups=32, bias=False).to(BF16)
    module = cute_conv.nn.Conv2d.from_torch(conv)
    assert module.weight.is_contiguous() and module.weight.shape == (128, 3, 3, 4)
    assert module._cudnn_weight()[0].data_ptr() == module.weight.data_ptr()
    torch.testing.assert_close(module.weight, conv.weight.permute(0, 2, 3, 1))
    fresh = cute_conv.nn.Conv2d(128, 128, 3, groups=32, bias=False, dtype=BF16)
    assert fresh.weight.is_contiguous()


def test_grouped_module_refuses_fp8():
    conv = nn.Conv2d(16, 16, 3, groups=16).to(BF16)
    module = cute_conv.nn.Conv2d.from_torch(conv)
    with pytest.raises(ValueError, match="to_fp8: a grouped Conv2d"):
        module.to_fp8()
    with pytest.raises(ValueError, match="write_fp8: a grouped Conv2d"):
        module.write_fp8(torch.ones(()))
    x = torch.randn(1, 16, 5, 5).to(BF16)
    with pytest.raises(ValueError, match="keeps no amax"):
        module(x, out_amax=torch.zeros(1))


def test_optimize_keeps_grouped_convs_16bit_under_fp8():
    model = nn.Sequential(
        nn.Conv2d(32, 64, 1), nn.Conv2d(64, 64, 3, padding=1, groups=64), nn.Conv2d(64, 32, 1)
    )
    gm = cute_conv.optimize(model.to(BF16).eval(), dtype="fp8")
    report = gm.cute_conv_report
    assert [left.name for left in report.kept_16bit] == ["1"]
    assert report.kept_16bit[0].reason.startswith("a grouped conv (groups=64)")
    assert gm.get_submodule("1").w_scale is None


@pytest.mark.parametrize(
    "macs, group_in, group_out, groups, taps, runs",
    [
        (2**29, 1, 1, 64, 9, True), (2**29 + 1, 1, 1, 64, 9, False),  # depthwise 3x3
        (2**29, 1, 1, 64, 49, True), (2**29 + 1, 1, 1, 64, 49, False),  # 7x7: the same
        (2**34, 1, 1, 64, 1, True),  # 1x1: a per-channel scale, always the kernel
        (2**29, 8, 8, 32, 9, True), (2**29 + 1, 8, 8, 32, 9, False),  # a power-of-two width
        (2**29, 8, 8, 32, 49, True),  # grouped: the filter size does not move the bound
        (2**26, 16, 16, 32, 9, True), (2**26 + 1, 16, 16, 32, 9, False),  # twice as wide: 1/8
        (2**29, 1, 8, 64, 9, True), (2**29 + 1, 1, 8, 64, 9, False),  # below 8 wide: as 8
        (2**30.5, 24, 24, 7, 9, True), (2**30.5 + 1, 24, 24, 7, 9, False),  # RegNet's 24
        (2**29.5, 48, 48, 9, 9, True), (2**29.5 + 1, 48, 48, 9, 9, False),  # twice as wide: 1/2
        (2_485_513, 48, 48, 2, 9, True), (2_485_514, 48, 48, 2, 9, False),  # 2 groups, fewer
        # than FITTED.few_groups: the native bound, 2**29 * (8 / 48)**3 = 2,485,513.5
    ],
)  # fmt: skip
def test_the_rule_bounds_the_multiply_adds(macs, group_in, group_out, groups, taps, runs):
    assert runs_grouped_kernel(macs, group_in, group_out, groups, taps, normalizes=True)
    assert runs_grouped_kernel(macs, group_in, group_out, groups, taps) is runs


@pytest.mark.parametrize(
    "n, size, c, groups, pixels",
    [
        (1, 14, 96, 96, 1),  # depthwise, 2,352 threads at one pixel each
        (2, 64, 64, 64, 2),  # depthwise, 2**16 threads: two pixels
        (2, 64, 64 - 8, 64 - 8, 1),  # 8 channels fewer: under 2**16
        (64, 64, 64, 64, 4),  # depthwise, 2**21 threads: four
        (64, 64, 64 - 8, 64 - 8, 2),  # under 2**21
        (1, 7, 48, 2, 1),  # grouped, 24 per group, 294 threads: one below 2**15
        (6, 32, 48, 2, 2),  # 6 * 1024 * 6 = 36,864 threads: two below 3 * 2**15
        (5, 32, 48, 2, 1),  # 5 * 1024 * 6 = 30,720 threads: one
        (15, 32, 48, 2, 2),  # 15 * 1024 * 6 = 98,304 - 6,144 threads: two
        (17, 32, 48, 2, 4),  # 17 * 1024 * 6 = 98,304 + 6,144 threads: four
        (11, 32, 64, 4, 1),  # 16 per group, 11 * 1024 * 8 = 90,112 threads: one (narrow)
        (13, 32, 64, 4, 4),  # 16 per group, 13 * 1024 * 8 = 106,496 threads: four
        (1, 7, 64, 8, 1),  # 8 per group, below the threshold: one
        (1, 7, 64, 2, 1),  # 32 per group: one
    ],
)
def test_pixels_per_thread(n, size, c, groups, pixels):
    problem = Conv2dProblemShape(N=n, H=size, W=size, C=c, K=c, R=3, S=3, padding=(1, 1))
    assert pixels_per_thread(problem, grouped_limits(c, c, groups)) == pixels
    assert FITTED_PIXELS.depthwise_two_pixels_threads == 2**16
    assert FITTED_PIXELS.depthwise_four_pixels_threads == 2**21


def test_a_pixels_rule_without_a_two_pixel_threshold_keeps_its_grouped_pixels():
    """``grouped_two_pixels_threads`` defaults to 0 (never two), the rule before the batched
    loads; FITTED_PIXELS takes two on the same small call."""
    rule = dataclasses.replace(FITTED_PIXELS, grouped_two_pixels_threads=0)
    problem = Conv2dProblemShape(N=8, H=28, W=28, C=48, K=48, R=3, S=3, padding=(1, 1))
    config = grouped_limits(48, 48, 2)  # 8 * 784 * 6 = 37,632 threads
    assert rule.pixels(problem, config) == FITTED_PIXELS.grouped_pixels == 4
    assert FITTED_PIXELS.pixels(problem, config) == 2
    fields = {f.name: f.default for f in dataclasses.fields(type(FITTED_PIXELS))}
    assert fields["grouped_two_pixels_threads"] == 0


def test_below_the_two_pixel_threshold_narrow_groups_take_one_pixel():
    """Under ``grouped_two_pixels_threads``, groups narrower than
    ``grouped_two_pixels_min_width`` take one pixel, wider ones two; its default (0) gives two
    to every width."""
    problem = Conv2dProblemShape(N=8, H=28, W=28, C=96, K=96, R=3, S=3, padding=(1, 1))
    widths = (8, 16, 24)  # 8 * 784 * 12 = 75,264 threads
    picks = [FITTED_PIXELS.pixels(problem, grouped_limits(96, 96, 96 // w)) for w in widths]
    assert FITTED_PIXELS.grouped_two_pixels_min_width == 24 and picks == [1, 1, 2]
    every_width = dataclasses.replace(FITTED_PIXELS, grouped_two_pixels_min_width=0)
    assert [every_width.pixels(problem, grouped_limits(96, 96, 96 // w)) for w in widths] == [2] * 3
    fields = {f.name: f.default for f in dataclasses.fields(type(FITTED_PIXELS))}
    assert fields["grouped_two_pixels_min_width"] == 0


def test_the_fewest_threads_take_one_pixel_at_any_width():
    """Under ``grouped_one_pixel_threads`` (its default, 0: never) every grouped width takes
    one pixel."""
    problem = Conv2dProblemShape(N=1, H=28, W=28, C=96, K=96, R=3, S=3, padding=(1, 1))
    config = grouped_limits(96, 96, 4)  # 24 per group, 784 * 12 = 9,408 threads
    assert FITTED_PIXELS.grouped_one_pixel_threads == 2**15
    assert FITTED_PIXELS.pixels(problem, config) == 1
    never_one = dataclasses.replace(FITTED_PIXELS, grouped_one_pixel_threads=0)
    assert never_one.pixels(problem, config) == 2
    fields = {f.name: f.default for f in dataclasses.fields(type(FITTED_PIXELS))}
    assert fields["grouped_one_pixel_threads"] == 0


def test_a_call_runs_the_rules_pixels_unless_it_names_them():
    from cute_conv import grouped

    x, flt = _call_inputs(n=1, h=7, w=7)
    staged = stage_filter(flt)

    def config(pixels):
        return grouped._validate(x, staged, None, None, None, 2, (1, 1), ((1, 1), (1, 1)),
                                 (1, 1), 1.0, 0.0, "after_activation", None, pixels, None, 1,
                                 None)[1]  # fmt: skip

    assert config(None).pixels == 1  # 98 threads: below FITTED_PIXELS.grouped_one_pixel_threads
    assert config(3) == GroupedDirectConfig(24, 24, pixels=3)


@pytest.mark.parametrize(
    "n, size, c, groups, stride, split",
    [
        (1, 14, 720, 6, 1, 2),  # RegNetX-8GF: 120 wide, 17,640 threads; 4 ways 70,560
        (1, 28, 240, 2, 1, 1),  # 120 wide, 23,520 threads: 2 ways 47,040, past 45,000
        (1, 14, 432, 9, 1, 4),  # RegNetX-3.2GF: 48 wide, 10,584 threads
        (1, 7, 1008, 21, 1, 4),  # 48 wide, 6,174 threads: 8 ways is past its 6 vectors
        (8, 14, 1008, 21, 1, 1),  # batch 8: 49,392 threads
        (1, 14, 96, 4, 1, 2),  # 24 wide, 2,352 threads: 3 vectors, so 2 ways at most
        (1, 14, 64, 8, 1, 1),  # 8 wide: one vector, nothing to split
        (1, 7, 512, 8, 1, 4),  # 64 wide, 3,136 threads: 8 ways is past max_split
        (1, 14, 96, 2, 2, 4),  # 48 wide, stride 2: 12 * 49 = 588 threads
        (1, 14, 96, 96, 1, 1),  # depthwise
    ],
)
def test_channel_split_for(n, size, c, groups, stride, split):
    problem = Conv2dProblemShape(N=n, H=size, W=size, C=c, K=c, R=3, S=3, padding=(1, 1),
                                 stride=(stride, stride))  # fmt: skip
    config = grouped_limits(c, c, groups)
    config = dataclasses.replace(config, pixels=pixels_per_thread(problem, config))
    assert channel_split_for(problem, config) == split
    assert FITTED_SPLIT == ChannelSplitRule(max_threads=45_000, max_split=4)


@pytest.mark.parametrize("rule", [channel_split_for, pixels_per_thread])
def test_the_rules_refuse_what_is_not_a_problem_and_a_config(rule):
    problem = Conv2dProblemShape(N=1, H=7, W=7, C=96, K=96, R=3, S=3, padding=(1, 1))
    with pytest.raises(TypeError, match="problem must be a Conv2dProblemShape, got tuple"):
        rule((1, 7, 7, 96), grouped_limits(96, 96, 2))
    with pytest.raises(TypeError, match="config must be a GroupedDirectConfig, got NoneType"):
        rule(problem, None)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(max_threads=0, max_split=4), ValueError, "max_threads must be >= 1, got 0"),
        (dict(max_threads=2.5, max_split=4), TypeError, "max_threads must be an int, got float"),
        (dict(max_threads=100, max_split=3), ValueError, r"max_split must be one of \(1, 2, 4, 8\)"),
        (dict(max_threads=100, max_split=True), ValueError, "max_split must be one of"),
    ],
)
def test_a_split_rule_refuses_bad_constants(kwargs, error, match):
    with pytest.raises(error, match=match):
        ChannelSplitRule(**kwargs)


def test_the_split_rule_leaves_several_pixels_and_the_channel_norm_alone():
    """Only one-pixel threads split: with more pixels, or a normalized output (the split
    form refuses it), the rule keeps one thread per output vector."""
    problem = Conv2dProblemShape(N=1, H=7, W=7, C=96, K=96, R=3, S=3, padding=(1, 1))
    config = grouped_limits(96, 96, 2)  # 48 wide, 588 threads
    assert channel_split_for(problem, config) == 4
    assert channel_split_for(problem, dataclasses.replace(config, pixels=2)) == 1
    normalized = dataclasses.replace(config, channel_norm_eps=1e-6)
    assert channel_split_for(problem, normalized) == 1


def test_a_call_runs_the_rules_split_unless_it_names_it():
    from cute_conv import grouped

    x, flt = _call_inputs(n=1, h=7, w=7, c=96, k=96)  # 48 per group, 98 * 12 threads

    def config(split):
        return grouped._validate(x, stage_filter(flt), None, None, None, 2, (1, 1),
                                 ((1, 1), (1, 1)), (1, 1), 1.0, 0.0, "after_activation", None,
                                 None, None, split, None)[1]  # fmt: skip

    assert config(None).channel_split == 4
    assert config(1).channel_split == 1
    assert config(2).channel_split == 2


@pytest.mark.parametrize(
    "s, geometry, window",
    [
        (7, dict(padding=3), 7),  # ConvNeXt's 7x7
        (3, dict(stride=(2, 1), padding=1, dilation=(2, 1)), 3),  # along the column: any
        (3, dict(stride=2, padding=1), 0),  # strided along the row: taps at run time
        (3, dict(padding=2, dilation=(1, 2)), 0),  # dilated along the row
        (9, dict(padding=4), 0),  # wider than MAX_WINDOW
    ],
)
def test_depthwise_calls_take_the_row_window_where_a_rows_taps_are_adjacent(s, geometry, window):
    from cute_conv.grouped import row_window

    problem = Conv2dProblemShape(N=1, H=16, W=16, C=32, K=32, R=3, S=s, **geometry)
    assert row_window(problem, grouped_limits(32, 32, 32)) == window
    assert row_window(problem, grouped_limits(32, 32, 2)) == 0  # grouped: never


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(group_in=1, group_out=1, window=8), "window=8: at most 7 filter columns"),
        (dict(group_in=2, group_out=8, window=3), "window=3: the row window is depthwise only"),
        (dict(group_in=1, group_out=1, window=-1), "window must be a non-negative int"),
        (dict(group_in=1, group_out=1, window=True), "window must be a non-negative int"),
    ],
)
def test_config_refuses_a_window_it_cannot_compile(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GroupedDirectConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(group_in=48, group_out=48, channel_split=3), r"must be one of \(1, 2, 4, 8\)"),
        (dict(group_in=48, group_out=48, channel_split=True), "must be one of"),
        (dict(group_in=1, group_out=1, channel_split=2), "the grouped form only"),
        (dict(group_in=48, group_out=48, channel_split=2, channel_norm_eps=1e-6),
         "the grouped form only"),
        (dict(group_in=56, group_out=56, channel_split=8),
         "channel_split=8: at most 7 at group_in=56"),
        (dict(group_in=4, group_out=8, channel_split=2),
         r"=2: at most 1 at group_in=4 \(one part per activation vector of 4 channels\)"),
    ],
)  # fmt: skip
def test_config_refuses_a_channel_split_it_cannot_compile(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GroupedDirectConfig(**kwargs)


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize(
    "config",
    [GroupedDirectConfig(48, 48, channel_split=4), GroupedDirectConfig(120, 120, channel_split=2),
     GroupedDirectConfig(64, 64, pixels=2, channel_split=8)],
    ids=["g48-4-ragged", "g120-2-ragged", "g64-8-2-pixels"],
)  # fmt: skip
def test_a_channel_split_adds_its_parts_by_shuffles_and_stores_once(arch, config):
    """With ``channel_split`` threads per output vector, each sums its share of the group
    (the loads of its activation vectors: ``ceil(vectors / split)`` per pixel and tap; a
    ragged share's last one predicated), the parts' sums meet by ``log2(split)`` butterfly
    shuffles of each float32 sum, and the vector is stored once per pixel."""
    spec = EpilogueSpec(has_bias=True, activation="relu", has_residual=True,
                        vector_dtype="bfloat16")  # fmt: skip
    ptx = cute_conv.compile_kernel(arch, config=config, epilogue=spec).ptx
    split = config.channel_split
    shuffles = len(re.findall(r"shfl\.sync\.bfly", ptx))
    assert shuffles == (split.bit_length() - 1) * config.vector * config.pixels
    stores = re.findall(r"st\.global(?:\.\w+)*?\.v(\d)\.[a-z]+(\d+)", ptx)
    assert [int(lanes) * int(bits) // 8 for lanes, bits in stores] == [16] * config.pixels
    # a part's multiply-adds: its share of the group's channels into 8 sums per pixel
    share = -(-config.group_in // config.in_vector // split) * config.in_vector
    products = len(re.findall(r"fma\.rn\.f32 ", ptx)) + 2 * len(re.findall(r"mul\.f32x2", ptx))
    assert share * 8 * config.pixels <= products < (share + config.in_vector) * 8 * config.pixels


@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
@pytest.mark.parametrize(
    "conv_args, batch, size, kernel",
    [
        ((96, 96, 3, 1, 1, 1, 96), 2, 16, True),  # 0.4M multiply-adds: the kernel
        ((96, 96, 3, 1, 1, 1, 96), 8, 160, True),  # 177M on a 3x3: the kernel
        ((96, 96, 7, 1, 3, 1, 96), 32, 64, False),  # 617M on a 7x7: cuDNN
        ((48, 48, 3, 2, 1, 1, 2), 2, 9, True),
        ((64, 64, 3, 1, 1, 1, 4), 8, 128, False),  # 16 per group: 2**23 at batch 1 already
        ((128, 128, 3, 1, 1, 1, 32), 1, 8, False),  # 4 out per group: out of grouped_limits
    ],
    ids=["dw-small", "dw-3x3-large", "dw-7x7-large", "g24-small", "g16-large", "g4-out-of-limits"],
)
def test_module_runs_cudnn_past_the_rule(kernel_calls, conv_args, batch, size, kernel, order):  # noqa: F811
    """Past the rule's bound the module runs cuDNN's grouped conv (scale folded into the
    weight) and torch's epilogue: the same function, on CPU tensors here."""
    torch.manual_seed(6)
    conv = nn.Conv2d(*conv_args, bias=False).to(BF16)
    bn = random_bn(conv.out_channels, BF16)
    module = cute_conv.nn.Conv2d.from_torch(conv, bn, nn.Hardswish(), order).eval()
    x = torch.randn(batch, conv.in_channels, size, size).to(BF16)
    x = x.to(memory_format=torch.channels_last)
    with torch.no_grad():
        out_shape = conv(x).shape
        identity = torch.randn(out_shape).to(BF16).to(memory_format=torch.channels_last)
        y = module(x, identity)
    assert len(kernel_calls) == int(kernel)
    z = bn.float()(conv.float()(x.float()))
    if order == "before_activation":
        expected = F.hardswish(z + identity.float())
    else:
        expected = F.hardswish(z) + identity.float()
    check = compare_to_reference(y, expected)
    assert check.ok, str(check)


@pytest.mark.parametrize(
    "groups, activation, grad, fused",
    [
        (32, "relu", False, True),  # 8 per group: cuDNN's native grouped conv
        (32, "silu", False, False),  # the fused op takes ReLU only
        (32, "relu", True, False),  # no derivative
        (10, "relu", False, False),  # 24 per group: cuDNN transforms, the fused op is slower
        (256, "relu", False, False),  # depthwise: not measured with the fused op
    ],
)  # fmt: skip
def test_cudnn_path_fuses_relu_on_power_of_two_widths(groups, activation, grad, fused):
    channels = 240 if groups == 10 else 256
    module = cute_conv.nn.Conv2d(channels, channels, 3, groups=groups, activation=activation)
    cuda_input = types.SimpleNamespace(is_cuda=True, requires_grad=False)
    with torch.set_grad_enabled(grad):
        assert module._fuses_cudnn_relu(cuda_input) is fused
        assert not module._fuses_cudnn_relu(torch.empty(1))  # a CPU tensor
        with torch.backends.cudnn.flags(enabled=False):
            assert not module._fuses_cudnn_relu(cuda_input)


def test_module_takes_groups_out_of_the_kernels_limits_but_not_bad_groups():
    module = cute_conv.nn.Conv2d(128, 128, 3, groups=32)  # 4 output channels per group
    assert module.weight.shape == (128, 3, 3, 4) and not module._grouped_kernel_takes
    assert cute_conv.nn.Conv2d(128, 256, 3, groups=32)._grouped_kernel_takes
    with pytest.raises(ValueError, match="groups=3 must divide in_channels=8 and out_channels=8"):
        cute_conv.nn.Conv2d(8, 8, 3, groups=3)


def test_cudnn_path_pads_asymmetrically_and_differentiates():
    torch.manual_seed(7)
    module = cute_conv.nn.Conv2d(
        256, 256, 7, padding=((4, 2), (3, 3)), groups=256, activation="silu", dtype=torch.float16
    )
    x = torch.randn(32, 256, 44, 44, dtype=torch.float16).to(memory_format=torch.channels_last)
    x.requires_grad_()
    y = module(x)  # 32 * 44 * 44 * 256 * 49 multiply-adds: past the depthwise bound
    weight = module.weight.detach().permute(0, 3, 1, 2).float().requires_grad_()
    x32 = x.detach().float().requires_grad_()
    z = F.conv2d(F.pad(x32, (3, 3, 4, 2)), weight, module.bias.detach(), groups=256)
    torch.testing.assert_close(y.float(), F.silu(z), rtol=2e-2, atol=2e-2)
    y.float().sum().backward()
    F.silu(z).sum().backward()
    assert module.weight.grad is not None and module.bias.grad is not None
    torch.testing.assert_close(x.grad.float(), x32.grad, rtol=2e-2, atol=2e-2)


def test_filter_layout_is_checked():
    x, flt = _call_inputs()
    with pytest.raises(ValueError, match="filter_layout must be 'krsc' or 'rsck', got 'kcrs'"):
        grouped_conv2d(x, flt, groups=2, filter_layout="kcrs")
    with pytest.raises(ValueError, match="groups=2: 12 output channels per group"):
        grouped_conv2d(x, flt, groups=2, filter_layout="rsck")  # a KRSC filter given as RSCK


def test_unaligned_vectors_are_copied_and_an_unaligned_filter_refused():
    from cute_conv.grouped import vector_operand

    bias = torch.randn(17)[1:]  # 4 bytes past a 16-byte boundary
    assert bias.data_ptr() % 16
    aligned = vector_operand(bias, torch.float32)
    assert aligned.data_ptr() % 16 == 0 and torch.equal(aligned, bias)
    already = torch.randn(16)
    assert vector_operand(already, torch.float32) is already
    x, flt = _call_inputs()
    staged = torch.empty(stage_filter(flt).numel() + 1, dtype=BF16)[1:].view(3, 3, 24, 48)
    with pytest.raises(ValueError, match="filter.data_ptr.*is not 16-byte aligned"):
        grouped_conv2d(x, staged, groups=2, filter_layout="rsck")


def test_a_call_is_planned_once_per_metadata(monkeypatch):
    """The direct path validates and compiles once per call signature (``_plan``): a second
    call of the same shapes, dtypes and arguments reuses the plan, another signature makes
    its own, and an unhashable argument still reaches validation."""
    from cute_conv import grouped

    made = []
    monkeypatch.setattr(grouped, "_plans", PlanCache())
    monkeypatch.setattr(grouped, "_make_plan", lambda *args: made.append(args) or len(made))
    x, flt = _call_inputs()
    staged = stage_filter(flt)
    geometry = (2, (1, 1), ((1, 1), (1, 1)), (1, 1), 1.0, 0.0, "after_activation", "relu")

    def plan(x=x, alpha=1.0, activation="relu", pixels=None, eps=None, split=1):
        groups, stride, padding, dilation, _, beta, order, _ = geometry
        return grouped._plan(x, staged, None, None, None, groups, stride, padding, dilation,
                             alpha, beta, order, activation, pixels, eps, split, None)  # fmt: skip

    assert plan() == plan() == 1
    assert plan(x=x.clone()) == 1  # other data, same metadata
    assert plan(x=torch.randn(3, 9, 8, 48, dtype=BF16)) == 2
    assert plan(alpha=-1.0) == 3 and plan(activation="silu") == 4
    assert plan(pixels=2) == 5 and plan(pixels=2) == 5
    assert plan(activation={"relu"}) == 6 and plan(activation={"relu"}) == 7  # not memoized
    assert plan(activation=None, eps=1e-6) == 8 and plan(activation=None, eps=1e-5) == 9
    assert plan(split=2) == 10 and plan(split=2) == 10
    assert len(made) == 10


def test_the_depthwise_example_compiles_without_a_gpu(capsys):
    import runpy
    from pathlib import Path

    if torch.cuda.is_available():
        pytest.skip("with a GPU the example runs the conv (see its GPU path)")
    example = Path(__file__).resolve().parents[1] / "examples" / "depthwise_conv.py"
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(example), run_name="__main__")
    assert exit_info.value.code == 0
    assert "compiled the sm_90a depthwise kernel" in capsys.readouterr().out


def test_out_partly_over_the_source_or_over_x_is_refused(monkeypatch):
    """The direct path's aliasing check (``dispatch.out_overlaps_inputs``, run on every call
    since it reads data pointers): out may be the source itself, not a shifted view of it."""
    import types

    from cute_conv import grouped

    plan = types.SimpleNamespace(has_residual=True)
    monkeypatch.setattr(grouped, "_plan", lambda *args: plan)
    x, flt = _call_inputs()
    staged = stage_filter(flt)
    buffer = torch.zeros(2 * 9 * 8 * 48 + 64, dtype=BF16)
    source = buffer[:-64].view(2, 9, 8, 48)
    shifted = buffer[64:].view(2, 9, 8, 48)  # 128 bytes on: aligned, overlapping
    with pytest.raises(ValueError, match="partly the source"):
        grouped._run(x, staged, source, None, None, 2, (1, 1), ((1, 1), (1, 1)), (1, 1), 1.0,
                     1.0, "after_activation", None, None, None, 1, shifted)  # fmt: skip
    plan.has_residual = False
    with pytest.raises(ValueError, match="out overlaps activation"):
        grouped._run(x, staged, None, None, None, 2, (1, 1), ((1, 1), (1, 1)), (1, 1), 1.0,
                     0.0, "after_activation", None, None, None, 1, x[:, :, :, :48])  # fmt: skip


# ------------------------------------------------------------------ channel slices (DenseNet)


def test_channel_slice_stride_names_only_prefixes_of_dense_nhwc():
    wide = torch.zeros(2, 5, 7, 48)
    assert channel_slice_stride(wide[..., :32]) == 48
    assert channel_slice_stride(wide[..., 8:40]) == 48  # its offset is the callers' to check
    assert channel_slice_stride(torch.zeros(1, 1, 1, 48)[..., :16]) == 48
    assert channel_slice_stride(wide) is None  # contiguous: not a slice
    assert channel_slice_stride(wide[:, :, ::2, :32]) is None  # every other pixel of 7
    assert channel_slice_stride(wide.transpose(1, 2)[..., :32]) is None
    assert channel_slice_stride(wide[..., :32].float().contiguous()) is None


def test_grouped_conv2d_validates_a_channel_slice():
    """A depthwise call on the first 96 of 104 channels passes validation (then the device
    check stops it, on the CPU); one whose pixel stride is not a multiple of the kernel's
    8-channel loads, or whose pixels are not dense, names why."""
    flt = stage_filter(torch.randn(96, 3, 3, 1).to(BF16))
    kwargs = dict(groups=96, padding=1, filter_layout="rsck")
    with pytest.raises(ValueError, match="cute_conv runs on CUDA tensors"):
        grouped_conv2d(torch.zeros(2, 6, 6, 104, dtype=BF16)[..., :96], flt, **kwargs)
    with pytest.raises(ValueError, match="pixel stride must be a multiple of 8"):
        grouped_conv2d(torch.zeros(2, 6, 6, 100, dtype=BF16)[..., :96], flt, **kwargs)
    with pytest.raises(ValueError, match=r"must be a contiguous \[N, H, W, C\] tensor"):
        transposed = torch.zeros(2, 12, 6, 104, dtype=BF16).transpose(1, 2)
        grouped_conv2d(transposed[..., :96], flt, **kwargs)


def test_kernel_scalars_take_the_slice_s_pixel_stride():
    problem = Conv2dProblemShape(N=1, H=4, W=4, C=32, K=32, R=1, S=1)
    fields = cute_conv.compile.ConvGeometry._fields
    assert kernel_scalars(problem, 1.0, 1.0, 1)[fields.index("c")] == 32
    assert kernel_scalars(problem, 1.0, 1.0, 1, pixel_stride=48)[fields.index("c")] == 48
    # The output's pixel stride: K for a contiguous output, else the wider tensor's channels.
    assert kernel_scalars(problem, 1.0, 1.0, 1)[fields.index("out_pixel_stride")] == 32
    scalars = kernel_scalars(problem, 1.0, 1.0, 1, out_pixel_stride=72)
    assert scalars[fields.index("out_pixel_stride")] == 72 and scalars[fields.index("k")] == 32


def test_module_reads_a_channel_slice_in_place(kernel_calls):  # noqa: F811
    """``nn.Conv2d``'s grouped path hands a channels_last prefix of a wider tensor to the
    kernel as it is (no copy): what ``optimize``'s concatenation buffers rely on."""
    torch.manual_seed(2)
    conv = nn.Conv2d(32, 32, 1, groups=32).to(BF16)
    module = cute_conv.nn.Conv2d.from_torch(conv, activation="relu").eval()
    wide = torch.randn(2, 48, 5, 7).to(BF16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        y = module(wide[:, :32])
    (x, _, _), = kernel_calls
    assert x.data_ptr() == wide.data_ptr() and x.stride(2) == 48
    expected = torch.relu(conv.float()(wide[:, :32].float()))
    check = compare_to_reference(y, expected)
    assert check.ok, str(check)


@pytest.mark.parametrize("name", ["bias", "scale", "source"])
@pytest.mark.parametrize("value", [1.5, [1.0, 2.0]], ids=["float", "list"])
def test_a_vector_or_source_not_a_tensor_is_a_type_error(name, value):
    """Not an AttributeError from the grad-mode check that reads ``requires_grad``."""
    x, flt = _call_inputs()
    with pytest.raises(TypeError, match=f"{name} must be a torch.Tensor"):
        grouped_conv2d(x, flt, groups=2, padding=1, **{name: value})
