"""Compile-only checks of the SM90 kernel: they need no GPU and run in CI."""

from __future__ import annotations

import re

import cutlass
import pytest
import torch
from cute_conv.kernels.sm90.conv2d_fprop import Conv2dFpropSm90

import cute_conv
from cute_conv.compile import SMEM_CAPACITY_BY_ARCH, cached_kernel_count


@pytest.fixture(scope="module")
def bf16_kernel():
    return cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16)


def test_ptx_has_wgmma_and_im2col_tma(bf16_kernel):
    ptx = bf16_kernel.ptx
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async" in ptx
    # Activation: im2col-mode bulk tensor loads with the two filter-tap offsets.
    im2col_loads = re.findall(r"cp\.async\.bulk\.tensor\.4d\.[^\s]*\.im2col[^\n]*", ptx)
    assert im2col_loads, "no im2col TMA load in the PTX"
    # Filter: tiled loads of the (K, (C, S, R)) view; output: tiled stores of (N*P*Q, K).
    assert re.search(r"cp\.async\.bulk\.tensor\.4d\.shared::\w+\.global\.tile\.mbarrier", ptx)
    assert re.search(r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta\.tile\.bulk_group", ptx)
    # Register reallocation between the producer and the consumer warpgroups.
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", ptx)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+232;", ptx)
    assert len(bf16_kernel.cubin) > 0


def test_smem_within_limit(bf16_kernel):
    assert 0 < bf16_kernel.smem_bytes <= SMEM_CAPACITY_BY_ARCH["sm_90a"]


@pytest.mark.parametrize(
    "act_dtype,out_dtype",
    [
        (torch.float16, torch.float16),
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.bfloat16),
    ],
    ids=["fp16", "bf16-to-fp32", "fp16-to-bf16"],
)
def test_dtype_variants_compile(act_dtype, out_dtype):
    kernel = cute_conv.compile_kernel("sm_90a", act_dtype=act_dtype, out_dtype=out_dtype)
    assert "wgmma.mma_async" in kernel.ptx
    wgmma_type = "f16.f16" if act_dtype == torch.float16 else "bf16.bf16"
    assert wgmma_type in kernel.ptx


@pytest.mark.parametrize(
    "config",
    [
        cute_conv.Conv2dConfig(tile_n=64),
        cute_conv.Conv2dConfig(tile_n=192, stages=3),
        cute_conv.Conv2dConfig(tile_n=256),
        cute_conv.Conv2dConfig(tile_n=96),
        cute_conv.Conv2dConfig(tile_n=160, cluster_n=2),
        cute_conv.Conv2dConfig(tile_n=224, cluster_m=2),
        cute_conv.Conv2dConfig(cluster_m=2),
        cute_conv.Conv2dConfig(cluster_n=2),
        cute_conv.Conv2dConfig(tile_m=256, tile_n=64),
        cute_conv.Conv2dConfig(tile_m=256, tile_n=128, cluster_m=2),
        cute_conv.Conv2dConfig(tile_m=192, tile_n=160, cluster_m=2),
        cute_conv.Conv2dConfig(tile_n=64, cluster_n=4),
        cute_conv.Conv2dConfig(cluster_m=4),
        cute_conv.Conv2dConfig(cluster_m=2, cluster_n=2),
    ],
    ids=[
        "n64",
        "n192-st3",
        "n256",
        "n96",
        "n160-1x2",
        "n224-2x1",
        "cluster-2x1",
        "cluster-1x2",
        "m256-n64",
        "m256-n128-2x1",
        "m192-n160-2x1",
        "n64-1x4",
        "cluster-4x1",
        "cluster-2x2",
    ],  # fmt: skip
)
def test_config_variants_compile(config):
    kernel = cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16, config=config)
    assert kernel.smem_bytes <= SMEM_CAPACITY_BY_ARCH["sm_90a"]
    multicast = ".multicast::cluster" in kernel.ptx
    assert multicast == (config.cluster_m * config.cluster_n > 1)


