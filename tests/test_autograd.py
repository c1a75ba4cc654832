"""Gradients of the fused conv (``cute_conv.autograd``).

CPU: the backward math against torch autograd of the same epilogue written in torch ops, in
float64, for every activation, both residual orders, with bias, scale and source; the
registered autograd end to end (the public functions, the ops, ``torch.compile``), with the
ops' forward run on CPU by the torch reference; the errors. GPU (``@requires_sm90``): the
gradients of a call of our kernel against torch autograd in float32, eager and compiled.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

import cute_conv
from cute_conv.autograd import EpilogueArgs, conv2d_fprop_backward, derives_from_output
from cute_conv.problem import normalize_padding, normalize_pair
from cute_conv.reference import TORCH_ACTIVATIONS
from tests.gpu import requires_sm90

ORDERS = ("after_activation", "before_activation")
GEOMETRIES = {
    "3x3-pad1": dict(stride=1, padding=1, dilation=1),
    "s2-asym-dil": dict(stride=(2, 1), padding=((2, 0), (1, 3)), dilation=(1, 2)),
}


def fused_reference(
    x, filter, source=None, *, bias=None, scale=None, stride=1, padding=0, dilation=1,  # noqa: A002
    alpha=1.0, beta=1.0, activation=None, residual_order="after_activation", groups=1,
):  # fmt: skip
    """The fused conv in torch ops (NHWC / KRSC / NPQK), in the tensors' dtype."""
    (top, bottom), (left, right) = normalize_padding(padding)
    x_nchw = F.pad(x.permute(0, 3, 1, 2), (left, right, top, bottom))
    conv = F.conv2d(
        x_nchw, filter.permute(0, 3, 1, 2),
        stride=normalize_pair("stride", stride), dilation=normalize_pair("dilation", dilation),
        groups=groups,
    ).permute(0, 2, 3, 1)  # fmt: skip
    z = conv * alpha
    if scale is not None:
        z = z * scale
    if bias is not None:
        z = z + bias
    if source is not None and residual_order == "before_activation":
        z = z + beta * source
    y = TORCH_ACTIVATIONS[activation](z)
    if source is not None and residual_order == "after_activation":
        y = y + beta * source
    return y


def _inputs(geometry, *, residual, dtype=torch.float64, device="cpu", seed=0):
    """x, filter, source (or None), bias, scale: small, of ``dtype``."""
    gen = torch.Generator(device).manual_seed(seed)
    x = torch.randn(2, 9, 8, 8, dtype=dtype, device=device, generator=gen)
    flt = torch.randn(16, 3, 3, 8, dtype=dtype, device=device, generator=gen) / 8
    out_shape = fused_reference(x, flt, **geometry).shape
    source = torch.randn(out_shape, dtype=dtype, device=device, generator=gen) if residual else None
    bias = torch.randn(16, dtype=dtype, device=device, generator=gen)
    scale = torch.rand(16, dtype=dtype, device=device, generator=gen) + 0.5
    return x, flt, source, bias, scale


def _epilogue_args(geometry, *, alpha, beta, activation, order) -> EpilogueArgs:
    (top, bottom), (left, right) = normalize_padding(geometry["padding"])
    return EpilogueArgs(
        list(normalize_pair("stride", geometry["stride"])),
        [top, bottom, left, right],
        list(normalize_pair("dilation", geometry["dilation"])),
        alpha, beta, activation, order,
    )  # fmt: skip


NAMES = ("x", "filter", "source", "bias", "scale")  # the differentiable inputs, in order
# Which of them need a gradient.
NEEDS = {
    "all": (True, True, True, True, True),
    "scale-fixed": (True, True, True, True, False),  # the output may stand in for z
    "filter-only": (False, True, False, False, False),
}


