"""Host-side validation: every rejection, on CPU tensors, before any CUDA query."""

from __future__ import annotations

import types

import pytest
import torch

from cute_conv.problem import Conv2dProblemShape
from cute_conv.validation import (
    ARCH_TABLE,
    IM2COL_3D,
    check_compute_capability,
    check_problem_limits,
    out_pixel_stride,
    output_rows_unaligned,
    validate_conv_inputs,
    validate_device,
)

BF16 = torch.bfloat16


def test_output_rows_unaligned_are_those_tma_cannot_store():
    # (K, bits of an output value): 16-byte rows are TMA's; the rest the threads store.
    assert not any(output_rows_unaligned(k, b) for k, b in ((8, 16), (4, 32), (16, 8), (0, 16)))
    assert all(output_rows_unaligned(k, b) for k, b in ((12, 16), (6, 32), (24, 8), (1, 16)))


def _t(*shape, dtype=BF16, device="cpu"):
    return torch.zeros(shape, dtype=dtype, device=device)


def _misaligned(*shape, dtype=BF16):
    """A contiguous tensor whose data starts one element past a 16-byte boundary."""
    numel = 1
    for size in shape:
        numel *= size
    return torch.zeros(numel + 1, dtype=dtype)[1:].view(shape)


def _call(**overrides):
    """A valid call (2x8x8x16 activation, 32x3x3x16 filter, padding 1), with overrides."""
    kwargs = {
        "activation": _t(2, 8, 8, 16),
        "filter": _t(32, 3, 3, 16),
        "stride": 1,
        "padding": 1,
        "dilation": 1,
        "out": None,
        "out_dtype": None,
    }
    kwargs.update(overrides)
    return kwargs


def _tall(h, r, **overrides):
    """A 1xHx4x8 activation and an 8xRx1x8 filter, for limits along the height."""
    return _call(
        **{"activation": _t(1, h, 4, 8), "filter": _t(8, r, 1, 8), "padding": 0} | overrides
    )


def _channels_last_nchw():
    return torch.zeros(2, 16, 8, 8, dtype=BF16).to(memory_format=torch.channels_last)


