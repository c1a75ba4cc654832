"""The CUDA-core kernel of few-row 1x1 convs on the CPU: its config's checks, the rule that
picks it, the checks of a config against a call, and its compiled PTX (vector loads, no
shared memory, warp shuffles, the amax atomic, PDL)."""

from __future__ import annotations

import re

import pytest
from cute_conv.kernels.common.epilogue import EpilogueSpec
from cute_conv.kernels.common.pointwise_gemv import PointwiseGemv

from cute_conv import Conv2dConfig, Conv2dProblemShape, PointwiseGemvConfig, compile_kernel
from cute_conv.arch import check_config_type
from cute_conv.gemv_rule import (
    GEMV_MAX_CTAS,
    GEMV_MAX_MACS,
    GEMV_MAX_ROWS,
    check_pointwise_gemv_fits,
    cta_count,
    pointwise_gemv_config,
)
from cute_conv.ops import config_from_str, config_to_str
from cute_conv.untuned import heuristic_config


def conv(n, h, w, c, k, r=1, s=1, **geom) -> Conv2dProblemShape:
    return Conv2dProblemShape.from_shapes((n, h, w, c), (k, r, s, c), **geom)


# ---- the config ----


@pytest.mark.parametrize(
    "fields,error",
    [(dict(vector=3), ValueError), (dict(rows=16), ValueError),
     (dict(channels_per_warp=3), ValueError), (dict(unroll=8), ValueError),
     (dict(rows=8, channels_per_warp=8), ValueError), (dict(vector=8.0), TypeError),
     (dict(rows=True), TypeError)],
    ids=["vector", "rows", "per-warp", "unroll", "sums", "float", "bool"],
)  # fmt: skip
def test_config_rejects_shapes_the_kernel_has_not(fields, error):
    with pytest.raises(error, match=next(iter(fields))):
        PointwiseGemvConfig(**fields)


def test_config_counts_a_lanes_sums():
    assert PointwiseGemvConfig(rows=4, channels_per_warp=8).sums == 32


def test_a_gemv_config_is_a_call_config_and_survives_the_ops_string():
    config = PointwiseGemvConfig(vector=2, rows=4, channels_per_warp=1, unroll=4)
    check_config_type(config)  # does not raise
    assert config_from_str(config_to_str(config)) == config
    with pytest.raises(TypeError, match="PointwiseGemvConfig"):
        check_config_type("gemv")


# ---- the rule ----


@pytest.mark.parametrize(
    "problem,vector,rows",
    [(conv(1, 1, 1, 222, 888), 2, 1), (conv(8, 1, 1, 888, 222), 8, 1),
     (conv(8, 1, 1, 30, 120), 2, 4), (conv(32, 1, 1, 84, 12), 4, 1),
     (conv(1, 16, 6, 300, 100, stride=2), 4, 1), (conv(2, 1, 1, 30, 336), 2, 1)],
    ids=["m1-v2", "m8-v8", "m8-v2-rows", "m32-v4", "strided", "m2-v2"],
)  # fmt: skip
def test_the_rule_takes_few_row_1x1s(problem, vector, rows):
    config = pointwise_gemv_config(problem, 2, 2)
    assert config == PointwiseGemvConfig(vector=vector, rows=rows)
    assert heuristic_config(problem, 132) == config
    assert isinstance(heuristic_config(problem, 132, cuda_cores=False), Conv2dConfig)


@pytest.mark.parametrize(
    "problem,element_bytes,out_bytes",
    [(conv(1, 1, 1, 64, 64), 1, 2), (conv(1, 1, 1, 64, 64), 2, 1),
     (conv(1, 3, 3, 64, 64, padding=1), 2, 2), (conv(1, 3, 3, 64, 64, 3, 3), 2, 2),
     (conv(1, 1, 1, 13, 64), 2, 2), (conv(1, 1, GEMV_MAX_ROWS + 1, 8, 8), 2, 2),
     (conv(32, 1, 1, 222, 888), 2, 2), (conv(1, 7, 7, 2048, 1024), 2, 2),
     (conv(32, 1, 1, 64, 1024), 2, 2)],
    ids=["fp8-in", "fp8-out", "padded", "3x3", "odd-c", "rows", "macs", "m49", "ctas"],
)  # fmt: skip
def test_the_rule_leaves_the_rest_to_the_tensor_cores(problem, element_bytes, out_bytes):
    assert pointwise_gemv_config(problem, element_bytes, out_bytes) is None


