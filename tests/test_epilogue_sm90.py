"""GPU numerics of the fused epilogues and the residual add against a float32 torch reference."""

from __future__ import annotations

import pytest
import torch

import cute_conv
from cute_conv.reference import TORCH_ACTIVATIONS, conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs

pytestmark = pytest.mark.gpu



def cubic(y):  # works on torch tensors and on cute TensorSSA alike
    return y * y * y * 0.25 - y


def reference(x, flt, geom, *, alpha=1.0, bias=None, scale=None, activation=None, fn=None,
              source=None, beta=0.0, order="after_activation"):  # fmt: skip
    y = conv2d_reference(x, flt, **geom) * alpha
    if scale is not None:
        y = y * scale.float()
    if bias is not None:
        y = y + bias.float()
    residual = 0.0 if source is None else beta * source.float()
    if order == "before_activation":
        y = y + residual
    y = TORCH_ACTIVATIONS[activation](y)
    if fn is not None:
        y = fn(y)
    if order == "after_activation":
        y = y + residual
    return y


CASES = [
    pytest.param(dict(bias=True), id="bias"),
    pytest.param(dict(alpha=0.5, scale=True, bias=True), id="alpha-scale-bias"),
    *[pytest.param(dict(bias=True, activation=a), id=f"bias-{a}") for a in TORCH_ACTIVATIONS if a],
    pytest.param(dict(fn=cubic), id="epilogue-fn"),
    pytest.param(dict(scale=True, bias=True, activation="silu", fn=cubic), id="bn-silu-fn"),
    pytest.param(dict(residual=1.0), id="residual"),
    pytest.param(dict(residual=0.5), id="residual-beta-0.5"),
    pytest.param(dict(activation="relu", residual=1.0), id="relu-residual"),
    pytest.param(dict(bias=True, activation="relu", residual=-2.0), id="bias-relu-residual"),
    pytest.param(dict(scale=True, bias=True, activation="gelu", fn=cubic, residual=0.3), id="all"),
]

SHAPES = [
    pytest.param((2, 12, 13, 64, 128, 3, 3, dict(padding=1)), id="3x3"),
    pytest.param((3, 9, 11, 72, 200, 3, 3, dict(padding=1, stride=2)), id="tails-stride2"),
    pytest.param((2, 14, 14, 256, 384, 1, 1, {}), id="1x1-k384"),
]


def run_case(shape, case, *, out_dtype=torch.bfloat16, vector_dtype=torch.float32, config=None):
    n, h, w, c, k, r, s, geom = shape
    x, flt = random_conv_inputs(n, h, w, c, k, r, s)
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    bias = torch.randn(k, device="cuda").to(vector_dtype) if case.get("bias") else None
    scale = (torch.rand(k, device="cuda") + 0.5).to(vector_dtype) if case.get("scale") else None
    epi = dict(alpha=case.get("alpha", 1.0), bias=bias, scale=scale,
               activation=case.get("activation"), epilogue_fn=case.get("fn"))  # fmt: skip
    out = torch.full(problem.output_shape, float("nan"), dtype=out_dtype, device="cuda")
    order = case.get("order", "after_activation")
    if "residual" in case:
        beta = case["residual"]
        source = torch.randn(problem.output_shape, device="cuda").to(out_dtype)
        cute_conv.conv2d_fprop_with_residual(
            x, flt, source, beta=beta, residual_order=order, out=out, config=config, **geom, **epi
        )
    else:
        beta, source = 0.0, None
        cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom, **epi)
    torch.cuda.synchronize()
    ref = reference(x, flt, geom, alpha=epi["alpha"], bias=bias, scale=scale,
                    activation=epi["activation"], fn=case.get("fn"), source=source, beta=beta,
                    order=order)  # fmt: skip
    report = compare_to_reference(out, ref)
    assert report.ok, f"{problem} {case}: {report}"


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("case", CASES)
def test_epilogue_variants(shape, case):
    run_case(shape, case)


ORDERS = ("after_activation", "before_activation")


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("activation", list(TORCH_ACTIVATIONS))
def test_every_activation_in_both_residual_orders(activation, order):
    case = dict(scale=True, bias=True, activation=activation, residual=0.75, order=order)
    run_case(SHAPES[1].values[0], case)


@pytest.mark.parametrize(
    "config",
    [None, cute_conv.Conv2dConfig(tile_m=256, tile_n=64), cute_conv.Conv2dConfig(pingpong=True),
     cute_conv.Conv2dConfig(dynamic_schedule=True), cute_conv.Conv2dConfig(stream_k=True),
     cute_conv.Conv2dConfig(tile_m=192, tile_n=128, cluster_n=2),
     cute_conv.Conv2dConfig(tile_m=256, tile_n=64, tile_w=64, halo_h=6)],
    ids=["default", "m256-n64", "pingpong", "dynamic", "stream-k", "m192", "halo"],
)  # fmt: skip
def test_residual_before_activation_across_configs(config):
    """ResNet's order through the kernel's schedules (several tiles per CTA: the source ring
    runs ahead across tile boundaries), with an epilogue_fn after the activation."""
    case = dict(bias=True, activation="relu", residual=1.0, order="before_activation")
    run_case((16, 40, 40, 64, 264, 3, 3, dict(padding=1)), case, config=config)
    run_case((4, 14, 14, 256, 128, 1, 1, {}), dict(case, fn=cubic), config=config)