REJECTIONS = [
    # --- tensor types, ranks, dtypes, layouts ---
    pytest.param(
        lambda: _call(activation=[[0.0]]),
        TypeError,
        ("activation", "torch.Tensor"),
        id="activation-not-tensor",
    ),
    pytest.param(
        lambda: _call(filter=None), TypeError, ("filter", "torch.Tensor"), id="filter-not-tensor"
    ),
    pytest.param(
        lambda: _call(activation=_t(8, 8, 16)),
        ValueError,
        ("activation", "rank-4", "rank 3"),
        id="activation-rank",
    ),
    pytest.param(
        lambda: _call(filter=_t(1, 32, 3, 3, 16)),
        ValueError,
        ("filter", "rank-4", "rank 5"),
        id="filter-rank",
    ),
    pytest.param(
        lambda: _call(activation=_t(2, 8, 8, 16).to_sparse()),
        ValueError,
        ("activation", "torch.strided"),
        id="activation-sparse",
    ),
    pytest.param(
        lambda: _call(activation=_t(2, 8, 8, 16, dtype=torch.float32)),
        TypeError,
        ("activation", "torch.float32", "torch.bfloat16, torch.float16"),
        id="activation-dtype",
    ),
    pytest.param(
        lambda: _call(filter=_t(32, 3, 3, 16, dtype=torch.int8)),
        TypeError,
        ("filter", "torch.int8", "torch.bfloat16, torch.float16"),
        id="filter-dtype",
    ),
    pytest.param(
        lambda: _call(filter=_t(32, 3, 3, 16, dtype=torch.float16)),
        TypeError,
        ("filter", "torch.float16", "activation", "must be equal"),
        id="dtype-mismatch",
    ),
    pytest.param(
        lambda: _call(activation=_channels_last_nchw()),
        ValueError,
        ("activation", "contiguous [N, H, W, C]", "permute(0, 2, 3, 1)", "channels_last"),
        id="activation-channels-last-nchw",
    ),
    pytest.param(
        lambda: _call(activation=_t(2, 8, 8, 16).transpose(1, 2)),
        ValueError,
        ("activation", "contiguous [N, H, W, C]", "permute(0, 2, 3, 1).contiguous()"),
        id="activation-strided-view",
    ),
    pytest.param(
        lambda: _call(filter=_t(32, 16, 3, 3).to(memory_format=torch.channels_last)),
        ValueError,
        ("filter", "contiguous [K, R, S, C]", "[K, C, R, S]", "filter.permute(0, 2, 3, 1)"),
        id="filter-kcrs-channels-last",
    ),
    pytest.param(
        lambda: _call(filter=_t(32, 16, 3, 3).permute(0, 2, 3, 1)),
        ValueError,
        ("filter", "contiguous [K, R, S, C]"),
        id="filter-kcrs-view",
    ),
    pytest.param(
        lambda: _call(activation=_misaligned(2, 8, 8, 16)),
        ValueError,
        ("activation.data_ptr()", "16-byte aligned"),
        id="activation-misaligned",
    ),
    pytest.param(
        lambda: _call(filter=_misaligned(32, 3, 3, 16)),
        ValueError,
        ("filter.data_ptr()", "16-byte aligned"),
        id="filter-misaligned",
    ),
    # --- sizes ---
    pytest.param(
        lambda: _call(filter=_t(32, 3, 3, 8)),
        ValueError,
        ("filter", "C=8", "activation", "C=16", "must be equal"),
        id="channel-mismatch",
    ),
    pytest.param(
        lambda: _call(activation=_t(2, 0, 8, 16)),
        ValueError,
        ("activation", "H=0", ">= 1"),
        id="activation-zero-H",
    ),
    pytest.param(
        lambda: _call(activation=_t(2, 8, 8, 0), filter=_t(32, 3, 3, 0)),
        ValueError,
        ("activation", "C=0", ">= 1"),
        id="activation-zero-C",
    ),
    pytest.param(
        lambda: _call(filter=_t(0, 3, 3, 16)),
        ValueError,
        ("filter", "K=0", ">= 1"),
        id="filter-zero-K",
    ),
    pytest.param(
        lambda: _call(filter=_t(32, 3, 0, 16)),
        ValueError,
        ("filter", "S=0", ">= 1"),
        id="filter-zero-S",
    ),
    pytest.param(
        lambda: _call(filter=_t(32, 11, 3, 16)),
        ValueError,
        ("output height P", ">= 1", "R=11"),
        id="output-P-empty",
    ),
    pytest.param(
        lambda: _call(filter=_t(32, 3, 5, 16), padding=((1, 1), (0, 0)), dilation=(1, 3)),
        ValueError,
        ("output width Q", ">= 1", "S=5", "dilation=3"),
        id="output-Q-empty",
    ),
    # --- stride, dilation, padding arguments ---
    pytest.param(lambda: _call(stride=0), ValueError, ("stride", ">= 1"), id="stride-zero"),
    pytest.param(
        lambda: _call(stride=(1, 9)), ValueError, ("stride", "1..8", "9"), id="stride-above-8"
    ),
    pytest.param(lambda: _call(stride=True), TypeError, ("stride", "True"), id="stride-bool"),
    pytest.param(lambda: _call(dilation=(0, 1)), ValueError, ("dilation", ">= 1"), id="dilation-0"),
    pytest.param(
        lambda: _call(dilation=(1, 2, 1)), ValueError, ("dilation", "2"), id="dilation-length"
    ),
    pytest.param(lambda: _call(padding=-1), ValueError, ("padding", ">= 0"), id="padding-negative"),
    pytest.param(lambda: _call(padding=0.5), TypeError, ("padding", "int"), id="padding-float"),
    # --- im2col TMA limits (docs/ARCHITECTURE.md section 4) ---
    pytest.param(
        lambda: _call(padding=((129, 0), (1, 1))),
        ValueError,
        ("padding top=129", "<= 128"),
        id="pad-top-above-128",
    ),
    pytest.param(
        lambda: _call(padding=((1, 1), (129, 0))),
        ValueError,
        ("padding left=129", "<= 128"),
        id="pad-left-above-128",
    ),
    pytest.param(
        lambda: _tall(300, 3, dilation=(128, 1)),
        ValueError,
        ("filter R=3", "dilation=128", "= 256", "255"),
        id="filter-span-above-255",
    ),
    pytest.param(
        lambda: _tall(140, 131),
        ValueError,
        ("padding bottom=0", "is -130", "-128"),
        id="corner-below-minus-128",
    ),
    pytest.param(
        lambda: _tall(140, 3, dilation=(65, 1)),
        ValueError,
        ("padding bottom=0", "dilation=65", "-128"),
        id="corner-below-minus-128-dilated",
    ),
    pytest.param(
        lambda: _tall(4, 1, padding=((0, 128), (0, 0))),
        ValueError,
        ("padding bottom=128", "127"),
        id="corner-above-127",
    ),
    pytest.param(
        lambda: _call(
            activation=_t(2**31, 1, 1, 8, device="meta"),
            filter=_t(8, 1, 1, 8, device="meta"),
            padding=0,
        ),
        ValueError,
        ("activation", "N*P*Q", "2**31"),
        id="gemm-m-overflow",
    ),
    # --- out and out_dtype ---
    pytest.param(
        lambda: _call(out_dtype=torch.float64),
        TypeError,
        ("out_dtype", "torch.float64", "torch.bfloat16, torch.float16, torch.float32"),
        id="out-dtype-unsupported",
    ),
    pytest.param(
        lambda: _call(out_dtype="bfloat16"),
        TypeError,
        ("out_dtype", "torch.dtype"),
        id="out-dtype-not-dtype",
    ),
    pytest.param(
        lambda: _call(out=_t(2, 8, 8, 32, dtype=torch.float32).numpy()),
        TypeError,
        ("out", "torch.Tensor"),
        id="out-not-tensor",
    ),
    pytest.param(
        lambda: _call(out=_t(2, 8, 8, 31)),
        ValueError,
        ("out", "(2, 8, 8, 32)", "[N, P, Q, K]"),
        id="out-shape",
    ),
    pytest.param(
        lambda: _call(out=_t(2, 32, 8, 8).permute(0, 2, 3, 1)),
        ValueError,
        ("out", "contiguous [N, P, Q, K]"),
        id="out-not-contiguous",
    ),
    pytest.param(
        lambda: _call(out=_t(2, 8, 8, 36)[..., :32]),
        ValueError,
        ("out", "channel slice", "L*2 bytes a multiple of 16", "(2304, 288, 36, 1)"),
        id="out-slice-pitch-not-16-bytes",
    ),
    pytest.param(
        lambda: _call(out=_t(2, 16, 8, 32)[:, ::2]),
        ValueError,
        ("out", "channel slice", "(4096, 512, 32, 1)"),
        id="out-every-other-row",
    ),
    pytest.param(
        lambda: _call(out=_t(2, 8, 8, 32, dtype=torch.int32)),
        TypeError,
        ("out", "torch.int32", "torch.float32"),
        id="out-dtype-unsupported-tensor",
    ),
    pytest.param(
        lambda: _call(out=_t(2, 8, 8, 32, dtype=torch.float32), out_dtype=BF16),
        TypeError,
        ("out", "torch.float32", "out_dtype", "torch.bfloat16"),
        id="out-dtype-mismatch",
    ),
    pytest.param(
        lambda: _call(out=_t(2, 8, 8, 32, device="meta")),
        ValueError,
        ("out", "meta", "activation", "same device"),
        id="out-other-device",
    ),
    pytest.param(
        lambda: _call(out=_misaligned(2, 8, 8, 32)),
        ValueError,
        ("out.data_ptr()", "16-byte aligned"),
        id="out-misaligned",
    ),
]


