"""CPU checks of operand staging: the staged problem computes the same convolution."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from cute_conv.problem import Conv2dProblemShape
from cute_conv.reference import conv2d_reference
from cute_conv.staging import (
    SuperPixelView,
    clear_staged_weights,
    kernel_problem_for,
    overlaps,
    patch_view,
    run_staged,
    span_bytes,
    staged_weights,
    staging_plan,
    super_pixel_view,
    unfolds_rows,
    uses_im2col,
    uses_space_to_depth,
)
from cute_conv.testing import compare_to_reference
from cute_conv.validation import validate_conv_inputs

CASES = [
    pytest.param((2, 15, 17, 3, 16, 7, 7, dict(stride=2, padding=3)), id="rgb-stem-s2d"),
    pytest.param((1, 14, 13, 8, 16, 7, 7, dict(stride=2, padding=3)), id="c8-stem-s2d"),
    pytest.param((2, 14, 16, 8, 16, 7, 7, dict(stride=2, padding=3)), id="c8-stem-view"),
    pytest.param(
        (1, 16, 20, 8, 24, 5, 5, dict(stride=2, padding=((1, 2), (2, 1)))), id="c8-view-asym"
    ),
    pytest.param(
        (2, 10, 12, 8, 8, 4, 4, dict(stride=2, padding=((1, 2), (3, 0)))), id="c8-view-even"
    ),
    pytest.param((2, 16, 16, 4, 16, 3, 3, dict(stride=2, padding=((0, 1), (1, 0)))), id="s2d-asym"),
    pytest.param((1, 13, 12, 3, 8, 5, 4, dict(stride=2)), id="s2d-even-odd-filter"),
    pytest.param((2, 15, 17, 3, 16, 7, 7, dict(stride=3, padding=3)), id="rgb-im2col-s3"),
    pytest.param(
        (1, 9, 8, 5, 12, 3, 3, dict(padding=((0, 2), (1, 0)), dilation=2)), id="c5-asym-dil"
    ),
    pytest.param((2, 8, 8, 12, 20, 3, 3, dict(padding=1)), id="c12-padded-k20"),
    pytest.param((2, 8, 8, 16, 24, 1, 1, {}), id="aligned"),
    pytest.param((2, 32, 48, 3, 16, 16, 16, dict(stride=16)), id="vit-patch-view"),
    pytest.param((1, 20, 36, 4, 8, 10, 12, dict(stride=(10, 12))), id="patch-view-10x12"),
    pytest.param((1, 28, 42, 3, 8, 14, 14, dict(stride=14)), id="patch14-rgb-unfolded"),
    pytest.param((2, 28, 28, 6, 8, 14, 14, dict(stride=14)), id="patch14-c6-unfolded"),
]


def fake_launch(kernel_problem):
    """Stands in for the kernel: the reference conv of the staged operands."""

    def launch(x, flt, out, source, bias, scale):
        assert x.is_contiguous() and flt.is_contiguous()
        assert x.shape[-1] % 8 == 0  # K takes any size: output rows are stored by threads
        geom = dict(stride=kernel_problem.stride, padding=kernel_problem.padding,
                    dilation=kernel_problem.dilation)  # fmt: skip
        y = conv2d_reference(x, flt, **geom)
        if scale is not None:
            y = y * scale
        if bias is not None:
            y = y + bias
        if source is not None:
            y = y + source.float()
        out.copy_(y)

    return launch


@pytest.mark.parametrize("case", CASES)
def test_staged_problem_matches_the_conv(case):
    n, h, w, c, k, r, s, geom = case
    x = torch.randn(n, h, w, c)
    flt = torch.randn(k, r, s, c)
    problem = Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    kp = kernel_problem_for(problem)
    assert kp.C % 8 == 0 and math.prod(kp.output_shape[:2]) == math.prod(problem.output_shape[:2])
    # The super-pixel view's output is the output's [N, P, Q/2, 2K] view, the patch view's
    # its [N*P, 1, Q, K] view.
    assert math.prod(kp.output_shape[2:]) >= math.prod(problem.output_shape[2:])
    bias, scale = torch.randn(k), torch.rand(k)
    source = torch.randn(problem.output_shape)
    out = torch.full(problem.output_shape, float("nan"))
    run_staged(fake_launch(kp), staging_plan(problem, kp, 2), x, flt, out, source, bias, scale)
    expected = conv2d_reference(x, flt, **geom) * scale + bias + source
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("c", [1, 3, 8])
def test_space_to_depth_16bit(c):
    """bf16 stems of 1, 3 and 8 channels: blocks of 2x8, 2x8 and 2x4 pixels of 2, 4 and 8
    channels."""
    x = torch.randn(2, 15, 13, c).to(torch.bfloat16)
    flt = torch.randn(8, 7, 7, c).to(torch.bfloat16)
    problem = Conv2dProblemShape.from_shapes(x.shape, flt.shape, stride=2, padding=3)
    kp = kernel_problem_for(problem)
    assert uses_space_to_depth(problem) and kp.C == {1: 32, 3: 64, 8: 64}[c]
    assert (kp.R, kp.S) == {1: (4, 1), 3: (4, 1), 8: (4, 2)}[c]
    out = torch.full(problem.output_shape, float("nan"))
    run_staged(fake_launch(kp), staging_plan(problem, kp, 2), x, flt, out, None, None, None)
    expected = conv2d_reference(x, flt, stride=2, padding=3)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "n,h,w,c,r,s,padding",
    [
        (2, 33, 30, 8, 7, 7, 3),
        (3, 17, 21, 3, 7, 7, 3),
        (1, 9, 11, 5, 3, 3, ((0, 1), (2, 0))),
        (2, 12, 10, 1, 5, 4, 0),
        (1, 40, 7, 4, 3, 6, ((4, 0), (0, 5))),
    ],
)
def test_space_to_depth_kernel_matches_the_torch_staging(n, h, w, c, r, s, padding, dtype):
    """The staging kernel writes exactly what the torch specification does, every element
    (its output starts NaN-poisoned, so an element it skips shows)."""
    from cute_conv.compile import compile_space_to_depth
    from cute_conv.staging import _space_to_depth_torch, fold_shape

    x = torch.randn(n, h, w, c, device="cuda").to(dtype)
    problem = Conv2dProblemShape.from_shapes(x.shape, (8, r, s, c), stride=2, padding=padding)
    kp = kernel_problem_for(problem)
    expected = _space_to_depth_torch(x.cpu(), problem, kp)
    staged = torch.full(expected.shape, float("nan"), dtype=dtype, device="cuda")
    fold = fold_shape(problem)
    kernel = compile_space_to_depth("sm_90a", dtype, c, fold.channels, fold.cols)
    (top, _), (left, _) = problem.padding
    geometry = (n, h, w, kp.H, kp.W, top, left)
    kernel.launch(
        x.data_ptr(), staged.data_ptr(), *geometry, torch.cuda.current_stream().cuda_stream
    )
    assert torch.equal(staged.cpu(), expected)


def _random_activation(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A random CUDA activation: 16-bit values, or fp8's bytes (uint8) with no zero byte."""
    if dtype == torch.uint8:
        return torch.randint(1, 256, shape, dtype=dtype, device="cuda")
    return torch.randn(shape, device="cuda").to(dtype)


