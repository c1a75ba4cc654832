"""The residual's place in the epilogue, checked without a GPU: the spec, the API's argument
checks, and the compiled PTX of both archs (which value feeds the activation).

Numerics of both orders on the GPU are in ``test_epilogue_sm90.py``.
"""

from __future__ import annotations

import pytest
import torch

import cute_conv
from cute_conv import EpilogueSpec
from cute_conv.config_sm100 import Conv2dConfigSm100
from tests.ptx_dataflow import definitions, feeds, instructions

ORDERS = ("after_activation", "before_activation")


def test_spec_rejects_unknown_order():
    with pytest.raises(ValueError, match="residual_order='pre'.*after_activation"):
        EpilogueSpec(has_residual=True, residual_order="pre")


def test_order_without_residual_is_one_kernel():
    # No residual, no order: both spellings are the same cache key.
    assert EpilogueSpec(residual_order="before_activation") == EpilogueSpec()
    assert EpilogueSpec(has_residual=True, residual_order="before_activation").name == (
        "residual-pre-act"
    )


@pytest.mark.parametrize("order", [None, "relu", "before", 1])
def test_api_rejects_bad_order_before_launch(order):
    x = torch.zeros(1, 8, 8, 16, dtype=torch.bfloat16)
    flt = torch.zeros(16, 3, 3, 16, dtype=torch.bfloat16)
    source = torch.zeros(1, 6, 6, 16, dtype=torch.bfloat16)
    out = torch.full((1, 6, 6, 16), 3.0, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="residual_order=.* is not supported"):
        cute_conv.conv2d_fprop_with_residual(x, flt, source, residual_order=order, out=out)
    assert bool((out == 3.0).all())


def _tanh_inputs_read_residual(ptx: str) -> list[bool]:
    """For each ``ex2`` of the tanh activation: does the residual C (a bf16 value converted
    to f32; the accumulator is f32 already and this spec has no 16-bit vectors) feed it?"""
    defs = definitions(ptx)
    return [feeds(defs, ops[1], "cvt.f32.bf16", depth=10) for ops in instructions(ptx, "ex2.")]


COMPILES = [
    pytest.param("sm_90a", None, id="sm90"),
    pytest.param("sm_100a", Conv2dConfigSm100.default_bf16_1sm(), id="sm100-1sm"),
    pytest.param("sm_100a", Conv2dConfigSm100.default_bf16(), id="sm100-2sm"),
]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("arch,config", COMPILES)
def test_ptx_adds_residual_where_the_order_says(arch, config, order):
    spec = EpilogueSpec(has_bias=True, activation="tanh", has_residual=True, residual_order=order)
    kernel = cute_conv.compile_kernel(
        arch, act_dtype=torch.bfloat16, config=config, epilogue=spec
    )
    reads = _tanh_inputs_read_residual(kernel.ptx)
    assert reads, "no ex2 of the tanh activation in the PTX"
    if order == "before_activation":
        assert all(reads), f"{sum(reads)} of {len(reads)} tanh inputs include the residual"
    else:
        assert not any(reads), f"{sum(reads)} of {len(reads)} tanh inputs include the residual"
