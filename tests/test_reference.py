"""The float32 reference against an independent float64 unfold (im2col) computation, on CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cute_conv.problem import Conv2dProblemShape, normalize_padding
from cute_conv.reference import conv2d_reference


def _unfold_conv(activation, filter, stride, padding, dilation):
    """NHWC/KRSC conv in float64 as one matmul over explicit im2col patches."""
    (top, bottom), (left, right) = normalize_padding(padding)
    problem = Conv2dProblemShape.from_shapes(
        activation.shape, filter.shape, stride=stride, padding=padding, dilation=dilation
    )
    x = activation.double().permute(0, 3, 1, 2)
    x = F.pad(x, (left, right, top, bottom))
    cols = F.unfold(x, (problem.R, problem.S), dilation=problem.dilation, stride=problem.stride)
    # cols: [N, C*R*S, P*Q] with (C, R, S) order; the filter flattened the same way:
    w = filter.double().permute(0, 3, 1, 2).reshape(problem.K, -1)
    out = torch.einsum("kj,njl->nlk", w, cols)
    return out.reshape(problem.output_shape)


CASES = [
    # (N, H, W, C, K, R, S, stride, padding, dilation)
    pytest.param(2, 6, 6, 3, 4, 3, 3, 1, 1, 1, id="3x3-same"),
    pytest.param(1, 9, 8, 5, 2, 3, 3, 2, 0, 1, id="stride2"),
    pytest.param(1, 7, 9, 2, 3, 3, 2, (1, 2), ((2, 0), (1, 3)), 1, id="asym-pad-stride"),
    pytest.param(2, 10, 9, 4, 3, 3, 3, 1, ((0, 2), (3, 1)), (2, 3), id="asym-pad-dilation"),
    pytest.param(1, 11, 12, 3, 6, 2, 3, (3, 2), ((1, 0), (0, 2)), (3, 2), id="all-mixed"),
    pytest.param(2, 5, 5, 8, 8, 1, 1, 1, 0, 1, id="1x1"),
]


@pytest.mark.parametrize("n, h, w, c, k, r, s, stride, padding, dilation", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_reference_matches_unfold(n, h, w, c, k, r, s, stride, padding, dilation, dtype):
    gen = torch.Generator().manual_seed(0)
    activation = torch.randn(n, h, w, c, generator=gen).to(dtype)
    filter = torch.randn(k, r, s, c, generator=gen).to(dtype)

    out = conv2d_reference(activation, filter, stride=stride, padding=padding, dilation=dilation)
    expected = _unfold_conv(activation, filter, stride, padding, dilation)

    assert out.dtype == torch.float32
    assert out.is_contiguous()
    assert out.shape == expected.shape
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_asymmetric_padding_is_not_symmetric():
    """Padding only the top must differ from padding top and bottom (and shift rows)."""
    gen = torch.Generator().manual_seed(1)
    activation = torch.randn(1, 6, 6, 2, generator=gen)
    filter = torch.randn(3, 3, 3, 2, generator=gen)
    top_only = conv2d_reference(activation, filter, padding=((2, 0), (1, 1)))
    both = conv2d_reference(activation, filter, padding=((1, 1), (1, 1)))
    assert top_only.shape == both.shape == (1, 6, 6, 3)
    assert not torch.allclose(top_only, both)
    # Output row p with top padding 2 is output row p-1 with top padding 1.
    torch.testing.assert_close(top_only[:, 1:], both[:, :-1])


def test_reference_restores_global_flags():
    matmul_tf32 = torch.backends.cuda.matmul.allow_tf32
    cudnn = (torch.backends.cudnn.enabled, torch.backends.cudnn.allow_tf32)
    conv2d_reference(torch.randn(1, 4, 4, 2), torch.randn(2, 3, 3, 2), padding=1)
    assert torch.backends.cuda.matmul.allow_tf32 == matmul_tf32
    assert (torch.backends.cudnn.enabled, torch.backends.cudnn.allow_tf32) == cudnn


def test_reference_empty_batch():
    out = conv2d_reference(torch.randn(0, 4, 4, 2), torch.randn(3, 3, 3, 2), padding=1)
    assert out.shape == (0, 4, 4, 3)


@pytest.mark.parametrize(
    "args, error",
    [
        pytest.param((torch.randn(4, 4, 2), torch.randn(3, 3, 3, 2)), ValueError, id="rank"),
        pytest.param(([0.0], torch.randn(3, 3, 3, 2)), TypeError, id="not-tensor"),
    ],
)
def test_reference_rejects(args, error):
    with pytest.raises(error, match="activation"):
        conv2d_reference(*args)
