"""The torch.library ops (``cute_conv.ops``): schemas, fake implementations, torch.compile and
torch.export tracing of the public functions, the eager routing, config serialization.

CPU: fake tensors, meta tensors and tracing (the ops' forward is run by the torch reference
where a test needs it run). GPU (``@requires_sm90``): the ops' numerics, compiled calls and
CUDA-graph capture of the public function.
"""

from __future__ import annotations

import types

import pytest
import torch
from torch._subclasses import FakeTensorMode

import cute_conv
from cute_conv import ops
from cute_conv.config_sm100 import Conv2dConfigSm100
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs
from tests.gpu import requires_sm90
from tests.test_autograd import fused_reference, reference_forward_on_cpu

BF16 = torch.bfloat16
CONV = torch.ops.cute_conv.conv2d_fprop.default
RESIDUAL = torch.ops.cute_conv.conv2d_fprop_with_residual.default
OUT = torch.ops.cute_conv.conv2d_fprop_out.default


def _plain_args(x, flt, *, bias=None, scale=None, fp8_scales=(None, None, None), stride=(1, 1),
                padding=(0, 0, 0, 0), dilation=(1, 1), alpha=1.0, activation=None,
                out_dtype=None, config=None):  # fmt: skip
    return (x, flt, bias, scale, *fp8_scales, list(stride), list(padding), list(dilation), alpha,
            activation, out_dtype, config)  # fmt: skip


def _residual_args(x, flt, source, *, beta=1.0, order="after_activation", source_scale=None,
                   **kwargs):  # fmt: skip
    x, flt, bias, scale, *scales, stride, padding, dilation, alpha, act, out_dtype, config = (
        _plain_args(x, flt, **kwargs)
    )
    return (x, flt, source, bias, scale, *scales, source_scale, stride, padding, dilation, alpha,
            beta, order, act, out_dtype, config)  # fmt: skip


def _expected_shape(x_shape, f_shape, stride, padding, dilation) -> tuple:
    """The output shape by torch's own conv (on small CPU tensors), not by cute_conv's math."""
    top, bottom, left, right = padding
    out = fused_reference(
        torch.zeros(x_shape), torch.zeros(f_shape), stride=stride,
        padding=((top, bottom), (left, right)), dilation=dilation,
    )  # fmt: skip
    return tuple(out.shape)


GEOMETRIES = [
    pytest.param((1, 1), (1, 1, 1, 1), (1, 1), id="3x3-pad1"),
    pytest.param((2, 2), (1, 0, 2, 1), (1, 1), id="s2-asym"),
    pytest.param((1, 3), (0, 3, 4, 0), (2, 1), id="asym-dilated"),
]


@pytest.mark.parametrize("out_dtype", [None, torch.float32, torch.float16])
@pytest.mark.parametrize(("stride", "padding", "dilation"), GEOMETRIES)
def test_fake_output_shape_and_dtype(stride, padding, dilation, out_dtype):
    x_shape, f_shape = (2, 13, 11, 24), (40, 3, 3, 24)
    expected = _expected_shape(x_shape, f_shape, stride, padding, dilation)
    with FakeTensorMode():
        x = torch.empty(x_shape, dtype=BF16, device="cuda")
        flt = torch.empty(f_shape, dtype=BF16, device="cuda")
        bias = torch.empty(40, device="cuda")
        geometry = dict(stride=stride, padding=padding, dilation=dilation)
        y = CONV(
            *_plain_args(x, flt, bias=bias, activation="relu", out_dtype=out_dtype, **geometry)
        )
        source = torch.empty(expected, dtype=out_dtype or BF16, device="cuda")
        z = RESIDUAL(*_residual_args(x, flt, source, order="before_activation", out_dtype=out_dtype,
                                     **geometry))  # fmt: skip
    for out in (y, z):
        assert tuple(out.shape) == expected
        assert out.dtype == (out_dtype or BF16)
        assert out.device == torch.device("cuda", 0)
        assert out.is_contiguous()


def test_fake_runs_as_the_meta_kernel():
    x = torch.empty(2, 8, 8, 16, dtype=torch.float16, device="meta")
    flt = torch.empty(32, 1, 1, 16, dtype=torch.float16, device="meta")
    y = CONV(*_plain_args(x, flt, out_dtype=torch.float32))
    assert (y.device.type, tuple(y.shape), y.dtype) == ("meta", (2, 8, 8, 32), torch.float32)


