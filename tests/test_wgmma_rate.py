"""The WGMMA rate microbenchmark (benchmarks/experiments/wgmma_rate.py) compiles for sm_90a
without a GPU, each variant with the WGMMA shape and the fills it names."""

from __future__ import annotations

import re

import cutlass
import pytest
import wgmma_rate as rate

from tests.sass import sass_of_ptx


@pytest.mark.parametrize(
    ("dtype", "tile_n", "fill", "sync", "random", "rotate", "shape"),
    [
        (cutlass.Float8E4M3FN, 128, True, False, False, False, "m64n128k32.f32.e4m3.e4m3"),
        (cutlass.Float8E4M3FN, 256, False, False, False, False, "m64n256k32.f32.e4m3.e4m3"),
        (cutlass.BFloat16, 128, False, False, False, False, "m64n128k16.f32.bf16.bf16"),
        (cutlass.Float8E4M3FN, 128, False, True, False, False, "m64n128k32.f32.e4m3.e4m3"),
        (cutlass.BFloat16, 128, True, True, True, True, "m64n128k16.f32.bf16.bf16"),
    ],
)
def test_each_variant_compiles_to_its_wgmma_batch_and_fills(
    dtype, tile_n, fill, sync, random, rotate, shape
):
    variant = rate.WgmmaRate(
        dtype, tile_n, k_tiles=64, fill=fill, sync=sync, random=random, rotate=rotate
    )
    ptx = rate.compile_variant(variant).__ptx__
    wgmmas = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(\S+)", ptx)
    assert wgmmas == [shape] * 4  # one batch of a 128-byte k-tile's k-blocks
    assert re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d);", ptx) == ["1", "0"]
    tma_loads = len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global\.tile", ptx))
    assert tma_loads == (rate.FILL_STAGES + 1 if fill else 0)
    # the ring's waits: the consumers' (and the producer's) only with sync; the fill's own
    ring_waits = len(re.findall(r"mbarrier\.try_wait", ptx))
    assert (ring_waits > (2 if fill else 0)) == sync
    # random operands: the consumers' hashed words stored to SMEM, then the proxy fence
    assert ("st.shared.u32" in ptx or "st.shared.b32" in ptx) == random
    assert ("fence.proxy.async.shared::cta" in ptx) == random


@pytest.mark.parametrize("m_outer", [False, True])
def test_one_warpgroup_issues_both_m_halves_in_the_order_asked(m_outer):
    variant = rate.WgmmaRate(
        cutlass.Float8E4M3FN, 128, k_tiles=64, fill=False, sync=True, warpgroups=1,
        m_outer=m_outer, regs=True,
    )  # fmt: skip
    ptx = rate.compile_variant(variant).__ptx__
    # each WGMMA's first accumulator register names its m-half
    halves = re.findall(r"wgmma\.mma_async\.sync\.aligned\.\S+ \{%r(\d+)", ptx)
    first, second = sorted(set(halves), key=halves.index)
    expected = [first] * 4 + [second] * 4 if m_outer else [first, second] * 4
    assert halves == expected
    setmaxnreg = re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+);", ptx)
    assert setmaxnreg == [("inc", "232"), ("dec", "40")]


def test_both_m_halves_stay_live_in_the_sass():
    """ptxas drops WGMMAs whose accumulators nothing reads: the result kept per CTA reads one
    value of each m-half, so the one-warpgroup variant keeps all eight WGMMAs of a k-tile."""
    variant = rate.WgmmaRate(cutlass.BFloat16, 128, k_tiles=64, fill=False, warpgroups=1)
    sass = sass_of_ptx(rate.compile_variant(variant).__ptx__, "sm_90a")
    assert len(re.findall(r"HGMMA\.64x128x16", sass)) == 8


@pytest.mark.parametrize("uniform", [False, True])
def test_a_warp_uniform_mma_slice_reuses_one_descriptor_register_quad(uniform):
    """The conv's SASS builds each WGMMA's descriptors in the same uniform registers;
    ``uniform`` reproduces that, the thread-index slice gives the batch's four their own."""
    variant = rate.WgmmaRate(
        cutlass.Float8E4M3FN, 128, k_tiles=64, fill=True, sync=True, random=True, rotate=True,
        uniform=uniform,
    )  # fmt: skip
    sass = sass_of_ptx(rate.compile_variant(variant).__ptx__, "sm_90a")
    quads = set(re.findall(r"QGMMA\.64x128x32\S* R\d+, gdesc\[(UR\d+)\]", sass))
    assert len(quads) == (1 if uniform else 4)


@pytest.mark.parametrize("fill_stages", [2, 8])
def test_the_fill_keeps_the_loads_in_flight_it_is_given(fill_stages):
    variant = rate.WgmmaRate(
        cutlass.Float8E4M3FN, 128, k_tiles=64, fill=True, fill_stages=fill_stages
    )
    ptx = rate.compile_variant(variant).__ptx__
    # the first stages' loads unrolled, then one in the steady loop
    tma_loads = len(re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global\.tile", ptx))
    assert tma_loads == fill_stages + 1
