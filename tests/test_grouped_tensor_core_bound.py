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