def _poison_next_allocation(shape: tuple[int, ...], element_size: int) -> None:
    """Fill a freed block of the size of a ``shape`` tensor with 0xFF bytes (NaN in 16 bits),
    which the caching allocator hands to the next tensor of that size: an element a staging
    kernel skips then shows."""
    torch.cuda.synchronize()
    poison = torch.full((math.prod(shape) * element_size,), 255, dtype=torch.uint8, device="cuda")
    del poison


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.uint8])
@pytest.mark.parametrize(
    "n,h,w,c,r,s,conv",
    [
        (1, 30, 28, 3, 3, 3, dict(padding=1)),  # VGG's stem: 27 columns of 32
        (2, 33, 30, 3, 7, 7, dict(stride=3, padding=3)),  # 147 columns of 152 (fp8: 160)
        (3, 17, 21, 1, 5, 4, dict(padding=((0, 2), (3, 1)), dilation=(2, 3))),
        (2, 44, 19, 4, 3, 5, dict(stride=(3, 2), padding=((2, 6), (0, 0)), dilation=(3, 1))),
        (1, 9, 11, 2, 2, 2, dict(padding=((1, 0), (0, 1)))),
        (2, 30, 27, 3, 11, 11, dict(stride=4, padding=2)),  # 363 columns: a thread per vector
    ],
)
@pytest.mark.parametrize("row_per_thread", [False, True])
def test_im2col_kernel_matches_the_torch_staging(n, h, w, c, r, s, conv, dtype, row_per_thread):
    """Each unfolding kernel (a thread per vector; a thread per row where the patch fits it,
    whichever ``unfolds_rows`` would pick) writes exactly what the torch specification does,
    every element (its output starts NaN-poisoned, so an element it skips shows); fp8
    activations arrive as their bytes (uint8), rows of 16-byte units of them."""
    from cute_conv.kernels.common.unfold import PATCH_ROW_MAX_COLUMNS

    from cute_conv.compile import compile_im2col_columns
    from cute_conv.staging import StagingLaunch, _im2col_columns_torch, _im2col_launch

    if row_per_thread and r * s * c > PATCH_ROW_MAX_COLUMNS:
        pytest.skip("a patch wider than a thread's row")
    x = _random_activation((n, h, w, c), dtype)
    problem = Conv2dProblemShape.from_shapes(x.shape, (8, r, s, c), **conv)
    kp = kernel_problem_for(problem, x.element_size())
    assert uses_im2col(problem) and kp.C % (16 // x.element_size()) == 0
    launch = _im2col_launch(problem, kp.C, x.element_size())
    compile_args = (c, (r, s)) if row_per_thread else (c,)
    launch = StagingLaunch(compile_im2col_columns, compile_args, launch.shape, launch.geometry)
    expected = _im2col_columns_torch(x.cpu(), problem, kp.C)
    _poison_next_allocation(expected.shape, x.element_size())
    staged = launch.run(x, None)
    torch.cuda.synchronize()
    assert staged.shape == expected.shape and torch.equal(staged.cpu(), expected)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.uint8])