def test_the_rule_bounds_the_multiply_adds_and_the_ctas():
    k = GEMV_MAX_MACS // (8 * 1024)
    assert pointwise_gemv_config(conv(8, 1, 1, 1024, k), 2, 2) is not None
    assert pointwise_gemv_config(conv(8, 1, 1, 1024, k + 1), 2, 2) is None
    # 32 rows of 32 CTAs (8 channels each): the bound; one more channel is a CTA more per row.
    at_bound = conv(32, 1, 1, 16, 256)
    assert cta_count(PointwiseGemvConfig(vector=8), at_bound) == GEMV_MAX_CTAS
    assert pointwise_gemv_config(at_bound, 2, 2) is not None
    assert pointwise_gemv_config(conv(32, 1, 1, 16, 257), 2, 2) is None


@pytest.mark.parametrize(
    "problem,element_bytes,out_bytes,match",
    [(conv(1, 1, 1, 64, 64), 1, 2, "16-bit inputs"), (conv(1, 1, 1, 64, 64), 2, 1, "16-bit inputs"),
     (conv(1, 3, 3, 64, 64, 3, 3), 2, 2, "1x1 convs"),
     (conv(1, 3, 3, 64, 64, padding=1), 2, 2, "padding"),
     (conv(1, 1, 1, 36, 64), 2, 2, r"C=36 must be a multiple of it \(vector=4 fits\)"),
     (conv(1, 256, 256, 64, 64), 2, 2, "GEMM M=65536 needs 65536, past the grid's 65535")],
    ids=["fp8-in", "fp8-out", "3x3", "padded", "vector", "grid"],
)  # fmt: skip
def test_a_config_that_cannot_run_the_call_is_refused(problem, element_bytes, out_bytes, match):
    with pytest.raises(ValueError, match=match):
        check_pointwise_gemv_fits(PointwiseGemvConfig(vector=8), problem, element_bytes, out_bytes)


def test_check_config_fits_points_a_gemv_config_to_its_own_check():
    from cute_conv import check_config_fits

    with pytest.raises(TypeError, match="check_pointwise_gemv_fits checks those"):
        check_config_fits(PointwiseGemvConfig(), conv(1, 1, 1, 64, 64))


# ---- the kernel ----


def ptx_of(config: PointwiseGemvConfig, epilogue: EpilogueSpec | None = None, **dtypes) -> str:
    return compile_kernel("sm_90a", config=config, epilogue=epilogue, **dtypes).ptx


@pytest.mark.parametrize("vector,load", [(8, "v4.b32"), (4, "v2.b32"), (2, "b32"), (1, "b16")])
def test_each_lane_loads_whole_vectors(vector, load):
    """Each unrolled step's loads, one per operand row and vector, all in flight together."""
    from tests.sass import loads_waiting_on_loads, sass_of_ptx

    config = PointwiseGemvConfig(vector=vector, rows=2, channels_per_warp=2, unroll=2)
    ptx = ptx_of(config)
    loads = re.findall(r"ld\.global\.(\S+)\s", ptx)
    # (2 rows + 2 channels) x 2 unrolled vectors, each one load of the vector's width
    assert loads.count(load) == 8, loads
    if vector > 1:  # 2-byte loads: ptxas's remainder block reuses the main loop's registers
        assert loads_waiting_on_loads(sass_of_ptx(ptx, "sm_90a")) == 0


def test_the_kernel_has_no_shared_memory_and_reduces_by_shuffles():
    config = PointwiseGemvConfig(rows=2, channels_per_warp=4)
    kernel = compile_kernel("sm_90a", config=config)
    assert kernel.smem_bytes == 0
    assert ".shared" not in kernel.ptx and "bar.sync" not in kernel.ptx
    assert kernel.ptx.count("shfl.sync.bfly") == 5 * config.sums  # 32 lanes: 5 steps a sum
    assert "griddepcontrol.wait" in kernel.ptx  # launched with PDL, waits before its loads


def test_the_amax_is_one_atomic_per_warp():
    plain = ptx_of(PointwiseGemvConfig())
    amax = ptx_of(PointwiseGemvConfig(), EpilogueSpec(has_amax=True))
    assert "atom.global" not in plain
    assert len(re.findall(r"atom\.global\S*\.max", amax)) == 1