def test_residual_before_activation_staged_problems():
    """Problems run through a staging pass (padded channels, the stem's super-pixel view)
    read the residual through the same views in ResNet's order."""
    case = dict(bias=True, scale=True, activation="relu", residual=1.0, order="before_activation")
    run_case((2, 10, 10, 5, 20, 3, 3, dict(padding=1)), case)
    run_case((2, 32, 32, 8, 64, 7, 7, dict(stride=2, padding=3)), case)
    run_case((2, 64, 48, 3, 96, 16, 16, dict(stride=16)), case)  # the patch view


def test_residual_on_the_patch_view():
    """A ViT-style patch embedding (stride 16) runs on views of x, the filter, the output and
    the source: every epilogue term in both orders."""
    for order in ("after_activation", "before_activation"):
        case = dict(bias=True, scale=True, activation="gelu", residual=0.5, order=order)
        run_case((3, 32, 64, 3, 192, 16, 16, dict(stride=16)), case)


@pytest.mark.parametrize(
    "config",
    [cute_conv.Conv2dConfig(tile_n=256), cute_conv.Conv2dConfig(tile_n=128, cluster_n=2),
     cute_conv.Conv2dConfig(tile_n=64, cluster_m=2),
     cute_conv.Conv2dConfig(tile_n=256, tile_k=32, cluster_n=2),
     cute_conv.Conv2dConfig(tile_n=160, cluster_n=2), cute_conv.Conv2dConfig(tile_n=224),
     cute_conv.Conv2dConfig(tile_m=256, tile_n=64), cute_conv.Conv2dConfig(tile_m=256, tile_n=128, cluster_n=2),
     cute_conv.Conv2dConfig(tile_m=192, tile_n=128, cluster_n=2),
     cute_conv.Conv2dConfig(tile_n=64, cluster_n=4), cute_conv.Conv2dConfig(cluster_m=2, cluster_n=2),
     # Three A/B stages: the ring holds the whole tile of C (default_config's whole source).
     cute_conv.Conv2dConfig(tile_n=256, cluster_m=2, stages=3),
     cute_conv.Conv2dConfig(tile_n=224, stages=3),
     # A config's own subtile width: 32 (4 C buffers, a whole tile), 64 on 128x256 (2 of 4).
     cute_conv.Conv2dConfig(epi_n=32), cute_conv.Conv2dConfig(tile_n=256, epi_n=64)],
    ids=["n256", "n128-cluster-1x2", "n64-cluster-2x1", "n256-k32-full-tile-of-c", "n160-1x2",
         "n224", "m256-n64", "m256-n128-1x2", "m192-n128-1x2", "n256-2x1-whole-c",
         "n224-whole-c", "n128-epi32", "n256-epi64", "n64-1x4", "n128-2x2"],
)  # fmt: skip
def test_residual_across_configs(config):
    case = dict(bias=True, activation="relu", residual=1.0)
    run_case(SHAPES[1].values[0], case, config=config)
    # Several tiles per persistent CTA: the source ring runs ahead across tile boundaries.
    run_case((16, 40, 40, 64, 264, 3, 3, dict(padding=1)), case, config=config)


@pytest.mark.parametrize("raster_along_m", [True, False], ids=["raster-m", "raster-n"])
def test_channel_vectors_follow_the_tile_column(raster_along_m):
    """A CTA keeps its bias and scale registers for its next tile of the same column and
    loads them anew where the column changes. Three columns (K=320) of 200 row tiles, ~4.5
    tiles a CTA: where a CTA's successive tiles keep or change their column depends on the
    raster, so both rasters run."""
    config = cute_conv.Conv2dConfig(raster_along_m=raster_along_m)
    case = dict(scale=True, bias=True, activation="relu", residual=1.0)
    run_case((16, 40, 40, 64, 320, 3, 3, dict(padding=1)), case, config=config)
    run_case((16, 40, 40, 64, 320, 3, 3, dict(padding=1)), dict(bias=True), config=config)


def test_fp32_output_and_16bit_vectors():
    case = dict(scale=True, bias=True, activation="gelu_tanh", residual=0.5)
    run_case(SHAPES[0].values[0], case, out_dtype=torch.float32, vector_dtype=torch.bfloat16)
    run_case(SHAPES[0].values[0], case, out_dtype=torch.float16, vector_dtype=torch.float16)
    # 256-row tiles: each warpgroup's accumulator holds two 64-row blocks per subtile.
    tall = cute_conv.Conv2dConfig(tile_m=256, tile_n=64)
    run_case(SHAPES[1].values[0], case, out_dtype=torch.float32, config=tall)


def test_unaligned_channels_with_epilogue_and_residual():
    case = dict(bias=True, scale=True, residual=1.0)
    run_case((2, 10, 10, 5, 20, 3, 3, dict(padding=1)), case)
    run_case((2, 10, 10, 5, 20, 3, 3, dict(padding=1)), case, vector_dtype=torch.bfloat16)


