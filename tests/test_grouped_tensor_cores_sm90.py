"""GPU numerics of grouped convs on the SM90 tensor-core kernel
(``cute_conv.grouped_tensor_cores``) against float32 ``F.conv2d(groups=...)``: groups of 16 to
232 channels, 1x1 and 3x3, strides, a bias, a scale and activations, tile widths that divide
the group's output channels and ones that do not (a group's last tile reaching past it), an
output channel slice written in place, and ``nn.Conv2d`` eager, compiled and differentiated."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import cute_conv
from cute_conv import Conv2dConfig, grouped_tensor_cores
from cute_conv.grouped_tensor_cores import (
    default_tile_k,
    default_tile_n,
    grouped_conv2d_tensor_cores,
)
from cute_conv.testing import compare_to_reference

pytestmark = pytest.mark.gpu

# (n, h, w, c, k, r, groups, stride, padding)
CASES = {
    "regnety8-like-48": (2, 28, 28, 192, 192, 3, 4, 1, 1),
    "s2": (2, 29, 31, 96, 96, 3, 2, 2, 1),
    "k2x": (1, 14, 14, 128, 256, 3, 2, 1, 1),
    "1x1": (3, 10, 12, 256, 256, 1, 2, 1, 0),
    "g16-64": (1, 16, 16, 1024, 1024, 3, 16, 1, 1),
    "112": (2, 14, 14, 448, 448, 3, 4, 1, 1),
    # Widths no tile divides: the last tile of a group reaches past it (64 for 56, ...).
    "56": (2, 14, 14, 448, 448, 3, 8, 1, 1),
    "120-s2": (2, 15, 15, 240, 240, 3, 2, 2, 1),
    "232": (1, 7, 7, 464, 464, 3, 2, 1, 1),
    "168-k2x": (1, 9, 9, 384, 672, 1, 4, 1, 0),
    # Groups narrower than 64 channels: by default on k-tiles of their own width (16, or 32
    # for 24 and 32: default_tile_k); test_narrow_groups_on_64_channel_k_tiles runs 64.
    "24": (2, 28, 28, 120, 120, 3, 5, 1, 1),
    "32-s2": (2, 15, 15, 256, 256, 3, 8, 2, 1),
    "40-1x1": (1, 14, 14, 160, 160, 1, 4, 1, 0),
    "16": (2, 28, 28, 128, 128, 3, 8, 1, 1),
    "16-s2": (2, 15, 15, 64, 64, 3, 4, 2, 1),
    # Waves of 256-row tiles narrower than 128 channels: on 16-, 32- and 64-channel k-tiles
    # (16, 24, 56).
    "16-256-rows": (8, 28, 28, 256, 256, 3, 16, 1, 1),
    "24-256-rows": (8, 30, 30, 240, 240, 3, 10, 1, 1),
    "56-256-rows": (8, 28, 28, 448, 448, 3, 8, 1, 1),
}


def run(n, h, w, c, k, r, groups, stride, padding, activation="relu", config=None):
    gen = torch.Generator("cuda").manual_seed(0)
    x = torch.randn(n, h, w, c, device="cuda", generator=gen).bfloat16()
    flt = (torch.randn(k, r, r, c // groups, device="cuda", generator=gen)
           / (r * r * c / groups) ** 0.5).bfloat16()  # fmt: skip
    bias = torch.randn(k, device="cuda", generator=gen).bfloat16()
    out = grouped_conv2d_tensor_cores(x, flt, groups=groups, stride=stride, padding=padding,
                                      bias=bias, activation=activation, config=config)  # fmt: skip
    ref = F.conv2d(x.permute(0, 3, 1, 2).float(), flt.permute(0, 3, 1, 2).float(),
                   bias.float(), stride=stride, padding=padding, groups=groups)  # fmt: skip
    if activation == "relu":
        ref = torch.relu(ref)
    report = compare_to_reference(out, ref.permute(0, 2, 3, 1))
    assert report.ok, report


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_grouped_convs_match_float32(case):
    run(*case)


@pytest.mark.parametrize("tile_m", [128, 256])
def test_narrow_groups_on_64_channel_k_tiles(tile_m):
    """The k-tile reaches past a 24-wide group: the 3-d view reads zeros there."""
    run(2, 28, 28, 120, 120, 3, 5, 1, 1,
        config=Conv2dConfig(tile_m=tile_m, tile_n=32, tile_k=64, groups=5))  # fmt: skip


@pytest.mark.parametrize("tile_n", [32, 64])
def test_tiles_narrower_than_a_group(tile_n):
    run(2, 20, 20, 256, 256, 3, 2, 1, 1, config=Conv2dConfig(tile_n=tile_n, groups=2))


def test_clusters_along_m_and_no_activation():
    run(2, 28, 28, 192, 192, 3, 4, 1, 1, activation=None,
        config=Conv2dConfig(tile_n=48, cluster_m=2, groups=4))  # fmt: skip


@pytest.mark.parametrize("tile_n,cluster_m", [(32, 1), (48, 1), (64, 2), (128, 1)])
def test_groups_of_56_at_any_tile_width(tile_n, cluster_m):
    """Two tiles a group, the second partial (32, 48), one padded tile (64, multicast along
    M), one tile past two groups' width (128)."""
    run(2, 12, 12, 224, 224, 3, 4, 1, 1,
        config=Conv2dConfig(tile_n=tile_n, cluster_m=cluster_m, groups=4))  # fmt: skip


