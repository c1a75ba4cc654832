"""The fp8 path's host side, without a GPU: argument checks (clear errors before any launch,
nothing written), the k-tile and heuristic rules, channel padding and ``quantize_fp8``."""

from __future__ import annotations

import re

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfig, Conv2dConfigSm100, Conv2dProblemShape, tuning
from cute_conv.optimize_fp8 import resolve_scaling
from cute_conv.staging import kernel_problem_for, uses_im2col
from tests.test_nn import kernel_calls, random_bn  # noqa: F401 - kernel_calls is a fixture

E4M3, E5M2, BF16 = torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16


def _tensors(act=E4M3, flt=E4M3):
    x = torch.zeros(1, 8, 8, 32).to(act)
    w = torch.zeros(16, 3, 3, 32).to(flt)
    return x, w


def _scale(**kwargs):
    return torch.ones((), **kwargs)


BAD_CALLS = [
    pytest.param(dict(flt=BF16), {}, TypeError, "filter has dtype torch.bfloat16", id="fp8-x-bf16-filter"),
    pytest.param(dict(act=BF16), {}, TypeError, "activation has dtype torch.bfloat16", id="bf16-x-fp8-filter"),
    pytest.param({}, dict(x_scale=None), ValueError, "x_scale is required", id="no-x-scale"),
    pytest.param({}, dict(w_scale=None), ValueError, "w_scale is required", id="no-w-scale"),
    pytest.param({}, dict(x_scale=_scale(dtype=torch.float64)), ValueError, "x_scale must be a one-element float32", id="x-scale-f64"),
    pytest.param({}, dict(w_scale=torch.ones(2)), ValueError, r"w_scale must be a one-element float32 tensor, got dtype torch.float32 and shape \(2,\)", id="w-scale-two"),
    pytest.param({}, dict(x_scale=1.0), TypeError, "x_scale must be a one-element float32 torch.Tensor, got float", id="x-scale-float"),
    pytest.param({}, dict(x_scale=_scale(device="meta")), ValueError, "x_scale is on meta but activation is on cpu", id="x-scale-device"),
    pytest.param({}, dict(w_scale=torch.ones(1).to_sparse()), ValueError, r"w_scale must be a dense \(torch.strided\) tensor, got layout torch.sparse_coo", id="w-scale-sparse"),
    pytest.param({}, dict(out_dtype=E4M3), ValueError, "out_scale is required with fp8 output", id="fp8-out-no-scale"),
    pytest.param({}, dict(out_scale=_scale()), ValueError, "out_scale is only for fp8 output", id="out-scale-bf16-out"),
    pytest.param({}, dict(out_dtype=E5M2, out_scale=_scale()), TypeError, "out_dtype is torch.float8_e5m2", id="e5m2-out"),
    pytest.param({}, dict(out_amax=torch.zeros(1, dtype=torch.float16)), ValueError, "out_amax must be a one-element float32", id="amax-f16"),
    pytest.param({}, dict(out_amax=torch.zeros(2)), ValueError, r"out_amax must be .* shape \(2,\)", id="amax-two"),
    pytest.param({}, dict(out_amax=0.0), TypeError, "out_amax must be a one-element float32 torch.Tensor", id="amax-float"),
    pytest.param({}, dict(out_amax=torch.zeros(1, device="meta")), ValueError, "out_amax is on meta but activation is on cpu", id="amax-device"),
]  # fmt: skip


@pytest.mark.parametrize("dtypes,kwargs,error,match", BAD_CALLS)
def test_bad_fp8_calls_raise_before_writing(dtypes, kwargs, error, match):
    x, w = _tensors(**dtypes)
    call = dict(x_scale=_scale(), w_scale=_scale(), padding=1)
    call.update(kwargs)
    out_dtype = call.get("out_dtype") or BF16
    out = torch.full((1, 8, 8, 16), 3.0).to(out_dtype)
    call["out"] = out
    with pytest.raises(error, match=match):
        cute_conv.conv2d_fprop(x, w, **call)
    assert bool((out.float() == 3.0).all())