def _bad(**changes):
    """A residual call with one thing wrong, as (args builder kwargs)."""
    return changes


BAD_CALLS = [
    pytest.param(_bad(x_dtype=torch.float32), TypeError, "activation has dtype torch.float32", id="x-dtype"),
    pytest.param(_bad(f_shape=(32, 3, 3, 8)), ValueError, "filter has C=8 channels", id="channels"),
    pytest.param(_bad(x_shape=(2, 8, 16)), ValueError, "rank-4", id="rank"),
    pytest.param(_bad(source_shape=(2, 8, 8, 16)), ValueError, "source has shape", id="source-shape"),
    pytest.param(_bad(source_dtype=torch.float16), TypeError, "source has dtype", id="source-dtype"),
    pytest.param(_bad(bias_shape=(31,)), ValueError, "bias has shape", id="bias-shape"),
    pytest.param(_bad(activation="swish"), ValueError, "activation='swish'", id="activation"),
    pytest.param(_bad(order="before"), ValueError, "residual_order='before'", id="order"),
    pytest.param(_bad(padding=(200, 0, 0, 0)), ValueError, "padding top=200", id="padding"),
    pytest.param(_bad(stride=(9, 1)), ValueError, "stride must be in 1..8", id="stride"),
    pytest.param(_bad(config="Conv2dConfig(tile_m=100)"), ValueError, "tile_m", id="config"),
    pytest.param(_bad(non_contiguous=True), ValueError, "must be a contiguous", id="layout"),
]  # fmt: skip


@pytest.mark.parametrize(("bad", "error", "match"), BAD_CALLS)
def test_fake_rejects_what_the_public_function_rejects(bad, error, match):
    with FakeTensorMode():
        x = torch.empty(bad.get("x_shape", (2, 8, 8, 16)), dtype=bad.get("x_dtype", BF16))
        if bad.get("non_contiguous"):
            x = torch.empty(2, 16, 8, 8, dtype=BF16).permute(0, 2, 3, 1)
        flt = torch.empty(bad.get("f_shape", (32, 3, 3, 16)), dtype=BF16)
        source = torch.empty(
            bad.get("source_shape", (2, 8, 8, 32)), dtype=bad.get("source_dtype", BF16)
        )
        bias = torch.empty(bad.get("bias_shape", (32,)))
        args = _residual_args(
            x, flt, source, bias=bias, stride=bad.get("stride", (1, 1)),
            padding=bad.get("padding", (1, 1, 1, 1)), activation=bad.get("activation", "relu"),
            order=bad.get("order", "after_activation"), config=bad.get("config"),
        )  # fmt: skip
        with pytest.raises(error, match=match):
            RESIDUAL(*args)


def test_fake_of_the_out_op_checks_out():
    with FakeTensorMode():
        x, flt = torch.empty(1, 8, 8, 16, dtype=BF16), torch.empty(32, 3, 3, 16, dtype=BF16)
        out = torch.empty(1, 6, 6, 32, dtype=BF16)
        args = (x, flt, None, None, None, None, None, None, None, None, out, [1, 1],
                [0, 0, 0, 0], [1, 1], 1.0, 0.0, "after_activation", None, None, None)  # fmt: skip
        assert OUT(*args) is None
        wrong = torch.empty(1, 8, 8, 32, dtype=BF16)
        with pytest.raises(ValueError, match=r"out has shape \(1, 8, 8, 32\)"):
            OUT(*args[:10], wrong, *args[11:])
        with pytest.raises(ValueError, match="out_amax must be a one-element float32"):
            OUT(*args[:8], torch.empty(2), *args[9:])
        with pytest.raises(ValueError, match="source_scale multiplies beta \\* source"):
            OUT(*args[:9], torch.ones(()), *args[10:])


OPCHECK_CASES = [
    pytest.param(lambda x, flt, src, b: _plain_args(
        x, flt, bias=b, stride=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), alpha=0.5,
        activation="gelu"), id="conv2d_fprop"),
    pytest.param(lambda x, flt, src, b: _residual_args(
        x, flt, src, bias=b, padding=(1, 1, 1, 1), beta=-2.0, order="before_activation",
        activation="relu", out_dtype=torch.float32), id="conv2d_fprop_with_residual"),
]  # fmt: skip


