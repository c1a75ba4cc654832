"""The tensor-core bound's selection of wide-group convs
(benchmarks/experiments/grouped_tensor_core_bound.py), on a CPU."""

from __future__ import annotations

import grouped_tensor_core_bound as bound
from torch import nn


def test_takes_groups_of_whole_input_and_output_vectors():
    wide = nn.Conv2d(224, 224, 3, groups=4)  # 56 per group
    assert bound.wide_groups(wide)
    assert bound.wide_groups(nn.Conv2d(96, 96, 3, groups=4))  # 24: timed with --min-group-in
    assert not bound.wide_groups(nn.Conv2d(96, 96, 3, groups=8))  # 12 per group
    assert not bound.wide_groups(nn.Conv2d(96, 96, 3))  # dense
    assert not bound.wide_groups(nn.Conv2d(128, 128, 3, groups=32))  # 4 per group
    assert not bound.wide_groups(nn.Conv2d(96, 96, 3, groups=96))  # depthwise
    assert not bound.wide_groups(nn.Conv2d(96, 60, 3, groups=2))  # 30 out per group
    assert bound.MIN_GROUP == 48


def test_the_tile_experiment_times_tile_shapes_and_narrower_k_tiles():
    import grouped_tensor_core_tiles as tiles

    shapes = {name: (c.tile_m, c.tile_n, c.tile_k) for name, c in tiles.tile_configs(56, 8).items()}
    assert shapes["m128"] == (128, 64, 64) and shapes["m64_k16"] == (64, 64, 16)
    assert "m128_half" not in shapes  # 32 does not divide 56
    half_step = tiles.tile_configs(48, 4)  # 48-wide tiles take k-tiles of >= 32 channels
    assert "m128_k32" in half_step and "m128_k16" not in half_step
    timed = set(tiles.tile_configs(128, 2)) | set(tiles.schedule_configs(128, 128, 2))
    assert timed == set(tiles.METHODS) - {"cudnn"}


def test_the_tile_experiment_times_the_default_tiles_on_the_other_schedules():
    import grouped_tensor_core_tiles as tiles

    narrow = tiles.schedule_configs(16, 16, 32)  # 32-wide tiles on 16-channel k-tiles
    assert narrow["m128_pingpong"].pingpong and narrow["m128_dynamic"].dynamic_schedule
    assert {(c.tile_m, c.tile_n, c.tile_k, c.groups) for c in narrow.values()} == {
        (128, 32, 16, 32)
    }
    assert set(tiles.schedule_configs(232, 232, 2)) == {"m128_dynamic"}  # 240 wide: no ping-pong


def test_groups_as_images_puts_each_groups_channels_in_an_image_of_its_own():
    import torch

    x = torch.arange(2 * 3 * 4 * 6).reshape(2, 3, 4, 6)  # NHWC, 6 channels in 3 groups
    images = bound.groups_as_images(x, 3)
    assert images.shape == (3, 2, 3, 4, 2)
    assert torch.equal(images[1], x[..., 2:4])
