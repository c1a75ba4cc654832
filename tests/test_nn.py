"""cute_conv.nn.Conv2d: BatchNorm folding, conversion from torch, the NCHW channels_last plumbing
of forward (on a CPU, with the kernel functions replaced by the float32 torch reference, checked
by the package's own validation), bad input, and (on a Hopper GPU) its numerics."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import cute_conv
from cute_conv import grouped, grouped_tensor_cores
from cute_conv.epilogue import validate_epilogue_args
from cute_conv.fold import fold_batch_norm
from cute_conv.problem import normalize_padding, normalize_pair
from cute_conv.testing import compare_to_reference
from cute_conv.validation import check_fp8_scales, validate_conv_inputs
from tests.gpu import requires_sm90
from tests.test_epilogue_sm90 import reference

BF16 = torch.bfloat16


def _reference_kernel(x, flt, source, **kwargs):
    """The kernel's contract on CPU tensors: the API's validation (all but the device), then
    the float32 torch reference of the epilogue, rounded to the output dtype (into ``out=``). fp8 calls as
    the kernel takes them: inputs times ``x_scale`` / ``w_scale``, the source times ``beta *
    source_scale``, an fp8 output stored as ``y / out_scale`` saturated to +-448."""
    residual_order = kwargs.pop("residual_order", "after_activation")
    out_amax = kwargs.pop("out_amax", None)
    out_dtype = kwargs.pop("out_dtype", None)
    out = kwargs.pop("out", None)
    fp8 = {k: kwargs.pop(k, None) for k in ("x_scale", "w_scale", "out_scale")}
    beta = kwargs.pop("beta", 1.0) * _scalar(kwargs.pop("source_scale", None))
    geom = {k: kwargs.pop(k) for k in ("stride", "padding", "dilation")}
    problem, out_dtype = validate_conv_inputs(x, flt, **geom, out=out, out_dtype=out_dtype)
    check_fp8_scales(x.dtype, out_dtype, x.device, *fp8.values(), out_amax)
    validate_epilogue_args(problem, out_dtype, x.device, alpha=1.0, epilogue_fn=None,
                           source=source, beta=beta, residual_order=residual_order, **kwargs)  # fmt: skip
    x, flt = x.float() * _scalar(fp8["x_scale"]), flt.float() * _scalar(fp8["w_scale"])
    y = reference(x, flt, geom, source=source, beta=beta, order=residual_order, **kwargs)
    if out_amax is not None:  # raised, as the epilogue raises it
        out_amax.copy_(torch.maximum(out_amax, y.abs().max()))
    if fp8["out_scale"] is not None:
        y = (y / fp8["out_scale"]).clamp(-448.0, 448.0)
    return y.to(out_dtype) if out is None else out.copy_(y)


def _reference_grouped(x, staged, source=None, *, groups, **kwargs):
    """The grouped kernel's contract on CPU tensors: ``cute_conv.grouped``'s validation, then
    the float32 torch reference, rounded to the output dtype (into ``out=``)."""
    kwargs.setdefault("beta", 1.0)
    kwargs.setdefault("residual_order", "after_activation")
    kwargs.setdefault("alpha", 1.0)
    args = [kwargs.pop(k, None) for k in ("bias", "scale")]
    geom = {k: kwargs.pop(k) for k in ("stride", "padding", "dilation")}
    grouped._validate(
        x, staged, source, *args, groups, normalize_pair("stride", geom["stride"]),
        normalize_padding(geom["padding"]), normalize_pair("dilation", geom["dilation"]),
        kwargs["alpha"], kwargs["beta"], kwargs["residual_order"], kwargs.get("activation"),
        kwargs.get("pixels"), kwargs.get("channel_norm_eps"), kwargs.get("channel_split"),
        kwargs.get("out"),
    )  # fmt: skip
    flt = staged.permute(3, 0, 1, 2).float()
    y = reference(x.float(), flt, {**geom, "groups": groups}, source=source, bias=args[0],
                  scale=args[1], beta=kwargs["beta"], order=kwargs["residual_order"],
                  activation=kwargs.get("activation"), alpha=kwargs["alpha"])  # fmt: skip
    if kwargs.get("channel_norm_eps") is not None:
        y = F.layer_norm(y, y.shape[-1:], eps=kwargs["channel_norm_eps"])
    out = kwargs.get("out")
    return y.to(x.dtype) if out is None else out.copy_(y)


def _reference_tensor_cores(x, flt, *, groups, **kwargs):
    """The grouped tensor-core launcher's contract on CPU tensors: its validation, then the
    float32 torch reference, rounded to the output dtype (into ``out=``)."""
    geom = {k: kwargs.pop(k) for k in ("stride", "padding", "dilation")}
    bias, scale, activation = (kwargs.pop(k, None) for k in ("bias", "scale", "activation"))
    out = kwargs.pop("out", None)
    grouped_tensor_cores._validate(
        x, flt, bias, scale, out, groups, normalize_pair("stride", geom["stride"]),
        normalize_padding(geom["padding"]), normalize_pair("dilation", geom["dilation"]),
        activation, kwargs.pop("config", None),
    )  # fmt: skip
    assert not kwargs, kwargs
    y = reference(x.float(), flt.float(), {**geom, "groups": groups}, source=None, bias=bias,
                  scale=scale, beta=0.0, order="after_activation", activation=activation,
                  alpha=1.0)  # fmt: skip
    return y.to(x.dtype) if out is None else out.copy_(y)


def _scalar(scale) -> float:
    return 1.0 if scale is None else scale.item()


@pytest.fixture
def kernel_calls(monkeypatch):
    """Runs cute_conv's kernel functions as ``_reference_kernel``; lists the calls' tensors."""
    calls = []

    def fprop(x, flt, /, **kwargs):
        calls.append((x, flt, None))
        return _reference_kernel(x, flt, None, **kwargs)

    def fprop_with_residual(x, flt, source, /, **kwargs):
        calls.append((x, flt, source))
        return _reference_kernel(x, flt, source, **kwargs)

    def grouped_staged(x, staged, /, filter_layout, **kwargs):
        assert filter_layout == "rsck"
        calls.append((x, staged, kwargs.get("source")))
        return _reference_grouped(x, staged, **kwargs)

    def tensor_cores(x, flt, /, **kwargs):
        calls.append((x, flt, None))
        return _reference_tensor_cores(x, flt, **kwargs)

    monkeypatch.setattr(cute_conv.nn, "grouped_conv2d", grouped_staged)
    monkeypatch.setattr(cute_conv.nn, "grouped_conv2d_tensor_cores", tensor_cores)
    monkeypatch.setattr(cute_conv.nn, "runs_on_tensor_cores", lambda device: True)  # as SM90
    monkeypatch.setattr(cute_conv.api, "conv2d_fprop", fprop)
    monkeypatch.setattr(cute_conv.api, "conv2d_fprop_with_residual", fprop_with_residual)
    return calls


@pytest.fixture
def conv_outs(kernel_calls, monkeypatch):
    """The ``out=`` of each call of ``kernel_calls``' ``conv2d_fprop`` and
    ``conv2d_fprop_with_residual`` (None where none was given), in order."""
    outs = []

    def recording(kernel):
        def call(*args, out=None, **kwargs):
            outs.append(out)
            return kernel(*args, out=out, **kwargs)

        return call

    for name in ("conv2d_fprop", "conv2d_fprop_with_residual"):
        monkeypatch.setattr(cute_conv.api, name, recording(getattr(cute_conv.api, name)))
    return outs


def random_bn(channels: int, dtype=torch.float32, affine: bool = True) -> nn.BatchNorm2d:
    """An eval-mode BatchNorm2d with random statistics and affine terms."""
    bn = nn.BatchNorm2d(channels, eps=1e-3, affine=affine).to(dtype).eval()
    with torch.no_grad():
        bn.running_mean.normal_(0, 0.5)
        bn.running_var.uniform_(0.2, 2.0)
        if affine:
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.normal_(0, 0.5)
    return bn


# ------------------------------------------------------------------------------ BatchNorm folding


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("conv_bias", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_folded_batch_norm_matches_torch(dtype, conv_bias, affine):
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 24, 3, padding=1, bias=conv_bias).to(dtype)
    check_fold(conv, random_bn(24, dtype, affine), torch.randn(2, 16, 9, 9, dtype=dtype))


@pytest.mark.parametrize("conv_bias", [True, False])
def test_folded_frozen_batch_norm_matches_torchvision(conv_bias):
    """torchvision's FrozenBatchNorm2d (pretrained detection backbones') folds the same."""
    frozen_type = pytest.importorskip("torchvision.ops").FrozenBatchNorm2d
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 24, 3, padding=1, bias=conv_bias)
    bn = frozen_type(24, eps=1e-3)
    bn.load_state_dict(random_bn(24).state_dict())
    check_fold(conv, bn, torch.randn(2, 16, 9, 9))
    module = cute_conv.nn.Conv2d.from_torch(conv.to(BF16), bn)
    torch.testing.assert_close(module.scale, fold_batch_norm(bn, conv.bias)[0])


def test_folded_sync_batch_norm_matches_torch():
    """A SyncBatchNorm in eval mode normalizes by its running statistics: it folds the same."""
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 24, 3, padding=1)
    bn = nn.SyncBatchNorm(24, eps=1e-3).eval()
    bn.load_state_dict(random_bn(24).state_dict())
    check_fold(conv, bn, torch.randn(2, 16, 9, 9))
    with pytest.raises(ValueError, match="training mode"):
        fold_batch_norm(bn.train())


def check_fold(conv: nn.Conv2d, bn: nn.Module, x: torch.Tensor) -> None:
    scale, bias = fold_batch_norm(bn, conv.bias)
    assert scale.dtype == bias.dtype == torch.float32 and scale.shape == bias.shape == (24,)
    with torch.no_grad():
        expected = bn(conv(x)).double()
        folded = F.conv2d(x, conv.weight, padding=1).double()
    folded = folded * scale.double()[:, None, None] + bias.double()[:, None, None]
    # float32 scale and bias: a few float32 ulps of the output (float64 model), or the float32
    # model's own rounding.
    torch.testing.assert_close(folded, expected, rtol=2e-6, atol=2e-6)


def test_fold_rejects_what_does_not_fold():
    bn = nn.BatchNorm2d(8)
    with pytest.raises(ValueError, match="training mode.*model.eval"):
        fold_batch_norm(bn)
    with pytest.raises(ValueError, match="track_running_stats=False"):
        fold_batch_norm(nn.BatchNorm2d(8, track_running_stats=False).eval())
    with pytest.raises(ValueError, match=r"conv_bias has shape \(7,\).*shape \(8,\)"):
        fold_batch_norm(bn.eval(), torch.zeros(7))
    with pytest.raises(TypeError, match="BatchNorm2d, got LayerNorm"):
        fold_batch_norm(nn.LayerNorm(8))


# ------------------------------------------------------------------------------ from_torch


def test_from_torch_keeps_the_weight_and_folds_bn_and_activation():
    torch.manual_seed(1)
    conv = nn.Conv2d(32, 64, 3, stride=2, padding=1).to(BF16)
    bn = random_bn(64, BF16)
    module = cute_conv.nn.Conv2d.from_torch(conv, bn, nn.ReLU(inplace=True), "before_activation")
    assert module.weight.shape == (64, 3, 3, 32) and module.weight.dtype == BF16
    assert torch.equal(module.weight, conv.weight.permute(0, 2, 3, 1))
    assert module.weight.requires_grad == conv.weight.requires_grad
    scale, bias = fold_batch_norm(bn, conv.bias)
    assert torch.equal(module.scale, scale) and torch.equal(module.bias, bias)
    assert (module.activation, module.residual_order) == ("relu", "before_activation")
    assert (module.stride, module.dilation, module._padding) == ((2, 2), (1, 1), ((1, 1), (1, 1)))
    assert "epilogue='relu(conv * scale + bias [+ identity])'" in repr(module)


def test_from_torch_without_bn_keeps_the_conv_bias_in_float32():
    conv = nn.Conv2d(8, 16, 1).to(torch.float16)
    module = cute_conv.nn.Conv2d.from_torch(conv, activation=F.gelu)
    assert module.scale is None and module.bias.dtype == torch.float32
    assert torch.equal(module.bias, conv.bias.float())
    assert module.activation == "gelu" and module.weight.dtype == torch.float16
    assert "epilogue='gelu(conv + bias) [+ identity]'" in repr(module)
    plain = cute_conv.nn.Conv2d.from_torch(nn.Conv2d(8, 16, 1, bias=False).to(BF16))
    assert plain.bias is None and "epilogue='conv [+ identity]'" in repr(plain)


def test_from_torch_views_a_channels_last_weight():
    conv = nn.Conv2d(16, 32, 3).to(BF16).to(memory_format=torch.channels_last)
    module = cute_conv.nn.Conv2d.from_torch(conv)
    assert module.weight.data_ptr() == conv.weight.data_ptr()
    assert module.weight.is_contiguous()


@pytest.mark.parametrize(
    "conv, error, match",
    [
        (nn.Conv2d(8, 8, 3), TypeError, "dtype torch.float32: .*bfloat16 and float16"),
        (nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect").to(BF16), ValueError,
         "padding_mode='reflect'"),
        (nn.Conv2d(8, 8, 3, stride=9).to(BF16), ValueError, "stride must be in 1..8"),
        (nn.Conv2d(8, 8, 3, padding=130).to(BF16), ValueError, "padding top=130 exceeds"),
        (nn.Conv2d(8, 8, 3, dilation=200).to(BF16), ValueError, "im2col TMA limit is 255"),
    ],
    ids=["float32", "padding-mode", "stride", "padding", "dilation"],
)  # fmt: skip
def test_from_torch_names_the_limit(conv, error, match):
    with pytest.raises(error, match=match):
        cute_conv.nn.Conv2d.from_torch(conv)


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(in_channels=-1), "in_channels must be a positive int, got -1"),
     (dict(out_channels=0), "out_channels must be a positive int, got 0"),
     (dict(kernel_size=-1), r"kernel_size must be >= 1, got \(-1, -1\)"),
     (dict(kernel_size=(3, 0)), r"kernel_size must be >= 1, got \(3, 0\)"),
     (dict(dilation=-1), r"dilation must be >= 1, got -1 along h \(dilation=\(-1, -1\)\)"),
     (dict(groups=2, stride=(1, 0)), r"stride must be >= 1, got 0 along w \(stride=\(1, 0\)\)")],
    ids=["in-channels", "out-channels", "kernel-size", "kernel-width", "dilation",
         "grouped-stride"],
)  # fmt: skip
def test_the_module_names_a_bad_size_before_making_its_weight(kwargs, match):
    """A ValueError, as torch's geometry errors are, not the RuntimeError of an empty tensor
    of a negative size."""
    with pytest.raises(ValueError, match=match):
        cute_conv.nn.Conv2d(**(dict(in_channels=16, out_channels=16, kernel_size=3) | kwargs))


def test_from_torch_rejects_bad_companions():
    conv = nn.Conv2d(8, 16, 3).to(BF16)
    with pytest.raises(ValueError, match="training mode"):
        cute_conv.nn.Conv2d.from_torch(conv, nn.BatchNorm2d(16))
    with pytest.raises(ValueError, match="bn normalizes 8 channels .* out_channels=16"):
        cute_conv.nn.Conv2d.from_torch(conv, nn.BatchNorm2d(8).eval())
    with pytest.raises(ValueError, match="slope 0.01 only"):
        cute_conv.nn.Conv2d.from_torch(conv, activation=nn.LeakyReLU(0.2))
    gelu = nn.GELU()
    gelu.approximate = "erf"
    with pytest.raises(ValueError, match="approximate='erf'"):
        cute_conv.nn.Conv2d.from_torch(conv, activation=gelu)
    with pytest.raises(ValueError, match="not one the kernel runs"):
        cute_conv.nn.Conv2d.from_torch(conv, activation=nn.ELU())
    with pytest.raises(ValueError, match="residual_order='after'"):
        cute_conv.nn.Conv2d.from_torch(conv, residual_order="after")
    with pytest.raises(TypeError, match="torch.nn.Conv2d, got Conv1d"):
        cute_conv.nn.Conv2d.from_torch(nn.Conv1d(8, 16, 3))


def test_from_linear_folds_the_channel_scale_into_scale_and_bias():
    torch.manual_seed(2)
    linear = nn.Linear(32, 48).to(BF16)
    gamma = torch.rand(48, 1, 1) + 0.5
    module = cute_conv.nn.Conv2d.from_linear(linear, nn.GELU(), gamma)
    assert module.weight.shape == (48, 1, 1, 32) and torch.equal(module.weight[:, 0, 0], linear.weight)
    assert torch.equal(module.scale, gamma.flatten())
    assert torch.equal(module.bias, linear.bias.float() * gamma.flatten())
    assert module.activation == "gelu" and module.kernel_size == (1, 1)
    plain = cute_conv.nn.Conv2d.from_linear(nn.Linear(8, 16, bias=False).to(BF16))
    assert plain.bias is None and plain.scale is None
    # A float32 bias beside 16-bit weights: the module's bias is the Linear's tensor no more.
    mixed = nn.Linear(32, 48).to(BF16)
    mixed.bias.data = mixed.bias.data.float()
    original = mixed.bias.detach().clone()
    folded = cute_conv.nn.Conv2d.from_linear(mixed, None, gamma)
    assert torch.equal(mixed.bias, original)
    assert torch.equal(folded.bias, original * gamma.flatten())


def test_from_linear_names_what_it_cannot_take():
    linear = nn.Linear(8, 16).to(BF16)
    with pytest.raises(TypeError, match="torch.nn.Linear, got Conv2d"):
        cute_conv.nn.Conv2d.from_linear(nn.Conv2d(8, 16, 1).to(BF16))
    with pytest.raises(TypeError, match="channel_scale must be a torch.Tensor or None, got list"):
        cute_conv.nn.Conv2d.from_linear(linear, channel_scale=[1.0] * 16)
    with pytest.raises(ValueError, match="channel_scale has 8 elements; linear has out_features=16"):
        cute_conv.nn.Conv2d.from_linear(linear, channel_scale=torch.ones(8))
    with pytest.raises(TypeError, match="dtype torch.float32"):
        cute_conv.nn.Conv2d.from_linear(nn.Linear(8, 16))
    with pytest.raises(ValueError, match="not one the kernel runs"):
        cute_conv.nn.Conv2d.from_linear(linear, nn.ELU())


# ------------------------------------------------------------------------------ the constructor


def test_constructor_makes_a_bf16_krsc_conv():
    module = cute_conv.nn.Conv2d(12, 20, (3, 5), padding="same", dilation=2)
    assert module.weight.shape == (20, 3, 5, 12) and module.weight.dtype == BF16
    assert module.bias.dtype == torch.float32 and module.scale is None
    # torch's "same": total (k-1)*dilation per dimension, the odd one after.
    assert module._padding == ((2, 2), (4, 4))
    assert cute_conv.nn.Conv2d(4, 4, 4, padding="same")._padding == ((1, 2), (1, 2))
    assert cute_conv.nn.Conv2d(4, 4, 3, padding="valid")._padding == ((0, 0), (0, 0))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(dtype=torch.float32), TypeError, "bfloat16 and float16"),
        (dict(groups=3), ValueError, "groups=3 must divide in_channels=8 and out_channels=8"),
        (dict(padding="same", stride=2), ValueError, "padding='same' needs stride 1"),
        (dict(padding="full"), ValueError, "padding='full'"),
        (dict(activation="swish"), ValueError, "activation='swish'"),
        (dict(residual_order="before"), ValueError, "residual_order='before'"),
    ],
)
def test_constructor_rejects(kwargs, error, match):
    with pytest.raises(error, match=match):
        cute_conv.nn.Conv2d(8, 8, 3, **kwargs)


# ------------------------------------------------------------------------------ forward, on a CPU


def torch_forward(conv, bn, act, x, identity=None, order="after_activation"):
    """The torch module chain in float32 (the weights as they are, the math in float32; no
    TF32 on a GPU)."""
    with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        y = F.conv2d(x.float(), conv.weight.float(), None if conv.bias is None else conv.bias.float(),
                     conv.stride, conv.padding, conv.dilation)  # fmt: skip
        if bn is not None:
            y = bn.float()(y)
        if identity is not None and order == "before_activation":
            y = y + identity.float()
        y = act(y)
        if identity is not None and order == "after_activation":
            y = y + identity.float()
    return y


@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
def test_forward_reads_and_writes_channels_last_without_copies(kernel_calls, order):
    torch.manual_seed(2)
    conv = nn.Conv2d(16, 24, 3, stride=2, padding=1).to(BF16)
    bn = random_bn(24, BF16)
    module = cute_conv.nn.Conv2d.from_torch(conv, bn, torch.relu, order).eval()
    x = torch.randn(2, 16, 11, 10).to(BF16).to(memory_format=torch.channels_last)
    identity = torch.randn(2, 24, 6, 5).to(BF16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        y = module(x, identity)
    ((x_nhwc, weight, source),) = kernel_calls
    assert x_nhwc.data_ptr() == x.data_ptr() and source.data_ptr() == identity.data_ptr()
    assert weight is module.weight
    assert y.shape == (2, 24, 6, 5) and y.dtype == BF16
    assert y.is_contiguous(memory_format=torch.channels_last)
    expected = torch_forward(conv, bn, F.relu, x, identity, order)
    report = compare_to_reference(y, expected)
    assert report.ok, str(report)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
def test_forward_copies_other_layouts_to_channels_last(kernel_calls):
    torch.manual_seed(3)
    conv = nn.Conv2d(8, 16, 4, padding="same", bias=False).to(BF16)
    module = cute_conv.nn.Conv2d.from_torch(conv, activation=nn.SiLU())
    x = torch.randn(3, 8, 7, 9).to(BF16)  # NCHW contiguous: copied
    identity = torch.randn(3, 16, 7, 9).to(BF16)
    with torch.no_grad():
        y = module(x, identity)
        y_plain = module(x)
    assert kernel_calls[0][0].data_ptr() != x.data_ptr()
    assert y.is_contiguous(memory_format=torch.channels_last)
    # "same" for an even filter: torch pads the extra row and column after.
    expected = F.silu(F.conv2d(x.float(), conv.weight.float(), padding="same"))
    assert compare_to_reference(y_plain, expected).ok
    report = compare_to_reference(y, expected + identity.float())
    assert report.ok, str(report)


def test_forward_zeroes_out_amax_before_the_epilogue_raises_it(kernel_calls):
    """``out_amax`` holds the max of this call's output alone: a stale larger value (from an
    earlier, larger input) is cleared first, since the epilogue only raises it."""
    module = cute_conv.nn.Conv2d.from_torch(nn.Conv2d(8, 16, 3, padding=1).to(BF16))
    amax = torch.full((), 1e6)
    with torch.no_grad():
        y = module(torch.randn(2, 8, 5, 5).to(BF16), out_amax=amax)
    assert amax.item() == pytest.approx(y.float().abs().max().item(), rel=2**-7)
    # A rejected call writes nothing: a bad identity, or a bad out_amax itself.
    amax.fill_(7.0)
    with pytest.raises(ValueError, match="identity has shape"):
        module(torch.randn(2, 8, 5, 5).to(BF16), torch.randn(2, 16, 4, 4).to(BF16), out_amax=amax)
    assert amax.item() == 7.0
    with pytest.raises(ValueError, match="out_amax must be a one-element float32 tensor"):
        module(torch.randn(2, 8, 5, 5).to(BF16), out_amax=torch.zeros(2))


@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
@pytest.mark.parametrize("shape", [(), (16, 1, 1), (1, 16, 1, 5), (2, 1, 5, 5)])
def test_an_identity_that_broadcasts_runs_in_torch_ops(kernel_calls, order, shape):
    """A traced model's ``relu(conv(x) + t)`` with ``t`` smaller than the output: torch's
    broadcast, through cuDNN's conv and torch ops (the kernel takes the output's shape only)."""
    torch.manual_seed(11)
    conv = nn.Conv2d(8, 16, 3, padding=1).to(BF16)
    bn = random_bn(16, BF16)
    module = cute_conv.nn.Conv2d.from_torch(conv, bn, nn.ReLU(), residual_order=order).eval()
    x = torch.randn(2, 8, 5, 5).to(BF16).to(memory_format=torch.channels_last)
    t = torch.randn(shape).to(BF16)
    with torch.no_grad():
        y = module(x, t)
        with pytest.raises(ValueError, match="an identity that broadcasts takes no out_amax"):
            module(x, t, out_amax=torch.zeros(1))
    assert not kernel_calls
    z = bn.float()(conv.float()(x.float()))
    expected = F.relu(z + t.float()) if order == "before_activation" else F.relu(z) + t.float()
    check = compare_to_reference(y, expected)
    assert check.ok, str(check)


def test_forward_rejects_bad_input(kernel_calls):
    module = cute_conv.nn.Conv2d(8, 16, 3, padding=1)
    x = torch.randn(2, 8, 5, 5).to(BF16)
    with torch.no_grad():
        with pytest.raises(TypeError, match="x must be a torch.Tensor, got ndarray"):
            module(x.float().numpy())
        with pytest.raises(ValueError, match=r"C=8, got shape \(2, 5, 5, 8\)"):
            module(x.permute(0, 2, 3, 1))
        with pytest.raises(
            ValueError, match=r"identity has shape \(2, 16, 4, 4\).*\(2, 16, 5, 5\)"
        ):
            module(x, torch.zeros(2, 16, 4, 4, dtype=BF16))
        with pytest.raises(TypeError, match="identity has dtype torch.float32"):
            module(x, torch.zeros(2, 16, 5, 5))
        with pytest.raises(TypeError, match="x has dtype torch.float32; the weight is torch.bf"):
            module(x.float())
    assert not kernel_calls


def _buffer_part(n, channels, h, w, start, width):
    """Channels ``start:start + width`` of a channels_last ``[n, channels, h, w]`` buffer of
    NaN: a concatenation's part."""
    buffer = torch.full((n, channels, h, w), float("nan"), dtype=BF16)
    buffer = buffer.to(memory_format=torch.channels_last)
    return buffer, buffer[:, start : start + width]


