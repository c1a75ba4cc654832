"""Compile-only: one SM90 kernel per feature combination the GPU tests run (stream-K, the
dynamic work queue, halo tiles, ping-pong, 192- and 256-row tiles, the residual in both
orders, the stem's super-pixel view), so a CPU run catches a combination that no longer
traces. The GPU tests check their numerics."""

from __future__ import annotations

import re

import pytest
import torch
from cute_conv.kernels.common.entry import ConvLaunchParams

import cute_conv
from cute_conv import Conv2dConfig, EpilogueSpec
from cute_conv.compile import SMEM_CAPACITY_BY_ARCH, KernelKey, _fake_launch_args
from cute_conv.staging import kernel_problem_for
from tests.ptx_dataflow import divisions_before_im2col_loads

AFTER = EpilogueSpec(has_residual=True)
BEFORE = EpilogueSpec(has_residual=True, residual_order="before_activation")
FUSED = EpilogueSpec(has_bias=True, has_scale=True, activation="relu")


def _stem_config() -> Conv2dConfig:
    """The default config of ResNet's 7x7 stride-2 stem, as the kernel runs it (staged)."""
    stem = cute_conv.Conv2dProblemShape.from_shapes(
        (8, 224, 224, 3), (64, 7, 7, 3), stride=2, padding=3
    )
    return cute_conv.default_config(kernel_problem_for(stem))


HALO = dict(tile_m=256, tile_n=64, tile_w=64, halo_h=6)
PITCHED = dict(tile_m=128, tile_n=256, tile_w=64, halo_h=4, halo_w=72)
CASES = {
    "stream-k": (Conv2dConfig(tile_n=256, cluster_n=2, stream_k=True), FUSED),
    "stream-k-residual": (Conv2dConfig(stream_k=True), AFTER),
    "stream-k-residual-before": (Conv2dConfig(stream_k=True), BEFORE),
    "dynamic": (Conv2dConfig(dynamic_schedule=True), None),
    "dynamic-residual": (Conv2dConfig(dynamic_schedule=True), AFTER),
    "halo": (Conv2dConfig(**HALO), FUSED),
    "halo-residual": (Conv2dConfig(**HALO), BEFORE),
    "pitched-halo": (Conv2dConfig(**PITCHED), FUSED),
    "pitched-halo-residual": (Conv2dConfig(**PITCHED), BEFORE),
    "pitched-halo-pingpong": (Conv2dConfig(**PITCHED | dict(tile_n=128, pingpong=True)), AFTER),
    "pingpong": (Conv2dConfig(pingpong=True), None),
    "pingpong-residual": (Conv2dConfig(pingpong=True), AFTER),
    "pingpong-residual-before": (Conv2dConfig(pingpong=True), BEFORE),
    "pingpong-halo": (Conv2dConfig(tile_w=32, halo_h=6, pingpong=True), None),
    "pingpong-halo-residual": (Conv2dConfig(tile_w=32, halo_h=6, pingpong=True), AFTER),
    "m192": (Conv2dConfig(tile_m=192, tile_n=128, cluster_n=2), None),
    "m192-residual": (Conv2dConfig(tile_m=192, tile_n=128, cluster_n=2), BEFORE),
    "m256-residual": (Conv2dConfig(tile_m=256, tile_n=64), AFTER),
    "m256-2x1-k32": (Conv2dConfig(tile_m=256, tile_n=128, cluster_m=2, tile_k=32), BEFORE),
    "stem": (_stem_config(), FUSED),
}


@pytest.mark.parametrize("config,spec", CASES.values(), ids=CASES.keys())
def test_feature_combination_compiles(config, spec):
    kernel = cute_conv.compile_kernel(
        "sm_90a", act_dtype=torch.bfloat16, config=config, epilogue=spec
    )
    ptx = kernel.ptx
    assert "wgmma.mma_async" in ptx
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", ptx)
    assert 0 < kernel.smem_bytes <= SMEM_CAPACITY_BY_ARCH["sm_90a"]
    im2col = re.search(r"cp\.async\.bulk\.tensor\.4d\.shared::\w+\.global\.im2col", ptx)
    assert bool(im2col) != bool(config.tile_w)  # halo tiles load A by tiled boxes
    # The tile's pixel origin is decomposed once per tile, not between a k-tile's barrier
    # wait and its im2col load.
    assert not any(divisions_before_im2col_loads(ptx))
    if config.stream_k:
        assert "fence.acq_rel.gpu" in ptx  # the fixup's publication of a partial
    if config.dynamic_schedule:
        assert re.search(r"atom\.\S*add", ptx)  # the global work counter
    if spec is not None and spec.has_residual and not config.tile_w:
        # C subtiles of the (N*P*Q, K) view (halo kernels load (q, p, n) boxes of C)
        assert re.search(r"cp\.async\.bulk\.tensor\.2d\.shared::\w+\.global\.tile", ptx)


def test_fake_launch_args_follow_the_launch_params():
    key = KernelKey("sm_90a", "bfloat16", "bfloat16", "bfloat16", Conv2dConfig())
    assert len(_fake_launch_args(key)) == len(ConvLaunchParams.flat_names())


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(Conv2dConfig(tile_m=256, tile_k=64, dynamic_schedule=True), id="256x128"),
        pytest.param(Conv2dConfig(pingpong=True), id="pingpong"),
        pytest.param(Conv2dConfig(**HALO), id="halo"),
    ],
)
def test_bf16_residual_is_read_from_a_few_swizzled_bases(config):
    """A bf16 residual C comes in as 4-byte value pairs, each at an immediate offset from one
    of a few swizzled bases (``copy_grouped``): a quarter of the base registers that an
    address per pair took (32 on 256x128, 64 on ping-pong)."""
    from tests.sass import sass_of

    kernel = cute_conv.compile_kernel("sm_90a", config=config, epilogue=BEFORE)
    sass = sass_of(kernel.cubin)
    bases = re.findall(r"LDS(?:\.\w+)* (?:R\d+, )?\[(R\d+)(?:\+0x[0-9a-f]+)?\]", sass)
    assert len(bases) >= 32 and len(set(bases)) <= len(bases) // 4
