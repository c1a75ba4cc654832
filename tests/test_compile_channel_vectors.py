"""Compile-only: how the epilogue gets its bias and scale, in both archs' PTX.

SM90: the consumers load a tile's bias/scale into registers before its mainloop where they
and the accumulators fit ``PRELOAD_MAX_REGISTERS`` (``preload_channel_vectors``: every load
before the first WGMMA, no prefetch); past that, one ``prefetch.global.L2`` per vector before
the mainloop and the loads per subtile after it. SM100: the epilogue warps prefetch before
waiting for the tile's accumulator. No vectors: neither. The GPU epilogue tests hold the
numerics; the speed is in NOTES (sessions 43, 44)."""

from __future__ import annotations

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfig, Conv2dConfigSm100, EpilogueSpec

PREFETCH = "prefetch.global.L2"
BIAS_BF16 = EpilogueSpec(has_bias=True, activation="relu", vector_dtype="bfloat16")
SCALE_BIAS_RESIDUAL = EpilogueSpec(has_bias=True, has_scale=True, has_residual=True)
SPECS = {
    "bias": (BIAS_BF16, 1),
    "scale-bias-residual": (SCALE_BIAS_RESIDUAL, 2),
    "residual": (EpilogueSpec(has_residual=True), 0),
    "linear": (EpilogueSpec(), 0),
}


def _ptx(arch, config, spec) -> str:
    kernel = cute_conv.compile_kernel(arch, act_dtype=torch.bfloat16, config=config, epilogue=spec)
    return kernel.ptx


def loads_around_the_mainloop(ptx: str) -> tuple[int, int]:
    """``ld.global`` before the consumers' first WGMMA and after it."""
    first_mma = ptx.index("wgmma.mma_async")
    return ptx[:first_mma].count("ld.global"), ptx[first_mma:].count("ld.global")


# A 128-wide tile: 32 distinct channels per consumer thread (two of each eight columns).
PRELOADED = {
    "cooperative": Conv2dConfig(),
    "pingpong": Conv2dConfig(pingpong=True),
    "stream-k": Conv2dConfig(stream_k=True),
    "tile-m-64": Conv2dConfig(tile_m=64, tile_n=128),
}


@pytest.mark.parametrize("config", PRELOADED.values(), ids=PRELOADED.keys())
def test_sm90_preloads_a_tiles_vectors_before_its_mainloop(config):
    ptx = _ptx("sm_90a", config, BIAS_BF16)
    assert PREFETCH not in ptx
    before, after = loads_around_the_mainloop(ptx)
    # Stream-K partial tiles read a scalar or two of their own after the mainloop.
    assert before == 32 and (after == 0 or config.stream_k)


def test_sm90_preloads_scale_and_bias_beside_64_accumulators():
    ptx = _ptx("sm_90a", Conv2dConfig(), SCALE_BIAS_RESIDUAL)  # 64 + 2 x 32 registers
    assert PREFETCH not in ptx and loads_around_the_mainloop(ptx)[0] == 64


@pytest.mark.parametrize("spec, prefetches", SPECS.values(), ids=SPECS.keys())
def test_sm90_wide_tiles_prefetch_and_load_per_subtile(spec, prefetches):
    # 128 accumulators + 2 x 64 fp32 (or 64 x 16-bit) registers: past the budget.
    ptx = _ptx("sm_90a", Conv2dConfig(tile_n=256), spec)
    assert ptx.count(PREFETCH) == prefetches
    if prefetches:
        assert ptx.index(PREFETCH) < ptx.index("wgmma.mma_async")
    assert loads_around_the_mainloop(ptx)[1] >= 64 * prefetches  # 64 channels per vector


@pytest.mark.parametrize("spec, prefetches", SPECS.values(), ids=SPECS.keys())
def test_sm100_prefetches_each_channel_vector(spec, prefetches):
    assert _ptx("sm_100a", Conv2dConfigSm100(), spec).count(PREFETCH) == prefetches


@pytest.mark.parametrize("ahead", [0, 1, 2])
def test_sm90_wide_tiles_load_each_subtiles_vectors_ahead(monkeypatch, ahead):
    # Past the preload budget, subtile i's bias is loaded at subtile i - ahead (the first
    # `ahead` subtiles' before the first): 8 channels a subtile before the first store.
    import cute_conv.kernels.sm90.epilogue as sm90_epilogue

    from cute_conv import compile as compile_mod

    monkeypatch.setattr(sm90_epilogue, "VECTOR_LOOKAHEAD_SUBTILES", ahead)
    monkeypatch.setattr(compile_mod, "_cache", {})  # the depth is not in the kernels' key
    monkeypatch.setenv("CUTE_CONV_DISK_CACHE", "0")
    ptx = _ptx("sm_90a", Conv2dConfig(tile_n=256), BIAS_BF16)
    epilogue = ptx[ptx.rindex("wgmma.wait_group") :]
    assert epilogue[: epilogue.index("stmatrix")].count("ld.global") == 8 * (ahead + 1)
    assert epilogue.count("ld.global") == 64
