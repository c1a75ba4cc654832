"""Compile-only checks of the SM100 (Blackwell) kernel: they need no GPU and run in CI.

No Blackwell GPU is reachable, so this is the SM100 kernel's verification: every test compiles
for ``sm_100a`` on the CPU and asserts on the PTX the compiler produced (tcgen05.mma, TMEM,
cluster launch control, im2col TMA, mbarrier arrive counts) and on the resources the kernel asks
for. Host-side tests (config, budgets, problem limits, arrive-count arithmetic, the tile mapping)
need no compiler at all. Compiled kernels are shared through ``compile_kernel``'s cache.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
import torch
from cute_conv.kernels.common.tile_scheduler import GroupedRaster, select_python
from cute_conv.kernels.sm100.config import SMEM_CAPACITY_SM100, TMEM_COLUMNS_SM100
from cute_conv.kernels.sm100.pipeline_checks import (
    BarrierSpec,
    check_arrive_count,
    conv2d_barrier_specs,
)

import cute_conv
from cute_conv.compile import SMEM_CAPACITY_BY_ARCH
from cute_conv.config_sm100 import (
    Conv2dConfigSm100,
    can_implement_sm100,
    check_sm100,
    default_config_sm100,
)
from cute_conv.problem import Conv2dProblemShape
from tests.ptx_dataflow import divisions_before_im2col_loads

EpilogueSpec = cute_conv.EpilogueSpec
ONE_SM = Conv2dConfigSm100.default_bf16_1sm()
TWO_SM = Conv2dConfigSm100.default_bf16()

# ------------------------------------------------------------------------------------------------
# PTX helpers
# ------------------------------------------------------------------------------------------------

IM2COL_LOAD = re.compile(r"cp\.async\.bulk\.tensor\.(\d)d\.shared::\w+\.global\.im2col\.[^\s]*")
FILTER_LOAD = re.compile(r"cp\.async\.bulk\.tensor\.4d\.shared::\w+\.global\.tile\.mbarrier[^\s]*")
# Source C: 2-D tiles of the (N*P*Q, K) residual, loaded into this CTA's SMEM.
SOURCE_LOAD = re.compile(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global\.tile\.mbarrier")
OUTPUT_STORE = re.compile(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\.tile\.bulk_group")
MMA = re.compile(r"tcgen05\.mma\.cta_group::(\d)\.kind::(\w+)")


def register_values(ptx: str) -> dict[str, int]:
    """``%rN -> immediate`` for registers set by ``mov.b32 %rN, <int>;``."""
    return {m[1]: int(m[2]) for m in re.finditer(r"mov\.b32\s+(%r\d+),\s*(-?\d+);", ptx)}


def mbarrier_init_counts(ptx: str) -> Counter:
    """Multiset of the arrive counts every ``mbarrier.init`` of the kernel uses."""
    regs = register_values(ptx)
    counts = Counter()
    for operand in re.findall(
        r"mbarrier\.init\.shared(?:::cta)?\.b64\s+\[[^\]]+\],\s*([^;]+);", ptx
    ):
        operand = operand.strip()
        counts[int(operand) if operand.lstrip("-").isdigit() else regs[operand]] += 1
    return counts


def tmem_alloc_columns(ptx: str) -> list[int]:
    regs = register_values(ptx)
    found = re.findall(r"tcgen05\.alloc\.cta_group::\d[^\[]*\[[^\]]+\],\s*([^;]+);", ptx)
    return [int(x) if x.strip().isdigit() else regs[x.strip()] for x in found]


def expected_init_counts(config: Conv2dConfigSm100, act, out, has_residual: bool) -> Counter:
    """What the roles say every barrier of one kernel must be initialised with."""
    plan = config.plan(act, out, has_residual)
    specs = conv2d_barrier_specs(
        cta_group=config.cta_group, cluster_size=config.cluster_m, has_residual=has_residual
    )
    stages = {
        "input": plan.ab_stages,
        "accumulator": config.acc_stages,
        "clc": config.clc_stages,
        "clc_throttle": config.clc_stages,
        "epi_load": plan.source_stages,
    }
    counts = Counter()
    for name, spec in specs.items():
        ring = name.split(".")[0]
        if ring == "named":
            continue
        counts[spec.count] += stages.get(ring, 1)
    return counts


def compile_sm100(config, dtype=torch.bfloat16, out_dtype=None, epilogue=None):
    return cute_conv.compile_kernel(
        "sm_100a", act_dtype=dtype, out_dtype=out_dtype, config=config, epilogue=epilogue
    )


def _cutlass(dtype):
    import cutlass

    return {torch.bfloat16: cutlass.BFloat16, torch.float16: cutlass.Float16}.get(
        dtype, cutlass.Float32
    )


# ------------------------------------------------------------------------------------------------
# The core matrix: 1-SM / 2-SM x bf16 / fp16 x residual off / on
# ------------------------------------------------------------------------------------------------

CORE = [
    pytest.param(cfg, dtype, residual, id=f"{sm}-{dt}-{'residual' if residual else 'plain'}")
    for sm, cfg in (("1sm", ONE_SM), ("2sm", TWO_SM))
    for dt, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16))
    for residual in (False, True)
]


@pytest.mark.parametrize("config,dtype,residual", CORE)
def test_core_matrix_ptx(config, dtype, residual):
    kernel = compile_sm100(config, dtype, epilogue=EpilogueSpec(has_residual=residual))
    ptx = kernel.ptx
    cta_group = config.cta_group
    assert ".target sm_100a" in ptx
    assert len(kernel.cubin) > 0

    # tcgen05.mma, all of the config's CTA group, f16-kind (bf16 and fp16 inputs).
    mmas = MMA.findall(ptx)
    assert mmas and set(mmas) == {(str(cta_group), "f16")}
    # Each k-tile's MMAs release their input stage with tcgen05.commit; a 2-SM commit is
    # multicast to both CTAs of the pair.
    commits = re.findall(r"tcgen05\.commit\.cta_group::(\d)[^\s]*", ptx)
    assert commits and {c for c in commits} == {str(cta_group)}
    assert ("multicast::cluster" in " ".join(re.findall(r"tcgen05\.commit[^\s]*", ptx))) == (
        cta_group == 2
    )

    # TMEM: one allocation of the planned columns, loads in the epilogue, one deallocation.
    assert ptx.count(f"tcgen05.alloc.cta_group::{cta_group}") == 1
    assert ptx.count(f"tcgen05.dealloc.cta_group::{cta_group}") == 1
    assert f"tcgen05.relinquish_alloc_permit.cta_group::{cta_group}" in ptx
    assert re.search(r"tcgen05\.ld\.sync\.aligned\.\w+", ptx)
    assert "tcgen05.wait::ld" in ptx
    assert tmem_alloc_columns(ptx) == [config.tmem_columns()]
    assert config.tmem_columns() <= TMEM_COLUMNS_SM100

    # Cluster launch control: one try_cancel (multicast to the pair on 2-SM), its queries.
    try_cancel = re.findall(r"clusterlaunchcontrol\.try_cancel[^\s]*", ptx)
    assert len(try_cancel) == 1
    assert ("multicast::cluster::all" in try_cancel[0]) == (cta_group == 2)
    assert "clusterlaunchcontrol.query_cancel.is_canceled" in ptx
    assert "clusterlaunchcontrol.query_cancel.get_first_ctaid::x" in ptx

    # Activation by im2col TMA on the 4-D (C, W, H, N) descriptor, never the 5-D form; the
    # filter by tiled TMA; a 2-SM load signals the leader CTA's barrier (cta_group::2).
    im2col = IM2COL_LOAD.findall(ptx)
    assert im2col and set(im2col) == {"4"}
    for load in IM2COL_LOAD.finditer(ptx):
        assert ("cta_group::2" in load.group(0)) == (cta_group == 2)
    assert FILTER_LOAD.search(ptx)
    assert OUTPUT_STORE.search(ptx)
    # Source C loads exist exactly when the residual is on.
    assert bool(SOURCE_LOAD.search(ptx)) == residual

    # The epilogue converts to the output type (here: the input type).
    cvt = "cvt.rn.bf16x2.f32" if dtype == torch.bfloat16 else "cvt.rn.f16x2.f32"
    assert cvt in ptx

    # Ring waits use a loop-carried phase; only the two one-shot barriers are waited on with
    # a constant phase 0: TMEM dealloc and (residual) load order. A CLC wait with a constant
    # phase is the bug of a pipeline state that stopped advancing across a call.
    constant_waits = re.findall(
        r"mbarrier\.try_wait\.parity\.shared\.b64\s+\w+,\s*\[[^\]]+\],\s*0,", ptx
    )
    assert len(constant_waits) == 1 + residual

    # Every mbarrier is initialised with the arrive count its roles make.
    act = _cutlass(dtype)
    assert mbarrier_init_counts(ptx) == expected_init_counts(config, act, act, residual)

    # Resources.
    assert 0 < kernel.smem_bytes <= SMEM_CAPACITY_BY_ARCH["sm_100a"] == SMEM_CAPACITY_SM100
    assert kernel.smem_bytes == config.plan(act, act, residual).smem_bytes


# The guard of an MMA k-block past C: ``k_blocks < k + 1`` branches over k-block k's MMA.
K_BLOCK_GUARD = re.compile(r"setp\.lt\.s32\s+(%p\d+),\s*(%r\d+),\s*(\d+);\s*\n\s*@\1 bra")


@pytest.mark.parametrize("config", [ONE_SM, TWO_SM], ids=["1sm", "2sm"])
def test_mma_k_blocks_past_c_are_skipped(config):
    # bf16 k-tiles of 64 channels: four 16-channel MMA k-blocks. In each unrolled copy of the
    # k-tile's MMAs, k-blocks 1-3 are issued only where the tap's last c-block holds channels
    # in them (one runtime count per copy); k-block 0 always is.
    ptx = compile_sm100(config, torch.bfloat16, epilogue=EpilogueSpec()).ptx
    mmas = len(MMA.findall(ptx))
    guards = [(reg, int(bound)) for _, reg, bound in K_BLOCK_GUARD.findall(ptx) if bound != "1"]
    counts = {reg for reg, _ in guards}
    assert mmas % 4 == 0 and len(counts) == mmas // 4
    for reg in counts:
        assert sorted(bound for r, bound in guards if r == reg) == [2, 3, 4]


def test_2sm_arrive_counts_in_ptx():
    """The seed's numbers, read back from the PTX of the 2-SM residual kernel."""
    counts = mbarrier_init_counts(
        compile_sm100(TWO_SM, epilogue=EpilogueSpec(has_residual=True)).ptx
    )
    assert counts[32 * (1 + 2 * 7)] == TWO_SM.clc_stages  # CLC empty: 480
    assert counts[4 * 2] == TWO_SM.acc_stages + 1  # accumulator empty + TMEM dealloc: 8
    assert counts[4] >= 1  # source empty: one lane per epilogue warp