@pytest.mark.parametrize(
    "n,h,w,c,r,s,conv",
    [
        (2, 32, 48, 257, 1, 1, dict(stride=(2, 3))),  # 257 channels of 264 (fp8: 272)
        (1, 10, 39, 129, 1, 3, dict(stride=3, padding=((0, 0), (1, 0)))),
        (3, 9, 7, 13, 3, 3, dict(padding=1)),  # 13 of 16 (fp8: 16)
        (1, 96, 96, 13, 3, 3, dict(padding=1)),  # 9,216 pixels: a thread per pixel's row
        (1, 5, 3, 47, 3, 3, dict(dilation=2, padding=2)),
    ],
)
def test_channel_pad_kernel_matches_torch_pad(n, h, w, c, r, s, conv, dtype):
    """The padding kernel writes x's channels then zeros, every element, where torch's pad
    did before (fp8 activations arrive as their bytes, rows of 16 of them)."""
    x = _random_activation((n, h, w, c), dtype)
    problem = Conv2dProblemShape.from_shapes(x.shape, (8, r, s, c), **conv)
    kp = kernel_problem_for(problem, x.element_size())
    plan = staging_plan(problem, kp, x.element_size())
    assert kp.C > c and not plan.im2col and plan.activation_launch is not None
    _poison_next_allocation(kp.activation_shape, x.element_size())
    staged = plan.activation_launch.run(x, None)
    torch.cuda.synchronize()
    expected = F.pad(x.cpu(), (0, kp.C - c))
    assert staged.shape == expected.shape and torch.equal(staged.cpu(), expected)


def test_channel_pad_is_one_staging_launch_of_the_pixels():
    """C off whole TMA rows is padded by the unfolding kernel on the 1x1 window of each pixel
    (width: C rounded up, no spatial padding or stride), as the plan's one activation launch;
    aligned C, gathered kernels and the views stage nothing."""
    problem = Conv2dProblemShape.from_shapes(
        (2, 32, 48, 257), (100, 3, 3, 257), stride=(2, 3), padding=((1, 0), (2, 1))
    )
    for element_bytes, width in ((2, 264), (1, 272)):
        kp = kernel_problem_for(problem, element_bytes)
        launch = staging_plan(problem, kp, element_bytes).activation_launch
        assert kp.C == width and launch.shape == kp.activation_shape == (2, 32, 48, width)
        assert launch.compile_args == (257,)
        # n, h, w, p, q, r, s, pad top, pad left, stride h, w, dilation h, w, row vectors
        vectors = width * element_bytes // 16
        assert launch.geometry == (2, 32, 48, 32, 48, 1, 1, 0, 0, 1, 1, 1, 1, vectors)
    gathered = kernel_problem_for(problem, 2, gathered=True)
    assert staging_plan(problem, gathered, 2).activation_launch is None
    aligned = Conv2dProblemShape.from_shapes((2, 32, 48, 256), (100, 3, 3, 256))
    assert staging_plan(aligned, kernel_problem_for(aligned), 2).activation_launch is None


