"""What a new user's mistakes get: a clear TypeError / ValueError naming the argument, the value
and the limit, before any CUDA call (CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import cute_conv
from cute_conv import (
    Conv2dConfig,
    Conv2dConfigSm100,
    Conv2dProblemShape,
    EpilogueSpec,
    can_implement_sm100,
    check_config_fits,
    compile_kernel,
    default_config,
    default_config_sm100,
    disk_cache,
    tuning,
)
from cute_conv.epilogue import validate_epilogue_args

PROBLEM = Conv2dProblemShape.from_shapes((2, 8, 8, 64), (64, 3, 3, 64), padding=1)
X_SHAPE, FILTER_SHAPE = (2, 8, 8, 64), (64, 3, 3, 64)
# A stride past the im2col TMA's on windows that do not tile the input.
STRIDE_16_3X3 = Conv2dProblemShape.from_shapes((2, 32, 32, 64), (64, 3, 3, 64), stride=16)
# Halo tiles need stride 1 (see check_config_fits): a config that cannot run a stride-2 conv.
HALO = Conv2dConfig(tile_m=256, tile_n=64, tile_w=64, halo_h=6)


@pytest.fixture
def no_cuda_calls(monkeypatch):
    """Any CUDA query fails the test: argument errors must come first."""

    def fail(*args, **kwargs):
        raise AssertionError("a CUDA query ran before the arguments were checked")

    for name in ("is_available", "device_count", "current_device", "get_device_capability"):
        monkeypatch.setattr(torch.cuda, name, fail)


# fmt: off
AUTOTUNE_ERRORS = [
    (dict(x_shape="2x8x8x64"), TypeError, "x_shape must be a sequence of 4 ints"),
    (dict(x_shape=64), TypeError, "x_shape must be a sequence of 4 ints"),
    (dict(filter_shape=None), TypeError, "filter_shape must be a sequence of 4 ints"),
    (dict(x_shape=(8, 8, 64)), ValueError, r"x_shape must be \[N, H, W, C\] \(4 values\)"),
    (dict(x_shape=(2, 8, 8.0, 64)), TypeError, "W must be an int"),
    (dict(x_shape=(2, 8, 8, 32)), ValueError, "C=32 channels but filter_shape has C=64"),
    (dict(x_shape=(0, 8, 8, 64)), ValueError, "N=0: there is nothing to time"),
    (dict(dtype=torch.float32), TypeError, "dtype must be one of torch.bfloat16, torch.float16"),
    (dict(dtype="bfloat16"), TypeError, "dtype must be one of"),
    (dict(out_dtype=torch.int8), TypeError, "out_dtype is torch.int8; supported output dtypes"),
    (dict(stride=9), ValueError, r"stride must be in 1\.\.8"),
    (dict(padding=-1), ValueError, "padding must be >= 0"),
    (dict(padding=200), ValueError, "padding top=200 exceeds the im2col TMA limit"),
    (dict(dilation=0), ValueError, "dilation must be >= 1"),
    (dict(has_residual="yes"), TypeError, "has_residual must be a bool"),
    (dict(configs=Conv2dConfig()), TypeError, "configs must be None or a non-empty sequence"),
    (dict(configs=[]), TypeError, "configs must be None or a non-empty sequence"),
    (dict(configs=["128x128"]), TypeError, "configs must be None or a non-empty sequence"),
    (dict(configs=[HALO], stride=2), ValueError, "halo tiles .* need stride 1"),
    (dict(device="cpu"), ValueError, "device=cpu must be a CUDA device"),
    (dict(device="gpu0"), ValueError, "device='gpu0' is not a device name"),
    (dict(device=1.5), TypeError, r"device must be a torch.device, a name \('cuda', 'cuda:1'\)"),
]
# fmt: on


@pytest.mark.parametrize("kwargs,error,match", AUTOTUNE_ERRORS)
def test_autotune_checks_its_arguments_before_any_cuda_call(no_cuda_calls, kwargs, error, match):
    args = {"x_shape": X_SHAPE, "filter_shape": FILTER_SHAPE, **kwargs}
    with pytest.raises(error, match=match):
        cute_conv.autotune(args.pop("x_shape"), args.pop("filter_shape"), **args)


def test_autotune_without_a_gpu_says_what_it_needs(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match=r"needs an H100/H200 .* torch.cuda.is_available\(\)"):
        cute_conv.autotune(X_SHAPE, FILTER_SHAPE, padding=1)


@pytest.mark.parametrize(
    "call,error,match",
    [
        (lambda: default_config("x"), TypeError, r"problem must be a Conv2dProblemShape .* got 'x' \(str\)"),
        (lambda: default_config((2, 8, 8, 64)), TypeError, "problem must be a Conv2dProblemShape"),
        (lambda: default_config(PROBLEM, "132"), TypeError, "num_sms must be an int, got '132'"),
        (lambda: default_config(PROBLEM, 0), ValueError, r"num_sms must be >= 1 \(the device's SM count\), got 0"),
        (lambda: default_config(PROBLEM, has_residual=None), TypeError, "has_residual must be"),
        (lambda: default_config(STRIDE_16_3X3), ValueError, r"stride must be in 1\.\.8 .*tile the input"),
        (lambda: default_config_sm100("x"), TypeError, "problem must be a Conv2dProblemShape"),
        (lambda: default_config_sm100(PROBLEM, -1), ValueError, "num_sms must be >= 1"),
        (lambda: check_config_fits(PROBLEM, Conv2dConfig()), TypeError, "config must be a Conv2d"),
        (lambda: check_config_fits(Conv2dConfigSm100.default_bf16(), PROBLEM), TypeError,
         r"got Conv2dConfigSm100 \(can_implement_sm100 checks those\)"),
        (lambda: check_config_fits(HALO, "x"), TypeError, "problem must be a Conv2dProblemShape"),
        (lambda: can_implement_sm100("x"), TypeError, "problem must be a Conv2dProblemShape"),
        (lambda: can_implement_sm100(PROBLEM, Conv2dConfig()), TypeError,
         "config must be a Conv2dConfigSm100, got Conv2dConfig"),
        (lambda: can_implement_sm100(PROBLEM, act_dtype=torch.float32), TypeError,
         "act_dtype=float32 is not supported; use one of bfloat16, float16"),
        (lambda: can_implement_sm100(PROBLEM, out_dtype="int8"), TypeError,
         "out_dtype=int8 is not supported"),
        (lambda: can_implement_sm100(PROBLEM, has_residual="no"), TypeError,
         "has_residual must be a bool"),
    ],
)  # fmt: skip
def test_config_helpers_name_a_wrong_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_config_helpers_still_answer_on_good_arguments():
    assert check_config_fits(default_config(PROBLEM), PROBLEM) is None
    assert can_implement_sm100(PROBLEM, default_config_sm100(PROBLEM)) is True


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(arch=90), TypeError, "arch must be a str, one of sm_100a, sm_90a; got 90"),
        (dict(arch="sm_80"), ValueError, "arch='sm_80' has no kernel; available: sm_100a, sm_90a"),
        (dict(act_dtype=torch.float32), TypeError,
         "act_dtype=float32 is not supported; use one of bfloat16, float16"),
        (dict(act_dtype="int8"), TypeError, "act_dtype=int8 is not supported"),
        (dict(filter_dtype=torch.float16), TypeError,
         "act_dtype and filter_dtype must both be BFloat16, both Float16, or each Float8"),
        (dict(out_dtype=torch.int32), TypeError,
         "out_dtype=int32 is not supported; use one of bfloat16, float16, float32"),
        (dict(config="128x128"), TypeError,
         "config must be a Conv2dConfig, a PointwiseGemvConfig or a GroupedDirectConfig for "
         "arch='sm_90a'"),
        (dict(config=Conv2dConfigSm100.default_bf16()), TypeError,
         "config must be a Conv2dConfig, a PointwiseGemvConfig or a GroupedDirectConfig for "
         "arch='sm_90a', got Conv2dConfigSm100"),
        (dict(arch="sm_100a", config=Conv2dConfig()), TypeError,
         "config must be a Conv2dConfigSm100, a PointwiseGemvConfig or a GroupedDirectConfig "
         "for arch='sm_100a', got Conv2dConfig"),
        (dict(epilogue="relu"), TypeError, "epilogue must be an EpilogueSpec, got str"),
    ],
)  # fmt: skip
def test_compile_kernel_names_a_wrong_argument(kwargs, error, match):
    with pytest.raises(error, match=match):
        compile_kernel(**kwargs)


@pytest.mark.parametrize(
    "epilogue_fn",
    [lambda a, b: a + b, lambda y: torch.tanh(y)],
    ids=["two-arguments", "torch-call"],
)
def test_compile_kernel_reports_a_broken_epilogue_fn_as_such(epilogue_fn):
    with pytest.raises(ValueError, match="epilogue_fn .* could not be compiled into the kernel"):
        compile_kernel("sm_90a", epilogue=EpilogueSpec(epilogue_fn=epilogue_fn))


def test_a_residual_of_the_wrong_dtype_must_equal_the_output_dtype():
    source = torch.zeros(PROBLEM.output_shape, dtype=torch.float16)
    with pytest.raises(TypeError, match=r"source has dtype torch.float16; it must equal the "
                       r"output dtype torch.bfloat16"):  # fmt: skip
        validate_epilogue_args(
            PROBLEM, torch.bfloat16, source.device, alpha=1.0, bias=None, scale=None,
            activation=None, epilogue_fn=None, source=source, beta=1.0,
        )  # fmt: skip


def test_the_test_session_keeps_its_caches_out_of_the_users_home():
    root = disk_cache.cache_root()
    assert root != Path.home() / ".cache" / "cute_conv"
    assert tuning._table_path().parent == root