def test_2sm_tma_targets_the_leader_barrier():
    """2-SM loads pass the mbarrier with the peer bit cleared (0xFEFFFFF8): the leader's."""
    ptx = compile_sm100(TWO_SM).ptx
    assert re.search(r"and\.b32\s+%r\d+,\s*%r\d+,\s*-16777224;", ptx)


# ------------------------------------------------------------------------------------------------
# Epilogue variants (each compiled once, on alternating configs)
# ------------------------------------------------------------------------------------------------

EPILOGUES = [
    (ONE_SM, EpilogueSpec(has_bias=True)),
    (TWO_SM, EpilogueSpec(has_bias=True, activation="relu")),
    (ONE_SM, EpilogueSpec(has_scale=True, has_bias=True, activation="silu")),
    (TWO_SM, EpilogueSpec(activation="gelu", epilogue_fn=lambda y: y * 0.5)),
    (ONE_SM, EpilogueSpec(activation="gelu_tanh")),
    (TWO_SM, EpilogueSpec(activation="sigmoid")),
    (ONE_SM, EpilogueSpec(activation="tanh")),
    (TWO_SM, EpilogueSpec(activation="leaky_relu")),
    (ONE_SM, EpilogueSpec(has_bias=True, activation="hardswish")),
    (TWO_SM, EpilogueSpec(activation="mish")),
    (ONE_SM, EpilogueSpec(has_bias=True, activation="relu", has_residual=True)),
    (TWO_SM, EpilogueSpec(has_scale=True, has_bias=True, activation="gelu", has_residual=True)),
    (ONE_SM, EpilogueSpec(has_bias=True, has_residual=True, vector_dtype="bfloat16")),
    (TWO_SM, EpilogueSpec(has_scale=True, has_bias=True, vector_dtype="float16")),
]


