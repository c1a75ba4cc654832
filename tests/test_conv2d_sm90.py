"""GPU numerics of conv2d_fprop on Hopper against a float32 torch reference.

Every case draws fresh random inputs and poisons the output with NaN before the launch, so an
element the kernel fails to write fails the test.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs

pytestmark = pytest.mark.gpu

SHAPES_JSON = Path(__file__).resolve().parents[1] / "benchmarks" / "shapes.json"


def run_and_check(
    n, h, w, c, k, r, s, *, stride=1, padding=0, dilation=1,
    dtype=torch.bfloat16, out_dtype=None, config=None,
):  # fmt: skip
    act, flt = random_conv_inputs(n, h, w, c, k, r, s, dtype=dtype)
    problem = cute_conv.Conv2dProblemShape.from_shapes(
        act.shape, flt.shape, stride=stride, padding=padding, dilation=dilation
    )
    out = torch.full(problem.output_shape, float("nan"), dtype=out_dtype or dtype, device="cuda")
    result = cute_conv.conv2d_fprop(
        act, flt, stride=stride, padding=padding, dilation=dilation, out=out, config=config
    )
    assert result is out
    torch.cuda.synchronize()
    ref = conv2d_reference(act, flt, stride=stride, padding=padding, dilation=dilation)
    report = compare_to_reference(out, ref)
    assert report.ok, f"{problem}: {report}"
    return out


# The seed matrix: N x C=K x filter x stride x padding.
SEED_MATRIX = list(itertools.product((1, 8), (384, 416), (3, 4, 5), (1, 2), (0, 1)))


@pytest.mark.parametrize(
    "n,ck,rs,stride,pad",
    SEED_MATRIX,
    ids=[f"n{n}-c{ck}-{rs}x{rs}-s{st}-p{p}" for n, ck, rs, st, p in SEED_MATRIX],
)
def test_seed_matrix(n, ck, rs, stride, pad):
    run_and_check(n, 12, 13, ck, ck, rs, rs, stride=stride, padding=pad)


GEOMETRIES = [
    pytest.param(dict(n=2, h=17, w=19, c=64, k=128, r=3, s=3, stride=(1, 2), padding=1), id="stride-1x2"),
    pytest.param(dict(n=2, h=20, w=20, c=64, k=64, r=3, s=3, dilation=2, padding=2), id="dilation-2"),
    pytest.param(dict(n=1, h=24, w=23, c=32, k=96, r=3, s=3, dilation=3, padding=1), id="dilation-3"),
    pytest.param(dict(n=2, h=16, w=16, c=64, k=64, r=3, s=3, dilation=(1, 2), padding=(1, 2)), id="dilation-1x2"),
    pytest.param(dict(n=2, h=15, w=16, c=64, k=64, r=3, s=3, padding=((0, 2), (1, 0))), id="asym-padding"),
    pytest.param(dict(n=2, h=15, w=16, c=64, k=64, r=5, s=3, padding=((2, 0), (0, 1)), stride=2), id="asym-padding-stride2"),
    pytest.param(dict(n=4, h=14, w=14, c=256, k=512, r=1, s=1), id="1x1"),
    pytest.param(dict(n=2, h=28, w=28, c=64, k=256, r=1, s=1, stride=2), id="1x1-stride2"),
    pytest.param(dict(n=2, h=32, w=32, c=8, k=64, r=7, s=7, stride=2, padding=3), id="7x7-s2-super-pixels"),
    pytest.param(dict(n=2, h=33, w=30, c=8, k=64, r=7, s=7, stride=2, padding=3), id="7x7-s2-folded"),
    pytest.param(dict(n=3, h=20, w=24, c=8, k=40, r=3, s=3, stride=2, padding=((0, 1), (1, 1))), id="3x3-s2-super-pixels"),
    pytest.param(dict(n=2, h=33, w=30, c=3, k=64, r=7, s=7, stride=2, padding=3), id="rgb-stem-space-to-depth"),
    pytest.param(dict(n=2, h=33, w=30, c=3, k=40, r=5, s=5, stride=3, padding=2), id="rgb-im2col"),
    pytest.param(dict(n=3, h=7, w=9, c=72, k=200, r=3, s=3, padding=1), id="m-and-k-tails"),
    pytest.param(dict(n=1, h=5, w=5, c=16, k=40, r=3, s=3), id="one-tile"),
    pytest.param(dict(n=1, h=1, w=1, c=64, k=64, r=1, s=1), id="single-pixel"),
    pytest.param(dict(n=2, h=9, w=9, c=64, k=64, r=4, s=2, padding=((2, 1), (1, 0))), id="even-filter"),
    pytest.param(dict(n=2, h=12, w=12, c=48, k=64, r=3, s=3, stride=3, padding=1), id="stride-3"),
    pytest.param(dict(n=1, h=40, w=40, c=16, k=32, r=3, s=3, stride=8, padding=1), id="stride-8"),
    pytest.param(dict(n=2, h=224, w=224, c=3, k=768, r=16, s=16, stride=16), id="vit-b16-patch-view"),
    pytest.param(dict(n=3, h=40, w=60, c=8, k=96, r=10, s=12, stride=(10, 12)), id="patch-view-10x12"),
    pytest.param(dict(n=2, h=28, w=28, c=96, k=192, r=2, s=2, stride=2), id="convnext-downsample-view"),
    pytest.param(dict(n=2, h=56, w=42, c=3, k=64, r=14, s=14, stride=14), id="patch14-rgb-unfolded"),
    pytest.param(dict(n=1, h=28, w=28, c=6, k=40, r=14, s=14, stride=14), id="patch14-c6-unfolded"),
]  # fmt: skip


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_geometry(geometry):
    run_and_check(**geometry)


@pytest.mark.parametrize(
    "c,k",
    [(3, 64), (5, 64), (3, 5), (64, 20), (12, 36)],
    ids=["rgb-stem", "c5", "c3-k5", "k20", "c12-k36"],
)
def test_unaligned_channels_are_padded(c, k):
    run_and_check(2, 16, 16, c, k, 3, 3, padding=1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(
    "out_dtype",
    [None, torch.float32, torch.bfloat16, torch.float16],
    ids=["same", "fp32", "bf16", "fp16"],
)
def test_dtypes(dtype, out_dtype):
    run_and_check(2, 10, 10, 64, 128, 3, 3, padding=1, dtype=dtype, out_dtype=out_dtype)
    tall = cute_conv.Conv2dConfig(tile_m=256, tile_n=64)
    run_and_check(3, 11, 13, 64, 72, 3, 3, padding=1, dtype=dtype, out_dtype=out_dtype, config=tall)


CONFIGS = [
    cute_conv.Conv2dConfig(tile_n=64),
    cute_conv.Conv2dConfig(tile_n=128, stages=2),
    cute_conv.Conv2dConfig(tile_n=192),
    cute_conv.Conv2dConfig(tile_n=256),
    cute_conv.Conv2dConfig(tile_n=96),
    cute_conv.Conv2dConfig(tile_n=160, cluster_n=2),
    cute_conv.Conv2dConfig(tile_n=224, cluster_m=2),
    cute_conv.Conv2dConfig(tile_n=128, cluster_m=2),
    cute_conv.Conv2dConfig(tile_n=128, cluster_n=2),
    cute_conv.Conv2dConfig(tile_n=128, raster_along_m=False, swizzle=3),
    cute_conv.Conv2dConfig(tile_n=256, swizzle=1),
    cute_conv.Conv2dConfig(tile_n=64, tile_k=16),
    cute_conv.Conv2dConfig(tile_n=128, tile_k=32, cluster_n=2),
    cute_conv.Conv2dConfig(tile_m=256, tile_n=64),
    cute_conv.Conv2dConfig(tile_m=256, tile_n=96, cluster_n=2),
    cute_conv.Conv2dConfig(tile_m=256, tile_n=128, cluster_m=2, tile_k=32),
    cute_conv.Conv2dConfig(tile_m=192, tile_n=128),
    cute_conv.Conv2dConfig(tile_m=192, tile_n=160, cluster_n=2),
    cute_conv.Conv2dConfig(tile_m=192, tile_n=64, cluster_m=2, tile_k=32),
    # 4-CTA clusters: the activation tile in four 32- or 16-row slices, the filter tile in
    # four 32-row ones, and both two ways.
    cute_conv.Conv2dConfig(tile_n=64, cluster_n=4),
    cute_conv.Conv2dConfig(tile_m=64, tile_n=64, cluster_n=4),
    cute_conv.Conv2dConfig(tile_n=128, cluster_m=4),
    cute_conv.Conv2dConfig(tile_n=128, cluster_m=2, cluster_n=2),
]


@pytest.mark.parametrize(
    "config",
    CONFIGS,
    ids=lambda c: (
        f"m{c.tile_m}-n{c.tile_n}-k{c.tile_k}-cl{c.cluster_m}x{c.cluster_n}-st{c.stages}-sw{c.swizzle}{'' if c.raster_along_m else '-rn'}"
    ),
)
def test_configs(config):
    # Tails in M and K, more tiles than a cluster, odd tile counts for the partial clusters.
    run_and_check(3, 19, 21, 96, 328, 3, 3, padding=1, config=config)


# Epilogue subtiles of a config's own width (``epi_n``): 64 wide on 128-, 192- and 256-row
# tiles, with stream-K partials, ping-pong epilogues, clusters and a float32 output; 16 wide
# on a tile 32 divides. Each on a 1x1 of K=120 (the last subtile half empty, one k-tile per
# tile, several tiles per CTA) and on a 3x3 with tails in M and N.
EPI_N_CONFIGS = [
    cute_conv.Conv2dConfig(epi_n=64),
    cute_conv.Conv2dConfig(tile_m=256, epi_n=64),
    cute_conv.Conv2dConfig(tile_m=192, tile_n=128, cluster_n=2, epi_n=64),
    cute_conv.Conv2dConfig(tile_n=192, cluster_m=2, epi_n=64),
    cute_conv.Conv2dConfig(tile_n=256, epi_n=64),
    cute_conv.Conv2dConfig(pingpong=True, epi_n=64),
    cute_conv.Conv2dConfig(stream_k=True, epi_n=64),
    cute_conv.Conv2dConfig(dynamic_schedule=True, epi_n=64),
    cute_conv.Conv2dConfig(tile_n=64, epi_n=16),
]


@pytest.mark.parametrize(
    "config",
    EPI_N_CONFIGS,
    ids=lambda c: (
        f"m{c.tile_m}-n{c.tile_n}-cl{c.cluster_m}x{c.cluster_n}-epi{c.epi_n}"
        f"{'-pingpong' if c.pingpong else ''}{'-streamk' if c.stream_k else ''}"
        f"{'-dynamic' if c.dynamic_schedule else ''}"
    ),
)
def test_epilogue_subtile_widths(config):
    run_and_check(32, 14, 14, 48, 120, 1, 1, config=config)
    run_and_check(3, 19, 21, 96, 328, 3, 3, padding=1, config=config)
    if config == EPI_N_CONFIGS[0]:
        run_and_check(3, 19, 21, 96, 328, 3, 3, padding=1, config=config, out_dtype=torch.float32)


# Channel counts whose last c-block (64-channel k-tiles of four 16-channel MMA k-blocks) holds
# channels in 1, 2 or 3 of its k-blocks, or in all 4 with the last one partly: the WGMMAs skip
# the k-blocks past C. Through each mainloop: im2col tiles, stream-K ranges that begin and end
# inside a tap, ping-pong consumers, halo tiles (one c-block per halo), and 2x1 clusters (the
# filter's partly empty k-tiles multicast to both CTAs, as default_config pairs 1x1s of such C).
PARTIAL_C_BLOCK_CHANNELS = (72, 96, 112, 120)
PARTIAL_C_BLOCK_CONFIGS = [
    pytest.param(cute_conv.Conv2dConfig(tile_n=128), id="im2col"),
    pytest.param(cute_conv.Conv2dConfig(tile_n=128, stream_k=True, stream_k_split=5), id="stream_k"),
    pytest.param(cute_conv.Conv2dConfig(tile_n=128, pingpong=True), id="pingpong"),
    pytest.param(cute_conv.Conv2dConfig(tile_m=128, tile_n=64, tile_w=32, halo_h=6), id="halo"),
    pytest.param(cute_conv.Conv2dConfig(tile_n=128, cluster_m=2), id="paired_m"),
]  # fmt: skip


@pytest.mark.parametrize("c", PARTIAL_C_BLOCK_CHANNELS)
@pytest.mark.parametrize("config", PARTIAL_C_BLOCK_CONFIGS)
def test_partial_c_blocks(config, c):
    run_and_check(3, 14, 17, c, 136, 3, 3, padding=1, config=config)


@pytest.mark.parametrize("c", [48, 120])
def test_default_pairs_ctas_for_1x1s_with_partly_empty_k_tiles(c):
    """RegNet-like 1x1s whose C leaves a k-tile partly empty run 2x1 clusters by default
    (``paired_m_max_channel_fill``), plain and fused, an M tail included."""
    from tests.repeated_calls import assert_repeated_calls_match

    act, flt = random_conv_inputs(32, 28, 27, c, 120, 1, 1)
    problem = cute_conv.Conv2dProblemShape.from_shapes(act.shape, flt.shape)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for has_residual in (False, True):
        config = cute_conv.default_config(problem, sms, has_residual=has_residual)
        assert config.cluster_shape_mn == (2, 1), config
    assert_repeated_calls_match(act, flt, 0, None)


def _bench_shapes():
    shapes = json.loads(SHAPES_JSON.read_text())["shapes"]
    return [pytest.param(s, id=s["name"]) for s in shapes]


@pytest.mark.parametrize("shape", _bench_shapes())
def test_benchmark_shapes(shape):
    run_and_check(
        shape["N"], shape["H"], shape["W"], shape["C"], shape["K"], shape["R"], shape["S"],
        stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"],
    )  # fmt: skip


def test_two_geometries_share_one_compilation():
    config = cute_conv.Conv2dConfig(tile_n=128, swizzle=2)
    run_and_check(2, 9, 9, 64, 128, 3, 3, padding=1, config=config)
    count = cute_conv.compile.cached_kernel_count()
    run_and_check(1, 20, 11, 128, 64, 5, 5, stride=2, padding=2, dilation=1, config=config)
    run_and_check(4, 7, 7, 32, 256, 1, 1, config=config)
    assert cute_conv.compile.cached_kernel_count() == count


def test_empty_batch_returns_empty_output():
    act, flt = random_conv_inputs(0, 8, 8, 64, 64, 3, 3)
    out = cute_conv.conv2d_fprop(act, flt, padding=1)
    assert out.shape == (0, 8, 8, 64) and out.device.type == "cuda"


def test_default_output_on_the_current_stream():
    act, flt = random_conv_inputs(2, 10, 10, 64, 64, 3, 3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = cute_conv.conv2d_fprop(act, flt, padding=1)
    side.synchronize()
    assert out.shape == (2, 10, 10, 64) and out.dtype == torch.bfloat16
    report = compare_to_reference(out, conv2d_reference(act, flt, padding=1))
    assert report.ok, str(report)


@pytest.mark.parametrize("how", ["current", "argument"])
def test_kernel_runs_on_the_callers_stream(how):
    act, flt = random_conv_inputs(2, 10, 10, 64, 64, 3, 3)
    out = torch.empty((2, 10, 10, 64), dtype=torch.bfloat16, device="cuda")
    side = torch.cuda.Stream()

    def conv_on_side_stream():
        if how == "current":
            with torch.cuda.stream(side):
                cute_conv.conv2d_fprop(act, flt, padding=1, out=out)
        else:
            cute_conv.conv2d_fprop(act, flt, padding=1, out=out, stream=side)

    def all_nan():
        return torch.isnan(out.float()).all()

    # This very call and the check first: the first launch of a lazily loaded kernel (CUDA's
    # default module loading) waits for the whole device, the sleep included, and the check's
    # kernels loaded after the sleep had seen the conv's output (H200, both cases).
    side.wait_stream(torch.cuda.current_stream())
    conv_on_side_stream()
    torch.cuda.current_stream().wait_stream(side)
    all_nan()
    out.fill_(float("nan"))
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(1_000_000_000)  # ~0.5 s of work queued ahead of the conv
    conv_on_side_stream()
    # On the side stream the conv still waits behind the sleep: the default stream sees NaN.
    assert all_nan()
    side.synchronize()
    report = compare_to_reference(out, conv2d_reference(act, flt, padding=1))
    assert report.ok, str(report)


def test_repeat_runs_are_bitwise_identical():
    act, flt = random_conv_inputs(4, 16, 16, 128, 256, 3, 3)
    first = cute_conv.conv2d_fprop(act, flt, padding=1)
    second = cute_conv.conv2d_fprop(act, flt, padding=1)
    assert torch.equal(first, second)


def test_dlpack_inputs_with_out():
    act, flt = random_conv_inputs(2, 8, 8, 64, 64, 3, 3)
    out = torch.full((2, 8, 8, 64), float("nan"), dtype=torch.bfloat16, device="cuda")

    class Capsule:  # a non-torch DLPack producer
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kwargs):
            return self.t.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    cute_conv.conv2d_fprop(Capsule(act), Capsule(flt), padding=1, out=Capsule(out))
    torch.cuda.synchronize()
    report = compare_to_reference(out, conv2d_reference(act, flt, padding=1))
    assert report.ok, str(report)


@pytest.mark.parametrize("stride", [16, 2], ids=["vit-like", "convnext-downsample"])
def test_patch_view_launches_on_the_tensors_themselves(stride, monkeypatch):
    """A conv whose windows tile its input runs on views that share the tensors' memory: the
    call launches the kernel directly, without the staged path."""
    import cute_conv.dispatch as dispatch

    def staged(*args, **kwargs):
        raise AssertionError("a patch conv went through run_staged")

    monkeypatch.setattr(dispatch, "run_staged", staged)
    c = 8 if stride == 16 else 96
    run_and_check(2, 4 * stride, 3 * stride, c, 96, stride, stride, stride=stride)


def test_rejected_call_writes_nothing():
    act, flt = random_conv_inputs(2, 8, 8, 64, 64, 3, 3)
    out = torch.full((2, 8, 8, 64), 7.0, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="stride"):
        cute_conv.conv2d_fprop(act, flt, padding=1, stride=9, out=out)
    assert bool((out == 7.0).all())


# A channel slice as out=: (N, H, W, C, K, R, S), padding, the buffer's channels and the
# slice's first, config, residual. The TMA-stored GEMM view, halo tiles (the tile view), K
# not a 16-byte row (stored by threads), the CUDA-core 1x1 kernel (few pixels), a staged stem
# (C=3: through a scratch output), the residual (C is K apart, D L apart).
HALO = cute_conv.Conv2dConfig(tile_m=128, tile_n=64, tile_w=32, halo_h=6)
OUT_SLICES = {
    "gemm-view": ((2, 14, 15, 64, 32, 3, 3), 1, 96, 32, None, False),
    "halo-tiles": ((2, 14, 14, 96, 64, 3, 3), 1, 192, 64, HALO, False),
    "thread-stores": ((2, 9, 9, 32, 12, 3, 3), 1, 40, 8, None, False),
    "cuda-core-1x1": ((1, 2, 2, 64, 64, 1, 1), 0, 256, 128, None, False),
    "staged-stem": ((2, 20, 20, 3, 32, 3, 3), 1, 64, 0, None, False),
    "residual": ((2, 14, 15, 64, 32, 3, 3), 1, 64, 32, None, True),
}


@pytest.mark.parametrize("case", list(OUT_SLICES))
def test_out_may_be_a_channel_slice(case):
    """The result lands in the slice; the buffer's other channels (NaN) are not written."""
    shape, padding, channels, start, config, residual = OUT_SLICES[case]
    n, h, w, c, k, r, s = shape
    act, flt = random_conv_inputs(n, h, w, c, k, r, s)
    problem = cute_conv.Conv2dProblemShape.from_shapes(act.shape, flt.shape, padding=padding)
    _, p, q, _ = problem.output_shape
    buffer = torch.full((n, p, q, channels), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = buffer[..., start : start + k]
    ref = conv2d_reference(act, flt, padding=padding)
    if residual:
        source = torch.randn(problem.output_shape, device="cuda").to(torch.bfloat16)
        result = cute_conv.conv2d_fprop_with_residual(
            act, flt, source, padding=padding, out=out, config=config
        )
        ref = ref + source.float()
    else:
        result = cute_conv.conv2d_fprop(act, flt, padding=padding, out=out, config=config)
    assert result is out
    report = compare_to_reference(out, ref)
    assert report.ok, f"{case}: {report}"
    assert buffer[..., :start].isnan().all() and buffer[..., start + k :].isnan().all()
