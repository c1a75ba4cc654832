"""Compile-only: the bias/scale L2 prefetch (``kernels/common/epilogue.prefetch_channel_vectors``)
in both archs' PTX: one ``prefetch.global.L2`` per channel vector the epilogue reads, none
without them. On SM90 it comes before the tile's mainloop (the consumers' first WGMMA); on
SM100 the epilogue warps issue it before waiting for the tile's accumulator. The GPU epilogue
tests hold the numerics (a prefetch changes no value); the speed is in NOTES (session 43)."""

from __future__ import annotations

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfig, Conv2dConfigSm100, EpilogueSpec

PREFETCH = "prefetch.global.L2"
SPECS = {
    "bias": (EpilogueSpec(has_bias=True, activation="relu", vector_dtype="bfloat16"), 1),
    "scale-bias-residual": (EpilogueSpec(has_bias=True, has_scale=True, has_residual=True), 2),
    "residual": (EpilogueSpec(has_residual=True), 0),
    "linear": (EpilogueSpec(), 0),
}
CONFIGS = {
    "sm90": ("sm_90a", Conv2dConfig()),
    "sm90-pingpong": ("sm_90a", Conv2dConfig(pingpong=True)),
    "sm90-stream-k": ("sm_90a", Conv2dConfig(stream_k=True)),
    "sm100": ("sm_100a", Conv2dConfigSm100()),
}


def _ptx(arch, config, spec) -> str:
    kernel = cute_conv.compile_kernel(arch, act_dtype=torch.bfloat16, config=config, epilogue=spec)
    return kernel.ptx


@pytest.mark.parametrize("spec, prefetches", SPECS.values(), ids=SPECS.keys())
@pytest.mark.parametrize("arch, config", CONFIGS.values(), ids=CONFIGS.keys())
def test_one_prefetch_per_channel_vector(arch, config, spec, prefetches):
    assert _ptx(arch, config, spec).count(PREFETCH) == prefetches


def test_sm90_prefetches_before_the_mainloop():
    ptx = _ptx("sm_90a", Conv2dConfig(), SPECS["bias"][0])
    assert ptx.index(PREFETCH) < ptx.index("wgmma.mma_async")