def test_scales_are_rejected_on_16bit_calls():
    x, w = _tensors(BF16, BF16)
    out = torch.full((1, 8, 8, 16), 3.0, dtype=BF16)
    with pytest.raises(ValueError, match="x_scale is only for fp8 inputs"):
        cute_conv.conv2d_fprop(x, w, padding=1, x_scale=_scale(), out=out)
    fp8_out = torch.full((1, 8, 8, 16), 3.0).to(E4M3)
    with pytest.raises(ValueError, match="out_scale is required with fp8 output"):
        cute_conv.conv2d_fprop(x, w, padding=1, out=fp8_out)
    with pytest.raises(TypeError, match="out_dtype is torch.float8_e5m2"):
        cute_conv.conv2d_fprop(x, w, padding=1, out_dtype=E5M2, out_scale=_scale())
    assert bool((out == 3.0).all()) and bool((fp8_out.float() == 3.0).all())


def test_fp8_residual_source_has_the_output_dtype():
    x, w = _tensors()
    source = torch.zeros(1, 8, 8, 16).to(E4M3)  # bf16 output: the source must be bf16
    with pytest.raises(TypeError, match="source has dtype torch.float8_e4m3fn"):
        cute_conv.conv2d_fprop_with_residual(x, w, source, padding=1, x_scale=_scale(),
                                             w_scale=_scale())  # fmt: skip


def test_compile_kernel_checks_fp8_dtypes():
    with pytest.raises(TypeError, match="Float8E4M3FN or Float8E5M2"):
        cute_conv.compile_kernel("sm_90a", act_dtype=E4M3, filter_dtype=BF16)
    with pytest.raises(TypeError, match="out_dtype must be one of"):
        cute_conv.compile_kernel("sm_90a", act_dtype=BF16, out_dtype=E5M2)
    with pytest.raises(ValueError, match="tile_k=16 with 8-bit inputs is a 16-byte k-tile"):
        cute_conv.compile_kernel("sm_90a", act_dtype=E4M3, config=Conv2dConfig(tile_k=16))
    with pytest.raises(ValueError, match="tile_k=128 with 16-bit inputs is a 256-byte k-tile"):
        cute_conv.compile_kernel("sm_90a", act_dtype=BF16, config=Conv2dConfig(tile_k=128))
    halo = Conv2dConfig(tile_m=256, tile_n=64, tile_k=64, tile_w=32, halo_h=10)
    with pytest.raises(ValueError, match="halo tiles need 128..128 bytes"):
        cute_conv.compile_kernel("sm_90a", act_dtype=E4M3, config=halo)
    with pytest.raises(ValueError, match="tile_k=32 with 8-bit inputs is a 32-byte k-tile"):
        cute_conv.compile_kernel(
            "sm_100a", act_dtype=E4M3, config=Conv2dConfigSm100(tile_k=32)
        )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the failure without a GPU")
def test_autotune_of_fp8_without_a_gpu_names_the_gpu():
    # The arguments pass, then the missing GPU is the error.
    with pytest.raises((RuntimeError, ValueError), match="GPU|H100|device"):
        cute_conv.autotune((1, 8, 8, 32), (16, 3, 3, 32), dtype=E4M3)


def test_autotune_takes_fp8_with_fp8_candidates():
    with pytest.raises(TypeError, match="dtype must be one of"):
        cute_conv.autotune((1, 8, 8, 32), (16, 3, 3, 32), dtype=torch.float32)
    problem = Conv2dProblemShape(8, 28, 28, 320, 128, 3, 3, padding=1)
    fp8 = tuning.candidate_configs(problem, element_bytes=1)
    # the fp8 heuristic's width for C=320 (halo tiles take 128-byte rows, checked below)
    assert {c.tile_k for c in fp8 if not c.tile_w} == {64}
    assert cute_conv.default_config(problem, element_bytes=1) in fp8
    assert {c.tile_k for c in tuning.candidate_configs(problem)} == {64}  # 16-bit: 64 always
    wide = Conv2dProblemShape(128, 28, 28, 128, 128, 3, 3, padding=1)
    halo = [c for c in tuning.candidate_configs(wide, element_bytes=1) if c.tile_w]
    assert halo and all(c.tile_k == 128 for c in halo)  # 128-byte rows of fp8
    # Keys: the same problem on fp8 and bf16 inputs is tuned apart.
    assert tuning.problem_key(problem, E4M3, torch.bfloat16) != tuning.problem_key(
        problem, torch.bfloat16, torch.bfloat16
    )


