"""The SM90 epilogue's register -> SMEM copy (``Sm90EpilogueMixin.r2s_tiled_copy``) on a CPU:
for every output width and subtile width the kernel stages, the consumer threads' values
cover each staging subtile exactly once, in the kernel's own widths (16 or 32) and in a
config's ``epi_n`` of 64. 8-bit outputs in 16-wide subtiles (half-step
tiles) once took a copy tiled over 32 columns, whose second 16 folded onto the first."""

from __future__ import annotations

import collections

import cutlass
import cutlass.cute as cute
import pytest
from cute_conv.kernels.common.epilogue import EpilogueSpec
from cute_conv.kernels.sm90.conv2d_fprop import Conv2dFpropSm90

from cute_conv import Conv2dConfig

CASES = [
    (out_dtype, tile_m, tile_n, epi_n)
    for out_dtype in (cutlass.BFloat16, cutlass.Float32, cutlass.Float8E4M3FN)
    for tile_m, tile_n, epi_n in (
        (128, 80, 0), (128, 96, 0), (64, 48, 0), (256, 64, 0), (128, 128, 64), (256, 128, 64), (192, 128, 64)
    )
    if out_dtype.width < 32 or tile_m * epi_n <= 128 * 64  # four float32 256x64 buffers: no room
]  # fmt: skip


@pytest.mark.parametrize(
    "out_dtype,tile_m,tile_n,epi_n",
    CASES,
    ids=[f"{o.__name__}-{m}x{n}{f'-epi{e}' if e else ''}" for o, m, n, e in CASES],
)
def test_every_subtile_value_is_written_once(out_dtype, tile_m, tile_n, epi_n):
    act = cutlass.Float8E4M3FN if out_dtype.width == 8 else cutlass.BFloat16
    config = Conv2dConfig(
        tile_m=tile_m, tile_n=tile_n, tile_k=128 // (act.width // 8), epi_n=epi_n
    )
    kernel = Conv2dFpropSm90(act, act, out_dtype, config, EpilogueSpec())
    seen = collections.Counter()

    @cute.jit
    def trace():
        kernel._setup_attributes()
        tiled_copy = kernel.r2s_tiled_copy(kernel.tiled_mma)
        subtile = cute.make_identity_tensor(kernel.epi_tile)
        for t in cutlass.range_constexpr(kernel.num_consumer_threads):
            coords = tiled_copy.get_slice(t).partition_D(subtile)
            for i in cutlass.range_constexpr(cute.size(coords)):
                seen[str(coords[i])] += 1

    cute.compile(trace, options="--gpu-arch sm_90a")
    epi_m, epi_n = kernel.epi_tile
    assert epi_m == tile_m and (epi_n == config.epi_n if config.epi_n else epi_n in (16, 32))
    assert len(seen) == epi_m * epi_n and set(seen.values()) == {1}