def test_192_row_tiles_run_three_consumer_warpgroups():
    config = cute_conv.Conv2dConfig(tile_m=192, tile_n=128, cluster_n=2)
    ptx = cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16, config=config).ptx
    assert re.search(r"\.reqntid 512, 1, 1", ptx)  # a producer and three consumer warpgroups
    # The register file split 40 / 152 (3 x 128 x 152 + 128 x 40 <= 64K), and the epilogue
    # barrier counts the 384 consumer threads.
    assert re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", ptx)
    assert re.search(r"setmaxnreg\.inc\.sync\.aligned\.u32\s+152;", ptx)
    assert re.search(r"bar\.sync\s+\d+,\s*384;", ptx)
    assert not re.search(r"bar\.sync\s+\d+,\s*256;", ptx)
    # Each warpgroup's WGMMAs are 64 x 128: one per 16 channels of a 64-channel k-tile.
    shapes = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)
    assert set(shapes) == {"m64n128k16"}


@pytest.mark.parametrize("has_residual", [False, True], ids=["plain", "residual"])
def test_pingpong_consumers_have_their_own_epilogues(has_residual):
    config = cute_conv.Conv2dConfig(stages=4, pingpong=True)
    spec = cute_conv.EpilogueSpec(has_residual=has_residual)
    ptx = cute_conv.compile_kernel("sm_90a", config=config, epilogue=spec).ptx
    # Each warpgroup's epilogue barrier counts its own 128 threads; its id is chosen at run
    # time by the warpgroup (none is shared by the 256 consumer threads).
    assert re.search(r"bar\.sync\s+%r\d+,\s*128;", ptx)
    assert not re.search(r"bar\.sync\s+\d+,\s*256;", ptx)
    # One warpgroup's WGMMAs cover the 128-row tile: two m64 atoms per 16 channels.
    assert set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)) == {
        "m64n128k16"
    }
    # The turns: a barrier per warpgroup for the mainloop, and for the epilogue of a residual
    # kernel (for the source ring): the only mbarriers the cooperative kernel does not have.
    cooperative_config = cute_conv.Conv2dConfig(stages=4)
    cooperative = cute_conv.compile_kernel("sm_90a", config=cooperative_config, epilogue=spec).ptx
    turns = len(re.findall(r"mbarrier\.init", ptx)) - len(
        re.findall(r"mbarrier\.init", cooperative)
    )
    assert turns == (4 if has_residual else 2)


def test_cache_keys_on_dtypes_and_config_only():
    before = cached_kernel_count()
    first = cute_conv.compile_kernel("sm_90a", act_dtype="float16", out_dtype="float32")
    again = cute_conv.compile_kernel("sm_90a", act_dtype=torch.float16, out_dtype=torch.float32)
    assert first is again
    assert cached_kernel_count() <= before + 1


def test_stream_k_splits_share_one_compiled_kernel():
    """A split is a launch choice (the grid's size): every split runs the whole-grid kernel."""
    whole = cute_conv.Conv2dConfig(tile_n=64, stream_k=True)
    kernel = cute_conv.compile_kernel("sm_90a", config=whole)
    for split in (2, 6):
        bounded = cute_conv.Conv2dConfig(tile_n=64, stream_k=True, stream_k_split=split)
        assert cute_conv.compile_kernel("sm_90a", config=bounded) is kernel
    assert kernel.key.config == whole


def test_too_many_stages_is_rejected():
    with pytest.raises(ValueError, match="stages=16"):
        cute_conv.compile_kernel("sm_90a", config=cute_conv.Conv2dConfig(tile_n=256, stages=16))


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(arch="sm_80"), ValueError, "arch='sm_80'"),
        (dict(act_dtype=torch.float32), TypeError, "act_dtype=float32"),
        (dict(act_dtype=torch.bfloat16, filter_dtype=torch.float16), TypeError, "filter_dtype"),
        (dict(out_dtype=torch.int8), TypeError, "int8"),
        (dict(config=(128, 128)), TypeError, "Conv2dConfig"),
    ],
    ids=["arch", "fp32-input", "mixed-inputs", "int8-output", "config-type"],
)
def test_compile_kernel_rejects_bad_arguments(kwargs, exc, match):
    arch = kwargs.pop("arch", "sm_90a")
    with pytest.raises(exc, match=match):
        cute_conv.compile_kernel(arch, **kwargs)


C_LOAD = re.compile(r"cp\.async\.bulk\.tensor\.2d\.shared::\w+\.global\.tile\.mbarrier")