@pytest.mark.parametrize(
    ("n", "size", "c", "r", "stride", "element_bytes", "rows"),
    [
        (1, 224, 3, 3, 1, 2, True),  # VGG's stem: 27 columns, 50,176 rows
        (1, 224, 3, 3, 1, 1, True),  # in fp8: 27 columns of 32
        (1, 64, 3, 3, 1, 2, False),  # 4,096 rows: too few for a row per thread
        (1, 224, 3, 4, 4, 2, False),  # ConvNeXt's patchify at batch 1: 3,136 rows
        (8, 224, 3, 4, 4, 2, True),  # and at batch 8: 25,088
        (8, 224, 3, 7, 3, 2, False),  # 147 columns: a thread per vector
        (8, 224, 4, 8, 4, 2, False),  # 256 columns
    ],
)
def test_small_patches_over_many_rows_unfold_a_row_per_thread(
    n, size, c, r, stride, element_bytes, rows
):
    """The unfolding launch takes the window at compile time (``Im2colPatchRows``) where
    ``unfolds_rows``: a patch of at most ``PATCH_ROW_FASTER_COLUMNS`` columns over at least
    ``PATCH_ROW_MIN_ROWS`` output pixels; the same launch geometry either way."""
    problem = Conv2dProblemShape.from_shapes(
        (n, size, size, c), (16, r, r, c), stride=stride, padding=r // 2 if stride == 1 else 0
    )
    kp = kernel_problem_for(problem, element_bytes)
    launch = staging_plan(problem, kp, element_bytes).activation_launch
    assert uses_im2col(problem, element_bytes) and launch.shape == kp.activation_shape
    assert unfolds_rows(problem, kp.C, element_bytes) == rows
    assert launch.compile_args == ((c, (r, r)) if rows else (c,))
    assert launch.geometry[-1] == kp.C * element_bytes // 16  # the row's vectors


def test_row_per_thread_bounds_fit_the_kernel():
    """The routing's column bound is one the patch-row kernel compiles for."""
    from cute_conv.kernels.common.unfold import PATCH_ROW_MAX_COLUMNS

    from cute_conv.staging import PATCH_ROW_FASTER_COLUMNS

    assert PATCH_ROW_FASTER_COLUMNS <= PATCH_ROW_MAX_COLUMNS


def test_im2col_is_used_for_few_channels_only():
    stem = Conv2dProblemShape.from_shapes((1, 32, 32, 3), (64, 7, 7, 3), stride=2, padding=3)
    assert uses_space_to_depth(stem) and not uses_im2col(stem)
    kp = kernel_problem_for(stem)
    # 2x8 blocks of 4 channels (3 and a zero): one tap per filter row pair
    assert (kp.R, kp.S, kp.C, kp.stride) == (4, 1, 64, (1, 1))
    c8 = Conv2dProblemShape.from_shapes((1, 30, 30, 8), (64, 7, 7, 8), stride=2, padding=3)
    kp = kernel_problem_for(c8)  # 2x4 blocks of 8 channels, taps two columns of blocks apart
    assert (kp.R, kp.S, kp.C, kp.stride, kp.dilation) == (4, 2, 64, (1, 1), (1, 2))
    assert kp.output_shape == c8.output_shape
    stem3 = Conv2dProblemShape.from_shapes((1, 32, 32, 3), (64, 7, 7, 3), stride=3, padding=3)
    assert uses_im2col(stem3)
    kp = kernel_problem_for(stem3)
    assert (kp.R, kp.S, kp.C) == (1, 1, 152)  # 7*7*3 = 147 columns, padded to 152
    assert not uses_im2col(Conv2dProblemShape.from_shapes((1, 8, 8, 16), (8, 3, 3, 16)))
    assert not uses_im2col(Conv2dProblemShape.from_shapes((1, 8, 8, 3), (8, 1, 1, 3)))
    aligned = Conv2dProblemShape.from_shapes((1, 8, 8, 64), (64, 3, 3, 64))
    assert kernel_problem_for(aligned) is aligned


