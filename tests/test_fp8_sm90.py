"""GPU numerics of the fp8 conv: fp8 activation and filter, fp32 accumulation, dequantization,
epilogue and (optionally) fp8 output fused, against a float32 reference computed on the
dequantized fp8 inputs.

Tolerances (``cute_conv.testing``): the reference sees exactly the values the kernel
multiplies, so a 16-bit or float32 output is held to the bf16 tests' bounds, plus the fp8
MMA's coarser accumulation (``ACCUMULATION_RTOL_FP8``); a float8_e4m3fn output to its own
rounding (``REL_TOL_FP8_OUTPUT``, and a few of its ulps at most per value).
"""

from __future__ import annotations

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfig
from cute_conv.reference import TORCH_ACTIVATIONS
from cute_conv.testing import compare_to_reference, random_conv_inputs
from tests.test_epilogue_sm90 import reference

pytestmark = pytest.mark.gpu

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def fp8_inputs(n, h, w, c, k, r, s, *, act_dtype=E4M3, filter_dtype=E4M3):
    """Fresh inputs quantized per tensor: (x, x_scale, filter, w_scale) and their dequantized
    float32 values (what the reference convolves)."""
    x, flt = random_conv_inputs(n, h, w, c, k, r, s, dtype=torch.float32)
    qx, x_scale = cute_conv.quantize_fp8(x, dtype=act_dtype)
    qf, w_scale = cute_conv.quantize_fp8(flt, dtype=filter_dtype)
    return (qx, x_scale, qf, w_scale), (qx.float() * x_scale, qf.float() * w_scale)


def run_fp8(shape, *, out_dtype=torch.bfloat16, act_dtype=E4M3, filter_dtype=E4M3, bias=False,
            scale=False, alpha=1.0, activation=None, residual=None, order="after_activation",
            config=None):  # fmt: skip
    n, h, w, c, k, r, s, geom = shape
    (qx, x_scale, qf, w_scale), (x32, f32) = fp8_inputs(
        n, h, w, c, k, r, s, act_dtype=act_dtype, filter_dtype=filter_dtype
    )
    problem = cute_conv.Conv2dProblemShape.from_shapes(qx.shape, qf.shape, **geom)
    b = torch.randn(k, device="cuda") if bias else None
    sc = torch.rand(k, device="cuda") + 0.5 if scale else None
    source, beta = None, 0.0
    if residual is not None:
        beta = residual
        source = torch.randn(problem.output_shape, device="cuda").to(out_dtype)
    ref = reference(x32, f32, geom, alpha=alpha, bias=b, scale=sc, activation=activation,
                    source=source, beta=beta, order=order)  # fmt: skip
    out_scale = None
    if out_dtype == E4M3:
        # As a calibrated scale would: the result's largest magnitude lands at 400 (< 448).
        out_scale = ref.abs().max() / 400
        ref = ref / out_scale
    out = torch.full(problem.output_shape, float("nan"), device="cuda").to(out_dtype)
    kwargs = dict(alpha=alpha, bias=b, scale=sc, activation=activation, out=out, config=config,
                  x_scale=x_scale, w_scale=w_scale, out_scale=out_scale, **geom)  # fmt: skip
    if residual is not None:
        cute_conv.conv2d_fprop_with_residual(
            qx, qf, source, beta=beta, residual_order=order, **kwargs
        )
    else:
        cute_conv.conv2d_fprop(qx, qf, **kwargs)
    torch.cuda.synchronize()
    report = compare_to_reference(out, ref, fp8_inputs=True)
    assert report.ok, f"{problem} {out_dtype}: {report}"