@pytest.mark.parametrize("with_identity", [False, True])
def test_forward_writes_a_channel_slice_in_place(conv_outs, with_identity):
    """``out=``: the kernel is handed the slice's NHWC view (pixels 40 channels apart); the
    buffer's other channels are left as they were."""
    torch.manual_seed(4)
    module = cute_conv.nn.Conv2d.from_torch(nn.Conv2d(8, 16, 3, padding=1).to(BF16)).eval()
    x = torch.randn(2, 8, 5, 6).to(BF16).to(memory_format=torch.channels_last)
    identity = torch.randn(2, 16, 5, 6).to(BF16) if with_identity else None
    buffer, part = _buffer_part(2, 40, 5, 6, 8, 16)
    with torch.no_grad():
        y = module(x, identity, out=part)
        expected = module(x, identity)
    assert y is part and torch.equal(part, expected)
    out = conv_outs[0]
    assert out.data_ptr() == part.data_ptr() and out.stride() == (1200, 240, 40, 1)
    assert buffer[:, :8].isnan().all() and buffer[:, 24:].isnan().all()


def test_a_grouped_forward_writes_a_channel_slice_in_place(kernel_calls, monkeypatch):
    torch.manual_seed(6)
    module = cute_conv.nn.Conv2d(16, 16, 3, padding=1, groups=16, activation="relu").eval()
    x = torch.randn(2, 16, 5, 6).to(BF16).to(memory_format=torch.channels_last)
    buffer, part = _buffer_part(2, 40, 5, 6, 8, 16)
    outs = []
    grouped = cute_conv.nn.grouped_conv2d  # the fixture's

    def recording(*args, out=None, **kwargs):
        outs.append(out)
        return grouped(*args, out=out, **kwargs)

    monkeypatch.setattr(cute_conv.nn, "grouped_conv2d", recording)
    with torch.no_grad():
        y = module(x, out=part)
        expected = module(x)
    assert y is part and torch.equal(part, expected)
    assert outs[0].data_ptr() == part.data_ptr() and outs[0].stride() == (1200, 240, 40, 1)
    assert outs[1] is None
    assert buffer[:, :8].isnan().all() and buffer[:, 24:].isnan().all()