@pytest.mark.parametrize(
    "config,spec",
    [pytest.param(c, s, id=f"{c.cta_group}sm-{s.name}-{s.vector_dtype}") for c, s in EPILOGUES],
)
def test_epilogue_variants_compile(config, spec):
    kernel = compile_sm100(config, epilogue=spec)
    ptx = kernel.ptx
    assert f"tcgen05.mma.cta_group::{config.cta_group}" in ptx
    assert kernel.smem_bytes <= SMEM_CAPACITY_SM100
    assert bool(SOURCE_LOAD.search(ptx)) == spec.has_residual
    # Per-channel vectors are read from global memory only when the spec has them, 16-bit
    # ones as 16-bit loads converted to fp32.
    assert ("ld.global" in ptx) == spec.has_channel_vectors
    if spec.has_channel_vectors and spec.vector_dtype != "float32":
        assert re.search(r"ld\.global[.\w]*\.(?:b16|u16)", ptx)
        assert re.search(r"cvt\.f32\.(?:bf16|f16)", ptx)
    if spec.activation in ("gelu",):
        assert "erf" in ptx or "ex2" in ptx
    if spec.activation in ("sigmoid", "silu", "gelu_tanh", "tanh"):
        assert "ex2.approx" in ptx or "tanh.approx" in ptx