@pytest.mark.parametrize(
    "dtypes,error",
    [(dict(act_dtype="float8_e4m3fn"), TypeError),
     (dict(act_dtype="bfloat16", out_dtype="float8_e4m3fn"), TypeError)],
    ids=["fp8-in", "fp8-out"],
)  # fmt: skip
def test_the_kernel_refuses_fp8(dtypes, error):
    with pytest.raises(error, match="PointwiseGemv"):
        compile_kernel("sm_90a", config=PointwiseGemvConfig(), **dtypes)


def test_the_kernel_has_no_bulk_tile_store():
    spec = EpilogueSpec(store_by_threads=True, bulk_tile_store=True)
    with pytest.raises(ValueError, match="bulk_tile_store"):
        compile_kernel("sm_90a", config=PointwiseGemvConfig(), epilogue=spec)


def test_the_kernel_builds_for_blackwell_too():
    assert ".target sm_100a" in compile_kernel("sm_100a", config=PointwiseGemvConfig()).ptx


def test_the_kernel_class_takes_only_its_config():
    import cutlass

    with pytest.raises(TypeError, match="PointwiseGemvConfig"):
        PointwiseGemv(cutlass.BFloat16, cutlass.BFloat16, cutlass.BFloat16, Conv2dConfig())


# ---- the call's plan (no GPU: the device queries stand in) ----


@pytest.fixture
def plan_on_a_stand_in_h200(monkeypatch):
    import torch

    import cute_conv.dispatch as dispatch

    monkeypatch.setattr(dispatch, "validate_device", lambda *args, **kwargs: "sm_90a")
    monkeypatch.setattr(dispatch, "sm_count", lambda index: 132)
    monkeypatch.setattr(dispatch, "resident_clusters", lambda index, size: 132 // size)
    monkeypatch.setattr(dispatch, "stored_or_tuned_config", lambda *args, **kwargs: None)

    def plan(n, h, w, c, k, stride=1, residual=False):
        x = torch.empty(n, h, w, c, dtype=torch.bfloat16)
        flt = torch.empty(k, 1, 1, c, dtype=torch.bfloat16)
        p, q = (h - 1) // stride + 1, (w - 1) // stride + 1
        source = torch.empty(n, p, q, k, dtype=torch.bfloat16) if residual else None
        beta = 1.0 if residual else 0.0
        args = (stride, 0, 1, 1.0, beta, "after_activation", None, None, None, None)
        return dispatch._make_plan(x, flt, source, None, None, None, args, None)

    return plan


def test_a_few_row_call_plans_the_gemv_unstaged_without_a_grid_bound(plan_on_a_stand_in_h200):
    plan = plan_on_a_stand_in_h200(1, 16, 6, 300, 100, stride=2, residual=True)
    assert plan.kernel.key.config == PointwiseGemvConfig(vector=4)
    assert plan.staging.kernel_problem.C == 300 and not plan.needs_staging
    assert plan.workspace is None and plan.scalars[-1] == 1  # no persistent clusters
    # K=100 would make a tensor-core kernel store by threads in pairs: not a gemv variant.
    assert plan.epilogue == EpilogueSpec(has_residual=True)
    tensor_cores = plan_on_a_stand_in_h200(64, 1, 1, 64, 64)
    assert isinstance(tensor_cores.kernel.key.config, Conv2dConfig)


@pytest.mark.parametrize(
    "config",
    [PointwiseGemvConfig(vector=8, rows=1, channels_per_warp=2, unroll=2),
     PointwiseGemvConfig(vector=2, rows=4, channels_per_warp=2, unroll=2)],
    ids=["v8-r1", "v2-r4"],
)  # fmt: skip
def test_a_lanes_loads_are_in_flight_before_it_multiplies(config):
    # The kernel's time is load latency: one round trip per step of the C loop, not one per
    # vector; and nothing spills.
    from tests.sass import sass_of

    sass = sass_of(compile_kernel("sm_90a", config=config).cubin)
    ops = re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\d+\s+)?([A-Z0-9]+)", sass)
    loads = [i for i, op in enumerate(ops) if op == "LDG"]
    first_fma = ops.index("FFMA")
    assert len(loads) == config.unroll * (config.rows + config.channels_per_warp)
    assert max(loads) < first_fma
    assert "LDL" not in ops and "STL" not in ops