@pytest.mark.parametrize(
    "c,expected_tile_k",
    [(3, 32), (32, 32), (64, 64), (96, 128), (128, 128), (256, 128), (320, 64), (432, 128),
     (960, 128)],
)
def test_fp8_heuristic_takes_k_tiles_of_32_to_128_bytes(c, expected_tile_k):
    problem = Conv2dProblemShape(8, 28, 28, c, 128, 3, 3, padding=1)
    fp8 = cute_conv.default_config(problem, element_bytes=1)
    bf16 = cute_conv.default_config(problem)
    assert fp8.tile_k == expected_tile_k
    assert 32 <= fp8.tile_k <= 128 and 32 <= bf16.tile_k * 2 <= 128
    if c % 128 == 0:  # full rows in both: the same kernel shape, twice the channels per k-tile
        assert fp8 == Conv2dConfig(**{**bf16.__dict__, "tile_k": 2 * bf16.tile_k})


def test_fp8_heuristic_keeps_halo_tiles_at_128_bytes():
    problem = Conv2dProblemShape(128, 56, 56, 64, 64, 3, 3, padding=1)
    bf16 = cute_conv.default_config(problem)
    assert bf16.tile_w  # the measured halo choice for r50-c2 3x3
    fp8 = cute_conv.default_config(problem, element_bytes=1)
    assert fp8.tile_w == 0 and fp8.tile_k == 64  # C=64 fp8 is a 64-byte row: no halo tiles
    wide = Conv2dProblemShape(128, 56, 56, 128, 64, 3, 3, padding=1)
    assert cute_conv.default_config(wide, element_bytes=1).tile_w  # C=128 fp8: 128-byte rows
    with pytest.raises(ValueError, match="element_bytes must be 2"):
        cute_conv.default_config(problem, element_bytes=4)


def test_sm100_heuristic_doubles_tile_k_for_fp8():
    problem = Conv2dProblemShape(8, 28, 28, 256, 128, 3, 3, padding=1)
    assert cute_conv.default_config_sm100(problem).tile_k == 64
    assert cute_conv.default_config_sm100(problem, element_bytes=1).tile_k == 128


def test_fp8_input_channels_pad_to_16():
    problem = Conv2dProblemShape(2, 9, 11, 72, 200, 3, 3, padding=1)
    assert kernel_problem_for(problem).C == 72 and kernel_problem_for(problem).K == 200
    kp = kernel_problem_for(problem, element_bytes=1)
    assert (kp.C, kp.K) == (80, 200)  # K never: an fp8 output's odd rows are stored by threads


def test_fp8_stems_stage_as_16bit_ones():
    """Stems stage the same way on fp8 as on 16 bits (the C=8 super-pixel view's super pixels
    are 32 bytes, the folded space-to-depth's staged pixels 32 or 64): only the channel
    alignment differs, 16 instead of 8."""
    for c, stride in ((8, 2), (3, 2), (1, 2)):
        stem = Conv2dProblemShape(2, 224, 224, c, 64, 7, 7, padding=3, stride=stride)
        assert kernel_problem_for(stem, 1) == kernel_problem_for(stem, 2)
    odd_k = Conv2dProblemShape(2, 224, 224, 3, 24, 7, 7, padding=3, stride=2)
    assert kernel_problem_for(odd_k, 1).K == kernel_problem_for(odd_k, 2).K == 24
    rgb_s1 = Conv2dProblemShape(1, 224, 224, 3, 64, 3, 3, padding=1)
    assert uses_im2col(rgb_s1) and kernel_problem_for(rgb_s1, 1).C == 32  # 27 columns -> 32