@pytest.mark.parametrize("geometry", list(GEOMETRIES))
@pytest.mark.parametrize("needs", list(NEEDS))
@pytest.mark.parametrize("order", [None, *ORDERS], ids=lambda o: o or "no-residual")
@pytest.mark.parametrize("activation", list(TORCH_ACTIVATIONS), ids=lambda a: a or "none")
def test_backward_matches_torch_autograd(activation, order, needs, geometry):
    geom = GEOMETRIES[geometry]
    tensors = _inputs(geom, residual=order is not None)
    x, flt, source, bias, scale = tensors
    wanted = NEEDS[needs]
    for t, need in zip(tensors, wanted, strict=True):
        if t is not None:
            t.requires_grad_(need)
    alpha, beta = 0.75, -0.5
    ref_out = fused_reference(
        x, flt, source, bias=bias, scale=scale, alpha=alpha, beta=beta, activation=activation,
        residual_order=order or "after_activation", **geom,
    )  # fmt: skip
    grad_out = torch.randn_like(ref_out)
    leaves = [t for t in tensors if t is not None and t.requires_grad]
    ref_grads = iter(torch.autograd.grad(ref_out, leaves, grad_out))
    expected = [next(ref_grads) if t is not None and t.requires_grad else None for t in tensors]

    args = _epilogue_args(
        geom, alpha=alpha, beta=beta, activation=activation, order=order or "after_activation"
    )
    from_output = derives_from_output(args, source is not None, scale_needs_grad=wanted[4])
    # Both ways to the activation's derivative where the output allows the cheaper one.
    for out in {None, ref_out.detach()} if from_output else {None}:
        got = conv2d_fprop_backward(
            grad_out, x.detach(), flt.detach(), bias.detach(), scale.detach(),
            source_dtype=None if source is None else source.dtype,
            source=None if source is None else source.detach(), out=out, args=args,
            needs_grad=tuple(t is not None and need for t, need in zip(tensors, wanted, strict=True)),
        )  # fmt: skip
        for name, g, e in zip(NAMES, got, expected, strict=True):
            if e is None:
                assert g is None, name
            else:
                assert g.shape == e.shape and g.dtype == e.dtype, name
                torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-9, msg=name)


@pytest.mark.parametrize(
    ("activation", "order", "scale_needs_grad", "expected"),
    [
        ("relu", None, False, True),
        ("tanh", "before_activation", False, True),
        ("sigmoid", "after_activation", False, False),  # out = act(z) + beta * source
        ("leaky_relu", None, True, False),  # the scale's gradient needs conv itself
        ("gelu", None, False, False),  # torch takes gelu's derivative from its input
        ("relu6", None, False, False),  # a z just below 6 can round to y = 6 in bf16
        (None, None, False, False),
    ],
)
def test_what_the_backward_derives_from_the_output(activation, order, scale_needs_grad, expected):
    args = _epilogue_args(
        GEOMETRIES["3x3-pad1"], alpha=1.0, beta=1.0, activation=activation,
        order=order or "after_activation",
    )  # fmt: skip
    assert derives_from_output(args, order is not None, scale_needs_grad) is expected


def test_every_kernel_activation_has_a_tested_derivative():
    assert set(cute_conv.ACTIVATIONS) | {None} == set(TORCH_ACTIVATIONS)


@contextlib.contextmanager
def reference_forward_on_cpu():
    """For the duration: the ops' forward on CPU tensors is ``fused_reference`` (in float32 for
    16-bit inputs, output in the call's dtype), so the registered autograd runs end to end on
    a CPU; cute_conv's kernels need a GPU."""

    def run(x, flt, source, bias, scale, stride, padding, dilation, alpha, beta, order, act,
            out_dtype, groups=1):  # fmt: skip
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        as_wide = lambda t: None if t is None else t.to(wide)  # noqa: E731
        y = fused_reference(
            as_wide(x), as_wide(flt), as_wide(source), bias=as_wide(bias), scale=as_wide(scale),
            stride=stride, padding=((padding[0], padding[1]), (padding[2], padding[3])),
            dilation=dilation, alpha=alpha, beta=beta, activation=act, residual_order=order,
            groups=groups,
        )  # fmt: skip
        return y.to(out_dtype or x.dtype).contiguous()

    def plain(x, flt, bias, scale, x_scale, w_scale, out_scale, stride, padding, dilation, alpha,
              act, out_dtype, config):  # fmt: skip
        return run(x, flt, None, bias, scale, stride, padding, dilation, alpha, 0.0,
                   "after_activation", act, out_dtype)  # fmt: skip

    def residual(x, flt, source, bias, scale, x_scale, w_scale, out_scale, source_scale, stride,
                 padding, dilation, alpha, beta, order, act, out_dtype, config):  # fmt: skip
        return run(x, flt, source, bias, scale, stride, padding, dilation, alpha, beta, order,
                   act, out_dtype)  # fmt: skip

    def into_out(x, flt, source, bias, scale, x_scale, w_scale, out_scale, out_amax, source_scale,
                 out, stride, padding, dilation, alpha, beta, order, act, out_dtype,
                 config):  # fmt: skip
        y = run(x, flt, source, bias, scale, stride, padding, dilation, alpha, beta, order, act,
                torch.float32)  # fmt: skip
        out.copy_(y)
        if out_amax is not None:
            out_amax.copy_(torch.maximum(out_amax, y.abs().max()))

    def grouped(x, staged, source, bias, scale, groups, stride, padding, dilation, alpha, beta,
                order, act, pixels=None, channel_norm_eps=None):  # fmt: skip
        y = run(x, staged.permute(3, 0, 1, 2), source, bias, scale, stride, padding, dilation,
                alpha, beta, order, act, torch.promote_types(x.dtype, torch.float32), groups)  # fmt: skip
        if channel_norm_eps is not None:
            y = F.layer_norm(y, y.shape[-1:], eps=channel_norm_eps)
        return y.to(x.dtype)

    def tensor_cores(x, flt, bias, scale, groups, stride, padding, dilation, act):
        return run(x, flt, None, bias, scale, stride, padding, dilation, 1.0, 0.0,
                   "after_activation", act, None, groups)  # fmt: skip

    # A scoped registration (torch's own tests use it): it is undone on exit.
    with torch.library._scoped_library("cute_conv", "IMPL") as lib:
        lib.impl("grouped_conv2d", grouped, "CPU")
        lib.impl("grouped_conv2d_tensor_cores", tensor_cores, "CPU")
        lib.impl("conv2d_fprop", plain, "CPU")
        lib.impl("conv2d_fprop_with_residual", residual, "CPU")
        lib.impl("conv2d_fprop_out", into_out, "CPU")
        yield


