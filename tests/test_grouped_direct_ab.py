"""The grouped-kernel A/B's conv finder (benchmarks/experiments/grouped_direct_ab.py), on a CPU:
the distinct grouped convs of a model with the activation after each."""

from __future__ import annotations

import grouped_direct_ab as ab
from models import build_model


def test_finds_regnet_grouped_convs_with_their_relu():
    found = ab.grouped_convs(build_model("regnet_y_400mf"), 1)
    assert found and all(conv.groups > 1 for conv, *_ in found)
    assert {activation for _, _, activation, _ in found} == {"relu"}
    assert sum(calls for *_, calls in found) == 16  # RegNetY-400MF's 16 blocks


def test_finds_mobilenet_depthwise_convs_and_skips_what_the_kernel_does_not_take():
    found = ab.grouped_convs(build_model("mobilenet_v3_large"), 2)
    assert {activation for _, _, activation, _ in found} == {"relu", "hardswish"}
    assert all(conv.groups == conv.in_channels == conv.out_channels for conv, *_ in found)
    assert sum(calls for *_, calls in found) == 15
    assert not ab.grouped_convs(build_model("resnet18"), 1)


def test_rule_total_sums_what_the_module_would_run():
    rows = [
        {"graph_us": {"cudnn": 10.0, "grouped": 4.0}, "calls": 3, "rule_takes_kernel": True},
        {"graph_us": {"cudnn": 6.0, "grouped": 9.0}, "calls": 1, "rule_takes_kernel": False},
    ]
    assert ab.rule_total(rows) == {"rule": 18.0}