def test_fp8_space_to_depth_kernel_moves_bytes():
    from cute_conv.compile import compile_space_to_depth

    ptx = compile_space_to_depth("sm_90a", E4M3, 3, 4, 8).ptx
    # Bytes in, a 4-byte staged pixel out; the only conversions are of 32-bit indices.
    assert set(re.findall(r"(?:ld|st)\.global[\w.]*", ptx)) == {"ld.global.b8", "st.global.b32"}
    assert set(re.findall(r"cvt[\w.]*", ptx)) <= {"cvt.s64.s32", "cvt.u64.u32"}


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_quantize_fp8_per_tensor(dtype):
    gen = torch.Generator().manual_seed(0)
    t = torch.randn(4, 8, 8, 16, generator=gen) * 3
    q, scale = cute_conv.quantize_fp8(t, dtype=dtype)
    assert q.dtype == dtype and q.shape == t.shape and scale.shape == () and scale.dtype == torch.float32
    assert q.float().abs().max() == torch.finfo(dtype).max  # amax maps to the largest value
    mantissa_bits = 3 if dtype == E4M3 else 2
    err = (q.float() * scale - t).abs()
    # Half an ulp of each value (normal range) or of the smallest normal (subnormals).
    tiny = torch.finfo(dtype).smallest_normal * scale
    assert bool((err <= t.abs() * 2.0 ** -(mantissa_bits + 1) + tiny).all())


def test_quantize_fp8_of_empty_tensors_scales_by_one():
    q, scale = cute_conv.quantize_fp8(torch.empty(0, 3, 3, 16))
    assert q.shape == (0, 3, 3, 16) and q.dtype == E4M3 and scale.shape == () and scale == 1.0
    q, scales = cute_conv.quantize_fp8(torch.empty(4, 0, 3, 16), per_channel_dim=0)
    assert q.shape == (4, 0, 3, 16) and torch.equal(scales, torch.ones(4))


def test_quantize_fp8_per_channel_and_zero_channels():
    t = torch.randn(6, 3, 3, 16)
    t[2] = 0
    t[4] *= 100
    q, scales = cute_conv.quantize_fp8(t, per_channel_dim=0)
    assert scales.shape == (6,) and scales[2] == 1.0
    assert torch.equal(q[2].float(), torch.zeros(3, 3, 16))
    per_channel_max = q.float().abs().amax(dim=(1, 2, 3))
    assert bool((per_channel_max[[0, 1, 3, 4, 5]] == 448).all())
    with pytest.raises(ValueError, match="per_channel_dim=4 is not a dimension"):
        cute_conv.quantize_fp8(t, per_channel_dim=4)
    with pytest.raises(TypeError, match="dtype must be one of"):
        cute_conv.quantize_fp8(t, dtype=BF16)
    with pytest.raises(TypeError, match="floating-point torch.Tensor"):
        cute_conv.quantize_fp8(torch.ones(3, dtype=torch.int32))


def test_nn_conv2d_to_fp8_quantizes_the_weight_per_channel():
    conv = torch.nn.Conv2d(32, 24, 3, padding=1, bias=False).to(BF16).eval()
    bn = torch.nn.BatchNorm2d(24).eval()
    with torch.no_grad():
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 2.0)
    module = cute_conv.nn.Conv2d.from_torch(conv, bn, "relu")
    bn_scale = module.scale.clone()
    weight = module.weight.detach().float()
    module.to_fp8()
    assert module.weight.dtype == E4M3 and not module.weight.requires_grad
    assert module.x_scale is None and module.out_scale is None and module.w_scale == 1
    channel_scales = module.scale / bn_scale
    dequantized = module.weight.float() * channel_scales.reshape(-1, 1, 1, 1)
    assert torch.allclose(dequantized, weight, rtol=2**-4, atol=1e-6)
    assert "float8_e4m3fn" in repr(module)
    with pytest.raises(ValueError, match="already runs on fp8"):
        module.to_fp8()
    fresh = cute_conv.nn.Conv2d.from_torch(conv, bn)
    with pytest.raises(ValueError, match="x_scale must be a one-element float32 tensor"):
        fresh.to_fp8(x_scale=torch.ones(2))
    with pytest.raises(ValueError, match="identity_scale .* needs out_scale"):
        fresh.to_fp8(identity_scale=torch.ones(()))
    with pytest.raises(TypeError, match="identity_scale must be a one-element float32"):
        fresh.to_fp8(out_scale=torch.ones(()), identity_scale=0.5)
    # A rejected call changes nothing: the module still runs 16-bit.
    assert fresh.weight.dtype == BF16 and fresh.w_scale is None and torch.equal(fresh.scale, bn_scale)