@pytest.mark.parametrize(
    "config,out_dtype",
    [
        pytest.param(TWO_SM, torch.float32, id="2sm-fp32-out"),
        pytest.param(
            Conv2dConfigSm100(cta_group=2, mma_m=256, mma_n=64, tile_k=32, epi_n=16), None,
            id="2sm-n64-k32-epi16",
        ),
        pytest.param(
            Conv2dConfigSm100(
                cta_group=1, mma_m=128, mma_n=192, epi_n=64, acc_stages=1, clc_stages=1,
                block_swizzle=4, raster_along_m=False,
            ),
            torch.float16,
            id="1sm-n192-epi64-acc1-clc1-sw4",
        ),
    ],
)  # fmt: skip
def test_config_variants_compile(config, out_dtype):
    spec = EpilogueSpec(has_bias=True, has_residual=True)
    kernel = compile_sm100(config, out_dtype=out_dtype, epilogue=spec)
    act = _cutlass(torch.bfloat16)
    out = _cutlass(out_dtype) if out_dtype is not None else act
    assert mbarrier_init_counts(kernel.ptx) == expected_init_counts(config, act, out, True)
    assert tmem_alloc_columns(kernel.ptx) == [config.tmem_columns()]
    assert kernel.smem_bytes == config.plan(act, out, True).smem_bytes <= SMEM_CAPACITY_SM100
    # The load warp decomposes a tile's pixel origin once per tile, not per k-tile.
    assert not any(divisions_before_im2col_loads(kernel.ptx))


def test_compile_kernel_sm100_argument_errors():
    with pytest.raises(TypeError, match="Conv2dConfigSm100"):
        cute_conv.compile_kernel("sm_100a", config=cute_conv.Conv2dConfig())
    with pytest.raises(TypeError, match="Conv2dConfig"):
        cute_conv.compile_kernel("sm_90a", config=TWO_SM)


def test_default_config_for_sm100_is_the_2sm_seed_default():
    assert cute_conv.compile_kernel("sm_100a").key.config == TWO_SM


# ------------------------------------------------------------------------------------------------
# Host side: config, budgets, limits, arrive counts, tile mapping (no compiler)
# ------------------------------------------------------------------------------------------------


def test_seed_configs():
    assert TWO_SM.cta_group == 2 and TWO_SM.mma_shape == (256, 256, 16)
    assert TWO_SM.cluster_shape_mn == (2, 1)
    assert TWO_SM.block_tile_shape == (128, 128, 64)
    assert TWO_SM.output_tile_shape == (128, 32)
    assert ONE_SM.cta_group == 1 and ONE_SM.mma_shape == (128, 128, 16)
    assert ONE_SM.cluster_shape_mn == (1, 1)
    assert TWO_SM.ab_swizzle_bytes() == 128 and TWO_SM.c_swizzle_bytes() == 64
    assert TWO_SM.c_swizzle_bytes(output_bits=32) == 128