@pytest.mark.parametrize(
    "spec",
    [
        cute_conv.EpilogueSpec(),
        cute_conv.EpilogueSpec(has_bias=True, activation="relu"),
        cute_conv.EpilogueSpec(has_scale=True, has_bias=True, activation="silu"),
        cute_conv.EpilogueSpec(activation="gelu", epilogue_fn=lambda y: y * 0.5),
        *[
            cute_conv.EpilogueSpec(activation=a)
            for a in cute_conv.ACTIVATIONS
            if a not in ("relu", "silu", "gelu")  # compiled in the specs above
        ],
        cute_conv.EpilogueSpec(has_residual=True),
        cute_conv.EpilogueSpec(has_bias=True, activation="relu", has_residual=True),
    ],
    ids=lambda spec: spec.name,
)
def test_epilogue_variants_compile(spec):
    kernel = cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16, epilogue=spec)
    assert "wgmma.mma_async" in kernel.ptx
    assert kernel.smem_bytes <= SMEM_CAPACITY_BY_ARCH["sm_90a"]
    # Only a residual kernel has the source-tile TMA loads (2-D tiles of the (N*P*Q, K) C).
    assert bool(C_LOAD.search(kernel.ptx)) == spec.has_residual
    if spec.activation == "gelu":
        assert "erf" in kernel.ptx or "ex2" in kernel.ptx


# A 16-bit element load from global memory, converted to fp32 in registers.
_BF16_VECTOR_LOAD = re.compile(r"ld\.global[.\w]*\.(?:b16|u16)")


@pytest.mark.parametrize("vector_dtype", ["float32", "bfloat16", "float16"])
def test_channel_vectors_are_read_in_their_dtype(vector_dtype):
    spec = cute_conv.EpilogueSpec(has_scale=True, has_bias=True, vector_dtype=vector_dtype)
    ptx = cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16, epilogue=spec).ptx
    assert bool(_BF16_VECTOR_LOAD.search(ptx)) == (vector_dtype != "float32")
    if vector_dtype != "float32":
        source_type = {"bfloat16": "bf16", "float16": "f16"}[vector_dtype]
        assert re.search(rf"cvt\.f32\.{source_type}", ptx)


def test_epilogue_fn_that_does_not_trace_fails_to_compile():
    spec = cute_conv.EpilogueSpec(epilogue_fn=lambda y: y.no_such_op())
    with pytest.raises(ValueError, match="could not be compiled .* AttributeError: .*no_such_op"):
        cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16, epilogue=spec)


def _residual_plan(tile_n: int, tile_k: int = 64, stages: int = 0) -> Conv2dFpropSm90:
    return Conv2dFpropSm90(
        cutlass.BFloat16, cutlass.BFloat16, cutlass.BFloat16,
        cute_conv.Conv2dConfig(tile_n=tile_n, tile_k=tile_k, stages=stages),
        epilogue=cute_conv.EpilogueSpec(has_residual=True),
    )  # fmt: skip


def test_partial_source_ring_prefetches_the_tile_of_c_to_l2():
    spec = cute_conv.EpilogueSpec(has_residual=True)
    prefetches = {
        tile_n: cute_conv.compile_kernel(
            "sm_90a", config=cute_conv.Conv2dConfig(tile_n=tile_n), epilogue=spec
        ).ptx.count("cp.async.bulk.prefetch.tensor.2d.L2")
        for tile_n in (192, 256)
    }
    # 128x192: all 6 C subtiles have a buffer; 128x256x64: 2 buffers, so 8 subtile prefetches.
    assert prefetches == {192: 0, 256: 8}


