"""Grouped convs on the SM90 tensor-core kernel (``Conv2dConfig.groups``,
``cute_conv.grouped_tensor_cores``), on the CPU: the config's limits, the launcher's argument
checks, and the compiled kernel (dense configs compile as before; a grouped one divides its
output tile's N index by the tiles per group to offset its activation tiles' channels)."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from cute_conv.kernels.common.epilogue import EpilogueSpec
from torch._subclasses.fake_tensor import FakeTensorMode

import cute_conv
from cute_conv import Conv2dConfig, grouped_tensor_cores
from cute_conv.dispatch import out_overlaps_inputs
from cute_conv.grouped_tensor_cores import (
    _default_config,
    default_tile_k,
    default_tile_n,
    grouped_conv2d_tensor_cores,
    tensor_cores_pay,
    tensor_cores_take,
)
from cute_conv.staging import span_bytes
from tests.test_autograd import reference_forward_on_cpu
from tests.test_nn import kernel_calls  # noqa: F401  (a fixture)


@pytest.mark.parametrize(
    "kwargs,match",
    [(dict(groups=0), "groups must be >= 1"),
     (dict(groups=2, cluster_n=2), "clusters of one CTA along N"),
     (dict(groups=2, gather=True, tile_n=32, tile_k=16), "no gather"),
     (dict(groups=2, stream_k=True), "stream_k")],
    ids=["zero", "cluster-n", "gather", "stream-k"],
)  # fmt: skip
def test_the_config_refuses_what_a_grouped_tile_cannot_take(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Conv2dConfig(**kwargs)
    Conv2dConfig(groups=4, cluster_m=2)  # clusters along M share one group's filter tile


def test_a_grouped_kernel_offsets_its_activation_tiles_by_group():
    spec = EpilogueSpec(has_bias=True, activation="relu", vector_dtype="bfloat16")
    dense = cute_conv.compile_kernel("sm_90a", config=Conv2dConfig(tile_n=64), epilogue=spec)
    grouped = cute_conv.compile_kernel(
        "sm_90a", config=Conv2dConfig(tile_n=64, groups=4), epilogue=spec
    )
    divisions = [len(re.findall(r"\bdiv\.s32", k.ptx)) for k in (dense, grouped)]
    assert divisions[0] == 0 and divisions[1] > 0  # the tile's group: N index / tiles a group
    # The grouped activation is a 3-d conv's view (``activation_im2col_view``): its im2col
    # box is 5-d, the group as the batch, so a k-tile's channels past the group are zeros.
    loads = [
        [len(re.findall(rf"cp\.async\.bulk\.tensor\.{rank}d\S*im2col", k.ptx)) for rank in (4, 5)]
        for k in (dense, grouped)
    ]
    assert loads[0][0] == loads[1][1] > 0 and loads[0][1] == loads[1][0] == 0
    # The grouped filter's TMA box is 5-d ((k in the group, group), (c, s, r)) and the
    # output's 3-d ((pixel), (k in the group, group)): a group's columns past its last are
    # outside both views.
    filter_loads = [len(re.findall(r"cp\.async\.bulk\.tensor\.5d\S*tile", k.ptx)) for k in (dense, grouped)]
    stores = [len(re.findall(r"cp\.async\.bulk\.tensor\.3d\.global\.shared", k.ptx)) for k in (dense, grouped)]
    assert filter_loads[0] == 0 and filter_loads[1] > 0
    assert stores[0] == 0 and stores[1] > 0


def inputs(n=1, h=8, w=8, c=128, k=128, r=3, groups=2, device="cpu"):
    x = torch.zeros(n, h, w, c, dtype=torch.bfloat16, device=device)
    flt = torch.zeros(k, r, r, c // groups, dtype=torch.bfloat16, device=device)
    return x, flt


@pytest.mark.parametrize(
    "args,kwargs,error,match",
    [(inputs(), dict(groups=1), ValueError, "groups must be >= 2, got 1"),
     (inputs(), dict(groups=True), TypeError, "groups must be an int"),
     (inputs(), dict(groups=2), ValueError, "activation is on cpu"),
     ((torch.zeros(1, 8, 8, 128), inputs()[1]), dict(groups=2), TypeError, "float32"),
     ((inputs()[0], "w"), dict(groups=2), TypeError, "filter must be a torch.Tensor"),
     (inputs(groups=4), dict(groups=2), ValueError, r"takes \[K, R, S, 64\]"),
     (inputs(c=96, groups=8), dict(groups=8), ValueError, "C / groups = 12: a multiple of 8"),
     (inputs(k=96, groups=4), dict(groups=4, config=Conv2dConfig(tile_n=32, groups=2)),
      ValueError, "config has groups=2"),
     (inputs(k=80, groups=4), dict(groups=4), ValueError,
      "K / groups = 20: a multiple of 8"),
     (inputs(), dict(groups=2, stride=9), ValueError, "stride"),
     (inputs(), dict(groups=2, padding=17), ValueError, "padding top=17 exceeds the 3-d im2col"),
     (inputs(), dict(groups=2, padding=16, dilation=16), ValueError,
      r"spans \(R-1\)\*dilation = 32 height positions; the 3-d im2col"),
     (inputs(), dict(groups=2, activation="tanhh"), ValueError, "tanhh"),
     (inputs(), dict(groups=2, bias=torch.zeros(32)), ValueError, "bias"),
     (inputs(), dict(groups=2, out=torch.zeros(1, 6, 6, 128)), TypeError, "out")],
    ids=["one-group", "bool", "cpu", "fp32", "not-a-tensor", "filter-channels", "group-in-12",
         "config-groups", "group-out-20", "stride", "pad-3d", "span-3d", "activation", "bias",
         "out-dtype"],
)  # fmt: skip
def test_bad_arguments_are_refused_before_any_launch(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        grouped_conv2d_tensor_cores(*args, **kwargs)


def test_an_out_that_overlaps_the_activation_is_refused():
    # Validation passes on the meta device up to the device check; the overlap is checked
    # after the plan, which a CPU call does not reach: the check itself on real pointers.
    x = torch.zeros(1, 8, 8, 128, dtype=torch.bfloat16)
    assert out_overlaps_inputs(x.data_ptr(), x.data_ptr(), 0, 0, (span_bytes(x), 0, 8))


@pytest.mark.parametrize(
    "channels,groups,takes",
    [((192, 192), 4, True), ((1008, 1008), 21, True), ((256, 512), 2, True),
     ((112, 112), 2, True), ((240, 240), 2, True), ((96, 96), 4, True),
     ((128, 128), 4, True), ((64, 64), 4, True), ((64, 64), 8, False),
     ((256, 256), 1, False), ((100, 100), 2, False), ((96, 40), 2, False),
     ((80, 80), 4, False)],
    ids=["48", "48x21", "k2x", "56", "120", "24", "32", "16", "8", "dense", "50",
         "group-out-20", "20"],
)  # fmt: skip
def test_which_groups_the_tensor_cores_take(channels, groups, takes):
    assert tensor_cores_take(*channels, groups) is takes


def test_narrow_groups_pay_on_the_tensor_cores_up_to_their_bound():
    bound = grouped_tensor_cores.NARROW_GROUP_MAX_MACS
    assert tensor_cores_pay(16, bound) and not tensor_cores_pay(16, bound + 1)
    assert tensor_cores_pay(24, 100 * bound)


def test_the_op_traces_to_the_output_shape_and_refuses_bad_groups():
    with FakeTensorMode():
        x = torch.empty(2, 14, 14, 192, dtype=torch.bfloat16, device="cuda")
        flt = torch.empty(192, 3, 3, 48, dtype=torch.bfloat16, device="cuda")
        y = torch.ops.cute_conv.grouped_conv2d_tensor_cores(
            x, flt, None, None, 4, [2, 2], [1, 1, 1, 1], [1, 1], "relu"
        )
        assert y.shape == (2, 7, 7, 192) and y.dtype == torch.bfloat16
        with pytest.raises(ValueError, match="a conv of 192 channels in 2 groups"):
            torch.ops.cute_conv.grouped_conv2d_tensor_cores(
                x, flt, None, None, 2, [1, 1], [1, 1, 1, 1], [1, 1], None
            )


def test_gradients_are_torch_grouped_conv_s():
    """Through the op and its registered autograd (forward: the float64 reference on a CPU),
    every input's gradient matches torch's own autograd of the grouped conv."""
    groups, c, k = 2, 96, 96
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 7, 6, c, dtype=torch.float64, generator=gen)
    flt = torch.randn(k, 3, 3, c // groups, dtype=torch.float64, generator=gen) / 8
    bias = torch.randn(k, dtype=torch.float64, generator=gen)
    scale = torch.rand(k, dtype=torch.float64, generator=gen) + 0.5
    grad_out = torch.randn(2, 4, 3, k, dtype=torch.float64, generator=gen)

    def ours(x, flt, bias, scale):
        return grouped_conv2d_tensor_cores(x, flt, groups=groups, stride=2, padding=1,
                                           bias=bias, scale=scale, activation="silu")  # fmt: skip

    def torchs(x, flt, bias, scale):
        z = F.conv2d(x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2), stride=2, padding=1,
                     groups=groups)  # fmt: skip
        return F.silu(z.permute(0, 2, 3, 1) * scale + bias)

    grads = []
    for fn in (ours, torchs):
        leaves = [t.clone().requires_grad_() for t in (x, flt, bias, scale)]
        with reference_forward_on_cpu():
            fn(*leaves).backward(grad_out)
        grads.append([leaf.grad for leaf in leaves])
    for name, mine, theirs in zip(("x", "filter", "bias", "scale"), *grads, strict=True):
        torch.testing.assert_close(mine, theirs, msg=name)


def test_nn_conv2d_runs_wide_groups_on_the_tensor_cores(kernel_calls):  # noqa: F811
    """A module of 48-wide groups keeps a contiguous KRSC filter and sends plain calls to
    the tensor-core launcher (here its CPU stand-in), identities to the grouped kernel's
    path; 8-wide groups keep the grouped kernel's staged filter."""
    torch.manual_seed(2)
    module = cute_conv.nn.Conv2d(96, 96, 3, padding=1, groups=2, activation="relu").eval()
    assert module._tensor_cores_take and module.weight.is_contiguous()
    with torch.no_grad():
        module.scale = torch.rand(96) + 0.5
    x = torch.randn(2, 96, 6, 5).to(torch.bfloat16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        y = module(x)
    ((x_nhwc, flt, _),) = kernel_calls
    assert flt is module.weight and x_nhwc.data_ptr() == x.data_ptr()
    ref = F.relu(F.conv2d(x.float(), module.weight.float().permute(0, 3, 1, 2), padding=1,
                          groups=2) * module.scale.view(-1, 1, 1) + module.bias.view(-1, 1, 1))  # fmt: skip
    torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=1e-2)
    small = x[:1, :, :3, :3]  # within grouped_rule's bound for the grouped kernel
    with torch.no_grad():
        module(small, identity=torch.zeros(1, 96, 3, 3, dtype=torch.bfloat16))
    assert len(kernel_calls) == 2 and kernel_calls[-1][2] is not None
    assert kernel_calls[-1][1].shape == (3, 3, 48, 96)  # the grouped kernel's staged filter
    narrow = cute_conv.nn.Conv2d(64, 64, 3, groups=8)  # 8 channels a group
    assert not narrow._tensor_cores_take and not narrow.weight.is_contiguous()


