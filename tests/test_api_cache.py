"""CPU checks of the plan cache's key: calls that validation tells apart never share a plan."""

from __future__ import annotations

import types
from collections.abc import Iterator

import pytest
import torch

import cute_conv
from cute_conv import dispatch
from cute_conv.epilogue import EpilogueSpec

SHAPE = (1, 8, 8, 64)


class _Sub(torch.Tensor):
    pass


@pytest.fixture
def made(monkeypatch) -> Iterator[list]:
    """The calls that built a plan (missed the cache); the plans are empty (nothing launched)."""
    calls = []

    def make_plan(*args):
        calls.append(args)
        return types.SimpleNamespace(epilogue=EpilogueSpec(), empty=True)

    monkeypatch.setattr(dispatch, "_make_plan", make_plan)
    dispatch._plans.clear()  # the module's own cache, which compile.clear_cache clears
    yield calls
    dispatch._plans.clear()  # drop the stand-in plans


def _t(shape=SHAPE, dtype=torch.bfloat16, device="cpu") -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device=device)


def _conv(x=None, f=None, out=None, **kwargs) -> None:
    x = _t() if x is None else x
    f = _t((64, 3, 3, 64), dtype=x.dtype, device=x.device) if f is None else f
    out = _t(dtype=x.dtype, device=x.device) if out is None else out
    cute_conv.conv2d_fprop(x, f, out=out, padding=kwargs.pop("padding", 1), **kwargs)


def test_same_metadata_shares_a_plan(made):
    for _ in range(3):
        _conv()  # new tensors, same metadata
    cute_conv.conv2d_fprop_with_residual(_t(), _t((64, 3, 3, 64)), _t(), out=_t(), padding=1)
    cute_conv.conv2d_fprop_with_residual(_t(), _t((64, 3, 3, 64)), _t(), out=_t(), padding=1)
    assert len(made) == 2


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(lambda: _conv(x=_t(dtype=torch.float16)), id="dtype"),
        pytest.param(lambda: _conv(x=_t((2, 8, 8, 64))), id="shape"),
        pytest.param(lambda: _conv(x=_t((1, 64, 8, 8)).permute(0, 2, 3, 1)), id="strides"),
        pytest.param(lambda: _conv(x=_t().as_subclass(_Sub)), id="subclass"),
        pytest.param(lambda: _conv(x=_t(device="meta")), id="device"),
        pytest.param(lambda: _conv(bias=torch.zeros(64)), id="bias"),
        pytest.param(lambda: _conv(bias=torch.zeros(64, dtype=torch.bfloat16)), id="bias-dtype"),
        pytest.param(lambda: _conv(padding=True), id="padding-bool"),
        pytest.param(lambda: _conv(padding=1.0), id="padding-float"),
        pytest.param(lambda: _conv(padding=(1, 1)), id="padding-pair"),
        pytest.param(lambda: _conv(padding=((1, True), (1, 1))), id="padding-nested-bool"),
        pytest.param(lambda: _conv(padding=(True, 1)), id="padding-pair-bool"),
        pytest.param(lambda: _conv(padding=(1, 1.0)), id="padding-pair-float"),
        pytest.param(lambda: _conv(padding=[1, 1]), id="padding-list"),
        pytest.param(lambda: _conv(alpha=1), id="alpha-int"),
        pytest.param(lambda: _conv(alpha=-1.0), id="alpha-value"),
        pytest.param(lambda: _conv(activation="relu"), id="activation"),
        pytest.param(lambda: _conv(out_dtype=torch.bfloat16), id="out-dtype"),
    ],
)  # fmt: skip
def test_differences_make_new_plans(made, variant):
    _conv()
    variant()
    variant()  # ... and is cached itself
    assert len(made) == 2


def test_sign_of_zero_alpha_is_kept(made):
    """0.0 == -0.0, but alpha * acc keeps the sign: the plan's kernel scalars differ."""
    _conv(alpha=0.0)
    _conv(alpha=-0.0)
    assert len(made) == 2


def test_layout_is_in_the_key():
    dense = torch.zeros(1, dtype=torch.bfloat16).expand(SHAPE)  # strides (0, 0, 0, 0)
    sparse = _t().to_sparse()
    assert dense.stride() == sparse.stride()
    assert dispatch.tensor_key(dense) != dispatch.tensor_key(sparse)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
def test_device_index_is_in_the_key():
    assert dispatch.tensor_key(_t(device="cuda:0")) != dispatch.tensor_key(_t(device="cuda:1"))


def test_uncacheable_arguments_go_to_validation(made):
    _conv(padding=[[1, 1], [1, 1]])  # a list: frozen into the key
    _conv(activation={"name": "relu"})  # unhashable
    _conv(alpha="1")  # not a number
    _conv(bias=[0.0] * 64)  # not a tensor
    assert len(made) == 4
    assert len(dispatch._plans) == 1  # only the first had a key


def test_non_tensor_bias_is_named_by_validation():
    with pytest.raises(TypeError, match="bias must be a torch.Tensor"):
        _conv(bias=[0.0] * 64)


def test_clear_cache_drops_the_plans(made):
    # A plan holds its compiled kernel: after clear_cache the next call plans (and loads) anew.
    _conv()
    _conv()
    assert len(made) == 1
    cute_conv.compile.clear_cache()
    _conv()
    assert len(made) == 2


def _fp8_conv(**scales) -> None:
    x, f = _t(dtype=torch.float8_e4m3fn), _t((64, 3, 3, 64), dtype=torch.float8_e4m3fn)
    scales = dict(x_scale=torch.ones(1), w_scale=torch.ones(1)) | scales
    cute_conv.conv2d_fprop(x, f, out=_t(), padding=1, **scales)


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(lambda: _fp8_conv(x_scale=torch.ones(1, dtype=torch.float64)), id="dtype"),
        pytest.param(lambda: _fp8_conv(w_scale=torch.ones(())), id="shape"),
        pytest.param(lambda: _fp8_conv(w_scale=torch.ones(1).to_sparse()), id="layout"),
        pytest.param(lambda: _fp8_conv(x_scale=torch.ones(1, device="meta")), id="device"),
        pytest.param(lambda: _fp8_conv(x_scale=torch.ones(1).as_subclass(_Sub)), id="subclass"),
        pytest.param(lambda: _fp8_conv(out_amax=torch.zeros(1)), id="amax"),
    ],
)  # fmt: skip
def test_scale_differences_make_new_plans(made, variant):
    _fp8_conv()
    variant()
    variant()
    assert len(made) == 2


def test_a_scales_strides_are_not_in_the_key(made):
    """Validation reads a scale's one element, not its strides: they share a plan."""
    _fp8_conv(x_scale=torch.ones(1, 1))
    _fp8_conv(x_scale=torch.ones(1, 2)[:, :1])  # strides (2, 1), not (1, 1)
    assert len(made) == 1