def test_residual_kernel_buffers_a_whole_tile_of_source():
    def plan(tile_n, tile_k=64, stages=0):
        k = _residual_plan(tile_n, tile_k, stages)
        return k.epi_tile[1], k.source_stages, k.ab_stages

    # 128x64 subtiles where a whole tile of C (2 buffers at least) fits beside 4 A/B stages...
    assert [plan(n) for n in (64, 128)] == [(64, 2, 6), (64, 2, 5)]
    assert plan(256, tile_k=32) == (64, 4, 5)
    # ... else 128x32 subtiles, a whole tile of them where that fits (128x192: 3 wide C
    # buffers and 2 output buffers would leave 3 stages of 40 KB),
    assert [plan(n) for n in (96, 160, 192, 224)] == [
        (32, 3, 6),
        (32, 5, 4),
        (32, 6, 4),
        (32, 4, 4),
    ]
    # else fewer: 128x256x64 stages are 48 KB, so C keeps 2 buffers (and an L2 prefetch).
    assert plan(256) == (32, 2, 4)
    # Stages asked for explicitly come first: 6 of 32 KB leave room for 2 C buffers only.
    assert plan(128, stages=6) == (32, 2, 6)
    for n in (64, 96, 128, 160, 192, 224, 256):
        assert _residual_plan(n).smem_bytes() <= SMEM_CAPACITY_BY_ARCH["sm_90a"]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_space_to_depth_kernel_moves_16_byte_pixels(arch):
    """The stem's staging kernel: a pixel of 8 bf16 channels is one 16-byte load and store;
    of 3 channels, three 2-byte loads in flight together."""
    from cute_conv.compile import compile_space_to_depth
    from tests.sass import loads_waiting_on_loads, sass_of_ptx

    ptx = compile_space_to_depth(arch, torch.bfloat16, 8, 8, 4).ptx
    assert "ld.global.v4.b32" in ptx and "st.global.v4.b32" in ptx
    assert "ld.global.b16" not in ptx
    # Three channels zero-extended to four: 2-byte loads, one 8-byte store per pixel.
    ptx3 = compile_space_to_depth(arch, torch.bfloat16, 3, 4, 8).ptx
    assert ptx3.count("ld.global.b16") == 3 and "st.global.v2.b32" in ptx3
    assert loads_waiting_on_loads(sass_of_ptx(ptx3, arch)) == 0


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_im2col_kernel_stores_16_byte_vectors(arch):
    """The unfolding kernel: a thread loads its vector's elements one by one (each with its
    predicate; none waits on another) and stores them as one 16-byte vector, 8 of 16 bits or
    16 of fp8."""
    from cute_conv.compile import compile_im2col_columns
    from tests.sass import loads_waiting_on_loads, sass_of_ptx

    for dtype, elements, load in ((torch.bfloat16, 8, "b16"), (torch.float8_e4m3fn, 16, "b8")):
        ptx = compile_im2col_columns(arch, dtype, 3).ptx
        assert ptx.count(f"ld.global.{load}") == elements
        assert ptx.count("st.global.v4.b32") == 1 and "st.global.b" not in ptx
        assert loads_waiting_on_loads(sass_of_ptx(ptx, arch)) == 0


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize(
    ("dtype", "load", "channels", "taps", "stores"),
    [
        (torch.bfloat16, "b16", 3, (3, 3), 4),
        (torch.float8_e4m3fn, "b8", 3, (7, 7), 10),
        (torch.bfloat16, "b16", 2, (10, 10), 25),  # the most columns, PATCH_ROW_MAX_COLUMNS
    ],
)
def test_patch_row_kernel_loads_each_column_once(arch, dtype, load, channels, taps, stores):
    """The compile-time window: a thread loads each of its row's R*S*C columns once, all in
    flight together (none waits on another; no spill), and stores the row as 16-byte vectors;
    past the thread's row and pixel no division, and a few instructions per column (the taps'
    offsets are constant multiples of the dilated steps, not 64-bit products per load)."""
    from cute_conv.compile import compile_im2col_columns
    from tests.sass import loads_waiting_on_loads, sass_of_ptx

    columns = taps[0] * taps[1] * channels
    ptx = compile_im2col_columns(arch, dtype, channels, taps).ptx
    assert ptx.count(f"ld.global.{load}") == columns
    assert ptx.count("st.global.v4.b32") == stores and "st.global.b" not in ptx
    assert len(re.findall(r"\b(div|rem)\.", ptx)) == 2  # the row's image and output row
    sass = sass_of_ptx(ptx, arch)
    assert loads_waiting_on_loads(sass) == 0 and "STL" not in sass
    instructions = re.findall(r"^\s+/\*[0-9a-f]{4}\*/", sass, re.MULTILINE)
    assert len(instructions) < 150 + 8 * columns


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(channels=0), ValueError, "channels must be >= 1, got 0"),
        (dict(channels=3.0), TypeError, "channels must be an int, got 3.0"),
        (dict(dtype=torch.float32), TypeError, "dtype=float32 is not supported"),
        (dict(arch="sm_80"), ValueError, "arch='sm_80' has no kernel"),
        (dict(taps=3), TypeError, "taps must be a pair of ints"),
        (dict(taps=(3, 3.0)), TypeError, "taps must be a pair of ints"),
        (dict(taps=(0, 3)), ValueError, r"taps must be >= 1 each, got \(0, 3\)"),
        (dict(taps=(11, 11)), ValueError, "make 363 columns; the patch-row kernel takes at most 200"),
    ],
)
def test_im2col_kernel_names_a_wrong_argument(kwargs, error, match):
    from cute_conv.compile import compile_im2col_columns

    args = {"arch": "sm_90a", "dtype": torch.bfloat16, "channels": 3, **kwargs}
    with pytest.raises(error, match=match):
        compile_im2col_columns(**args)


