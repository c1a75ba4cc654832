"""The WGMMA rate microbenchmark (benchmarks/experiments/wgmma_rate.py) compiles for sm_90a
without a GPU, each variant with the WGMMA shape and the fills it names."""

from __future__ import annotations

import re

import cutlass
import pytest
import wgmma_rate as rate


@pytest.mark.parametrize(
    ("dtype", "tile_n", "fill", "sync", "shape"),
    [
        (cutlass.Float8E4M3FN, 128, True, False, "m64n128k32.f32.e4m3.e4m3"),
        (cutlass.Float8E4M3FN, 256, False, False, "m64n256k32.f32.e4m3.e4m3"),
        (cutlass.BFloat16, 128, False, False, "m64n128k16.f32.bf16.bf16"),
        (cutlass.Float8E4M3FN, 128, False, True, "m64n128k32.f32.e4m3.e4m3"),
    ],
)
def test_each_variant_compiles_to_its_wgmma_batch_and_fills(dtype, tile_n, fill, sync, shape):
    variant = rate.WgmmaRate(dtype, tile_n, k_tiles=64, fill=fill, sync=sync)
    ptx = rate.compile_variant(variant).__ptx__
    wgmmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(\S+)", ptx)
    assert wgmmas == [shape] * 4  # one batch of a 128-byte k-tile's k-blocks
    assert re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d);", ptx) == ["1", "0"]
    tma_loads = len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global\.tile", ptx))
    assert tma_loads == (rate.FILL_STAGES + 1 if fill else 0)
    # the ring's waits: the consumers' (and the producer's) only with sync; the fill's own
    ring_waits = len(re.findall(r"mbarrier\.try_wait", ptx))
    assert (ring_waits > (2 if fill else 0)) == sync