@pytest.mark.parametrize("make_args", OPCHECK_CASES)
def test_opcheck(make_args):
    """torch's own op checks: schema (mutation), autograd registration, the fake against the
    real forward (the torch reference on CPU here), and AOT dispatch with dynamic shapes."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 9, 8, 8, generator=gen).to(BF16)
    flt = (torch.randn(16, 3, 3, 8, generator=gen) / 8).to(BF16).requires_grad_()
    source = torch.randn(2, 9, 8, 16, generator=gen)
    bias = torch.randn(16, generator=gen).requires_grad_()
    args = make_args(x, flt, source, bias)
    op = CONV if len(args) == 14 else RESIDUAL
    with reference_forward_on_cpu():
        torch.library.opcheck(op, args)


def test_opcheck_out_op():
    x = torch.randn(1, 8, 8, 16).to(BF16)
    flt = torch.randn(32, 3, 3, 16).to(BF16)
    out = torch.full((1, 8, 8, 32), float("nan"), dtype=BF16)
    amax = torch.zeros(1)
    args = (x, flt, None, None, None, None, None, None, amax, None, out, [1, 1], [1, 1, 1, 1],
            [1, 1], 1.0, 0.0, "after_activation", "tanh", None, None)  # fmt: skip
    with reference_forward_on_cpu():
        torch.library.opcheck(OUT, args)
        OUT(*args)
    ref = torch.tanh(conv2d_reference(x, flt, padding=1))
    torch.testing.assert_close(out.float(), ref, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(amax, ref.abs().max().reshape(1), rtol=1e-5, atol=0.0)


@pytest.mark.parametrize(
    "config",
    [cute_conv.Conv2dConfig(), cute_conv.Conv2dConfig(tile_n=256, stream_k=True, swizzle=4),
     cute_conv.Conv2dConfig(tile_m=64, tile_n=32, tile_k=16, gather=True, pack_taps=True),
     Conv2dConfigSm100(cta_group=1, mma_m=128, mma_n=128)],
    ids=["sm90-default", "sm90-stream-k", "sm90-packed-taps", "sm100"],
)  # fmt: skip
def test_config_round_trips_through_its_string(config):
    text = ops.config_to_str(config)
    assert text == repr(config)
    assert ops.config_from_str(text) == config
    assert ops.config_from_str(text) is ops.config_from_str(text)  # parsed once


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("__import__('os').system('true')", "not a serialized config"),
        ("Conv2dConfig(1, 2)", "not a serialized config"),
        ("Gemm(tile_m=128)", "not a serialized config"),
        ("Conv2dConfig(tile_m=len('x'))", "not a serialized config"),
        ("Conv2dConfig(tile_m=", "not a serialized config"),
    ],
)
def test_config_strings_are_parsed_not_evaluated(text, match):
    with pytest.raises(ValueError, match=match):
        ops.config_from_str(text)


def test_config_of_another_type_is_rejected():
    with pytest.raises(TypeError, match="config must be a Conv2dConfig"):
        ops.config_to_str({"tile_m": 128})


class _Block(torch.nn.Module):
    """Every argument kind the ops carry: asymmetric padding, stride, dilation, scale, bias,
    activation, out_dtype, config, both residual orders."""

    def __init__(self, device: str) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(32, 3, 3, 16, dtype=BF16, device=device))
        self.scale = torch.nn.Parameter(torch.rand(32, device=device))
        self.bias = torch.nn.Parameter(torch.randn(32, device=device))
        self.config = cute_conv.Conv2dConfig(tile_n=64)

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        y = cute_conv.conv2d_fprop(
            x, self.weight, stride=(2, 1), padding=((1, 0), (2, 1)), dilation=(1, 2),
            scale=self.scale, bias=self.bias, activation="silu", config=self.config,
        )  # fmt: skip
        return cute_conv.conv2d_fprop_with_residual(
            x, self.weight, skip, padding=1, beta=0.5, residual_order="before_activation",
            activation="relu", out_dtype=torch.float32,
        )[:, 1::2, 1:, :] + y.float()  # fmt: skip


def _recording_backend(graphs: list):
    def backend(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(gm)
        return gm.forward

    return backend


def _op_calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if "cute_conv" in str(n.target)]


def test_compile_fullgraph_traces_the_public_functions():
    """On meta tensors: dynamo traces the module, the ops run as their fake (meta) kernel."""
    block = _Block("meta")
    x = torch.empty(2, 9, 8, 16, dtype=BF16, device="meta")
    skip = torch.empty(2, 9, 8, 32, dtype=torch.float32, device="meta")
    graphs = []
    compiled = torch.compile(block, fullgraph=True, backend=_recording_backend(graphs))
    with torch.no_grad():
        out = compiled(x, skip)
    assert (tuple(out.shape), out.dtype) == ((2, 4, 7, 32), torch.float32)
    (gm,) = graphs
    plain, residual = _op_calls(gm)
    assert plain.args[4:] == (None, None, None, [2, 1], [1, 0, 2, 1], [1, 2], 1.0, "silu", None,
                              repr(cute_conv.Conv2dConfig(tile_n=64)))  # fmt: skip
    assert residual.args[5:] == (None, None, None, None, [1, 1], [1, 1, 1, 1], [1, 1], 1.0, 0.5,
                                 "before_activation", "relu", torch.float32, None)  # fmt: skip


def test_compile_traces_out_and_backward():
    """aot_eager on meta tensors: the out= op as a mutation, and the backward graph of a
    call whose filter requires grad."""
    x = torch.empty(1, 8, 8, 16, dtype=BF16, device="meta")
    flt = torch.empty(32, 3, 3, 16, dtype=BF16, device="meta")
    out = torch.empty(1, 8, 8, 32, dtype=BF16, device="meta")

    def write(x, flt, out):
        cute_conv.conv2d_fprop(x, flt, padding=1, out=out)
        return out

    assert torch.compile(write, fullgraph=True, backend="aot_eager")(x, flt, out) is out
    amax = torch.zeros(1, device="meta")
    graphs = []
    keep_amax = torch.compile(
        lambda x, flt, amax: cute_conv.conv2d_fprop(x, flt, padding=1, out_amax=amax),
        fullgraph=True, backend=_recording_backend(graphs),
    )  # fmt: skip
    assert keep_amax(x, flt, amax).shape == (1, 8, 8, 32)
    # A functional call that keeps an amax runs as the out= op, which mutates it.
    assert [str(n.target) for n in _op_calls(graphs[0])] == ["cute_conv.conv2d_fprop_out"]
    flt.requires_grad_()
    conv = torch.compile(
        lambda x, flt: cute_conv.conv2d_fprop(x, flt, padding=1, activation="gelu"),
        fullgraph=True, backend="aot_eager",
    )  # fmt: skip
    conv(x, flt).sum().backward()
    assert (flt.grad.shape, flt.grad.dtype) == (flt.shape, BF16)


def test_export_traces_the_module_without_running_it():
    block = _Block("cpu")
    x, skip = torch.randn(2, 9, 8, 16, dtype=BF16), torch.randn(2, 9, 8, 32)
    exported = torch.export.export(block, (x, skip))
    targets = [n.target for n in exported.graph.nodes if n.op == "call_function"]
    assert CONV in targets and RESIDUAL in targets
    (out_spec,) = [n for n in exported.graph.nodes if n.op == "output"]
    assert tuple(out_spec.args[0][0].meta["val"].shape) == (2, 4, 7, 32)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(epilogue_fn=lambda v: v * 2), "epilogue_fn=.* cannot be traced by torch.compile"),
        (dict(stream=object()), "stream= is not supported under torch.compile"),
    ],
    ids=["epilogue_fn", "stream"],
)
@pytest.mark.parametrize("fullgraph", [True, False], ids=["fullgraph", "graph-breaks"])
def test_compile_rejects_what_an_op_cannot_carry(kwargs, match, fullgraph):
    x = torch.empty(1, 8, 8, 16, dtype=BF16, device="meta")
    flt = torch.empty(32, 3, 3, 16, dtype=BF16, device="meta")
    compiled = torch.compile(
        lambda x, flt: cute_conv.conv2d_fprop(x, flt, **kwargs) + 1,
        fullgraph=fullgraph, backend="eager",
    )  # fmt: skip
    # With fullgraph, dynamo re-raises user errors wrapped (RuntimeError subclasses), the
    # message kept; without, it runs the frame eagerly after the graph break, where the same
    # error is raised as it is.
    with pytest.raises((TypeError, RuntimeError), match=match):
        compiled(x, flt)


def test_eager_calls_without_grad_skip_the_ops(monkeypatch):
    def no_op_path(*args):
        raise AssertionError("an eager call without gradients went through the op")

    monkeypatch.setattr(ops, "call_op", no_op_path)
    x = torch.zeros(1, 8, 8, 16, dtype=BF16)
    flt = torch.zeros(32, 3, 3, 16, dtype=BF16, requires_grad=True)
    with torch.no_grad(), pytest.raises(ValueError, match="cute_conv runs on CUDA tensors"):
        cute_conv.conv2d_fprop(x, flt)
    with pytest.raises(ValueError, match="cute_conv runs on CUDA tensors"):
        cute_conv.conv2d_fprop_with_residual(x, flt.detach(), torch.zeros(1, 6, 6, 32, dtype=BF16))


def test_takes_torch_path():
    x = torch.zeros(1, 8, 8, 16, dtype=BF16)
    w = torch.zeros(8, 1, 1, 16, dtype=BF16)
    bias = torch.zeros(8, requires_grad=True)
    assert not ops.takes_torch_path(x, w, None, None, None, None)
    assert ops.takes_torch_path(x, w, None, bias, None, None)
    with torch.no_grad():
        assert not ops.takes_torch_path(x, w, None, bias, None, None)
    # A DLPack array of another library (allowed with out=) has no requires_grad; the torch
    # tensors beside it are still read.
    array = types.SimpleNamespace(__dlpack__=None, shape=(1, 8, 8, 16))
    assert not ops.takes_torch_path(array, w, None, None, None, None)
    assert ops.takes_torch_path(array, w, None, bias, None, None)


# --- GPU: the ops run our kernel ---


def _gpu_inputs():
    x, flt = random_conv_inputs(2, 14, 14, 64, 96, 3, 3, device="cuda")
    bias = torch.randn(96, device="cuda")
    source = torch.randn(2, 14, 14, 96, device="cuda", dtype=BF16)
    return x, flt, bias, source


@requires_sm90
def test_ops_match_the_public_functions_on_gpu():
    x, flt, bias, source = _gpu_inputs()
    plain = CONV(*_plain_args(x, flt, bias=bias, padding=(1, 1, 1, 1), activation="gelu"))
    public = cute_conv.conv2d_fprop(x, flt, padding=1, bias=bias, activation="gelu")
    assert torch.equal(plain, public)
    ref = torch.nn.functional.gelu(conv2d_reference(x, flt, padding=1) + bias)
    report = compare_to_reference(plain, ref)
    assert report.ok, report

    residual = RESIDUAL(*_residual_args(x, flt, source, bias=bias, padding=(1, 1, 1, 1),
                                        order="before_activation", activation="relu"))  # fmt: skip
    ref = torch.relu(conv2d_reference(x, flt, padding=1) + bias + source.float())
    report = compare_to_reference(residual, ref)
    assert report.ok, report

    out = torch.full_like(residual, float("nan"))
    OUT(x, flt, source, bias, None, None, None, None, None, None, out, [1, 1], [1, 1, 1, 1],
        [1, 1], 1.0, 1.0, "before_activation", "relu", None, None)  # fmt: skip
    assert torch.equal(out, residual)


@requires_sm90
def test_compiled_module_matches_eager_on_gpu():
    block = _Block("cuda")
    x = torch.randn(2, 9, 8, 16, dtype=BF16, device="cuda")
    skip = torch.randn(2, 9, 8, 32, device="cuda")
    with torch.no_grad():
        eager = block(x, skip)
        compiled = torch.compile(block, fullgraph=True)(x, skip)
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)


@requires_sm90
def test_cuda_graph_capture_of_the_public_function():
    x, flt, bias, _ = _gpu_inputs()
    call = lambda: cute_conv.conv2d_fprop(x, flt, padding=1, bias=bias, activation="relu")  # noqa: E731
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()  # compile and cache the plan outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = call()
    x.copy_(torch.randn_like(x))
    captured.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, call())