def test_patch_view_reads_and_writes_the_tensors_in_place():
    """A ViT-B/16 patch embedding runs on views: no copy of x, the filter or the output."""
    x, flt = torch.randn(2, 32, 48, 3), torch.randn(16, 16, 16, 3)
    problem = Conv2dProblemShape.from_shapes(x.shape, flt.shape, stride=16)
    kp = kernel_problem_for(problem)
    assert patch_view(problem) == kp
    assert (kp.N, kp.H, kp.W, kp.C, kp.R, kp.S, kp.stride) == (4, 16, 3, 48, 16, 1, (1, 1))
    plan = staging_plan(problem, kp, 2)
    assert plan.patches and plan.on_view and not plan.stages_filter and not plan.im2col
    out = torch.full(problem.output_shape, float("nan"))
    seen = {}

    def launch(x_k, flt_k, out_k, source, bias, scale):
        seen.update(x=x_k.data_ptr(), flt=flt_k.data_ptr(), out=out_k.data_ptr())
        fake_launch(kp)(x_k, flt_k, out_k, source, bias, scale)

    run_staged(launch, plan, x, flt, out, None, None, None)
    assert seen == dict(x=x.data_ptr(), flt=flt.data_ptr(), out=out.data_ptr())
    torch.testing.assert_close(out, conv2d_reference(x, flt, stride=16), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "shape,geom,on_view,unfolded",
    [
        # (16-bit, fp8) each: whether the patch view takes the conv, whether it is unfolded
        (((1, 32, 32, 3), (8, 16, 16, 3)), dict(stride=16), (True, True), (False, False)),
        (((1, 32, 32, 3), (8, 16, 16, 3)), dict(stride=8), (False, False), (True, True)),
        (((1, 28, 28, 3), (8, 14, 14, 3)), dict(stride=14), (False, False), (True, True)),
        (((1, 28, 28, 8), (8, 14, 14, 8)), dict(stride=14), (True, True), (False, False)),
        (((1, 48, 48, 3), (8, 24, 24, 3)), dict(stride=24), (True, False), (False, True)),
        # Strides the im2col TMA takes: the view where no stem staging takes the conv.
        (((1, 16, 16, 16), (8, 2, 2, 16)), dict(stride=2), (True, True), (False, False)),
        (((1, 32, 32, 8), (8, 8, 8, 8)), dict(stride=8), (True, True), (False, False)),
        (((1, 16, 16, 4), (8, 2, 2, 4)), dict(stride=2), (False, False), (False, False)),
        (((1, 32, 32, 3), (8, 4, 4, 3)), dict(stride=4), (False, False), (True, True)),
        (((1, 32, 32, 4), (8, 4, 4, 4)), dict(stride=4), (False, False), (True, True)),
    ],
)
def test_patch_view_only_where_it_applies(shape, geom, on_view, unfolded):
    problem = Conv2dProblemShape.from_shapes(*shape, **geom)
    for element_bytes, view, columns in zip((2, 1), on_view, unfolded, strict=True):
        assert (patch_view(problem, element_bytes) is not None) == view
        assert uses_im2col(problem, element_bytes) == columns
        assert (kernel_problem_for(problem, element_bytes) == patch_view(problem, element_bytes)) == view


@pytest.mark.parametrize(
    "geom,tiles",
    [
        (dict(stride=16), True),
        (dict(stride=(16, 8)), False),
        (dict(stride=16, padding=((0, 1), (0, 0))), False),
        (dict(stride=16, dilation=2), False),
    ],
)
def test_strides_past_8_are_taken_where_the_windows_tile_the_input(geom, tiles):
    x = torch.empty(1, 32, 32, 3, dtype=torch.bfloat16, device="meta")
    flt = torch.empty(8, 16, 16, 3, dtype=torch.bfloat16, device="meta")
    if tiles:
        problem, _ = validate_conv_inputs(x, flt, **geom)
        assert kernel_problem_for(problem).stride == (1, 1)
    else:
        with pytest.raises(ValueError, match=r"stride must be in 1\.\.8 .*tile the input"):
            validate_conv_inputs(x, flt, **geom)
    bad_height = torch.empty(1, 40, 32, 3, dtype=torch.bfloat16, device="meta")
    with pytest.raises(ValueError, match="H and W multiples"):
        validate_conv_inputs(bad_height, flt, stride=16)


def test_super_pixel_view_of_the_c8_stem():
    """C=8, stride 2, W a multiple of 4, Q even: the input read as [N, H, W/4, 32], two output
    phases per GEMM row, 3 taps of 4 pixels along W; nothing copied but the filter."""
    stem = Conv2dProblemShape.from_shapes((2, 224, 224, 8), (64, 7, 7, 8), stride=2, padding=3)
    assert super_pixel_view(stem) == SuperPixelView(pixels=4, phases=2, first_tap=-1, taps=3)
    assert not uses_space_to_depth(stem) and not uses_im2col(stem)
    kp = kernel_problem_for(stem)
    assert kp.activation_shape == (2, 224, 56, 32) and kp.filter_shape == (128, 7, 3, 32)
    assert (kp.stride, kp.padding) == ((2, 1), ((3, 3), (1, 1)))
    assert kp.output_shape == (2, 112, 56, 128)  # the [2, 112, 112, 64] output, viewed
    x = torch.randn(stem.activation_shape)
    flt = torch.randn(stem.filter_shape)
    out = torch.empty(stem.output_shape)

    def launch(x_k, flt_k, out_k, source, bias, scale):
        assert x_k.data_ptr() == x.data_ptr() and out_k.data_ptr() == out.data_ptr()
        out_k.fill_(1.0)

    run_staged(launch, staging_plan(stem, kp, 2), x, flt, out, None, None, None)
    assert bool((out == 1.0).all())


