"""Problem-shape math and argument normalizers (CPU only)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from cute_conv.problem import Conv2dProblemShape, normalize_padding, normalize_pair, output_hw

# (N, H, W, C, K, R, S, padding, stride, dilation)
GEOMETRIES = [
    pytest.param(2, 8, 8, 3, 5, 3, 3, 1, 1, 1, id="3x3-same"),
    pytest.param(1, 9, 7, 4, 6, 3, 3, 0, 2, 1, id="3x3-stride2-valid"),
    pytest.param(2, 7, 7, 2, 3, 1, 1, 0, 1, 1, id="1x1"),
    pytest.param(1, 11, 13, 2, 4, 3, 5, (1, 2), (2, 3), (2, 1), id="rect-mixed"),
    pytest.param(1, 10, 10, 2, 2, 3, 3, ((2, 0), (0, 3)), 1, 1, id="asym-pad"),
    pytest.param(3, 12, 9, 2, 2, 2, 3, ((0, 1), (1, 0)), (3, 2), (2, 3), id="asym-all"),
    pytest.param(1, 15, 15, 1, 1, 7, 7, 3, 2, 1, id="stem-7x7"),
    pytest.param(0, 5, 5, 2, 2, 3, 3, 1, 1, 1, id="empty-batch"),
]


def _torch_output_shape(n, h, w, c, k, r, s, padding, stride, dilation):
    (top, bottom), (left, right) = normalize_padding(padding)
    x = F.pad(torch.zeros(n, c, h, w), (left, right, top, bottom))
    y = F.conv2d(x, torch.zeros(k, c, r, s), stride=stride, dilation=dilation)
    n_out, k_out, p, q = y.shape
    return n_out, p, q, k_out


@pytest.mark.parametrize("n, h, w, c, k, r, s, padding, stride, dilation", GEOMETRIES)
def test_output_shape_and_gemm_math(n, h, w, c, k, r, s, padding, stride, dilation):
    problem = Conv2dProblemShape.from_shapes(
        (n, h, w, c), (k, r, s, c), stride=stride, padding=padding, dilation=dilation
    )
    expected = _torch_output_shape(n, h, w, c, k, r, s, padding, stride, dilation)
    assert problem.output_shape == expected
    _, p, q, _ = expected
    assert problem.P == p
    assert problem.Q == q
    assert problem.gemm_m == n * p * q
    assert problem.gemm_n == k
    assert problem.gemm_k == c * r * s
    assert problem.flops == 2 * n * p * q * k * c * r * s
    assert problem.activation_shape == (n, h, w, c)
    assert problem.filter_shape == (k, r, s, c)


def test_problem_is_frozen_hashable_and_normalized():
    problem = Conv2dProblemShape(1, 8, 8, 16, 32, 3, 3, padding=1, stride=2, dilation=(1, 2))
    assert problem.padding == ((1, 1), (1, 1))
    assert problem.stride == (2, 2)
    assert problem.dilation == (1, 2)
    same = Conv2dProblemShape.from_shapes(
        (1, 8, 8, 16), (32, 3, 3, 16), stride=2, padding=1, dilation=(1, 2)
    )
    assert problem == same and hash(problem) == hash(same)
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.N = 2  # type: ignore[misc]


def test_known_resnet_layer():
    problem = Conv2dProblemShape.from_shapes((32, 56, 56, 64), (64, 3, 3, 64), padding=1)
    assert problem.output_shape == (32, 56, 56, 64)
    assert problem.gemm_m == 32 * 56 * 56
    assert problem.gemm_k == 576
    assert problem.flops == 2 * 32 * 56 * 56 * 64 * 576


def test_filter_larger_than_input_gives_nonpositive_output():
    problem = Conv2dProblemShape.from_shapes((1, 2, 2, 8), (8, 5, 5, 8))
    assert problem.P <= 0 and problem.Q <= 0


@pytest.mark.parametrize(
    "value, expected",
    [
        pytest.param(3, (3, 3), id="int"),
        pytest.param((2, 5), (2, 5), id="tuple"),
        pytest.param([4, 1], (4, 1), id="list"),
    ],
)
def test_normalize_pair(value, expected):
    assert normalize_pair("stride", value) == expected


@pytest.mark.parametrize(
    "value, error",
    [
        pytest.param(True, TypeError, id="bool"),
        pytest.param(1.0, TypeError, id="float"),
        pytest.param((1, 2.5), TypeError, id="float-in-pair"),
        pytest.param((1, False), TypeError, id="bool-in-pair"),
        pytest.param("2", TypeError, id="str"),
        pytest.param(None, TypeError, id="none"),
        pytest.param((1, 2, 3), ValueError, id="three-values"),
        pytest.param((), ValueError, id="empty"),
    ],
)
def test_normalize_pair_rejects(value, error):
    with pytest.raises(error, match="dilation"):
        normalize_pair("dilation", value)


@pytest.mark.parametrize(
    "value, expected",
    [
        pytest.param(0, ((0, 0), (0, 0)), id="zero"),
        pytest.param(2, ((2, 2), (2, 2)), id="int"),
        pytest.param((1, 3), ((1, 1), (3, 3)), id="per-dim"),
        pytest.param(((0, 2), (1, 0)), ((0, 2), (1, 0)), id="asymmetric"),
        pytest.param([[3, 1], [2, 4]], ((3, 1), (2, 4)), id="asymmetric-lists"),
    ],
)
def test_normalize_padding(value, expected):
    assert normalize_padding(value) == expected


@pytest.mark.parametrize(
    "value, error, limit",
    [
        pytest.param(-1, ValueError, ">= 0", id="negative-int"),
        pytest.param((0, -2), ValueError, ">= 0", id="negative-width"),
        pytest.param(((0, -1), (0, 0)), ValueError, "bottom=-1", id="negative-bottom"),
        pytest.param(((0, 0), (-3, 0)), ValueError, "left=-3", id="negative-left"),
        pytest.param(1.5, TypeError, "int", id="float"),
        pytest.param(((0, 0), (0, 0), (0, 0)), ValueError, "2", id="three-dims"),
        pytest.param(((0, 0, 1), (0, 0)), ValueError, "2", id="three-sides"),
        pytest.param((1, 2, 3, 4), ValueError, "2", id="flat-four"),
    ],
)
def test_normalize_padding_rejects(value, error, limit):
    with pytest.raises(error, match="padding") as info:
        normalize_padding(value)
    assert limit in str(info.value)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        pytest.param({"H": 0}, ValueError, ("H", ">= 1"), id="zero-H"),
        pytest.param({"N": -1}, ValueError, ("N", ">= 0"), id="negative-N"),
        pytest.param({"C": 8.0}, TypeError, ("C", "int"), id="float-C"),
        pytest.param({"stride": 0}, ValueError, ("stride", ">= 1"), id="zero-stride"),
        pytest.param({"dilation": (1, 0)}, ValueError, ("dilation", ">= 1"), id="zero-dilation"),
        pytest.param({"padding": -1}, ValueError, ("padding", ">= 0"), id="negative-padding"),
    ],
)
def test_problem_rejects(kwargs, error, words):
    fields = {"N": 1, "H": 8, "W": 8, "C": 8, "K": 8, "R": 3, "S": 3} | kwargs
    with pytest.raises(error) as info:
        Conv2dProblemShape(**fields)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    "activation_shape, filter_shape, word",
    [
        pytest.param((1, 8, 8), (8, 3, 3, 8), "activation_shape", id="activation-rank"),
        pytest.param((1, 8, 8, 8), (8, 3, 3, 8, 1), "filter_shape", id="filter-rank"),
        pytest.param((1, 8, 8, 8), (8, 3, 3, 4), "C=4", id="channel-mismatch"),
    ],
)
def test_from_shapes_rejects(activation_shape, filter_shape, word):
    with pytest.raises(ValueError, match=word):
        Conv2dProblemShape.from_shapes(activation_shape, filter_shape)


def test_output_hw_is_the_problem_shape_s_p_and_q():
    problem = Conv2dProblemShape(
        N=1, H=17, W=30, C=8, K=8, R=5, S=3, padding=((2, 1), (0, 3)), stride=(2, 3),
        dilation=(1, 2),
    )  # fmt: skip
    hw = output_hw((17, 30), (5, 3), (2, 3), ((2, 1), (0, 3)), (1, 2))
    assert hw == (problem.P, problem.Q) == (8, 10)