@pytest.mark.parametrize(
    "config,act,out,residual,ab_stages,source_stages,smem,tmem",
    [
        (TWO_SM, torch.bfloat16, None, False, 6, 0, 214016, 512),
        (TWO_SM, torch.bfloat16, None, True, 4, 8, 214016, 512),
        (TWO_SM, torch.bfloat16, torch.float32, True, 4, 4, 230400, 512),
        (ONE_SM, torch.bfloat16, None, False, 6, 0, 214016, 256),
        (ONE_SM, torch.float16, None, True, 5, 4, 214016, 256),
    ],
    ids=["2sm", "2sm-residual", "2sm-residual-fp32", "1sm", "1sm-residual"],
)
def test_plan_budgets(config, act, out, residual, ab_stages, source_stages, smem, tmem):
    plan = config.plan(_cutlass(act), _cutlass(out or act), residual)
    assert (plan.ab_stages, plan.source_stages) == (ab_stages, source_stages)
    assert plan.smem_bytes == smem <= SMEM_CAPACITY_SM100
    assert plan.tmem_columns == tmem <= TMEM_COLUMNS_SM100


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        pytest.param(dict(cta_group=3), ValueError, "cta_group must be one of", id="cta-group"),
        pytest.param(dict(cta_group=1), ValueError, "mma_m must be 128 with cta_group=1", id="mma-m-1sm"),
        pytest.param(dict(mma_m=128), ValueError, "mma_m must be 256 with cta_group=2", id="mma-m-2sm"),
        pytest.param(dict(mma_n=96), ValueError, "mma_n must be one of", id="mma-n"),
        pytest.param(dict(tile_k=256), ValueError, "tile_k must be one of", id="tile-k"),
        pytest.param(dict(epi_n=8), ValueError, "epi_n must be one of", id="epi-n"),
        pytest.param(dict(stages=1), ValueError, "stages must be 0", id="stages"),
        pytest.param(dict(acc_stages=3), ValueError, "acc_stages must be in 1..2", id="acc-stages"),
        pytest.param(dict(clc_stages=0), ValueError, "clc_stages must be in 1..4", id="clc-stages"),
        pytest.param(dict(output_stages=5), ValueError, "output_stages must be in 1..4", id="output-stages"),
        pytest.param(dict(block_swizzle=3), ValueError, "block_swizzle must be one of", id="block-swizzle"),
        pytest.param(dict(mma_n=128.0), TypeError, "mma_n must be an int", id="type"),
        pytest.param(dict(raster_along_m=1), TypeError, "raster_along_m must be a bool", id="bool"),
    ],
)  # fmt: skip
def test_config_rejections(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Conv2dConfigSm100(**kwargs)


def test_tmem_budget_is_checked():
    # 2 x 192 columns are allocated as 512 (powers of two): fits; nothing larger exists.
    assert Conv2dConfigSm100(mma_n=192).tmem_columns() == 512
    assert Conv2dConfigSm100(mma_n=192, acc_stages=1).tmem_columns() == 256
    assert Conv2dConfigSm100(mma_n=64, acc_stages=1, cta_group=1, mma_m=128).tmem_columns() == 64


def test_too_many_stages_is_rejected_before_compiling():
    config = Conv2dConfigSm100(stages=16)
    with pytest.raises(ValueError, match=r"stages=16 does not fit.*232448 bytes"):
        config.plan(_cutlass(torch.bfloat16), _cutlass(torch.bfloat16), False)
    with pytest.raises(ValueError, match="stages=16 does not fit"):
        cute_conv.compile_kernel("sm_100a", config=config)


def test_auto_source_stages_keep_the_ab_ring_deep():
    # fp32 output: 8 source subtiles would leave 2 A/B stages; the plan halves them.
    plan = TWO_SM.plan(_cutlass(torch.bfloat16), _cutlass(torch.float32), True)
    assert plan.source_stages == 4 and plan.ab_stages >= 3
    explicit = Conv2dConfigSm100(source_stages=2).plan(
        _cutlass(torch.bfloat16), _cutlass(torch.float32), True
    )
    assert explicit.source_stages == 2


def problem(n=2, hw=16, c=64, k=128, rs=3, **geom):
    return Conv2dProblemShape.from_shapes((n, hw, hw, c), (k, rs, rs, c), **geom)


def test_can_implement_accepts_what_the_5d_atom_could_not():
    # 7x7 with dilation 6 spans 36 > 31 (the 5-D im2col limit) and a pad-0 upper corner of -36
    # (< -16): fine on the 4-D descriptor this kernel uses.
    prob = problem(hw=64, rs=7, dilation=6)
    assert can_implement_sm100(prob)
    plan = check_sm100(prob, ONE_SM, act_dtype=torch.float16, out_dtype=torch.float32)
    assert plan.smem_bytes <= SMEM_CAPACITY_SM100


@pytest.mark.parametrize(
    "prob,kwargs,match",
    [
        pytest.param(problem(c=12), {}, r"C=12 channels .* multiples of 16 bytes", id="c-align"),
        pytest.param(problem(hw=300, padding=129), {}, r"padding top=129", id="pad-lo"),
        pytest.param(problem(hw=600, rs=3, dilation=128, padding=0), {}, r"spans .* 256", id="span"),
        pytest.param(problem(hw=40, rs=3, stride=1, padding=((1, 1), (130, 1))), {}, r"padding left=130", id="pad-left"),
        pytest.param(problem(), dict(config=Conv2dConfigSm100(stages=16)), r"stages=16 does not fit", id="smem"),
    ],
)  # fmt: skip
def test_check_sm100_rejections(prob, kwargs, match):
    with pytest.raises(ValueError, match=match):
        check_sm100(prob, **kwargs)
    assert not can_implement_sm100(prob, **kwargs)


def test_any_k_runs_its_output_rows_stored_by_threads():
    """K = 100 makes 200-byte output rows: stored by the epilogue threads, which read the
    residual themselves, so the plan has no C ring."""
    assert can_implement_sm100(problem(k=100))
    assert check_sm100(problem(k=100), has_residual=True).source_stages == 0
    assert check_sm100(problem(k=96), has_residual=True).source_stages > 0


def test_check_sm100_rejects_the_wrong_config_type():
    with pytest.raises(TypeError, match="Conv2dConfigSm100"):
        check_sm100(problem(), cute_conv.Conv2dConfig())


def test_default_config_sm100():
    assert default_config_sm100(problem(n=8, hw=56, k=256)) == TWO_SM
    assert default_config_sm100(problem(n=8, hw=56, k=384)).mma_n == 192  # 2 x 192
    assert default_config_sm100(problem(n=8, hw=56, k=320)).mma_n == 192
    assert default_config_sm100(problem(n=8, hw=56, k=96)).mma_n == 128
    small = default_config_sm100(problem(n=1, hw=8, k=64))
    assert small.cta_group == 1 and small.mma_n == 64
    assert default_config_sm100(problem(c=64)).tile_k == 64
    assert default_config_sm100(problem(c=32)).tile_k == 32  # e.g. the stem's super-pixel view


def test_arrive_counts_follow_the_roles():
    two = conv2d_barrier_specs(cta_group=2, cluster_size=2, has_residual=True)
    one = conv2d_barrier_specs(cta_group=1, cluster_size=1, has_residual=False)
    # The seed's CLC empty count: 32 + cluster * (load + MMA + 4 epilogue + epi-load) * 32.
    assert two["clc.empty"].count == 32 + 2 * 7 * 32 == 480
    assert one["clc.empty"].count == 32 + 6 * 32 == 224  # no epilogue-load warp
    assert two["accumulator.empty"].count == 8 and one["accumulator.empty"].count == 4
    assert two["tmem_dealloc"].count == 8 and one["tmem_dealloc"].count == 4
    for specs in (one, two):
        assert specs["input.full"].count == specs["input.empty"].count == 1
        assert specs["accumulator.full"].count == specs["clc.full"].count == 1
        assert specs["clc_throttle.full"].count == specs["clc_throttle.empty"].count == 32
        assert specs["named.tmem_allocation"].count == 160
        assert specs["named.epilogue"].count == 128
    assert two["epi_load.empty"].count == 4 and two["load_order"].count == 1
    assert "epi_load.full" not in one and "load_order" not in one


def test_arrive_count_mismatch_spells_out_the_arithmetic():
    spec = conv2d_barrier_specs(cta_group=2, cluster_size=2, has_residual=True)["clc.empty"]
    assert check_arrive_count(spec, 480) is None
    with pytest.raises(ValueError, match=r"clc\.empty .* 256, .*= 480"):
        check_arrive_count(spec, 256)
    assert isinstance(spec, BarrierSpec) and "remote to CTA 0" in spec.arithmetic()


@pytest.mark.parametrize("tiles", [(1, 1), (7, 3), (5, 8), (13, 1), (1, 9), (6, 6)])
@pytest.mark.parametrize("swizzle", [1, 2, 4, 8])
@pytest.mark.parametrize("raster_along_m", [True, False])
def test_tile_mapping_is_a_bijection(tiles, swizzle, raster_along_m):
    tiles_m, tiles_n = tiles
    raster = GroupedRaster(tiles_m, tiles_n, swizzle, raster_along_m)
    coords = [raster.coord(w, select_python) for w in range(tiles_m * tiles_n)]
    assert sorted(coords) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]
    if swizzle == 1 and raster_along_m:
        # Plain M-fastest... within a band of one N column.
        assert coords[:tiles_m] == [(m, 0) for m in range(tiles_m)]
