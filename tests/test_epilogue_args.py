"""CPU checks of the epilogue arguments: every rejection names the argument and the limit."""

from __future__ import annotations

import pytest
import torch

from cute_conv.epilogue import EpilogueSpec, validate_epilogue_args
from cute_conv.problem import Conv2dProblemShape

PROBLEM = Conv2dProblemShape.from_shapes((2, 8, 8, 16), (24, 3, 3, 16), padding=1)
CPU = torch.device("cpu")


def call(**overrides):
    args = dict(alpha=1.0, bias=None, scale=None, activation=None, epilogue_fn=None)
    args.update(overrides)
    return validate_epilogue_args(PROBLEM, torch.bfloat16, CPU, **args)


def source(shape=(2, 8, 8, 24), dtype=torch.bfloat16):
    return torch.zeros(shape, dtype=dtype)


@pytest.mark.parametrize(
    "overrides,exc,match",
    [
        pytest.param(dict(bias=torch.zeros(23)), ValueError, r"bias has shape \(23,\).*\(24,\)", id="bias-length"),
        pytest.param(dict(scale=torch.zeros(24, 1)), ValueError, r"scale has shape.*\(24,\)", id="scale-rank"),
        pytest.param(dict(bias=torch.zeros(24, dtype=torch.int32)), TypeError, "bias has dtype torch.int32", id="bias-dtype"),
        pytest.param(dict(bias=[0.0] * 24), TypeError, "bias must be a torch.Tensor", id="bias-type"),
        pytest.param(dict(activation="swish"), ValueError, "activation='swish' is not supported", id="activation-name"),
        pytest.param(dict(activation=torch.relu), TypeError, "activation must be None or a name", id="activation-type"),
        pytest.param(dict(epilogue_fn="relu"), TypeError, "epilogue_fn must be callable", id="epilogue-fn"),
        pytest.param(dict(alpha=True), TypeError, "alpha must be a real number", id="alpha-bool"),
        pytest.param(dict(alpha=float("nan")), ValueError, "alpha must be finite", id="alpha-nan"),
        pytest.param(dict(source=source(), beta="1"), TypeError, "beta must be a real number", id="beta-type"),
        pytest.param(dict(source=source((2, 8, 8, 16))), ValueError, r"source has shape \(2, 8, 8, 16\).*\(2, 8, 8, 24\)", id="source-shape"),
        pytest.param(dict(source=source(dtype=torch.float16)), TypeError, "source has dtype torch.float16", id="source-dtype"),
        pytest.param(dict(source=source().permute(0, 3, 1, 2).contiguous().permute(0, 2, 3, 1)), ValueError, "source must be a contiguous", id="source-layout"),
        pytest.param(dict(source=torch.zeros(2, 8, 8, 24, dtype=torch.bfloat16, device="meta")), ValueError, "source is on meta", id="source-device"),
    ],
)  # fmt: skip
def test_rejections(overrides, exc, match):
    with pytest.raises(exc, match=match):
        call(**overrides)


def test_spec_reflects_arguments():
    fn = lambda y: y * 2.0  # noqa: E731
    spec = call(bias=torch.zeros(24), scale=torch.ones(24, dtype=torch.float16),
                activation="gelu", epilogue_fn=fn, source=source(), beta=0.5)  # fmt: skip
    assert spec == EpilogueSpec(True, True, "gelu", fn, has_residual=True)
    assert spec.name == "scale-bias-gelu-fn-residual"


@pytest.mark.parametrize(
    "bias_dtype,scale_dtype,expected",
    [
        (torch.bfloat16, None, "bfloat16"),
        (None, torch.float16, "float16"),
        (torch.float16, torch.float16, "float16"),
        (torch.bfloat16, torch.float16, "float32"),
        (None, None, "float32"),
    ],
)
def test_kernel_reads_the_vectors_in_their_dtype_when_they_agree(bias_dtype, scale_dtype, expected):
    vectors = {
        name: torch.zeros(24, dtype=dtype)
        for name, dtype in (("bias", bias_dtype), ("scale", scale_dtype))
        if dtype is not None
    }
    assert call(**vectors).vector_dtype == expected


def test_unknown_vector_dtype_is_rejected():
    with pytest.raises(ValueError, match="vector_dtype='int8'"):
        EpilogueSpec(has_bias=True, vector_dtype="int8")


def test_beta_zero_or_no_source_drops_the_residual():
    assert not call(source=source(), beta=0.0).has_residual
    assert not call().has_residual
    assert call().name == "linear"