def test_nn_conv2d_runs_16_wide_groups_on_the_tensor_cores_up_to_their_bound(
    kernel_calls, monkeypatch  # noqa: F811
):
    """A module of 16-wide groups keeps a contiguous KRSC filter; a call within
    ``NARROW_GROUP_MAX_MACS`` runs on the tensor cores, one past it on the grouped kernel's
    path, its filter staged once from KRSC."""
    torch.manual_seed(3)
    module = cute_conv.nn.Conv2d(64, 64, 3, padding=1, groups=4, activation="relu").eval()
    assert module._tensor_cores_take and module.weight.is_contiguous()
    x = torch.randn(1, 64, 5, 6).to(torch.bfloat16).to(memory_format=torch.channels_last)
    ref = F.relu(F.conv2d(x.float(), module.weight.float().permute(0, 3, 1, 2), padding=1,
                          groups=4) + module.bias.view(-1, 1, 1))  # fmt: skip
    macs = 1 * 5 * 6 * 64 * 9 * 16
    with torch.no_grad():
        y = module(x)
    assert kernel_calls[-1][1] is module.weight
    torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=1e-2)
    monkeypatch.setattr(grouped_tensor_cores, "NARROW_GROUP_MAX_MACS", macs - 1)
    with torch.no_grad():
        y = module(x)
        module(x)
    assert len(kernel_calls) == 3
    assert kernel_calls[-1][1].shape == (3, 3, 16, 64)  # the grouped kernel's staged filter
    assert kernel_calls[-1][1] is kernel_calls[-2][1]  # staged once
    torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=1e-2)