@pytest.mark.parametrize(
    "channels, start",
    [(40, 4), (36, 8), (16, 0)],
    ids=["offset-not-16-bytes", "pitch-not-16-bytes", "nchw-contiguous"],
)
def test_forward_copies_into_an_out_the_kernel_cannot_store_to(conv_outs, channels, start):
    """A slice at a channel offset or of a pitch that is no whole number of 16-byte units
    (TMA's), or an NCHW-contiguous out: the kernel writes its own output, copied in."""
    torch.manual_seed(5)
    module = cute_conv.nn.Conv2d(8, 16, 3, padding=1)
    x = torch.randn(2, 8, 5, 6).to(BF16)
    buffer, part = _buffer_part(2, channels, 5, 6, start, 16)
    if channels == 16:
        part = buffer.contiguous()
    with torch.no_grad():
        y = module(x, out=part)
        expected = module(x)
    assert y is part and conv_outs[0] is None and torch.equal(part, expected)


def test_forward_copies_into_out_where_a_gradient_is_tracked(conv_outs):
    """With a weight that requires grad the call runs without ``out=`` (whose op has no
    backward) and its result is copied into ``out``."""
    module = cute_conv.nn.Conv2d(8, 16, 3, padding=1)
    x = torch.randn(2, 8, 5, 6).to(BF16)
    _, part = _buffer_part(2, 32, 5, 6, 16, 16)
    y = module(x, out=part)
    assert y is part and conv_outs == [None] and not part.isnan().any()
    with torch.no_grad():
        assert torch.equal(part, module(x))