def _public_call(x, flt, source, bias, scale, *, activation, order, geometry):
    kwargs = dict(bias=bias, scale=scale, alpha=0.75, activation=activation, **geometry)
    if source is None:
        return cute_conv.conv2d_fprop(x, flt, **kwargs)
    return cute_conv.conv2d_fprop_with_residual(
        x, flt, source, beta=-0.5, residual_order=order, **kwargs
    )


def _reference_call(x, flt, source, bias, scale, *, activation, order, geometry):
    return fused_reference(
        x, flt, source, bias=bias, scale=scale, alpha=0.75, beta=-0.5, activation=activation,
        residual_order=order or "after_activation", **geometry,
    )  # fmt: skip


def _grads(call, tensors, grad_out, **kwargs):
    """``call``'s output on fresh leaves of ``tensors``, and the gradients of those present."""
    leaves = [None if t is None else t.detach().requires_grad_() for t in tensors]
    out = call(*leaves, **kwargs)
    return out, torch.autograd.grad(out, [t for t in leaves if t is not None], grad_out)


@pytest.mark.parametrize("order", [None, *ORDERS], ids=lambda o: o or "no-residual")
def test_public_functions_differentiate_through_the_ops_on_cpu(order):
    geometry = GEOMETRIES["s2-asym-dil"]
    tensors = _inputs(geometry, residual=order is not None)
    kwargs = dict(activation="silu", order=order, geometry=geometry)
    ref_out = _reference_call(*tensors, **kwargs)
    grad_out = torch.randn_like(ref_out)
    _, ref_grads = _grads(_reference_call, tensors, grad_out, **kwargs)
    with reference_forward_on_cpu():
        out, grads = _grads(_public_call, tensors, grad_out, **kwargs)
    assert "cute_conv" in type(out.grad_fn).__name__  # through the op's registered autograd
    for got, expected in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("order", ORDERS)