@pytest.mark.parametrize(
    "shape,geom",
    [
        ((1, 15, 16, 8, 7, 7), dict(stride=2, padding=2)),  # Q odd
        ((1, 16, 18, 8, 7, 7), dict(stride=2, padding=3)),  # W not a multiple of 4
        ((1, 16, 16, 8, 7, 7), dict(stride=(2, 1), padding=3)),
        ((1, 16, 16, 8, 7, 7), dict(stride=2, padding=3, dilation=2)),
        ((1, 16, 16, 4, 7, 7), dict(stride=2, padding=3)),
        ((1, 16, 16, 8, 1, 1), dict(stride=2)),
    ],
)
def test_super_pixel_view_only_where_it_applies(shape, geom):
    n, h, w, c, r, s = shape
    problem = Conv2dProblemShape.from_shapes((n, h, w, c), (16, r, s, c), **geom)
    assert super_pixel_view(problem) is None


def test_super_pixel_view_needs_aligned_k():
    stem = Conv2dProblemShape.from_shapes((1, 16, 16, 8), (20, 7, 7, 8), stride=2, padding=3)
    assert super_pixel_view(stem) is None and uses_space_to_depth(stem)


def test_out_aliasing_x_goes_through_a_scratch():
    x = torch.randn(1, 6, 6, 16)
    flt = torch.randn(16, 3, 3, 16)
    problem = Conv2dProblemShape.from_shapes(x.shape, flt.shape, padding=1)
    expected = conv2d_reference(x, flt, padding=1) + x
    seen = {}

    def launch(xs, fs, out, source, bias, scale):
        seen["scratch"] = out.data_ptr() != x.data_ptr()
        fake_launch(problem)(xs, fs, out, source, bias, scale)

    run_staged(launch, staging_plan(problem, problem, 2), x, flt, x, x, None, None)
    assert seen["scratch"]
    torch.testing.assert_close(x, expected, rtol=1e-5, atol=1e-4)


def test_a_caller_that_ruled_out_aliasing_gets_out_written_directly():
    """``may_alias=False`` (``dispatch`` compared the pointers): no scratch output and no
    copy of the source; the kernel writes ``out`` and reads the source as given."""
    x = torch.randn(1, 6, 6, 12)
    flt = torch.randn(16, 3, 3, 12)
    problem = Conv2dProblemShape.from_shapes(x.shape, flt.shape, padding=1)
    kp = kernel_problem_for(problem)
    out = torch.full(problem.output_shape, float("nan"))
    source = torch.randn(problem.output_shape)
    seen = {}

    def launch(xs, fs, kernel_out, kernel_source, bias, scale):
        seen["out"], seen["source"] = kernel_out is out, kernel_source is source
        fake_launch(kp)(xs, fs, kernel_out, kernel_source, bias, scale)

    plan = staging_plan(problem, kp, 2)
    run_staged(launch, plan, x, flt, out, source, None, None, may_alias=False)
    assert seen == {"out": True, "source": True}
    torch.testing.assert_close(out, conv2d_reference(x, flt, padding=1) + source, rtol=1e-5,
                               atol=1e-4)  # fmt: skip


def test_overlaps():
    base = torch.zeros(100)
    assert overlaps(base[:50], base[49:])
    assert not overlaps(base[:50], base[50:])
    assert not overlaps(base, None)


def test_span_bytes_from_the_first_element_to_the_end_of_the_last():
    nhwc = torch.zeros(2, 3, 4, 16, dtype=torch.bfloat16)
    assert span_bytes(nhwc) == nhwc.numel() * 2  # contiguous
    assert span_bytes(nhwc[..., 4:12]) == (((1 * 3 + 2) * 4 + 3) * 16 + 7 + 1) * 2  # a slice
    assert span_bytes(nhwc.permute(0, 3, 1, 2)) == nhwc.numel() * 2  # channels_last NCHW
    assert span_bytes(nhwc[:, :, :, :1].expand(2, 3, 4, 5)) == ((1 * 3 + 2) * 4 + 3) * 32 + 2
    assert span_bytes(nhwc[:0]) == 0