def test_forward_rejects_a_bad_out_before_any_call(kernel_calls):
    module = cute_conv.nn.Conv2d(8, 16, 3, padding=1)
    x = torch.randn(2, 8, 5, 5).to(BF16)
    with torch.no_grad():
        with pytest.raises(TypeError, match="out must be a torch.Tensor, got ndarray"):
            module(x, out=torch.zeros(2, 16, 5, 5).numpy())
        with pytest.raises(ValueError, match=r"out has shape \(2, 16, 5, 4\).*\(2, 16, 5, 5\)"):
            module(x, out=torch.zeros(2, 16, 5, 4, dtype=BF16))
        with pytest.raises(TypeError, match="out has dtype torch.float32; .* torch.bfloat16"):
            module(x, out=torch.zeros(2, 16, 5, 5))
    assert not kernel_calls


@requires_sm90
def test_forward_rejects_a_cpu_input_on_the_gpu_machine():
    module = cute_conv.nn.Conv2d(8, 16, 3, device="cuda")
    with torch.no_grad(), pytest.raises(ValueError, match="is on cpu"):
        module(torch.randn(1, 8, 5, 5).to(BF16))


# ------------------------------------------------------------------------------ GPU numerics

ACTIVATIONS = [nn.ReLU(), nn.GELU(), nn.GELU("tanh"), nn.SiLU(), nn.Sigmoid(), nn.Tanh(),
               nn.LeakyReLU(0.01), nn.Mish(), nn.ReLU6(), nn.Hardswish(),
               nn.Hardsigmoid()]  # fmt: skip


