"""The fp8 kernels, compiled without a GPU for sm_90a and sm_100a: the MMA forms, the
dequantization scales read from global memory into the epilogue, and the saturating fp8
output conversion, asserted on the PTX. (Numerics: ``test_fp8_sm90.py``, on a GPU.)"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfig, Conv2dConfigSm100, EpilogueSpec
from tests.ptx_dataflow import definitions, feeds, instructions

E4M3, E5M2, BF16 = torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16


def _ptx(arch, act, flt, out, config=None, epilogue=None):
    return cute_conv.compile_kernel(
        arch, act_dtype=act, filter_dtype=flt, out_dtype=out, config=config, epilogue=epilogue
    ).ptx


@pytest.mark.parametrize(
    "act,flt,form",
    [(E4M3, E4M3, "e4m3.e4m3"), (E5M2, E4M3, "e5m2.e4m3"), (E4M3, E5M2, "e4m3.e5m2")],
)
def test_sm90_fp8_wgmma_forms(act, flt, form):
    ptx = _ptx("sm_90a", act, flt, BF16, Conv2dConfig(tile_k=128))
    forms = set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k\d+\.f32\.[\w.]+)", ptx))
    assert forms == {f"m64n128k32.f32.{form}"}


def _stores_read_global(ptx: str, cvt_prefix: str) -> list[bool]:
    """For each output conversion ``cvt_prefix``: is a value loaded from global memory (a
    scale) among its sources? (This spec has no bias or scale vectors: only the fp8 scales
    are read from global memory by the epilogue.)"""
    defs = definitions(ptx)
    return [
        any(feeds(defs, reg, "ld.global", depth=6) for reg in ops[1:])
        for ops in instructions(ptx, cvt_prefix)
    ]


ARCH_CONFIGS = [
    pytest.param("sm_90a", Conv2dConfig(tile_k=128), Conv2dConfig(), id="sm90"),
    pytest.param(
        "sm_100a", Conv2dConfigSm100(tile_k=128), Conv2dConfigSm100.default_bf16(), id="sm100-2sm"
    ),
    pytest.param(
        "sm_100a",
        Conv2dConfigSm100(cta_group=1, mma_m=128, tile_k=128),
        Conv2dConfigSm100.default_bf16_1sm(),
        id="sm100-1sm",
    ),
]


@pytest.mark.parametrize("arch,fp8_config,bf16_config", ARCH_CONFIGS)
def test_dequantization_scales_feed_the_output(arch, fp8_config, bf16_config):
    fp8 = _stores_read_global(_ptx(arch, E4M3, E4M3, BF16, fp8_config), "cvt.rn.bf16x2.f32")
    bf16 = _stores_read_global(_ptx(arch, BF16, BF16, BF16, bf16_config), "cvt.rn.bf16x2.f32")
    assert fp8 and all(fp8), "every output value is multiplied by the loaded scales"
    assert bf16 and not any(bf16), "a 16-bit kernel reads no scale"


@pytest.mark.parametrize("arch,_,bf16_config", ARCH_CONFIGS)
def test_source_scale_feeds_the_output(arch, _, bf16_config):
    """``has_source_scale``: beta is multiplied by a float32 read from global memory (the
    source itself arrives through SMEM), so every value stored depends on such a load; the
    same residual kernel without it reads nothing from global memory in its epilogue."""
    spec = EpilogueSpec(has_residual=True)
    scaled = replace(spec, has_source_scale=True)
    with_scale = _stores_read_global(
        _ptx(arch, BF16, BF16, BF16, bf16_config, scaled), "cvt.rn.bf16x2.f32"
    )
    without = _stores_read_global(
        _ptx(arch, BF16, BF16, BF16, bf16_config, spec), "cvt.rn.bf16x2.f32"
    )
    assert with_scale and all(with_scale)
    assert without and not any(without)
    assert not EpilogueSpec(has_source_scale=True).has_source_scale  # no residual: dropped


@pytest.mark.parametrize("inputs", [E4M3, BF16], ids=["fp8-in", "bf16-in"])
@pytest.mark.parametrize("arch,fp8_config,bf16_config", ARCH_CONFIGS)
def test_fp8_output_is_a_saturating_conversion_of_scaled_values(
    arch, fp8_config, bf16_config, inputs
):
    """An e4m3 output, from fp8 inputs or 16-bit ones (a 16-bit stem writing fp8)."""
    epilogue = EpilogueSpec(has_bias=False, activation="relu", has_residual=True)
    config = fp8_config if inputs == E4M3 else bf16_config
    ptx = _ptx(arch, inputs, inputs, E4M3, config, epilogue)
    converts = instructions(ptx, "cvt.rn.satfinite.e4m3x2.f32")
    assert converts
    assert not re.search(r"cvt\.rn\.e4m3x2", ptx)  # every fp8 store saturates
    defs = definitions(ptx)
    # Each value stored went through 1 / out_scale, a value read from global memory.
    assert all(any(feeds(defs, r, "rcp", 4) or feeds(defs, r, "div", 4) for r in ops[1:])
               for ops in converts)  # fmt: skip


def test_sm100_fp8_mma_kind():
    for config in (Conv2dConfigSm100(tile_k=128), Conv2dConfigSm100(tile_k=64)):
        ptx = _ptx("sm_100a", E4M3, E4M3, BF16, config)
        kinds = set(re.findall(r"tcgen05\.mma\.cta_group::\d\.kind::(\w+)", ptx))
        assert kinds == {"f8f6f4"}
    ptx = _ptx("sm_100a", BF16, BF16, BF16, Conv2dConfigSm100.default_bf16())
    assert set(re.findall(r"tcgen05\.mma\.cta_group::\d\.kind::(\w+)", ptx)) == {"f16"}


def test_sm90_fp8_k_tile_is_one_128_byte_row():
    kernel = cute_conv.compile_kernel(
        "sm_90a", act_dtype=E4M3, config=Conv2dConfig(tile_k=128, stages=4)
    )
    bf16 = cute_conv.compile_kernel("sm_90a", act_dtype=BF16, config=Conv2dConfig(stages=4))
    # 128 fp8 channels per k-tile hold the bytes of 64 bf16 ones: the same SMEM ring.
    assert kernel.smem_bytes == bf16.smem_bytes


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(Conv2dConfig(tile_m=256, tile_k=64, dynamic_schedule=True), id="256x128"),
        pytest.param(Conv2dConfig(tile_k=128, pingpong=True), id="pingpong"),
    ],
)
def test_fp8_staging_is_addressed_from_a_few_registers(config):
    """ResNet's block-output convs in fp8 (a residual, an amax, an fp8 output; the default
    configs of its batch-128 layers): the byte pairs of the output staging and of C are
    read and written at offsets from a few swizzled bases, so no register spills. (With an
    address per pair they spilled 14-58 values.)"""
    from tests.sass import sass_of

    spec = EpilogueSpec(
        has_bias=True, has_scale=True, activation="relu", has_residual=True, has_amax=True,
        has_source_scale=True, residual_order="before_activation",
    )  # fmt: skip
    kernel = cute_conv.compile_kernel(
        "sm_90a", act_dtype=E4M3, out_dtype=E4M3, config=config, epilogue=spec
    )
    sass = sass_of(kernel.cubin)
    bases = set(re.findall(r"(?:STS|LDS)\.U16 (?:R\d+, )?\[(R\d+)(?:\+0x[0-9a-f]+)?\]", sass))
    pairs = len(re.findall(r"(?:STS|LDS)\.U16", sass))
    assert pairs >= 2 * 64 and len(bases) <= pairs // 8
    assert re.search(r"\b(STL|LDL)\b", sass) is None


@pytest.mark.parametrize("dtype", [BF16, torch.float16])
def test_quantize_kernel_is_one_vectorized_saturating_pass(dtype):
    from cute_conv.compile import compile_quantize

    ptx = compile_quantize("sm_90a", dtype).ptx
    assert "ld.global.v4.b32" in ptx  # 8 16-bit values, one 16-byte load
    assert re.search(r"st\.global\.v4\.b16|st\.global\.v2\.b32|st\.global\.b64", ptx)  # 8 bytes
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx and not re.search(r"cvt\.rn\.e4m3x2", ptx)
    with pytest.raises(TypeError, match="dtype=float32 is not supported"):
        compile_quantize("sm_90a", torch.float32)


def test_quantize_from_amax_derives_and_writes_the_scale():
    """Dynamic scaling: the kernel reads the amax, divides (IEEE, as torch does) and one
    thread stores the scale; the static kernel only reads its scale."""
    from cute_conv.compile import compile_quantize

    dynamic = compile_quantize("sm_90a", BF16, from_amax=True).ptx
    static = compile_quantize("sm_90a", BF16).ptx
    assert "div.rn.f32" in dynamic and "div.rn.f32" not in static
    assert re.findall(r"st\.global\.b32", dynamic) == ["st.global.b32"]  # the scale
    assert not re.search(r"st\.global\.b32", static)
    with pytest.raises(TypeError, match="from_amax must be a bool"):
        compile_quantize("sm_90a", BF16, from_amax=1)