def test_strided_bias_is_read_as_its_values():
    x, flt = random_conv_inputs(2, 8, 8, 64, 128, 3, 3)
    bias = torch.randn(256, device="cuda")[::2]  # a view with stride 2: staged contiguous
    out = cute_conv.conv2d_fprop(x, flt, padding=1, bias=bias)
    assert compare_to_reference(out, reference(x, flt, dict(padding=1), bias=bias)).ok


def test_beta_zero_is_bit_identical_to_conv2d_fprop():
    x, flt = random_conv_inputs(2, 16, 16, 64, 192, 3, 3)
    bias = torch.randn(192, device="cuda")
    source = torch.randn(2, 16, 16, 192, device="cuda").to(torch.bfloat16)
    plain = cute_conv.conv2d_fprop(x, flt, padding=1, bias=bias, activation="silu")
    fused = cute_conv.conv2d_fprop_with_residual(
        x, flt, source, beta=0.0, padding=1, bias=bias, activation="silu"
    )
    assert torch.equal(plain, fused)


def test_in_place_residual_out_is_source():
    x, flt = random_conv_inputs(2, 12, 12, 64, 96, 3, 3)
    source = torch.randn(2, 12, 12, 96, device="cuda").to(torch.bfloat16)
    expected = reference(x, flt, dict(padding=1), source=source, beta=1.0)
    result = cute_conv.conv2d_fprop_with_residual(x, flt, source, padding=1, out=source)
    torch.cuda.synchronize()
    assert result is source
    report = compare_to_reference(source, expected)
    assert report.ok, str(report)


def test_x_plus_conv_x_in_place():
    # out, source and the activation are one tensor: x = x + conv(x).
    x, flt = random_conv_inputs(4, 20, 20, 64, 64, 3, 3)
    expected = reference(x, flt, dict(padding=1), source=x, beta=1.0)
    cute_conv.conv2d_fprop_with_residual(x, flt, x, padding=1, out=x)
    torch.cuda.synchronize()
    report = compare_to_reference(x, expected)
    assert report.ok, str(report)


def test_epilogue_fn_that_does_not_compile_is_a_clear_error():
    x, flt = random_conv_inputs(1, 8, 8, 64, 64, 3, 3)
    out = torch.full((1, 8, 8, 64), 3.0, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="epilogue_fn .* could not be compiled"):
        cute_conv.conv2d_fprop(x, flt, padding=1, out=out, epilogue_fn=lambda y: y.no_such_op())
    assert bool((out == 3.0).all())


def test_rejected_residual_call_writes_nothing():
    x, flt = random_conv_inputs(1, 8, 8, 64, 64, 3, 3)
    out = torch.full((1, 8, 8, 64), 3.0, dtype=torch.bfloat16, device="cuda")
    source = torch.zeros(1, 8, 8, 32, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="source has shape"):
        cute_conv.conv2d_fprop_with_residual(x, flt, source, padding=1, out=out)
    assert bool((out == 3.0).all())


def test_super_pixel_view_epilogue():
    """The C=8 stem's super-pixel view (two output phases per GEMM row): bias and scale
    repeated per phase, the residual read through the output's view; default tiles and the
    256x128 2x1 ones the heuristic gives large stems."""
    case = dict(bias=True, scale=True, activation="relu", residual=0.5)
    run_case((2, 32, 32, 8, 64, 7, 7, dict(stride=2, padding=3)), case)
    tall = cute_conv.Conv2dConfig(tile_m=256, tile_n=128, tile_k=32, cluster_m=2)
    run_case((6, 64, 96, 8, 64, 7, 7, dict(stride=2, padding=3)), case, config=tall)


@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
def test_unaligned_k_residual_in_both_orders_and_in_place(order):
    """K not a multiple of 8 with a residual: the kernel reads the source and stores the
    output by threads (``store_by_threads``), no scratch; also with out=source, where each
    thread reads an element of C before it writes that element of D. (A freed NaN block of
    a padded scratch's size stays in the allocator's cache, as it did when this path went
    through a scratch output.)"""
    x, flt = random_conv_inputs(2, 10, 10, 16, 20, 3, 3)
    bias = torch.randn(20, device="cuda")
    source = torch.randn(2, 10, 10, 20, device="cuda").to(torch.bfloat16)
    expected = reference(x, flt, dict(padding=1), bias=bias, activation="relu", source=source,
                         beta=1.0, order=order)  # fmt: skip
    for in_place in (False, True):
        src = source.clone()
        poison = torch.full((2, 10, 10, 24), float("nan"), dtype=torch.bfloat16, device="cuda")
        del poison
        out = src if in_place else torch.full_like(src, float("nan"))
        cute_conv.conv2d_fprop_with_residual(
            x, flt, src, padding=1, bias=bias, activation="relu", residual_order=order, out=out
        )
        torch.cuda.synchronize()
        report = compare_to_reference(out, expected)
        assert report.ok, f"in_place={in_place}: {report}"