@requires_sm90
@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda m: repr(m))
def test_module_matches_torch_float32_on_the_gpu(act, order):
    torch.manual_seed(4)
    conv = nn.Conv2d(64, 96, 3, padding=1, bias=True).to("cuda", BF16)
    bn = random_bn(96, BF16).cuda()
    module = cute_conv.nn.Conv2d.from_torch(conv, bn, act, order)
    x = torch.randn(4, 64, 20, 18, device="cuda").to(BF16).to(memory_format=torch.channels_last)
    identity = torch.randn(4, 96, 20, 18, device="cuda").to(BF16)  # NCHW: copied
    with torch.no_grad():
        y = module(x, identity)
        y_plain = module(x)
    torch.cuda.synchronize()
    assert y.is_contiguous(memory_format=torch.channels_last)
    for out, ident in ((y, identity), (y_plain, None)):
        report = compare_to_reference(out, torch_forward(conv, bn, act, x, ident, order))
        assert report.ok, str(report)


@requires_sm90
@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
@pytest.mark.parametrize("groups", [1, 8])
def test_an_identity_that_broadcasts_on_the_gpu(order, groups):
    torch.manual_seed(5)
    conv = nn.Conv2d(64, 64, 3, padding=1, groups=groups).to("cuda", BF16)
    bn = random_bn(64, BF16).cuda()
    module = cute_conv.nn.Conv2d.from_torch(conv, bn, nn.SiLU(), order)
    x = torch.randn(4, 64, 20, 18, device="cuda").to(BF16).to(memory_format=torch.channels_last)
    t = torch.randn(64, 1, 1, device="cuda").to(BF16)
    with torch.no_grad():
        y = module(x, t)
    z = bn.float()(conv.float()(x.float()))
    expected = F.silu(z + t.float()) if order == "before_activation" else F.silu(z) + t.float()
    report = compare_to_reference(y, expected)
    assert report.ok, str(report)


@requires_sm90
@pytest.mark.parametrize(
    "conv",
    [nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), nn.Conv2d(40, 72, 4, padding="same"),
     nn.Conv2d(64, 256, 1, stride=2), nn.Conv2d(32, 32, 3, padding=2, dilation=2)],
    ids=["stem", "same-even", "1x1-s2", "dilated"],
)  # fmt: skip
def test_module_geometries_on_the_gpu(conv):
    torch.manual_seed(5)
    conv = conv.to("cuda", BF16)
    module = cute_conv.nn.Conv2d.from_torch(conv)
    x = torch.randn(2, conv.in_channels, 30, 28, device="cuda").to(BF16)
    with torch.no_grad():
        y = module(x.to(memory_format=torch.channels_last))
    torch.cuda.synchronize()
    report = compare_to_reference(y, torch_forward(conv, None, lambda v: v, x))
    assert report.ok, str(report)
