"""The amax the epilogue keeps (``EpilogueSpec.has_amax``), compiled for sm_90a and sm_100a
(no GPU): one atomic max per warp, of NaN-propagating maxima; none without it."""

from __future__ import annotations

import re

import pytest

import cute_conv
from cute_conv import Conv2dConfig, EpilogueSpec

_ATOMIC_MAX = re.compile(r"atom\.global\.max\.s32")
_NAN_MAX = re.compile(r"max\.NaN\.f32")
AMAX = EpilogueSpec(has_bias=True, activation="relu", has_amax=True)
SM90_CASES = {
    "default": (Conv2dConfig(), AMAX, "bfloat16"),
    "stream-k": (Conv2dConfig(stream_k=True), AMAX, "bfloat16"),
    "pingpong-residual": (
        Conv2dConfig(pingpong=True), EpilogueSpec(has_residual=True, has_amax=True), "bfloat16"
    ),
    "thread-store": (Conv2dConfig(), EpilogueSpec(store_by_threads=True, has_amax=True), "bfloat16"),
    "fp8-out": (Conv2dConfig(tile_k=128), AMAX, "float8_e4m3fn"),
    # Output rows of (q, p, n) boxes: the bounds of each row take divisions.
    "halo": (Conv2dConfig(tile_m=256, tile_n=64, tile_w=64, halo_h=6), AMAX, "bfloat16"),
}  # fmt: skip


def _atomics_and_maxima(ptx: str) -> tuple[int, int]:
    return len(_ATOMIC_MAX.findall(ptx)), len(_NAN_MAX.findall(ptx))


@pytest.mark.parametrize("config,spec,dtype", SM90_CASES.values(), ids=SM90_CASES.keys())
def test_sm90_kernel_publishes_one_amax_per_warp(config, spec, dtype):
    kernel = cute_conv.compile_kernel(
        "sm_90a", act_dtype=dtype, out_dtype=dtype, config=config, epilogue=spec
    )
    atomics, maxima = _atomics_and_maxima(kernel.ptx)
    # One atomic, after the persistent loop; a max per value (trees per row, rows in bounds
    # or not) plus the warp's five-step butterfly.
    assert atomics == 1
    assert maxima >= config.tile_n // 2 + 5
    plain = cute_conv.compile_kernel(
        "sm_90a", act_dtype=dtype, out_dtype=dtype, config=config,
        epilogue=EpilogueSpec(**{**spec.__dict__, "has_amax": False}),
    )  # fmt: skip
    assert _atomics_and_maxima(plain.ptx) == (0, 0)


def test_sm100_kernel_publishes_one_amax_per_warp():
    kernel = cute_conv.compile_kernel("sm_100a", epilogue=AMAX)
    atomics, maxima = _atomics_and_maxima(kernel.ptx)
    assert atomics == 1 and maxima > 5


def test_an_amax_spec_names_itself():
    assert AMAX.name == "bias-relu-amax"
    assert AMAX.needs_output_coords and not EpilogueSpec().needs_output_coords
