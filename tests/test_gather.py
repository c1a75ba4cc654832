"""The gathered activation on the CPU: its config rules and errors, the heuristic's choice,
the staging that remains (the filter alone is padded), the role table and the compiled PTX
(the activation read by plain loads, no im2col TMA, a proxy fence before each arrive)."""

from __future__ import annotations

import re

import pytest
import torch
from cute_conv.kernels.sm90.pipeline_checks import sm90_barrier_specs

import cute_conv
from cute_conv import Conv2dConfig
from cute_conv.config import (
    MAX_GATHER_ELEMS_PER_SM,
    gather_elems_per_sm,
    gathered_config,
    schedule_shape,
    with_gathered_activation,
)
from cute_conv.problem import Conv2dProblemShape
from cute_conv.staging import (
    kernel_problem_for,
    pads_channels_only,
    run_staged,
    staging_plan,
)


def conv(n, h, c, k, r, **geom):
    return Conv2dProblemShape.from_shapes((n, h, h, c), (k, r, r, c), **geom)


@pytest.mark.parametrize(
    "fields",
    [dict(cluster_m=2), dict(cluster_n=2), dict(stream_k=True), dict(dynamic_schedule=True),
     dict(pingpong=True), dict(tile_w=64, halo_h=4)],
    ids=lambda f: next(iter(f)),
)  # fmt: skip
def test_gather_a_excludes_the_other_schedules(fields):
    with pytest.raises(ValueError, match="gather_a needs cluster_m=cluster_n=1"):
        Conv2dConfig(gather_a=True, **fields)


def test_gather_a_needs_16_bit_inputs():
    config = Conv2dConfig(tile_k=128, gather_a=True)
    with pytest.raises(ValueError, match="gather_a needs 16-bit inputs"):
        cute_conv.compile_kernel("sm_90a", act_dtype="float8_e4m3fn", config=config)


def test_gather_a_is_typed():
    with pytest.raises(TypeError, match="gather_a"):
        Conv2dConfig(gather_a=1)


def test_pads_channels_only():
    assert pads_channels_only(conv(1, 16, 12, 64, 3, padding=1))
    assert not pads_channels_only(conv(1, 16, 16, 64, 3, padding=1))  # no staging at all
    assert not pads_channels_only(conv(1, 224, 3, 64, 7, stride=2, padding=3))  # space-to-depth
    assert not pads_channels_only(conv(1, 64, 3, 64, 3, padding=1))  # im2col columns
    assert pads_channels_only(conv(1, 16, 12, 64, 3, padding=1), element_bytes=1)  # fp8: 16


def test_a_gathered_kernel_problem_keeps_c_and_pads_the_filter():
    problem = conv(2, 16, 12, 40, 3, padding=1)
    padded, gathered = kernel_problem_for(problem), kernel_problem_for(problem, gathered=True)
    assert padded.C == 16 and gathered is problem
    plan = staging_plan(problem, gathered)
    assert plan.filter_channels == 16 and plan.stages_filter and plan.stages_anything
    aligned = conv(2, 16, 16, 40, 3, padding=1)
    assert not staging_plan(aligned, kernel_problem_for(aligned, gathered=True)).stages_anything


def test_run_staged_passes_a_gathered_activation_as_it_is():
    problem = conv(1, 8, 5, 8, 3, padding=1)
    plan = staging_plan(problem, kernel_problem_for(problem, gathered=True))
    x = torch.randn(problem.activation_shape)
    flt = torch.randn(problem.filter_shape)
    seen = {}

    def launch(x_k, flt_k, out, source, bias, scale):
        seen.update(x=x_k, flt=flt_k)

    out = torch.empty(problem.output_shape)
    run_staged(launch, plan, x, flt, out, None, None, None)
    assert seen["x"] is x
    assert seen["flt"].shape == (8, 3, 3, 8)
    assert torch.equal(seen["flt"][..., :5], flt) and not seen["flt"][..., 5:].any()