SHAPES = [
    pytest.param((2, 12, 13, 64, 128, 3, 3, dict(padding=1)), id="3x3"),
    pytest.param((3, 9, 11, 72, 200, 3, 3, dict(padding=1, stride=2)), id="tails-stride2"),
    pytest.param((2, 14, 14, 256, 384, 1, 1, {}), id="1x1-k384"),
    pytest.param((2, 20, 20, 3, 64, 7, 7, dict(padding=3, stride=2)), id="stem-c3"),
    pytest.param((1, 16, 16, 8, 32, 7, 7, dict(padding=3, stride=2)), id="stem-c8"),
    pytest.param((2, 17, 15, 3, 64, 3, 3, dict(padding=1)), id="rgb-im2col"),
    pytest.param((4, 7, 7, 512, 512, 3, 3, dict(padding=1)), id="deep-k4608"),
    pytest.param((2, 64, 32, 1, 96, 16, 16, dict(stride=16)), id="patch-view-c1"),
    pytest.param((2, 48, 48, 3, 64, 24, 24, dict(stride=24)), id="patch24-rgb-unfolded"),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float16, torch.float32, E4M3])
def test_fp8_conv_every_output_dtype(shape, out_dtype):
    run_fp8(shape, out_dtype=out_dtype, bias=True)


@pytest.mark.parametrize("dtypes", [(E5M2, E4M3), (E4M3, E5M2), (E5M2, E5M2)], ids=str)
def test_fp8_input_pairings(dtypes):
    run_fp8(SHAPES[0].values[0], act_dtype=dtypes[0], filter_dtype=dtypes[1])


EPILOGUES = [
    pytest.param(dict(alpha=0.5, scale=True, bias=True), id="alpha-scale-bias"),
    *[pytest.param(dict(bias=True, activation=a), id=f"bias-{a}") for a in TORCH_ACTIVATIONS if a],
    pytest.param(dict(bias=True, activation="relu", residual=1.0), id="relu-residual"),
    pytest.param(dict(bias=True, activation="relu", residual=1.0, order="before_activation"),
                 id="relu-residual-before"),  # fmt: skip
    pytest.param(dict(scale=True, bias=True, activation="gelu", residual=-0.5,
                      order="before_activation"), id="all-before"),  # fmt: skip
]


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, E4M3])
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_fp8_epilogues(epilogue, out_dtype):
    run_fp8(SHAPES[1].values[0], out_dtype=out_dtype, **epilogue)


CONFIGS = [
    pytest.param(Conv2dConfig(tile_k=64), id="tile_k64"),
    pytest.param(Conv2dConfig(tile_k=32), id="tile_k32"),
    pytest.param(Conv2dConfig(tile_n=256, cluster_n=2), id="128x256-1x2"),
    pytest.param(Conv2dConfig(tile_m=256, tile_n=64, cluster_m=2), id="256x64-2x1"),
    pytest.param(Conv2dConfig(tile_n=64, cluster_n=4), id="128x64-1x4"),
    pytest.param(Conv2dConfig(tile_m=192, tile_n=128), id="192x128"),
    pytest.param(Conv2dConfig(pingpong=True), id="pingpong"),
    pytest.param(Conv2dConfig(stream_k=True), id="stream_k"),
    pytest.param(Conv2dConfig(dynamic_schedule=True), id="dynamic"),
    pytest.param(Conv2dConfig(tile_m=256, tile_n=64, tile_k=128, tile_w=32, halo_h=10), id="halo"),
    pytest.param(
        Conv2dConfig(tile_k=128, tile_w=64, halo_h=4, halo_w=72), id="pitched-halo"
    ),
]


@pytest.mark.parametrize("out_dtype", [torch.bfloat16, E4M3])
@pytest.mark.parametrize("residual", [None, 1.0], ids=["plain", "residual"])
@pytest.mark.parametrize("config", CONFIGS)
def test_fp8_across_configs(config, residual, out_dtype):
    # K=128: fp8 output rows of 128 bytes, so an fp8 residual is read by TMA and staged in
    # SMEM as the output is (K=200 above is stored and read by the threads).
    shape = (2, 16, 28, 128, 128, 3, 3, dict(padding=1))
    run_fp8(shape, bias=True, activation="relu", residual=residual, config=config,
            out_dtype=out_dtype)  # fmt: skip