@pytest.fixture
def no_cuda(monkeypatch):
    """Fail the test if anything asks the CUDA runtime."""

    def forbidden(*args, **kwargs):
        raise AssertionError("validation queried CUDA")

    for name in ("get_device_capability", "is_available", "current_device", "device_count"):
        monkeypatch.setattr(torch.cuda, name, forbidden)


@pytest.mark.parametrize("make_call, error, words", REJECTIONS)
def test_rejects(make_call, error, words, no_cuda):
    with pytest.raises(error) as info:
        validate_conv_inputs(**make_call())
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_valid_call_returns_problem_and_dtype(no_cuda):
    problem, out_dtype = validate_conv_inputs(**_call())
    assert problem == Conv2dProblemShape(2, 8, 8, 16, 32, 3, 3, padding=1)
    assert problem.output_shape == (2, 8, 8, 32)
    assert out_dtype == BF16


@pytest.mark.parametrize(
    "overrides, expected",
    [
        pytest.param({}, BF16, id="default-is-activation-dtype"),
        pytest.param({"out_dtype": torch.float32}, torch.float32, id="out-dtype"),
        pytest.param({"out": _t(2, 8, 8, 32, dtype=torch.float16)}, torch.float16, id="out"),
        pytest.param(
            {"out": _t(2, 8, 8, 32, dtype=torch.float32), "out_dtype": torch.float32},
            torch.float32,
            id="out-and-out-dtype",
        ),
    ],
)
def test_output_dtype_resolution(overrides, expected):
    assert validate_conv_inputs(**_call(**overrides))[1] == expected