def test_nn_conv2d_keeps_wide_groups_off_the_tensor_cores_past_their_limits():
    assert not cute_conv.nn.Conv2d(96, 96, 3, stride=9, groups=2)._tensor_cores_take
    assert cute_conv.nn.Conv2d(96, 96, 3, stride=8, groups=2)._tensor_cores_take
    # The 3-d im2col view's 5-bit fields (validation.IM2COL_3D), within the dense 4-d limits.
    assert not cute_conv.nn.Conv2d(96, 96, 3, padding=16, dilation=16, groups=2)._tensor_cores_take
    assert cute_conv.nn.Conv2d(96, 96, 3, padding=15, dilation=15, groups=2)._tensor_cores_take
    assert not cute_conv.nn.Conv2d(96, 96, 3, padding=17, groups=2)._tensor_cores_take


@pytest.mark.parametrize(
    "group_out,tile_n",
    [(48, 48), (112, 112), (128, 128), (256, 256), (512, 256), (96, 96), (1008 // 21, 48),
     (56, 64), (120, 128), (168, 176), (232, 240), (24, 32), (8, 32), (264, 144)],
)  # fmt: skip
def test_the_default_tile_leaves_the_fewest_columns_past_a_group(group_out, tile_n):
    """The widest that divides the group where one does, else the fewest padded columns."""
    assert default_tile_n(group_out) == tile_n


@pytest.mark.parametrize(
    "n,hw,k,groups,tile_m",
    [(1, 14, 896, 7, 64), (8, 14, 896, 7, 128), (32, 14, 896, 7, 128),
     (1, 7, 3024, 27, 64), (8, 7, 3024, 27, 128), (1, 28, 192, 4, 64), (8, 28, 192, 4, 128),
     (32, 28, 192, 4, 256), (1, 33, 448, 8, 128), (1, 31, 448, 8, 64), (8, 28, 448, 8, 256),
     (8, 14, 896, 16, 128), (32, 14, 336, 14, 256), (32, 14, 512, 32, 256),
     (8, 7, 512, 32, 128), (8, 14, 320, 20, 128), (1, 14, 512, 32, 64)],
    ids=["x16-b1", "x16-b8", "x16-b32-128-wide", "y16-b1", "y16-b8", "x3-b1", "x3-b8",
         "x3-b32", "56-72-tiles", "56-64-tiles", "y8-b8-full-wave", "y8-b8-short-of-a-wave",
         "24-wide-b32-narrow-k", "16-wide-b32-narrow-k", "16-wide-b8-half-a-wave",
         "16-wide-b8-short-of-its-waves", "16-wide-b1"],
)  # fmt: skip
def test_the_default_config_takes_rows_by_the_tiles_wave(n, hw, k, groups, tile_m):
    """256 rows where tiles narrower than 128 channels fill the SMs at least once (1.4 times
    on narrow k-tiles: 140 tiles of 132 take 128 rows), 64 where 128-row tiles fill at most
    half of them."""
    problem = cute_conv.Conv2dProblemShape.from_shapes(
        (n, hw, hw, k), (k, 3, 3, k), stride=1, padding=1
    )
    config = _default_config(problem, groups, num_sms=132)
    assert (config.tile_m, config.tile_n, config.groups) == (
        tile_m, default_tile_n(k // groups), groups
    )


@pytest.mark.parametrize(
    "group_in,tile_n,tile_k",
    [(16, 32, 16), (24, 32, 32), (32, 32, 32), (40, 64, 64), (64, 64, 64), (448, 128, 64),
     (16, 48, 32), (32, 80, 32), (56, 48, 64)],
)  # fmt: skip
def test_the_default_k_tile_is_the_narrowest_that_covers_the_group(group_in, tile_n, tile_k):
    """At most 64 channels; half-step tile widths (48, 80, ...) keep 64-byte k-tiles."""
    assert default_tile_k(group_in, tile_n) == tile_k


@pytest.mark.parametrize(
    "call,error,match",
    [(lambda: default_tile_k(0, 32), ValueError, "group_in must be >= 1, got 0"),
     (lambda: default_tile_k(16.0, 32), TypeError, "group_in must be an int"),
     (lambda: default_tile_k(16, 40), ValueError, "tile_n must be one of"),
     (lambda: default_tile_n(-8), ValueError, "group_out must be >= 1, got -8"),
     (lambda: default_tile_n(True), TypeError, "group_out must be an int")],
    ids=["zero-group", "float-group", "tile-n", "negative-group-out", "bool-group-out"],
)  # fmt: skip
def test_the_default_tiles_refuse_bad_widths(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize(
    "group_in,tile_k", [(16, 16), (32, 32), (24, 32), (48, 64), (64, 64), (128, 64)]
)
def test_the_default_config_takes_the_groups_k_tile(group_in, tile_k):
    problem = cute_conv.Conv2dProblemShape.from_shapes(
        (8, 28, 28, 8 * group_in), (8 * group_in, 3, 3, 8 * group_in), stride=1, padding=1
    )
    assert _default_config(problem, 8, num_sms=132).tile_k == tile_k


@pytest.mark.parametrize(
    "options",
    [dict(tile_k=16), dict(tile_k=32), dict(tile_k=16, pingpong=True),
     dict(tile_k=16, dynamic_schedule=True)],
    ids=["k16", "k32", "k16-pingpong", "k16-dynamic"],
)  # fmt: skip
def test_a_grouped_kernel_compiles_at_a_narrow_groups_k_tile(options):
    """One k-tile a filter tap: its im2col loads are boxes of ``tile_k`` channels; ping-pong
    consumers and a tile counter take grouped tiles too (timed beside the static schedule by
    ``grouped_tensor_core_tiles.py``)."""
    config = Conv2dConfig(tile_m=128, tile_n=32, groups=8, **options)
    kernel = cute_conv.compile_kernel("sm_90a", config=config, epilogue=EpilogueSpec())
    assert re.search(r"cp\.async\.bulk\.tensor\.\dd\S*im2col", kernel.ptx)
    assert re.search(r"wgmma\.mma_async\S*\.bf16", kernel.ptx)


@pytest.mark.parametrize("arch,runs", [("sm_90a", True), ("sm_100a", False)])
def test_only_sm90_devices_run_groups_on_the_tensor_cores(monkeypatch, arch, runs):
    """The SM100 kernel takes no groups: nn.Conv2d keeps the grouped kernel there."""
    monkeypatch.setattr(grouped_tensor_cores, "device_arch", lambda index: arch)
    assert grouped_tensor_cores.runs_on_tensor_cores(torch.device("cuda", 0)) is runs
    assert not grouped_tensor_cores.runs_on_tensor_cores(torch.device("cpu"))