# fp8 k-tiles of four 32-channel MMA k-blocks: in 128-channel k-tiles C=96 fills 3 of every
# k-tile's (the WGMMAs skip the fourth), C=160 a whole c-block and 1 of the next, C=208 a whole
# one and 3 of the next, the last partly; in 64-channel k-tiles (two k-blocks) each leaves the
# last c-block half full. Through im2col tiles, stream-K, ping-pong and halo tiles.
@pytest.mark.parametrize("c", (96, 160, 208))
@pytest.mark.parametrize("config", [CONFIGS[i] for i in (0, 5, 6, 8)] + [Conv2dConfig(tile_k=128)])
def test_fp8_partial_c_blocks(config, c):
    run_fp8((2, 16, 28, c, 128, 3, 3, dict(padding=1)), bias=True, config=config)


@pytest.mark.parametrize("residual", [None, 0.5], ids=["plain", "residual"])
@pytest.mark.parametrize("shape", [SHAPES[i] for i in (0, 1, 3)])  # 3x3, tails, the C=3 stem
def test_16bit_inputs_write_fp8(shape, residual):
    """bf16 inputs with a float8_e4m3fn output and its amax (a 16-bit stem writing fp8 for the
    convs after it): the stored values are the float32 result over ``out_scale``, rounded to
    e4m3; the amax is the result's, before the scale."""
    n, h, w, c, k, r, s, geom = shape
    x, flt = random_conv_inputs(n, h, w, c, k, r, s)
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    bias = torch.randn(k, device="cuda")
    source = None
    if residual is not None:
        source = torch.randn(problem.output_shape, device="cuda").to(E4M3)
    ref = reference(x.float(), flt.float(), geom, bias=bias, activation="relu", source=source,
                    beta=residual or 0.0)  # fmt: skip
    out_scale = ref.abs().max() / 400
    out = torch.full(problem.output_shape, float("nan"), device="cuda").to(E4M3)
    amax = torch.zeros(1, device="cuda")  # raised, not reset, by the kernel
    kwargs = dict(bias=bias, activation="relu", out=out, out_scale=out_scale, out_amax=amax,
                  **geom)  # fmt: skip
    if source is None:
        cute_conv.conv2d_fprop(x, flt, **kwargs)
    else:
        cute_conv.conv2d_fprop_with_residual(x, flt, source, beta=residual, **kwargs)
    torch.cuda.synchronize()
    report = compare_to_reference(out, ref / out_scale)
    assert report.ok, f"{problem}: {report}"
    assert torch.allclose(amax, ref.abs().max().reshape(1), rtol=1e-2, atol=0)


def test_fp8_output_saturates():
    """Values past e4m3's largest finite value (448) are stored as +-448, never NaN."""
    shape = (1, 8, 8, 64, 64, 1, 1, {})
    (qx, x_scale, qf, w_scale), (x32, f32) = fp8_inputs(*shape[:7])
    out_scale = torch.tensor(1 / 4096, device="cuda")
    out = cute_conv.conv2d_fprop(qx, qf, x_scale=x_scale, w_scale=w_scale, out_scale=out_scale,
                                 out_dtype=E4M3)  # fmt: skip
    ref = (x32.reshape(-1, 64) @ f32.reshape(64, 64).t()).reshape(out.shape) / out_scale
    big = ref.abs() > 470  # past 448 and past the midpoint (464) to the next binade's step
    small = ref.abs() < 440  # finite in e4m3 with room for the rounding
    assert big.any() and small.any()
    values = out.float()
    assert not values.isnan().any()
    assert torch.equal(values[big], 448 * ref[big].sign())
    report = compare_to_reference(
        out[small].reshape(1, 1, 1, -1), ref[small].reshape(1, 1, 1, -1), fp8_inputs=True
    )
    assert report.ok, report


def test_per_channel_filter_scales_through_scale():
    """Per-output-channel filter quantization: the channel scales go in ``scale``."""
    n, h, w, c, k, r, s = 2, 10, 10, 64, 96, 3, 3
    x, flt = random_conv_inputs(n, h, w, c, k, r, s, dtype=torch.float32)
    flt = flt * torch.linspace(0.01, 4, k, device="cuda").reshape(k, 1, 1, 1)
    qx, x_scale = cute_conv.quantize_fp8(x)
    qf, channel_scales = cute_conv.quantize_fp8(flt, per_channel_dim=0)
    one = torch.ones((), device="cuda")
    out = cute_conv.conv2d_fprop(qx, qf, padding=1, x_scale=x_scale, w_scale=one,
                                 scale=channel_scales)  # fmt: skip
    deq_f = qf.float() * channel_scales.reshape(k, 1, 1, 1)
    ref = reference(qx.float() * x_scale, deq_f, dict(padding=1))
    report = compare_to_reference(out, ref, fp8_inputs=True)
    assert report.ok, report