def test_nn_conv2d_write_fp8_keeps_16bit_inputs():
    """A 16-bit conv (the stem) writing e4m3: the weight stays, ``out_scale`` is set; bad
    scales and a second call are refused before anything changes; no identity then."""
    conv = torch.nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False).to(BF16).eval()
    module = cute_conv.nn.Conv2d.from_torch(conv, None, "relu")
    weight = module.weight.detach().clone()
    with pytest.raises(TypeError, match="out_scale must be a one-element float32"):
        module.write_fp8(0.5)
    with pytest.raises(ValueError, match="out_scale must be a one-element float32 tensor"):
        module.write_fp8(torch.ones(2))
    assert module.out_scale is None
    scale = torch.full((), 0.25)
    assert module.write_fp8(scale) is module
    assert module.out_scale is scale and module.weight.dtype == BF16
    assert torch.equal(module.weight, weight) and "fp8 output" in repr(module)
    with pytest.raises(ValueError, match="already runs on or writes fp8"):
        module.write_fp8(scale)
    x = torch.zeros(1, 3, 16, 16, dtype=BF16).contiguous(memory_format=torch.channels_last)
    identity = torch.zeros(1, 64, 8, 8, dtype=BF16).contiguous(memory_format=torch.channels_last)
    with pytest.raises(ValueError, match="writes fp8 .* takes no identity"):
        module(x, identity)
    fp8 = cute_conv.nn.Conv2d(32, 32, 1).to_fp8()
    with pytest.raises(ValueError, match="already runs on or writes fp8"):
        fp8.write_fp8(scale)


def test_optimize_fp8_arguments_and_report():
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(weights=None).to(BF16).eval()
    with pytest.raises(ValueError, match="dtype must be None"):
        cute_conv.optimize(model, dtype="bf16")
    with pytest.raises(ValueError, match="calibration sets fp8 scales"):
        cute_conv.optimize(model, calibration=torch.zeros(1, 3, 32, 32))
    gm = cute_conv.optimize(model, dtype="fp8", scaling="dynamic")  # nothing runs here
    report = gm.cute_conv_report
    assert len(report.fp8) == 19 and not report.fp8_outputs
    assert [c.name for c in report.kept_16bit] == ["conv1"]
    modules = dict(gm.named_modules())
    assert modules["layer1.0.conv1"].weight.dtype == E4M3 and modules["conv1"].weight.dtype == BF16
    assert "19 fused convs" in str(report)
    # Dynamic scales: every fp8 conv reads max|x| from the epilogue of the fused conv that
    # writes its input, the one after the max pool from the 16-bit stem's.
    assert sorted(report.fp8_amax_inputs) == sorted(
        [f"layer{i}.{j}.conv{c}" for i in range(1, 5) for j in range(2) for c in (1, 2)]
        + [f"layer{i}.0.downsample.0" for i in (2, 3, 4)]
    )  # fmt: skip
    assert "19 scaled by the amax" in str(report)
    for node in gm.graph.nodes:
        if node.target in report.fp8_amax_inputs:
            writer = node.args[0]
            if node.target == "layer1.0.conv1":
                assert writer.target == "maxpool" and writer.args[0].target == "conv1"
                writer = writer.args[0]
            assert node.kwargs["x_amax"] is writer.kwargs["out_amax"]
            assert writer.kwargs["out_amax"].op == "get_attr"


