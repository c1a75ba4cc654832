"""The ConvNeXt block tail of benchmarks/experiments/pointwise_linear_ab.py, on a CPU: what
``cute_conv.optimize`` fuses of it, and that the fused module computes it (kernel functions
replaced by the float32 reference, see tests/test_nn.py)."""

from __future__ import annotations

import copy

import pointwise_linear_ab as ab
import torch

import cute_conv
from tests.test_nn import kernel_calls  # noqa: F401 - the fixture


def test_block_tail_fuses_both_linears_and_computes_the_block(kernel_calls):  # noqa: F811
    torch.manual_seed(3)
    tail = ab.BlockTail(16).eval()
    model = copy.deepcopy(tail).to(torch.bfloat16)
    optimized = cute_conv.optimize(model)
    assert optimized.cute_conv_report.counts() == {"linear+gelu": 1, "linear+permute+mul+add": 1}
    x = torch.randn(2, 16, 6, 5).to(memory_format=torch.channels_last)
    with torch.no_grad():
        expected = tail(x)
        out = optimized(x.to(torch.bfloat16))
    assert len(kernel_calls) == 2
    assert ((out.float() - expected).norm() / expected.norm()).item() < 1e-2