def test_scales_are_read_on_the_device_under_cuda_graphs():
    """The scales are device scalars: a captured graph replays with their new values."""
    shape = (2, 12, 12, 64, 64, 3, 3)
    (qx, x_scale, qf, w_scale), _ = fp8_inputs(*shape)
    out = torch.empty(2, 10, 10, 64, device="cuda", dtype=torch.bfloat16)
    run = lambda: cute_conv.conv2d_fprop(qx, qf, x_scale=x_scale, w_scale=w_scale, out=out)  # noqa: E731
    run()  # compile and plan outside the capture
    first = out.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    x_scale.mul_(2.0)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), 2.0 * first.float(), rtol=2**-7, atol=0)


def test_fp8_op_under_torch_compile():
    (qx, x_scale, qf, w_scale), (x32, f32) = fp8_inputs(2, 10, 10, 64, 64, 3, 3)

    @torch.compile(fullgraph=True)
    def fn(a, b, sa, sb):
        return cute_conv.conv2d_fprop(a, b, padding=1, x_scale=sa, w_scale=sb, activation="relu")

    torch._dynamo.reset()
    got = fn(qx, qf, x_scale, w_scale)
    eager = cute_conv.conv2d_fprop(qx, qf, padding=1, x_scale=x_scale, w_scale=w_scale,
                                   activation="relu")  # fmt: skip
    assert torch.equal(got, eager)


def test_quantize_kernel_matches_torch_bit_for_bit():
    """One pass of the CuTe DSL quantize kernel = torch's multiply by 1/scale, saturate,
    round to nearest (values past 448 included)."""
    from cute_conv.fp8 import E4M3_MAX, quantize_with_scale

    t = (torch.randn(3, 17, 19, 64, device="cuda") * 30).to(torch.bfloat16)
    scale = torch.tensor(0.05, device="cuda")
    got = quantize_with_scale(t, scale)
    want = (t.float() * (1 / scale)).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    assert (t.float().abs() / scale > 448).any()
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


@pytest.mark.parametrize("fill", ["random", "zeros"])
def test_dynamic_quantize_matches_torch(fill):
    """quantize_dynamic's one reduction + one kernel pass: the scale is max|t| / 448 (the
    kernel divides exactly; torch's tensor-by-scalar division multiplies by the reciprocal,
    so the two may differ in the last bit), and the values are torch's multiply by 1/scale,
    saturate, round, with that scale, bit for bit."""
    from cute_conv.fp8 import E4M3_MAX, quantize_dynamic

    t = (torch.randn(3, 17, 19, 64, device="cuda") * 30).to(torch.bfloat16)
    if fill == "zeros":
        t.zero_()
    got, scale = quantize_dynamic(t)
    amax = t.double().abs().amax()
    exact = (amax / 448).float() if amax > 0 else torch.ones((), device="cuda")
    assert scale.dtype == torch.float32 and scale.shape == ()
    assert torch.equal(scale, exact)
    want = (t.float() * (1 / scale)).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_dynamic_quantize_measures_again_on_each_graph_replay():
    from cute_conv.fp8 import quantize_dynamic

    t = torch.randn(2, 8, 8, 64, device="cuda").to(torch.bfloat16)
    quantize_dynamic(t)  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q, scale = quantize_dynamic(t)
    for magnitude in (1.0, 1000.0):
        t.copy_(torch.randn_like(t, dtype=torch.float32) * magnitude)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(scale, (t.double().abs().amax() / 448).float())
        assert (q.float() * scale - t.float()).abs().max() <= t.float().abs().max() / 16