def test_optimize_fp8_scaling_arguments_and_delayed_graph():
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(weights=None).to(BF16).eval()
    x = torch.zeros(1, 3, 32, 32, dtype=BF16)
    with pytest.raises(ValueError, match="scaling must be None or one of"):
        cute_conv.optimize(model, dtype="fp8", scaling="current")
    with pytest.raises(TypeError, match="scaling must be None or a str"):
        cute_conv.optimize(model, dtype="fp8", scaling=1)
    with pytest.raises(ValueError, match="scaling='static' takes its scales from a calibration"):
        cute_conv.optimize(model, dtype="fp8", scaling="static")
    with pytest.raises(ValueError, match="scaling='dynamic' measures every call"):
        cute_conv.optimize(model, dtype="fp8", scaling="dynamic", calibration=x)
    with pytest.raises(ValueError, match="pass it with dtype='fp8'"):
        cute_conv.optimize(model, scaling="delayed")
    # None resolves to static scales with a calibration input (which would run here).
    assert resolve_scaling("fp8", None, x) == "static" and resolve_scaling(None, None, None) is None
    gm = cute_conv.optimize(model, dtype="fp8")  # delayed by default; nothing runs here
    report = gm.cute_conv_report
    assert report.fp8_scaling == "delayed" and "(delayed scaling)" in str(report)
    delayed = gm.fp8_delayed_scales
    assert sorted(delayed.writers) == sorted(report.fp8_outputs + report.fp8_stems)
    assert not delayed.seeded
    # The 16-bit stem writes fp8 too: its readers (past the max pool, one as an identity)
    # are fp8 convs; every block's conv2 then reads an fp8 identity and writes fp8.
    assert report.fp8_stems == ["conv1"] and "16-bit conv1 writes fp8" in str(report)
    assert len(report.fp8_outputs) == 16 and "layer1.0.conv2" in report.fp8_outputs
    # The graph starts with the scales' update, reading each writer's epilogue amax.
    first = next(n for n in gm.graph.nodes if n.op == "call_module")
    assert first.target == "fp8_delayed_scales"
    nodes = {n.target: n for n in gm.graph.nodes if n.op == "call_module"}
    amax_of = {name: nodes[name].kwargs["out_amax"].target for name in delayed.writers}
    assert [a.target for a in first.args] == [amax_of[name] for name in delayed.writers]
    modules = dict(gm.named_modules())
    for name, scale in zip(delayed.writers, delayed.scales, strict=True):
        assert modules[name].out_scale is scale  # shared, updated in place
        output = nodes[name]
        if name == "conv1":  # read past the max pool
            (output,) = output.users
            assert isinstance(modules[output.target], cute_conv.pooling.MaxPool2d)
        for reader in output.users:
            module = modules[reader.target]
            if reader.args[0] is output:
                assert module.x_scale is scale
            else:
                assert module.identity_scale is scale
    # Blocks whose identity is written fp8 read its scale on the device.
    assert any(modules[n].identity_scale is not None for n in report.fp8)
    # The convs raise their amax without zeroing it; one op zeroes them all after the update.
    order = [n for n in gm.graph.nodes if n.op in ("call_module", "call_function")]
    zero = next(n for n in order if n.target is torch._foreach_zero_)
    assert order.index(first) < order.index(zero) < order.index(nodes["layer1.0.conv1"])
    with_amax = [n for n in nodes.values() if "out_amax" in n.kwargs]
    assert sorted(a.target for a in zero.args[0]) == sorted(
        n.kwargs["out_amax"].target for n in with_amax
    )
    assert all(n.kwargs["reset_amax"] is False for n in with_amax)