@pytest.mark.parametrize("k", [64, 60], ids=["k-aligned", "k-padded"])
@pytest.mark.parametrize(
    "bias_dtype,scale_dtype,kernel_dtype",
    [
        (torch.bfloat16, None, torch.bfloat16),
        (torch.float16, torch.float16, torch.float16),
        (torch.bfloat16, torch.float32, torch.float32),
    ],
    ids=["bf16", "fp16-pair", "mixed-to-fp32"],
)
def test_channel_vectors_reach_the_kernel_in_one_dtype_padded_with_zeros(
    k, bias_dtype, scale_dtype, kernel_dtype
):
    x, flt = torch.randn(1, 6, 6, 16), torch.randn(k, 3, 3, 16)
    problem = Conv2dProblemShape.from_shapes(x.shape, flt.shape, padding=1)
    kp = kernel_problem_for(problem)
    bias = torch.randn(2 * k).to(bias_dtype)[::2]  # strided: the kernel wants it contiguous
    scale = None if scale_dtype is None else torch.randn(k).to(scale_dtype)
    seen = {}

    def launch(xs, fs, out, source, bias_k, scale_k):
        seen["bias"], seen["scale"] = bias_k, scale_k

    out = torch.empty(problem.output_shape)
    run_staged(launch, staging_plan(problem, kp, 2), x, flt, out, None, bias, scale)
    vectors = [(seen["bias"], bias)] + ([] if scale is None else [(seen["scale"], scale)])
    assert (seen["scale"] is None) == (scale is None)
    for staged, given in vectors:
        assert staged.dtype == kernel_dtype and staged.is_contiguous()
        assert staged.shape == (kp.K,)
        assert torch.equal(staged[:k], given.to(kernel_dtype))
        assert not staged[k:].any()


def _seen_filters(kernel_problem, seen: list):
    """A fake launch that also records the filter tensor the kernel was given."""
    inner = fake_launch(kernel_problem)

    def launch(x, flt, out, source, bias, scale):
        seen.append(flt)
        inner(x, flt, out, source, bias, scale)

    return launch


def _padded_call(flt: torch.Tensor, seen: list) -> torch.Tensor:
    """A C=12, K=20 conv (channels padded: the filter staged) on ``flt``; its output."""
    x = torch.randn(1, 6, 6, 12)
    problem = Conv2dProblemShape.from_shapes(x.shape, flt.shape, padding=1)
    kp = kernel_problem_for(problem)
    out = torch.full(problem.output_shape, float("nan"))
    run_staged(_seen_filters(kp, seen), staging_plan(problem, kp, 2), x, flt, out, None, None, None)
    torch.testing.assert_close(out, conv2d_reference(x, flt, padding=1), rtol=1e-5, atol=1e-4)
    return out


def test_staged_filter_is_kept_while_the_filter_is_unchanged():
    clear_staged_weights()
    flt, seen = torch.randn(20, 3, 3, 12), []
    _padded_call(flt, seen)
    _padded_call(flt, seen)
    assert seen[1] is seen[0] and len(staged_weights) == 1
    # An in-place write bumps the version counter: restaged, and the result follows it.
    flt.mul_(2)
    _padded_call(flt, seen)
    assert seen[2] is not seen[1]
    torch.testing.assert_close(seen[2][:20, ..., :12], flt)
    # Another tensor with equal values is another filter.
    _padded_call(flt.clone(), seen)
    assert seen[3] is not seen[2]


def test_staged_filter_cache_forgets_dead_filters_and_clears():
    clear_staged_weights()
    flt, seen = torch.randn(20, 3, 3, 12), []
    _padded_call(flt, seen)
    assert len(staged_weights) == 1
    del flt, seen
    assert len(staged_weights) == 0  # the entry went with its source
    flt, seen = torch.randn(20, 3, 3, 12), []
    _padded_call(flt, seen)
    clear_staged_weights()
    _padded_call(flt, seen)
    assert seen[1] is not seen[0]


def test_staged_filter_cache_skips_inference_tensors_and_unstaged_weights():
    clear_staged_weights()
    with torch.inference_mode():
        flt = torch.randn(20, 3, 3, 12)
    _padded_call(flt, [])
    assert len(staged_weights) == 0
    # An aligned filter staged only because out overlaps x: read as it is, nothing kept.
    x = torch.randn(1, 6, 6, 16)
    aligned = torch.randn(16, 1, 1, 16)
    problem = Conv2dProblemShape.from_shapes(x.shape, aligned.shape)
    expected = conv2d_reference(x, aligned)
    run_staged(fake_launch(problem), staging_plan(problem, problem, 2), x, aligned, x, None, None,
               None)  # fmt: skip
    torch.testing.assert_close(x, expected, rtol=1e-5, atol=1e-4)
    assert len(staged_weights) == 0