@pytest.mark.parametrize("schedule", ["pingpong", "dynamic_schedule"])
@pytest.mark.parametrize("case", [(2, 28, 28, 128, 128, 3, 8, 1, 1), (2, 14, 14, 448, 448, 3, 8, 1, 1)],
                         ids=["16-wide", "56-wide"])  # fmt: skip
def test_grouped_tiles_on_the_other_schedules(schedule, case):
    """Each consumer's own tiles (ping-pong), tiles taken from a counter (dynamic): the
    group of a tile comes from its N coordinate on either."""
    group_in = case[3] // case[6]
    tile_n = default_tile_n(case[4] // case[6])
    config = Conv2dConfig(tile_n=tile_n, tile_k=default_tile_k(group_in, tile_n), groups=case[6],
                          **{schedule: True})  # fmt: skip
    run(*case, config=config)


@pytest.mark.parametrize("channels", [192, 224], ids=["48", "56"])
def test_scale_bias_float16_and_a_channel_slice_of_out(channels):
    gen = torch.Generator("cuda").manual_seed(1)
    n, h, w, c, k, groups = 2, 15, 13, channels, channels, 4
    x = torch.randn(n, h, w, c, device="cuda", generator=gen).half()
    flt = (torch.randn(k, 3, 3, c // groups, device="cuda", generator=gen) / 15).half()
    scale = torch.rand(k, device="cuda", generator=gen) + 0.5
    bias = torch.randn(k, device="cuda", generator=gen)
    buffer = torch.full((n, h, w, k + 64), float("nan"), device="cuda", dtype=torch.float16)
    part = buffer[..., 32:32 + k]
    out = grouped_conv2d_tensor_cores(x, flt, groups=groups, padding=1, bias=bias,
                                      scale=scale, activation="silu", out=part)  # fmt: skip
    ref = F.conv2d(x.permute(0, 3, 1, 2).float(), flt.permute(0, 3, 1, 2).float(), padding=1,
                   groups=groups).permute(0, 2, 3, 1)  # fmt: skip
    ref = F.silu(ref * scale + bias)
    assert out is part
    report = compare_to_reference(part, ref)
    assert report.ok, report
    assert buffer[..., :32].isnan().all() and buffer[..., 32 + k:].isnan().all()


def test_module_of_wide_groups_eager_compiled_and_differentiated():
    """``nn.Conv2d`` of 48-wide groups (the tensor cores) against torch's module in float32:
    eager, under ``torch.compile(fullgraph=True)`` (the op) and its input gradient."""
    torch.manual_seed(3)
    conv = nn.Conv2d(192, 192, 3, stride=2, padding=1, groups=4).to(torch.bfloat16).cuda()
    module = cute_conv.nn.Conv2d.from_torch(conv, activation="relu")
    assert module._tensor_cores_take
    x = torch.randn(2, 192, 17, 17, device="cuda").to(torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    expected = F.relu(conv.float()(x.float()))
    with torch.no_grad():
        for fn in (module, torch.compile(module, fullgraph=True)):
            report = compare_to_reference(fn(x), expected)
            assert report.ok, str(report)
    x32 = x.float().requires_grad_()
    leaf = x.detach().requires_grad_()
    module(leaf).float().sum().backward()
    F.relu(conv.float()(x32)).sum().backward()
    assert compare_to_reference(leaf.grad, x32.grad).ok
    assert module.weight.grad is not None


def test_an_empty_batch_launches_nothing():
    x = torch.zeros(0, 8, 8, 128, device="cuda", dtype=torch.bfloat16)
    flt = torch.zeros(128, 3, 3, 64, device="cuda", dtype=torch.bfloat16)
    out = grouped_conv2d_tensor_cores(x, flt, groups=2, padding=1)
    assert out.shape == (0, 8, 8, 128)


@pytest.mark.parametrize("width", [8, 24, 32, 48, 56, 64, 120])
def test_a_non_finite_input_stays_in_its_group(width):
    """An Inf in group 1's channels makes group 1's outputs non-finite and no other group's,
    as in torch, at every group width: widths of 8 mod 16 (24, 56, 120) included, whose
    last 16-channel MMA step reaches past the group into channels the view leaves out
    (zeros), not into the next group's."""
    groups = 4
    c = width * groups
    x = torch.randn(2, 9, 9, c, device="cuda").bfloat16()
    flt = (torch.randn(c, 3, 3, width, device="cuda") / 8).bfloat16()
    x[0, 4, 4, width + 3] = float("inf")  # a channel of group 1
    out = grouped_conv2d_tensor_cores(x, flt, groups=groups, padding=1)
    ref = F.conv2d(x.permute(0, 3, 1, 2).float(), flt.permute(0, 3, 1, 2).float(), padding=1,
                   groups=groups).permute(0, 2, 3, 1)  # fmt: skip
    ours = [bool(out[..., g * width:(g + 1) * width].isfinite().all()) for g in range(groups)]
    torch_finite = [bool(ref[..., g * width:(g + 1) * width].isfinite().all())
                    for g in range(groups)]  # fmt: skip
    assert torch_finite == [True, False, True, True]
    assert ours == torch_finite


def test_module_of_16_wide_groups_on_both_sides_of_their_bound(monkeypatch):
    """``nn.Conv2d`` of 16-wide groups: a call within ``NARROW_GROUP_MAX_MACS`` on the tensor
    cores, the same call past it on the grouped kernel's path (its filter staged from KRSC)."""
    torch.manual_seed(4)
    conv = nn.Conv2d(128, 128, 3, padding=1, groups=8).to(torch.bfloat16).cuda()
    module = cute_conv.nn.Conv2d.from_torch(conv, activation="relu")
    assert module._tensor_cores_take and module.weight.is_contiguous()
    x = torch.randn(2, 128, 14, 14, device="cuda").to(torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    expected = F.relu(conv.float()(x.float()))
    with torch.no_grad():
        report = compare_to_reference(module(x), expected)
        assert report.ok, str(report)
        monkeypatch.setattr(grouped_tensor_cores, "NARROW_GROUP_MAX_MACS", 0)
        report = compare_to_reference(module(x), expected)
        assert report.ok, str(report)
    assert "staged" in module._derived_cache