def test_delayed_scaling_runs_on_the_kernels_contract(kernel_calls):  # noqa: F811
    """A delayed-scaling model end to end on a CPU, the kernels replaced by their contract
    (``tests.test_nn._reference_kernel``, fp8 included): the first call measures (writers
    write 16 bits) and then runs with the measured scales; each later call starts from the
    last call's amax; the writers' readers read fp8."""
    from cute_conv.fp8 import E4M3_MAX

    torch.manual_seed(3)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 3, padding=1), random_bn(32), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 32, 3, padding=1), random_bn(32), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 16, 1),
    ).eval()  # fmt: skip
    x = torch.randn(2, 16, 10, 12).to(BF16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        expected = model(x.float())
        gm = cute_conv.optimize(model.to(BF16), dtype="fp8", scaling="delayed")
        delayed = gm.fp8_delayed_scales
        assert delayed.writers == ("0", "3")  # the last conv's output is the model's
        written = []
        gm.get_submodule("0").register_forward_hook(lambda _m, _a, y: written.append(y.dtype))
        first = gm(x).float()
        assert delayed.seeded and len(kernel_calls) == 6  # measured, then run
        assert written == [BF16, E4M3]  # the measuring pass writes 16 bits, the run fp8
        amax = [getattr(gm, f"{w}_out_amax").clone() for w in delayed.writers]
        second = gm(x).float()
        assert len(kernel_calls) == 9 and written[2] == E4M3  # no second measuring pass
    assert torch.equal(delayed.history[:, 0], torch.stack(amax))
    expected_scales = delayed.history.amax(dim=1) / E4M3_MAX
    torch.testing.assert_close(torch.stack(delayed.scales), expected_scales)
    # e4m3 operands cost ~3.7% relative error per conv (README); these three: 0.035.
    for out in (first, second):
        assert ((out - expected).norm() / expected.norm()).item() < 0.1


def test_the_default_fp8_models_first_call_under_torch_compile(kernel_calls):  # noqa: F811
    """The default (delayed) fp8 model's first call measures eagerly: torch.compile breaks
    the graph there and runs it, and with fullgraph=True dynamo refuses with the reason."""
    model = torch.nn.Sequential(
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(32, 16, 1)
    ).eval()  # fmt: skip
    x = torch.randn(2, 16, 6, 6).to(BF16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        whole = torch.compile(cute_conv.optimize(model.to(BF16), dtype="fp8"), fullgraph=True)
        with pytest.raises(Exception, match="measures its scales on its first call, eagerly"):
            whole(x)
        torch._dynamo.reset()
        gm = cute_conv.optimize(model, dtype="fp8")
        torch.compile(gm, backend="eager")(x)
    assert gm.fp8_delayed_scales.seeded and len(kernel_calls) == 4  # measured, then run


class _StemAndPool(torch.nn.Module):
    """An RGB stem (too few channels for fp8 inputs), a max pool and two convs reading it;
    ``leak`` also returns the pooled map (a reader that is no fp8 conv)."""

    def __init__(self, stem_channels: int, leak: bool = False) -> None:
        super().__init__()
        self.stem = torch.nn.Conv2d(3, stem_channels, 3, stride=2, padding=1)
        self.relu = torch.nn.ReLU()
        self.pool = torch.nn.MaxPool2d(3, stride=2, padding=1)
        self.a = torch.nn.Conv2d(stem_channels, 32, 3, padding=1)
        self.b = torch.nn.Conv2d(stem_channels, 32, 1)
        self.leak = leak

    def forward(self, x):
        pooled = self.pool(self.relu(self.stem(x)))
        y = self.a(pooled) + self.b(pooled)
        return (y, pooled) if self.leak else y


@pytest.mark.parametrize(
    "stem_channels, leak, writes", [(32, False, True), (24, False, False), (32, True, False)],
    ids=["fp8-stem", "k24-no-e4m3-vectors", "pooled-map-returned"],
)  # fmt: skip
def test_a_16bit_stem_writes_fp8_where_every_reader_takes_it(
    kernel_calls, stem_channels, leak, writes  # noqa: F811
):
    """Static scales on the kernels' contract (CPU): the stem writes e4m3 through the max
    pool when both convs after it read it as fp8; not when its K does not fill the pool's
    16-channel e4m3 vectors, nor when the pooled map leaves the model too."""
    torch.manual_seed(5)
    model = _StemAndPool(stem_channels, leak).eval()
    x = torch.randn(2, 3, 20, 20).to(BF16).contiguous(memory_format=torch.channels_last)
    calibration = torch.randn_like(x)
    with torch.no_grad():
        expected = model(x.float())
        gm = cute_conv.optimize(model.to(BF16), dtype="fp8", calibration=calibration)
        report = gm.cute_conv_report
        assert [c.name for c in report.kept_16bit] == ["stem"]
        assert report.fp8_stems == (["stem"] if writes else [])
        dtypes = []
        gm.get_submodule("pool").register_forward_hook(lambda _m, _a, y: dtypes.append(y.dtype))
        out = gm(x)
    assert dtypes == [E4M3 if writes else BF16]
    if writes:  # the readers read the stem's scale: no quantize pass of their own
        assert gm.get_submodule("a").x_scale is gm.get_submodule("stem").out_scale
    y, expected_y = (out[0], expected[0]) if leak else (out, expected)
    assert ((y.float() - expected_y).norm() / expected_y.norm()).item() < 0.1


def test_delayed_scales_update_from_the_amax_history():
    from cute_conv.delayed_scaling import DelayedScales
    from cute_conv.fp8 import E4M3_MAX

    delayed = DelayedScales(["a", "b"], torch.device("cpu"), history=3)
    for amax in ([4.0, 0.0], [2.0, 8.0], [1.0, 1.0], [0.5, 1.0]):
        delayed(*map(torch.tensor, amax))
    # The newest first, three calls kept: a's 4.0 has left the history.
    assert delayed.history.tolist() == [[0.5, 1.0, 2.0], [1.0, 1.0, 8.0]]
    assert [s.item() for s in delayed.scales] == pytest.approx([2.0 / E4M3_MAX, 8.0 / E4M3_MAX])
    empty = DelayedScales(["a"], torch.device("cpu"))
    empty(torch.tensor(0.0))
    assert empty.scales[0].item() == 1.0  # an all-zero history: scale 1
    with pytest.raises(ValueError, match="history must be at least 1 call"):
        DelayedScales(["a"], torch.device("cpu"), history=0)


def test_quantize_from_amax_rejects_a_bad_amax():
    from cute_conv.fp8 import quantize_from_amax

    t = torch.zeros(8, dtype=BF16)
    with pytest.raises(TypeError, match="amax must be a one-element float32"):
        quantize_from_amax(t, 1.0)
    with pytest.raises(ValueError, match="amax must be a one-element float32 tensor"):
        quantize_from_amax(t, torch.ones(2))
    with pytest.raises(TypeError, match="t must be a bfloat16 or float16"):
        quantize_from_amax(t.float(), torch.ones(()))
    q, scale = quantize_from_amax(torch.full((8,), 896.0, dtype=BF16), torch.tensor(448.0))
    assert scale.item() == 1.0 and q.float().max().item() == 448.0  # saturated past amax


def test_quantizations_trace_whole_under_torch_compile():
    """Under torch.compile(fullgraph=True) the per-tensor quantizations run as the
    ``cute_conv::quantize_*`` ops (their launch reads data pointers, which dynamo cannot
    trace), with the eager results; the ops pass torch.library's opcheck."""
    from torch.library import opcheck

    from cute_conv.fp8 import quantize_dynamic, quantize_from_amax, quantize_with_scale

    t = torch.randn(4, 8, 8, 16).to(BF16)
    scale, amax = torch.tensor(0.01), t.float().abs().amax()

    @torch.compile(backend="eager", fullgraph=True)
    def quantize_all(t, scale, amax):
        return (quantize_with_scale(t, scale), *quantize_dynamic(t), *quantize_from_amax(t, amax))

    traced = quantize_all(t, scale, amax)
    eager = (quantize_with_scale(t, scale), *quantize_dynamic(t), *quantize_from_amax(t, amax))
    assert [x.dtype for x in traced] == [E4M3, E4M3, torch.float32, E4M3, torch.float32]
    for got, want in zip(traced, eager, strict=True):
        assert torch.equal(got.float(), want.float())
    opcheck(torch.ops.cute_conv.quantize_with_scale.default, (t, scale))
    opcheck(torch.ops.cute_conv.quantize_from_amax.default, (t, amax))
