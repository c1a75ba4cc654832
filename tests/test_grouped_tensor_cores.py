"""Grouped convs on the SM90 tensor-core kernel (``Conv2dConfig.groups``,
``cute_conv.grouped_tensor_cores``), on the CPU: the config's limits, the launcher's argument
checks, and the compiled kernel (dense configs compile as before; a grouped one divides its
output tile's N index by the tiles per group to offset its activation tiles' channels)."""

from __future__ import annotations

import re

import pytest
import torch
from cute_conv.kernels.common.epilogue import EpilogueSpec

import cute_conv
from cute_conv import Conv2dConfig
from cute_conv.grouped_tensor_cores import default_tile_n, grouped_conv2d_tensor_cores


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
    assert divisions == [0, 1]  # the tile's group: its N index over the tiles per group
    loads = [len(re.findall(r"cp\.async\.bulk\.tensor\.4d\S*im2col", k.ptx)) for k in (dense, grouped)]
    assert loads[0] == loads[1] > 0


def inputs(n=1, h=8, w=8, c=64, k=64, r=3, groups=4, device="cpu"):
    x = torch.zeros(n, h, w, c, dtype=torch.bfloat16, device=device)
    flt = torch.zeros(k, r, r, c // groups, dtype=torch.bfloat16, device=device)
    return x, flt


@pytest.mark.parametrize(
    "args,kwargs,error,match",
    [(inputs(), dict(groups=1), ValueError, "groups must be an int >= 2"),
     (inputs(), dict(groups=True), ValueError, "groups must be an int >= 2"),
     (inputs(), dict(groups=4), ValueError, "must be CUDA tensors"),
     ((torch.zeros(1, 8, 8, 64), inputs()[1]), dict(groups=4), ValueError, "bfloat16/float16"),
     ((inputs()[0], torch.zeros(64, 3, 3, 8, dtype=torch.bfloat16)), dict(groups=4), ValueError,
      "must be CUDA tensors"),
     ((inputs()[0], "w"), dict(groups=4), TypeError, "filter must be a torch.Tensor")],
    ids=["one-group", "bool", "cpu", "fp32", "cpu-filter", "not-a-tensor"],
)  # fmt: skip
def test_bad_arguments_are_refused_before_any_launch(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        grouped_conv2d_tensor_cores(*args, **kwargs)


@pytest.mark.parametrize("group_out,tile_n", [(48, 48), (112, 112), (128, 128), (256, 256),
                                              (512, 256), (96, 96), (1008 // 21, 48)])  # fmt: skip
def test_the_default_tile_is_the_widest_that_divides_a_group(group_out, tile_n):
    assert default_tile_n(group_out) == tile_n


@pytest.mark.parametrize("group_out", [56, 120, 24, 8])
def test_groups_no_tile_divides_are_refused(group_out):
    with pytest.raises(ValueError, match=f"K / groups = {group_out}: no tile width divides it"):
        default_tile_n(group_out)
