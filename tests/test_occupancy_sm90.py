"""On a Hopper GPU: the driver's count of resident clusters, and a conv of 4-CTA clusters
whose grid is bounded by it (more cluster tiles than clusters resident at once)."""

from __future__ import annotations

import pytest
import torch

import cute_conv
from cute_conv import occupancy
from tests.gpu import requires_sm90
from tests.test_conv2d_sm90 import run_and_check

pytestmark = [pytest.mark.gpu, requires_sm90]


@pytest.mark.parametrize("cluster_size", [2, 4, 8])
def test_the_driver_counts_resident_clusters(cluster_size):
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert occupancy._driver_resident_clusters(0, cluster_size) is not None, "no driver answer"
    assert 1 <= occupancy.resident_clusters(0, cluster_size) <= num_sms // cluster_size


@pytest.mark.parametrize(
    "config",
    [
        cute_conv.Conv2dConfig(tile_n=64, cluster_m=2, cluster_n=2),
        cute_conv.Conv2dConfig(tile_n=64, cluster_n=4),
    ],
    ids=["2x2", "1x4"],
)
def test_a_grid_of_4_cta_clusters_past_what_is_resident(config):
    # 8 x 56 x 56 rows of 128 and 256 channels of 64: 196 x 4 tiles, 196 cluster tiles.
    run_and_check(8, 56, 56, 64, 256, 1, 1, config=config)