def test_stream_k_fixup_in_the_ptx():
    """Stream-K writes and reads a thread's partial as 16-byte vectors, publishes it with a
    release (fence + relaxed add) and waits with acquire loads; without stream-K none of it."""
    config = cute_conv.Conv2dConfig(tile_n=256, cluster_n=2, stream_k=True)
    ptx = cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16, config=config).ptx
    vectors_per_thread = 128 * 256 // 256 // 4
    assert ptx.count("st.global.v4.b32") == vectors_per_thread
    assert ptx.count("ld.global.v4.b32") == vectors_per_thread
    assert "fence.acq_rel.gpu" in ptx
    assert "red.relaxed.gpu.global.add.s32" in ptx
    assert "ld.acquire.gpu.global.b32" in ptx
    plain = cute_conv.compile_kernel(
        "sm_90a", act_dtype=torch.bfloat16, config=cute_conv.Conv2dConfig(tile_n=256, cluster_n=2)
    ).ptx
    assert not any(op in plain for op in ("st.global.v4", "fence.acq_rel.gpu", "ld.acquire"))


def test_dynamic_schedule_in_the_ptx():
    """A dynamically scheduled kernel takes work with a relaxed atomic add, counts its CTA out
    with an acq_rel one and resets both counters; a static kernel has no global atomics."""
    config = cute_conv.Conv2dConfig(dynamic_schedule=True)
    ptx = cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16, config=config).ptx
    assert ptx.count("atom.global.add.u32") == 1
    assert ptx.count("atom.global.acq_rel.add.u32") == 1
    assert ptx.count("st.relaxed.gpu.global") == 2
    static = cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16).ptx
    assert "atom.global" not in static


def test_halo_tiles_in_the_ptx():
    """Halo tiles load the activation with tiled 4-D TMA boxes (no im2col loads) and store the
    output as (channel, q, p, n) boxes; the im2col kernel keeps its im2col loads."""
    config = cute_conv.Conv2dConfig(tile_m=256, tile_n=64, tile_w=64, halo_h=6)
    ptx = cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16, config=config).ptx
    assert "im2col" not in ptx
    assert "cp.async.bulk.tensor.4d.global.shared::cta.tile" in ptx  # the output store
    assert ptx.count("cp.async.bulk.tensor.4d.shared::cta.global.tile") >= 2  # halo and filter
    im2col = cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16).ptx
    assert "cp.async.bulk.tensor.4d.shared::cta.global.im2col" in im2col
    assert "cp.async.bulk.tensor.2d.global.shared::cta.tile" in im2col  # (N*P*Q, K) stores


def test_kernel_constructor_takes_a_hopper_config():
    """The kernel class takes its arch's config, which has checked the options (see
    test_config.py), as the SM100 class does."""
    with pytest.raises(TypeError, match="config must be a Conv2dConfig, got Conv2dConfigSm100"):
        Conv2dFpropSm90(
            cutlass.BFloat16, cutlass.BFloat16, cutlass.BFloat16, cute_conv.Conv2dConfigSm100()
        )


class _FakeWrapper:
    """Stands in for the DSL's keyword-argument wrapper of a compiled function."""

    def __init__(self, inner, converts_pointers: bool) -> None:
        self._inner = inner
        self.execution_args = type("Args", (), {"has_pointer_address_arg_specs": converts_pointers})

    def __tvm_ffi_object__(self):
        return self._inner