@pytest.mark.gpu
@pytest.mark.parametrize(
    "c,k,r,stride", [(12, 20, 3, 1), (3, 24, 7, 2), (8, 24, 7, 2)], ids=["pad", "s2d", "view"]
)
def test_kept_filter_follows_in_place_writes_eagerly_and_in_cuda_graphs(c, k, r, stride):
    """Staged filters (padded, space-to-depth, super-pixel view) are reused across eager
    calls yet follow an in-place write; a CUDA graph captured with a kept filter restages
    it in the graph, so a replay after a write sees the new values."""
    import cute_conv

    clear_staged_weights()
    x = torch.randn(2, 16, 16, c, device="cuda").to(torch.bfloat16)
    flt = (torch.randn(k, r, r, c, device="cuda") / (r * r * c) ** 0.5).to(torch.bfloat16)
    geom = dict(stride=stride, padding=r // 2)
    problem = Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    assert staging_plan(problem, kernel_problem_for(problem), 2).stages_filter
    assert (super_pixel_view(problem) is not None) == (c == 8)
    # An explicit config: the staged path, where the heuristic would gather small C=12 convs.
    config = cute_conv.default_config(kernel_problem_for(problem))

    def check(out):
        ref = conv2d_reference(x, flt, **geom)
        assert compare_to_reference(out, ref).ok

    check(cute_conv.conv2d_fprop(x, flt, config=config, **geom))
    check(cute_conv.conv2d_fprop(x, flt, config=config, **geom))
    assert len(staged_weights) == 1
    flt.mul_(-0.5)
    check(cute_conv.conv2d_fprop(x, flt, config=config, **geom))
    out = torch.full(cute_conv.conv2d_fprop(x, flt, config=config, **geom).shape,
                     float("nan"), dtype=x.dtype, device="cuda")  # fmt: skip
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom)
    flt.mul_(-3.0)
    graph.replay()
    torch.cuda.synchronize()
    check(out)


def test_converted_bias_and_scale_are_kept_while_unchanged():
    clear_staged_weights()
    x, flt = torch.randn(1, 4, 4, 12), torch.randn(20, 1, 1, 12)  # C padded: a staged call
    bias, scale = torch.randn(20).to(torch.bfloat16), torch.rand(20)  # two dtypes: float32
    problem = Conv2dProblemShape.from_shapes(x.shape, flt.shape)
    plan = staging_plan(problem, kernel_problem_for(problem), 2)
    seen = []

    def call():
        def launch(xs, fs, out, source, b, s):
            seen.append((b, s))
            fake_launch(plan.kernel_problem)(xs, fs, out, source, b, s)

        out = torch.full(problem.output_shape, float("nan"))
        run_staged(launch, plan, x, flt, out, None, bias, scale)
        expected = conv2d_reference(x, flt) * scale + bias.float()
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-4)

    call()
    call()
    assert seen[1][0] is seen[0][0] and seen[1][1] is scale  # float32 already: no copy
    assert seen[0][0].dtype == torch.float32 and seen[0][0].shape == (20,)  # K is not padded
    bias.add_(1.0)
    call()
    assert seen[2][0] is not seen[1][0] and seen[2][1] is scale


def test_staged_weights_are_reused_on_their_own_stream_only():
    """A copy staged on one stream is not handed to a call on another (which would not
    wait for the staging); each stream gets its own, and the later one replaces the entry."""
    clear_staged_weights()
    x = torch.randn(1, 6, 6, 12)
    flt, bias = torch.randn(20, 3, 3, 12), torch.randn(40)[::2]  # a strided bias: copied
    problem = Conv2dProblemShape.from_shapes(x.shape, flt.shape, padding=1)
    plan = staging_plan(problem, kernel_problem_for(problem), 2)
    seen = []

    def call(stream):
        def launch(xs, fs, out, source, b, s):
            seen.append((fs, b))
            fake_launch(plan.kernel_problem)(xs, fs, out, source, b, s)

        out = torch.full(problem.output_shape, float("nan"))
        run_staged(launch, plan, x, flt, out, None, bias, None, stream=stream)

    call(7)
    call(7)
    call(9)
    assert seen[1][0] is seen[0][0] and seen[1][1] is seen[0][1]
    assert seen[2][0] is not seen[1][0] and seen[2][1] is not seen[1][1]