def small_and_large():
    return conv(1, 16, 16, 64, 1), conv(64, 128, 16, 64, 3, padding=1)


def test_gathered_config_takes_small_convs_only():
    small, large = small_and_large()
    base = Conv2dConfig(tile_n=64, tile_k=16, cluster_m=2)
    chosen = gathered_config(base, small, 132)
    assert chosen.gather_a and chosen.cluster_shape_mn == (1, 1)
    assert chosen.tile_shape_mnk == base.tile_shape_mnk
    assert gathered_config(base, large, 132) == base
    assert gathered_config(base, small, 132, element_bytes=1) == base


def test_gathered_config_threshold_is_elements_per_sm():
    config = Conv2dConfig(tile_n=64, tile_k=16)
    for n in range(1, 40):
        problem = conv(n, 16, 16, 64, 3, padding=1)
        tiles, k_tiles = schedule_shape(problem, 128, 64, 16)
        elems = -(-tiles // 132) * k_tiles * 128 * 16
        assert gather_elems_per_sm(config, problem) == elems
        assert gathered_config(config, problem).gather_a == (elems <= MAX_GATHER_ELEMS_PER_SM)


def test_with_gathered_activation_turns_off_what_it_excludes():
    config = Conv2dConfig(tile_m=256, tile_n=64, dynamic_schedule=True, tile_w=64, halo_h=6)
    gathered = with_gathered_activation(config)
    assert gathered == Conv2dConfig(tile_m=256, tile_n=64, gather_a=True)
    assert with_gathered_activation(Conv2dConfig(pingpong=True)) == Conv2dConfig(gather_a=True)


def test_gathered_config_checks_its_arguments():
    small, _ = small_and_large()
    with pytest.raises(TypeError, match="config must be a Conv2dConfig"):
        gathered_config(cute_conv.Conv2dConfigSm100(), small)
    with pytest.raises(ValueError, match="num_sms"):
        gathered_config(Conv2dConfig(), small, 0)
    with pytest.raises(ValueError, match="element_bytes"):
        gathered_config(Conv2dConfig(), small, 132, element_bytes=4)


def test_the_gather_ring_in_the_role_table():
    specs = sm90_barrier_specs(Conv2dConfig(gather_a=True), has_residual=False)
    assert specs["gather.full"].count == 64
    assert specs["gather.empty"].count == 256  # every thread of the two consumer warpgroups
    assert "gather.full" not in sm90_barrier_specs(Conv2dConfig(), has_residual=False)


@pytest.mark.parametrize(
    "config,epilogue",
    [(Conv2dConfig(tile_n=64, tile_k=16, gather_a=True), cute_conv.EpilogueSpec()),
     (Conv2dConfig(tile_m=256, tile_n=32, tile_k=32, gather_a=True),
      cute_conv.EpilogueSpec(has_residual=True, has_bias=True, activation="relu")),
     (Conv2dConfig(tile_n=128, gather_a=True), cute_conv.EpilogueSpec(store_by_threads=True))],
    ids=["plain", "residual", "thread-store"],
)  # fmt: skip
def test_a_gathered_kernel_loads_the_activation_by_threads(config, epilogue):
    kernel = cute_conv.compile_kernel("sm_90a", config=config, epilogue=epilogue)
    ptx = kernel.ptx
    assert "im2col" not in ptx  # the filter alone comes by TMA (tiled)
    assert re.search(r"cp\.async\.bulk\.tensor\.4d\.shared::\w+\.global\.tile", ptx)
    assert re.search(r"ld\.global(\.\w+)*\.b16|ld\.global(\.\w+)*\.u16", ptx)
    assert "fence.proxy.async.shared::cta" in ptx
    plain = cute_conv.compile_kernel("sm_90a", config=Conv2dConfig(), epilogue=epilogue)
    assert "im2col" in plain.ptx