def test_gradcheck_of_the_residual_op(order):
    """Numerical differentiation of the op (forward: the reference) against its backward."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 5, 5, 3, dtype=torch.float64, generator=gen)
    flt = torch.randn(4, 2, 2, 3, dtype=torch.float64, generator=gen)
    out_shape = fused_reference(x, flt, **GEOMETRIES["s2-asym-dil"]).shape
    source = torch.randn(out_shape, dtype=torch.float64, generator=gen)
    bias, scale = torch.randn(2, 4, dtype=torch.float64, generator=gen)
    tensors = [t.requires_grad_() for t in (x, flt, source, bias, scale)]

    def op(x, flt, source, bias, scale):
        return torch.ops.cute_conv.conv2d_fprop_with_residual(
            x, flt, source, bias, scale, None, None, None, None, [2, 1], [2, 0, 1, 3], [1, 2], 0.75,
            -0.5, order, "gelu_tanh", None, None,
        )  # fmt: skip

    with reference_forward_on_cpu():
        assert torch.autograd.gradcheck(op, tensors)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_gradients_on_cpu(backend):
    """torch.compile(fullgraph=True) traces the public function, its op and (aot_eager) the
    backward; bf16 inputs, as the fake implementation's validation requires."""
    geometry = GEOMETRIES["3x3-pad1"]
    tensors = _inputs(geometry, residual=True, dtype=torch.bfloat16)
    kwargs = dict(activation="gelu", order="before_activation", geometry=geometry)
    compiled = torch.compile(_public_call, fullgraph=True, backend=backend)
    grad_out = torch.randn_like(_reference_call(*tensors, **kwargs))
    with reference_forward_on_cpu():
        eager_out, eager_grads = _grads(_public_call, tensors, grad_out, **kwargs)
        out, grads = _grads(compiled, tensors, grad_out, **kwargs)
    torch.testing.assert_close(out, eager_out, rtol=0, atol=0)
    for got, expected in zip(grads, eager_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_epilogue_fn_with_grad_is_an_error():
    x, flt, _, _, _ = _inputs(GEOMETRIES["3x3-pad1"], residual=False, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="epilogue_fn=.* has no derivative"):
        cute_conv.conv2d_fprop(x, flt.requires_grad_(), padding=1, epilogue_fn=lambda v: v * 2)


def test_out_with_grad_is_an_error():
    x, flt, _, _, _ = _inputs(GEOMETRIES["3x3-pad1"], residual=False, dtype=torch.bfloat16)
    out = torch.empty(2, 9, 8, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="out=.* don't support automatic differentiation"):
        cute_conv.conv2d_fprop(x.requires_grad_(), flt, padding=1, out=out)


def test_grad_path_on_cpu_tensors_gives_the_device_error():
    """The op's implementation runs the public function with grad mode off: its direct path
    (and its validation), not the op again."""
    x, flt, _, _, _ = _inputs(GEOMETRIES["3x3-pad1"], residual=False, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="cute_conv runs on CUDA tensors"):
        cute_conv.conv2d_fprop(x, flt.requires_grad_(), padding=1)


# --- GPU: our kernel's forward, torch's backward, against torch autograd in float32 ---

# (activation, residual order, with a scale): without a scale, relu/tanh/sigmoid take their
# derivative from the saved output; with one (it needs a gradient) the conv is recomputed.
GPU_CASES = [
    pytest.param("relu", None, True, id="scale-relu"),
    pytest.param("relu", None, False, id="relu-from-output"),
    pytest.param("sigmoid", "before_activation", False, id="sigmoid-residual-pre-act-from-output"),
    pytest.param("gelu", "after_activation", True, id="scale-gelu-residual"),
    pytest.param("silu", "before_activation", True, id="scale-silu-residual-pre-act"),
    pytest.param("relu", "before_activation", True, id="scale-relu-residual-pre-act"),
    pytest.param("tanh", None, True, id="scale-tanh"),
    pytest.param(None, "after_activation", True, id="scale-residual"),
]


def _relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    assert not torch.isnan(got).any()
    return ((got.float() - ref).norm() / ref.norm()).item()


@requires_sm90
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize(("activation", "order", "with_scale"), GPU_CASES)
def test_gradients_on_gpu(activation, order, with_scale, compiled):
    geometry = dict(stride=1, padding=1, dilation=1)
    gen = torch.Generator("cuda").manual_seed(0)
    x = torch.randn(4, 16, 16, 64, device="cuda", generator=gen).bfloat16()
    flt = (torch.randn(128, 3, 3, 64, device="cuda", generator=gen) / 24).bfloat16()
    source = None
    if order is not None:
        source = torch.randn(4, 16, 16, 128, device="cuda", generator=gen).bfloat16()
    bias = torch.randn(128, device="cuda", generator=gen)
    scale = torch.rand(128, device="cuda", generator=gen) + 0.5 if with_scale else None
    tensors = (x, flt, source, bias, scale)
    kwargs = dict(activation=activation, order=order, geometry=geometry)
    if compiled:
        # Every case compiles the same function anew: without a reset the parametrized cases
        # exhaust dynamo's recompile limit, which fullgraph turns into a failure.
        torch._dynamo.reset()
    call = torch.compile(_public_call, fullgraph=True) if compiled else _public_call
    wide = [None if t is None else t.float() for t in tensors]
    with torch.backends.cudnn.flags(enabled=False):
        ref_out = _reference_call(*wide, **kwargs)
    grad_out = torch.randn(ref_out.shape, device="cuda", generator=gen)
    with torch.backends.cudnn.flags(enabled=False):
        _, ref_grads = _grads(_reference_call, wide, grad_out, **kwargs)
    out, grads = _grads(call, tensors, grad_out.bfloat16(), **kwargs)
    # Torch's own bf16 autograd of the same composition: a ReLU mask taken on bf16-rounded
    # values flips where the float32 one does not, so near-zero activations cost a few percent
    # on the gradients of x and filter whoever computes them. Ours may err up to twice as much.
    _, torch_grads = _grads(_reference_call, tensors, grad_out.bfloat16(), **kwargs)
    assert _relative_error(out, ref_out) < 1e-2
    present = [(n, t) for n, t in zip(NAMES, tensors, strict=True) if t is not None]
    for (name, t), got, ref, torch_bf16 in zip(present, grads, ref_grads, torch_grads, strict=True):
        assert got.dtype == t.dtype, name
        allowed = max(1e-2, 2 * _relative_error(torch_bf16, ref))
        assert _relative_error(got, ref) < allowed, name


@requires_sm90
def test_epilogue_fn_with_grad_is_an_error_on_gpu():
    x = torch.randn(1, 8, 8, 64, device="cuda", dtype=torch.bfloat16)
    flt = torch.randn(64, 3, 3, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(TypeError, match="has no derivative"):
        cute_conv.conv2d_fprop(x, flt, padding=1, epilogue_fn=lambda v: v * 2)
