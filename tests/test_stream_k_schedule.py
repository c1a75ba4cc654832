"""How many tiles the stream-K ranges split (``stream_k_tile_count``), on the CPU."""

from __future__ import annotations

import pytest
from cute_conv.kernels.common.tile_scheduler import stream_k_tile_count


@pytest.mark.parametrize(
    "num_work, num_clusters, split",
    [
        (4, 132, 4),  # below a wave: every tile
        (132, 132, 132),  # one wave
        (200, 132, 200),  # below two waves: every tile
        (264, 132, 132),  # two whole waves: one wave of whole ranges, one of whole tiles
        (265, 66, 67),  # 4.02 waves: the last partial wave and one whole wave
        (330, 132, 198),  # 2.5 waves
    ],
)
def test_the_ranges_split_the_last_partial_wave_and_one_more(num_work, num_clusters, split):
    assert stream_k_tile_count(num_work, num_clusters, max) == split


@pytest.mark.parametrize("num_clusters", [1, 7, 66, 132])
def test_the_whole_tiles_left_fill_whole_waves(num_clusters):
    for num_work in range(1, 5 * num_clusters):
        split = stream_k_tile_count(num_work, num_clusters, max)
        assert 0 < split <= num_work
        assert (num_work - split) % num_clusters == 0
        assert split >= min(num_work, num_clusters)  # each cluster's range a tile or more