def _conv_bn_relu(c, k, r, stride=1):
    conv = torch.nn.Conv2d(c, k, r, stride=stride, padding=r // 2, bias=False)
    bn = torch.nn.BatchNorm2d(k)
    cute_conv.testing.randomize_batchnorm_(torch.nn.Sequential(bn))
    return conv.to("cuda", torch.bfloat16).eval(), bn.cuda().eval()


@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
def test_nn_conv2d_to_fp8(static):
    """The fp8 module computes, in the kernel, what its own quantized operands give: checked
    against a float32 reference on them (the plumbing of scales, folded BN and channel
    scales), and against the bf16 module within quantization's error."""
    from cute_conv.fp8 import amax_scale, quantize_with_scale

    conv, bn = _conv_bn_relu(64, 96, 3)
    x = torch.randn(4, 64, 20, 20, device="cuda").to(torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    bf16 = cute_conv.nn.Conv2d.from_torch(conv, bn, "relu")
    fp8 = cute_conv.nn.Conv2d.from_torch(conv, bn, "relu")
    x_nhwc = x.permute(0, 2, 3, 1)
    x_scale = amax_scale(x_nhwc) * 1.25 if static else None
    fp8.to_fp8(x_scale=x_scale)
    assert fp8.weight.dtype == E4M3 and fp8.scale.shape == (96,)
    with torch.no_grad():
        y = fp8(x)
        y16 = bf16(x)
    used_scale = x_scale if static else amax_scale(x_nhwc)
    x8 = quantize_with_scale(x_nhwc, used_scale)
    ref = reference(x8.float() * used_scale, fp8.weight.float(), dict(padding=1),
                    scale=fp8.scale, bias=fp8.bias, activation="relu")  # fmt: skip
    report = compare_to_reference(y.permute(0, 2, 3, 1), ref, fp8_inputs=True)
    assert report.ok, report
    quantization = (y.float() - y16.float()).norm() / y16.float().norm()
    assert quantization < 0.1  # each operand within 2^-4 per element: ~0.04 measured


def test_amax_from_the_writer_scales_the_reader():
    """A 16-bit conv writes ``max|y|`` from its epilogue (``out_amax``, zeroed first: the
    buffer holds a larger stale value) and an fp8 reader quantizes ``y`` with it
    (``x_amax``), in one pass: checked against a float32 reference on the operands that
    quantization gives, and against measuring ``y`` by a reduction."""
    from cute_conv.fp8 import quantize_from_amax

    writer = cute_conv.nn.Conv2d.from_torch(*_conv_bn_relu(64, 96, 3), "relu")
    reader = cute_conv.nn.Conv2d.from_torch(*_conv_bn_relu(96, 64, 3), "relu")
    reader.to_fp8()
    x = torch.randn(4, 64, 20, 20, device="cuda").to(torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    amax = torch.full((), 1e6, device="cuda")
    with torch.no_grad():
        y = writer(x, out_amax=amax)
        # The epilogue's max is taken before the rounding to bf16.
        assert torch.isclose(amax, y.float().abs().max(), rtol=2**-8, atol=0)
        from_epilogue = reader(y, x_amax=amax)
        measured = reader(y)
    y8, y_scale = quantize_from_amax(y.permute(0, 2, 3, 1), amax)
    ref = reference(y8.float() * y_scale, reader.weight.float(), dict(padding=1),
                    scale=reader.scale, bias=reader.bias, activation="relu")  # fmt: skip
    report = compare_to_reference(from_epilogue.permute(0, 2, 3, 1), ref, fp8_inputs=True)
    assert report.ok, report
    gap = (from_epilogue.float() - measured.float()).norm() / measured.float().norm()
    # The scales differ by the rounding of max|y| alone, but that moves fp8's grid: the two
    # outputs differ by quantization's error (0.010 measured), not by a wrong scale (~1).
    assert gap < 0.05


def _resnet18_and_input(batch: int) -> tuple[torch.nn.Module, torch.Tensor]:
    """A bf16 channels_last eval ResNet-18 of random weights and batch norms (seed 0), and a
    random ``[batch, 3, 96, 96]`` input for it."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None)
    cute_conv.testing.randomize_batchnorm_(model)
    model = model.to("cuda", torch.bfloat16, memory_format=torch.channels_last).eval()
    x = torch.randn(batch, 3, 96, 96, device="cuda").to(torch.bfloat16)
    return model, x.contiguous(memory_format=torch.channels_last)


# The fp8 convs of ResNet-18 that optimize(dtype="fp8") lets write fp8 (static or delayed
# scales): those whose readers all take fp8 and whose identity is fp8: the blocks' first convs,
# and the block outputs and downsamples of layers 1 to 3 (layer1's identity is the max pool's
# e4m3 output, the 16-bit stem writing fp8 too; layer4's last block feeds the 16-bit average
# pool, and so its identity chain stays 16-bit).
RESNET18_FP8_WRITERS = (
    [f"layer{i}.{j}.conv1" for i in range(1, 5) for j in range(2)]
    + [f"layer{i}.{j}.conv2" for i in (1, 2, 3) for j in range(2)]
    + ["layer2.0.downsample.0", "layer3.0.downsample.0"]
)


def test_optimize_fp8_static_and_dynamic():
    model, x = _resnet18_and_input(8)
    calib = torch.randn_like(x)
    with torch.no_grad():
        bf16 = cute_conv.optimize(model)(x).float()
        static = cute_conv.optimize(model, dtype="fp8", calibration=calib)
        dynamic = cute_conv.optimize(model, dtype="fp8", scaling="dynamic")
        outs = {"static": static(x).float(), "dynamic": dynamic(x).float()}
    report = static.cute_conv_report
    assert [c.name for c in report.kept_16bit] == ["conv1"]  # the RGB stem
    assert len(report.fp8) == 19
    assert sorted(report.fp8_outputs) == sorted(RESNET18_FP8_WRITERS)
    assert report.fp8_stems == ["conv1"]
    assert not dynamic.cute_conv_report.fp8_outputs and not dynamic.cute_conv_report.fp8_stems
    for name, out in outs.items():
        err = ((out - bf16).norm() / bf16.norm()).item()
        assert err < 0.15, f"{name}: {err}"


def test_optimize_fp8_delayed_scaling():
    """Delayed scales: the first call measures (writers write 16 bits), each later call
    starts by moving the last call's epilogue amax into the history and setting the writers'
    scales to its max / 448; the block's first convs write fp8 with them."""
    from cute_conv.fp8 import E4M3_MAX

    model, x = _resnet18_and_input(8)
    with torch.no_grad():
        bf16 = cute_conv.optimize(model)(x).float()
        delayed = cute_conv.optimize(model, dtype="fp8")  # the default without calibration
        report = delayed.cute_conv_report
        # The convs static scales let write fp8 (see test_optimize_fp8_static_and_dynamic).
        assert sorted(report.fp8_outputs) == sorted(RESNET18_FP8_WRITERS)
        state = delayed.fp8_delayed_scales
        assert sorted(state.writers) == sorted(RESNET18_FP8_WRITERS + ["conv1"])
        assert not state.seeded
        first = delayed(x).float()  # seeds, then runs with the scales of x itself
        assert state.seeded
        amax = {name: getattr(delayed, f"{name.replace('.', '_')}_out_amax").clone()
                for name in state.writers}  # fmt: skip
        second = delayed(x).float()
        # Scales from the seeding call's amax, then from the max of it and the first call's
        # (whose inputs were rounded to fp8 once less): two fp8 quantizations of the model,
        # each ~0.04 from float32, so they differ by at most about their sum.
        assert ((second - first).norm() / first.norm()).item() < 0.1
        for index, name in enumerate(state.writers):
            assert state.history[index, 0] == amax[name] > 0
            assert torch.allclose(state.scales[index], state.history[index].max() / E4M3_MAX)
        for out in (first, second):
            assert ((out - bf16).norm() / bf16.norm()).item() < 0.15
        # Twice the input: the writers' outputs pass their history's amax and saturate to
        # +-448 (no NaN); the next calls' scales follow.
        loud = delayed(2 * x).float()
        assert torch.isfinite(loud).all()
        before = torch.stack(state.scales).clone()
        delayed(2 * x)
        assert torch.stack(state.scales).sum() > before.sum()


@pytest.mark.parametrize("fp8", [False, True])
def test_source_scale_is_beta_read_from_the_device(fp8):
    """``source_scale`` multiplies beta * source as a device scalar: the same bits as the
    product passed as beta, for an fp8 source (fp8 output) and a 16-bit one."""
    x, w = random_conv_inputs(2, 10, 12, 32, 64, 3, 3)
    source = torch.randn(2, 10, 12, 64, device="cuda").to(torch.bfloat16)
    scale = torch.tensor(0.375, device="cuda")
    kwargs = dict(padding=1, activation="relu", residual_order="before_activation")
    if fp8:
        x, x_scale = cute_conv.quantize_fp8(x)
        w, w_scale = cute_conv.quantize_fp8(w)
        source, _ = cute_conv.quantize_fp8(source)
        out_scale = torch.tensor(0.05, device="cuda")
        kwargs.update(x_scale=x_scale, w_scale=w_scale, out_scale=out_scale,
                      out_dtype=torch.float8_e4m3fn)  # fmt: skip
    by_beta = cute_conv.conv2d_fprop_with_residual(x, w, source, beta=0.5 * 0.375, **kwargs)
    by_device = cute_conv.conv2d_fprop_with_residual(
        x, w, source, beta=0.5, source_scale=scale, **kwargs
    )
    assert torch.equal(by_device.float(), by_beta.float())
    scale.fill_(0.0)  # read at launch: no source term now
    no_source = cute_conv.conv2d_fprop_with_residual(
        x, w, source, beta=0.5, source_scale=scale, **kwargs
    )
    without = cute_conv.conv2d_fprop_with_residual(x, w, source, beta=0.0, **kwargs)
    assert torch.equal(no_source.float(), without.float())


def test_delayed_scaling_refuses_a_capture_before_its_first_call():
    model, x = _resnet18_and_input(2)
    with torch.no_grad():
        delayed = cute_conv.optimize(model, dtype="fp8", scaling="delayed")
        graph = torch.cuda.CUDAGraph()
        with pytest.raises(RuntimeError, match="measures its scales on its first call"):
            with torch.cuda.graph(graph):
                delayed(x)
        assert not delayed.fp8_delayed_scales.seeded


@pytest.mark.parametrize("scales", ["static", "dynamic", "delayed"])
def test_fp8_model_under_torch_compile_and_cuda_graphs(scales):
    """An fp8 model traces whole under torch.compile(fullgraph=True) (the quantizations are
    ops; dynamic: the amax buffers zeroed and raised by each writer, read by its readers;
    delayed: the scales updated in place at the graph's start) and replays from a CUDA
    graph: both give the eager model's logits for a new input (the graph: the same bits)."""
    model, x = _resnet18_and_input(4)
    calibration = torch.randn_like(x) if scales == "static" else None
    with torch.no_grad():
        fp8 = cute_conv.optimize(
            model, dtype="fp8", calibration=calibration,
            scaling="dynamic" if scales == "dynamic" else None,
        )  # fmt: skip
    if scales == "dynamic":
        assert len(fp8.cute_conv_report.fp8_amax_inputs) == 19
    compiled = torch.compile(fp8, fullgraph=True)
    with torch.no_grad():
        fp8(x)  # delayed: the first call measures
        # Delayed scales move with each call: every call below starts from the same state.
        state = [b.clone() for b in fp8.buffers()]

        def restore() -> None:
            for buffer, saved in zip(fp8.buffers(), state, strict=True):
                buffer.copy_(saved)

        eager = fp8(x)
        restore()
        traced = compiled(x)
        restore()
        static_x = torch.zeros_like(x)
        fp8(static_x)  # warm up outside the capture
        restore()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            replayed = fp8(static_x)
        static_x.copy_(x)
        graph.replay()
    torch.cuda.synchronize()
    # Inductor compiles the pooling and the classifier its own way; the convs are ours.
    assert ((traced.float() - eager.float()).norm() / eager.float().norm()).item() < 1e-2
    assert torch.equal(replayed, eager)