@pytest.mark.parametrize(
    "make_call",
    [
        pytest.param(lambda: _call(activation=_t(1, 8, 8, 3), filter=_t(5, 3, 3, 3)), id="C3-K5"),
        pytest.param(lambda: _call(activation=_t(0, 8, 8, 16)), id="empty-batch"),
        pytest.param(
            lambda: _call(activation=_channels_last_nchw().permute(0, 2, 3, 1)),
            id="channels-last-permuted-view",
        ),
        pytest.param(
            lambda: _call(
                filter=_t(32, 16, 3, 3).to(memory_format=torch.channels_last).permute(0, 2, 3, 1)
            ),
            id="channels-last-weight-permuted-view",
        ),
        pytest.param(lambda: _call(padding=((128, 0), (0, 128)), stride=8), id="pad-lo-128"),
        pytest.param(
            lambda: _tall(300, 2, dilation=(255, 1), padding=((0, 127), (0, 0))), id="span-255"
        ),
        pytest.param(lambda: _tall(140, 129), id="corner-minus-128"),
        pytest.param(lambda: _tall(4, 1, padding=((0, 127), (0, 0))), id="corner-127"),
        pytest.param(
            lambda: _call(
                activation=_t(1, 8, 8, 16, dtype=torch.float16),
                filter=_t(32, 3, 3, 16, dtype=torch.float16),
            ),
            id="fp16",
        ),
    ],
)
def test_accepts(make_call, no_cuda):
    validate_conv_inputs(**make_call())


@pytest.mark.parametrize(
    "out, pixels",
    [
        (_t(2, 8, 8, 32), 32),  # contiguous
        (_t(2, 8, 8, 48)[..., 8:40], 48),  # a concatenation's part
        (_t(2, 8, 8, 40)[..., 8:], 40),  # the last part
        (_t(2, 16, 8, 8).to(memory_format=torch.channels_last)[:, 8:16].permute(0, 2, 3, 1), 16),
        (_t(1, 1, 1, 24)[..., :4], 4),  # one pixel: contiguous, whatever its pitch
    ],
)
def test_out_pixel_stride_of_contiguous_outputs_and_channel_slices(out, pixels):
    assert out_pixel_stride(out) == pixels


def test_a_channel_slice_is_accepted_as_out(no_cuda):
    buffer = _t(2, 8, 8, 64)
    problem, _ = validate_conv_inputs(**_call(out=buffer[..., 16:48]))
    assert problem.output_shape == (2, 8, 8, 32)