def test_positional_launcher_unwraps_only_what_it_can_call_directly():
    from cute_conv.compile import _positional_launcher

    inner = object()
    assert _positional_launcher(_FakeWrapper(inner, converts_pointers=False)) is inner
    # A wrapper that converts pointer arguments, or holds no loaded function, is kept.
    converting = _FakeWrapper(inner, converts_pointers=True)
    assert _positional_launcher(converting) is converting
    unloaded = _FakeWrapper(None, converts_pointers=False)
    assert _positional_launcher(unloaded) is unloaded
    plain = print  # not a wrapper at all
    assert _positional_launcher(plain) is plain


def _longest_wgmma_batch(sass: str) -> int:
    """The most WGMMAs (HGMMA/QGMMA) issued in a row with no fence (``WARPGROUP.ARRIVE``) or
    branch between them."""
    longest = run = 0
    for line in sass.splitlines():
        if re.search(r"\b[HQ]GMMA\.", line):
            run += 1
            longest = max(longest, run)
        elif re.search(r"\bWARPGROUP\.ARRIVE\b|\bBRA\b", line):
            run = 0
    return longest


@pytest.mark.parametrize(
    "act_dtype,config,k_blocks",
    [
        (torch.bfloat16, cute_conv.Conv2dConfig(tile_n=128), 4),
        (torch.float8_e4m3fn, cute_conv.Conv2dConfig(tile_n=192, tile_k=128, cluster_m=2), 4),
        (torch.bfloat16, cute_conv.Conv2dConfig(tile_n=64, tile_w=32, halo_h=6), 4),
        (torch.bfloat16, cute_conv.Conv2dConfig(tile_n=128, tile_k=32, stream_k=True), 2),
        (torch.bfloat16, cute_conv.Conv2dConfig(tile_n=64, tile_k=16, gather=True), 1),
    ],
    ids=["im2col", "fp8", "halo", "stream-k", "one-k-block"],
)
def test_whole_k_tiles_stay_one_wgmma_batch(act_dtype, config, k_blocks):
    """The MMA k-blocks past C are skipped by a branch per WGMMA, which ptxas fences and
    closes with an empty WGMMA; a whole k-tile keeps its WGMMAs in one unfenced batch, and a
    k-tile of one k-block has no skipping path at all."""
    from tests.sass import sass_of

    kernel = cute_conv.compile_kernel("sm_90a", act_dtype=act_dtype, config=config)
    sass = sass_of(kernel.cubin)
    assert _longest_wgmma_batch(sass) >= k_blocks
    empty_wgmma = re.search(r"HGMMA\.64x8x16\.F16 RZ, gdesc\[URZ\]", sass)
    assert bool(empty_wgmma) == (k_blocks > 1)


@pytest.mark.parametrize(
    "act_dtype,config,spec",
    [
        (torch.float8_e4m3fn, cute_conv.Conv2dConfig(tile_n=128, tile_k=128), None),
        (torch.float8_e4m3fn, cute_conv.Conv2dConfig(tile_n=128, tile_k=128, pingpong=True), None),
        (torch.bfloat16, cute_conv.Conv2dConfig(tile_m=256, tile_n=64), None),
        (torch.bfloat16, cute_conv.Conv2dConfig(tile_n=128, tile_k=32, stream_k=True), None),
        (
            torch.bfloat16, cute_conv.Conv2dConfig(tile_n=128, pingpong=True),
            cute_conv.EpilogueSpec(has_bias=True, activation="relu", has_residual=True),
        ),
    ],
    ids=["fp8", "pingpong", "256-row", "stream-k", "pingpong-residual"],
)  # fmt: skip
def test_ptxas_keeps_the_wgmmas_pipelined(act_dtype, config, spec):
    """ptxas serializes every WGMMA of a kernel (a wait after each) where it cannot prove the
    accumulators safe, and says so only as an info line (C7520); no config may trigger it."""
    from tests.sass import ptxas_messages

    kernel = cute_conv.compile_kernel("sm_90a", act_dtype=act_dtype, config=config, epilogue=spec)
    messages = ptxas_messages(kernel.ptx, "sm_90a")
    assert "C7520" not in messages, messages
