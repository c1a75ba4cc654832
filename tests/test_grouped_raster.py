"""The grouped rasterization (``GroupedRaster``), on the CPU: the band walk, and the divisors
the SM90 launch makes for it on the host (compiled in, no integer division left in the
data-parallel kernels)."""

from __future__ import annotations

import pytest
from cute_conv.kernels.common.tile_scheduler import GroupedRaster, select_python


def band_walk(work: int, tiles_m: int, tiles_n: int, swizzle: int, along_m: bool):
    """The walk written out: bands of ``swizzle`` minor tiles (the last one narrower), the
    minor index fastest inside a band."""
    major, minor = (tiles_m, tiles_n) if along_m else (tiles_n, tiles_m)
    band, rest = divmod(work, swizzle * major)
    width = min(minor - band * swizzle, swizzle)
    minor_idx, major_idx = band * swizzle + rest % width, rest // width
    return (major_idx, minor_idx) if along_m else (minor_idx, major_idx)


@pytest.mark.parametrize("tiles", [(1, 1), (7, 3), (5, 8), (13, 1), (1, 9), (6, 6), (49, 10)])
@pytest.mark.parametrize("swizzle", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("along_m", [True, False])
@pytest.mark.parametrize("divisors", ["plain", "made"])
def test_the_raster_walks_the_bands(tiles, swizzle, along_m, divisors):
    """Both arithmetics: plain extents (one division by the band's width, the gather
    kernels' and SM100's) and made divisors (Python ints standing in for the host's
    ``cute.FastDivmodDivisorV2``: both band widths divided, then one selected)."""
    tiles_m, tiles_n = tiles
    made = {"plain": {}, "made": {"divisor": lambda extent: extent}}[divisors]
    raster = GroupedRaster(tiles_m, tiles_n, swizzle, along_m, **made)
    assert raster.divides_fast == (divisors == "made")
    assert raster.num_tiles() == tiles_m * tiles_n
    coords = [raster.coord(w, select_python) for w in range(tiles_m * tiles_n)]
    assert coords == [band_walk(w, *tiles, swizzle, along_m) for w in range(len(coords))]
    assert sorted(coords) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]


def test_the_data_parallel_kernels_divide_by_no_run_time_value():
    """The raster's and the im2col pixel's divisors come from the host: the kernel's SASS has
    no integer-division sequence (``MUFU.RCP`` of the divisor) left. (The gather kernels keep
    plain divisions: ``test_gather_loads_are_in_flight_together``.)"""
    from cute_conv.compile import compile_kernel
    from cute_conv.config import Conv2dConfig
    from tests.sass import sass_of

    for config in (Conv2dConfig(tile_m=64, tile_n=32, tile_k=64), Conv2dConfig(cluster_m=2)):
        sass = sass_of(compile_kernel("sm_90a", config=config).cubin)
        assert "UTMALDG.4D.IM2COL" in sass and "MUFU.RCP" not in sass


def test_halo_tiles_take_their_q_p_image_coordinate_without_division():
    """Halo kernels: the scheduler's tile coordinate is (q, p, image) by divisors of the
    tiles across a row and down an image made on the host; the same walk as the linear
    tile index decomposed along Q, then P, then images."""
    from cute_conv.compile import compile_kernel
    from cute_conv.config import Conv2dConfig
    from tests.sass import sass_of

    for config in (
        Conv2dConfig(tile_w=64, halo_h=4),
        Conv2dConfig(tile_m=128, tile_n=192, tile_w=64, halo_h=6, halo_w=72),
    ):
        sass = sass_of(compile_kernel("sm_90a", config=config).cubin)
        assert "UTMALDG" in sass and "MUFU.RCP" not in sass
    tiles_w, tiles_h, images = 3, 4, 2
    for m in range(tiles_w * tiles_h * images):
        row = m // tiles_w
        image, in_image = divmod(m, tiles_w * tiles_h)
        assert (m % tiles_w, row % tiles_h, row // tiles_h) == (
            in_image % tiles_w,
            in_image // tiles_w,
            image,
        )
