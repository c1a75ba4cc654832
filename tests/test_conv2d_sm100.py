"""GPU numerics of the SM100 (Blackwell) kernel against a float32 torch reference.

These run on a GPU of compute capability 10.0 (B200: ``.github/workflows/b200.yml``) and skip
with a reason everywhere else. **They have never run**: no Blackwell GPU was reachable while the
kernel was written, so the SM100 kernel is compile-verified only (``test_compile_sm100.py``).

The numerics and cases are the Hopper tests' (``test_conv2d_sm90.py``, ``test_epilogue_sm90.py``:
fresh random inputs, output poisoned with NaN, the same tolerance), run through the public API
with SM100 configs: 1-SM and 2-SM, several MMA/tile shapes, every epilogue variant, residual.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfigSm100
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs
from tests.gpu import requires_sm100
from tests.test_conv2d_sm90 import GEOMETRIES, run_and_check
from tests.test_epilogue_sm90 import CASES, SHAPES, reference, run_case

pytestmark = requires_sm100

ONE_SM = Conv2dConfigSm100.default_bf16_1sm()
TWO_SM = Conv2dConfigSm100.default_bf16()
BOTH = [pytest.param(ONE_SM, id="1sm"), pytest.param(TWO_SM, id="2sm")]


def test_device_dispatches_to_sm100():
    assert (
        cute_conv.validation.validate_device(
            torch.empty(1, device="cuda"), torch.empty(1, device="cuda")
        )
        == "sm_100a"
    )


# The seed matrix (N x C=K x filter x stride x padding), on both CTA groups.
SEED_MATRIX = list(itertools.product((1, 8), (384, 416), (3, 4, 5), (1, 2), (0, 1)))


@pytest.mark.parametrize("config", BOTH)
@pytest.mark.parametrize(
    "n,ck,rs,stride,pad",
    SEED_MATRIX,
    ids=[f"n{n}-c{ck}-{rs}x{rs}-s{st}-p{p}" for n, ck, rs, st, p in SEED_MATRIX],
)
def test_seed_matrix(n, ck, rs, stride, pad, config):
    run_and_check(n, 12, 13, ck, ck, rs, rs, stride=stride, padding=pad, config=config)


@pytest.mark.parametrize("config", BOTH)
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_geometry(geometry, config):
    run_and_check(**geometry, config=config)


@pytest.mark.parametrize("config", BOTH)
@pytest.mark.parametrize(
    "c,k", [(3, 64), (5, 64), (64, 20), (12, 36)], ids=["rgb", "c5", "k20", "c12-k36"]
)
def test_unaligned_channels_are_padded(c, k, config):
    run_and_check(2, 16, 16, c, k, 3, 3, padding=1, config=config)


@pytest.mark.parametrize("config", BOTH)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(
    "out_dtype",
    [None, torch.float32, torch.bfloat16, torch.float16],
    ids=["same", "fp32", "bf16", "fp16"],
)
def test_dtypes(dtype, out_dtype, config):
    run_and_check(
        2, 10, 10, 64, 128, 3, 3, padding=1, dtype=dtype, out_dtype=out_dtype, config=config
    )


CONFIGS = [
    ONE_SM,
    TWO_SM,
    Conv2dConfigSm100(cta_group=1, mma_m=128, mma_n=256),
    Conv2dConfigSm100(cta_group=1, mma_m=128, mma_n=64, tile_k=32, epi_n=16),
    Conv2dConfigSm100(cta_group=2, mma_m=256, mma_n=192, epi_n=64),
    Conv2dConfigSm100(cta_group=2, mma_m=256, mma_n=64, tile_k=32),
    Conv2dConfigSm100(acc_stages=1, clc_stages=1, output_stages=1, stages=2),
    Conv2dConfigSm100(block_swizzle=4, raster_along_m=False),
    Conv2dConfigSm100(cta_group=1, mma_m=128, mma_n=128, block_swizzle=8, clc_stages=4),
]


def _config_id(c: Conv2dConfigSm100) -> str:
    return (
        f"{c.cta_group}sm-n{c.mma_n}-k{c.tile_k}-e{c.epi_n}-st{c.stages}-acc{c.acc_stages}"
        f"-clc{c.clc_stages}-sw{c.block_swizzle}{'' if c.raster_along_m else '-rn'}"
    )


@pytest.mark.parametrize("config", CONFIGS, ids=_config_id)
def test_configs(config):
    # M and K tails, an odd number of M tiles (a partial 2-SM pair), more tiles than a wave.
    run_and_check(3, 19, 21, 96, 328, 3, 3, padding=1, config=config)


@pytest.mark.parametrize("config", BOTH)
def test_many_more_tiles_than_sms(config):
    # ~3,100 MMA tiles on 148 SMs: clusters are launched, cancelled and stolen by CLC.
    run_and_check(16, 56, 56, 64, 512, 3, 3, padding=1, config=config)


@pytest.mark.parametrize("config", BOTH)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", CASES)
def test_epilogue_variants(shape, case, config):
    run_case(shape, case, config=config)


@pytest.mark.parametrize("config", CONFIGS[2:], ids=_config_id)
def test_residual_across_configs(config):
    run_case(SHAPES[1].values[0], dict(bias=True, activation="relu", residual=1.0), config=config)


@pytest.mark.parametrize("config", BOTH)
def test_fp32_output_and_16bit_vectors(config):
    case = dict(scale=True, bias=True, activation="gelu_tanh", residual=0.5)
    run_case(
        SHAPES[0].values[0],
        case,
        out_dtype=torch.float32,
        vector_dtype=torch.bfloat16,
        config=config,
    )
    run_case(
        SHAPES[0].values[0],
        case,
        out_dtype=torch.float16,
        vector_dtype=torch.float16,
        config=config,
    )


def test_default_config_path():
    # config=None on a B200 takes default_config_sm100.
    run_and_check(2, 28, 28, 128, 256, 3, 3, padding=1)


def test_two_geometries_share_one_compilation():
    run_and_check(2, 9, 9, 64, 128, 3, 3, padding=1, config=TWO_SM)
    count = cute_conv.compile.cached_kernel_count()
    run_and_check(1, 20, 11, 128, 64, 5, 5, stride=2, padding=2, config=TWO_SM)
    run_and_check(4, 7, 7, 32, 256, 1, 1, config=TWO_SM)
    assert cute_conv.compile.cached_kernel_count() == count


@pytest.mark.parametrize("config", BOTH)
def test_repeat_runs_are_bitwise_identical(config):
    act, flt = random_conv_inputs(4, 16, 16, 128, 256, 3, 3)
    first = cute_conv.conv2d_fprop(act, flt, padding=1, config=config)
    second = cute_conv.conv2d_fprop(act, flt, padding=1, config=config)
    assert torch.equal(first, second)


@pytest.mark.parametrize("config", BOTH)
def test_beta_zero_is_bit_identical_to_conv2d_fprop(config):
    x, flt = random_conv_inputs(2, 16, 16, 64, 192, 3, 3)
    bias = torch.randn(192, device="cuda")
    source = torch.randn(2, 16, 16, 192, device="cuda").to(torch.bfloat16)
    plain = cute_conv.conv2d_fprop(x, flt, padding=1, bias=bias, activation="silu", config=config)
    fused = cute_conv.conv2d_fprop_with_residual(
        x, flt, source, beta=0.0, padding=1, bias=bias, activation="silu", config=config
    )
    assert torch.equal(plain, fused)


@pytest.mark.parametrize("config", BOTH)
def test_in_place_residual_out_is_source(config):
    x, flt = random_conv_inputs(2, 12, 12, 64, 96, 3, 3)
    source = torch.randn(2, 12, 12, 96, device="cuda").to(torch.bfloat16)
    expected = reference(x, flt, dict(padding=1), source=source, beta=1.0)
    result = cute_conv.conv2d_fprop_with_residual(
        x, flt, source, padding=1, out=source, config=config
    )
    torch.cuda.synchronize()
    assert result is source
    report = compare_to_reference(source, expected)
    assert report.ok, str(report)


def test_default_output_and_current_stream():
    act, flt = random_conv_inputs(2, 10, 10, 64, 64, 3, 3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = cute_conv.conv2d_fprop(act, flt, padding=1, config=ONE_SM)
    side.synchronize()
    report = compare_to_reference(out, conv2d_reference(act, flt, padding=1))
    assert report.ok, str(report)


def test_hopper_config_is_rejected_on_blackwell():
    act, flt = random_conv_inputs(1, 8, 8, 64, 64, 3, 3)
    out = torch.full((1, 8, 8, 64), 7.0, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(TypeError, match="Conv2dConfigSm100"):
        cute_conv.conv2d_fprop(act, flt, padding=1, out=out, config=cute_conv.Conv2dConfig())
    assert bool((out == 7.0).all())