def test_c3_k5_accepted():
    problem, _ = validate_conv_inputs(_t(1, 8, 8, 3), _t(5, 3, 3, 3), padding=1)
    assert (problem.C, problem.K) == (3, 5)


@pytest.mark.parametrize(
    "padding,dilation,message",
    [((16, 16), 1, None), ((17, 0), 1, "padding top=17 exceeds"), ((15, 15), 15, None),
     ((16, 16), 16, r"spans \(R-1\)\*dilation = 32"), ((0, 0), 8, None),
     ((0, 0), 9, r"is -18; the 3-d im2col TMA .* limit is -16")],
    ids=["pad-16", "pad-17", "span-30", "span-32", "corner-16", "corner-18"],
)  # fmt: skip
def test_the_3d_view_of_grouped_tensor_cores_has_5_bit_limits(padding, dilation, message):
    (top, bottom) = padding
    problem = Conv2dProblemShape(1, 64, 64, 8, 8, 3, 3, padding=((top, bottom), (0, 0)),
                                 dilation=(dilation, 1))  # fmt: skip
    check_problem_limits(problem)  # the 2-d view takes all of them
    if message is None:
        check_problem_limits(problem, IM2COL_3D)
    else:
        with pytest.raises(ValueError, match=message):
            check_problem_limits(problem, IM2COL_3D)


def test_gemm_m_limit_is_exclusive():
    check_problem_limits(Conv2dProblemShape(2**31 - 1, 1, 1, 8, 8, 1, 1))
    with pytest.raises(ValueError, match=r"2\*\*31"):
        check_problem_limits(Conv2dProblemShape(2**31, 1, 1, 8, 8, 1, 1))


def test_device_check_rejects_cpu_tensors():
    with pytest.raises(ValueError, match="activation is on cpu; cute_conv runs on CUDA tensors"):
        validate_device(_t(1, 8, 8, 16), _t(8, 3, 3, 16))


def _fake_cuda(index):
    """Stands in for a CUDA tensor: validate_device only reads ``.device``."""
    return types.SimpleNamespace(device=torch.device("cuda", index))


def test_device_check_names_each_tensor(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    with pytest.raises(ValueError, match="filter is on cpu; cute_conv runs on CUDA tensors"):
        validate_device(_fake_cuda(0), _t(8, 3, 3, 16))
    with pytest.raises(ValueError, match="out is on cpu"):
        validate_device(_fake_cuda(0), _fake_cuda(0), _t(1, 8, 8, 8))
    with pytest.raises(ValueError, match="filter is on cuda:1 but activation is on cuda:0"):
        validate_device(_fake_cuda(0), _fake_cuda(1))
    assert validate_device(_fake_cuda(0), _fake_cuda(0), _fake_cuda(0)) == "sm_90a"


def test_device_check_queries_the_tensors_device(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: asked.append(d) or (8, 0))
    with pytest.raises(ValueError, match=r"cuda:1 has compute capability 8\.0"):
        validate_device(_fake_cuda(1), _fake_cuda(1))
    assert asked == [torch.device("cuda", 1)]


def test_compute_capability_table():
    assert check_compute_capability((9, 0)) == "sm_90a"
    # CC 10.0 dispatches to the SM100 kernel, which is compile-verified only.
    assert check_compute_capability((10, 0)) == "sm_100a"
    assert ARCH_TABLE[(9, 0)].hardware_verified and not ARCH_TABLE[(10, 0)].hardware_verified


@pytest.mark.parametrize(
    "capability, words",
    [
        pytest.param((8, 0), ("8.0", "sm_90a", "sm_100a", "compile-verified"), id="sm80"),
        pytest.param((8, 9), ("8.9", "sm_90a"), id="sm89"),
        pytest.param((10, 3), ("10.3", "sm_100a", "B200", "10.0", "sm_90a"), id="sm103"),
        pytest.param((12, 0), ("12.0", "sm_90a"), id="sm120"),
    ],
)
def test_compute_capability_rejects(capability, words):
    with pytest.raises(ValueError) as info:
        check_compute_capability(capability, "cuda:0")
    for word in words:
        assert word in str(info.value)
