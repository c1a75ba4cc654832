"""Few-channel dense convs on the grouped kernel's direct form, on the CPU: the rule that
sends them there (``cute_conv.direct_rule``), the checks of such a config against a call,
the config's KRSC flag, the dispatch's choice, and the compiled PTX (the KRSC filter's
scalar loads)."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
import torch
from cute_conv.kernels.common.epilogue import EpilogueSpec
from cute_conv.kernels.common.grouped_direct import output_vector

from cute_conv import (
    Conv2dConfig,
    Conv2dProblemShape,
    GroupedDirectConfig,
    PointwiseGemvConfig,
    compile_kernel,
)
from cute_conv.arch import ARCHS, check_config_type
from cute_conv.direct_rule import (
    DIRECT_MAX_MACS,
    DIRECT_MAX_PIXEL_MACS,
    DIRECT_MIN_PIXELS,
    DIRECT_STAGED_MAX_K,
    DIRECT_UNSTAGED_MAX_K,
    DIRECT_UNSTAGED_MIN_PIXELS,
    check_direct_dense_fits,
)
from cute_conv.direct_rule import direct_dense_config as _direct_dense_config
from cute_conv.dispatch import _config_for_call
from cute_conv.grouped_rule import pixels_per_thread
from cute_conv.ops import config_from_str, config_to_str
from cute_conv.staging import copies_activation
from cute_conv.untuned import heuristic_config


def conv(n, h, w, c, k, r=1, s=None, **geom) -> Conv2dProblemShape:
    return Conv2dProblemShape.from_shapes((n, h, w, c), (k, r, r if s is None else s, c), **geom)


def direct_dense_config(problem, element_bytes, out_bytes):
    """The rule as a call without a config asks it (``untuned.cuda_core_config``)."""
    staged = copies_activation(problem, element_bytes)
    return _direct_dense_config(problem, element_bytes, out_bytes, staged)


STEM = conv(1, 224, 224, 3, 32, 3, stride=2, padding=1)  # 864 multiply-adds a pixel

# ---- the rule ----


@pytest.mark.parametrize(
    "problem",
    [STEM, conv(8, 224, 224, 3, 32, 3, stride=2, padding=1),
     conv(1, 224, 224, 3, 16, 3, stride=2, padding=1), conv(8, 64, 64, 8, 8),
     conv(4, 128, 128, 8, 8, 3, padding=1), conv(1, 128, 128, 4, 8)],
    ids=["stem-b1", "stem-b8", "stem-k16", "1x1-c8-b8", "3x3-c8-b4", "1x1-c4-b1"],
)  # fmt: skip
def test_the_rule_takes_few_channel_stems(problem):
    config = direct_dense_config(problem, 2, 2)
    expected = GroupedDirectConfig(problem.C, problem.K, filter_krsc=True)
    assert config == replace(expected, pixels=pixels_per_thread(problem, expected))
    assert config.pixels == 4  # the grouped pixels, however few the threads
    assert heuristic_config(problem, 132) == config
    assert isinstance(heuristic_config(problem, 132, cuda_cores=False), Conv2dConfig)
    assert direct_dense_config(problem, 2, 4) == config  # a float32 output
    # A residual: the same (the direct form loads the source before its sums).
    assert heuristic_config(problem, 132, has_residual=True) == config


@pytest.mark.parametrize(
    "problem,element_bytes,out_bytes",
    [(STEM, 1, 2), (STEM, 2, 1), (conv(1, 224, 224, 17, 32, 1), 2, 2),
     (conv(1, 224, 224, 3, 40, 3, padding=1), 2, 2),
     (conv(1, 224, 224, 3, 64, 3, stride=2, padding=1), 2, 2),
     (conv(1, 224, 224, 3, 64, 7, stride=2, padding=3), 2, 2),
     (conv(32, 224, 224, 3, 32, 3, stride=2, padding=1), 2, 2),
     (conv(1, 16, 16, 8, 8), 2, 2), (conv(128, 1, 1, 12, 48), 2, 2)],
    ids=["fp8-in", "fp8-out", "c17", "k40-3x3", "k64-3x3", "7x7", "b32-macs", "m256", "m128"],
)  # fmt: skip
def test_the_rule_leaves_the_rest_to_the_tensor_cores(problem, element_bytes, out_bytes):
    assert direct_dense_config(problem, element_bytes, out_bytes) is None


@pytest.mark.parametrize(
    "problem,vector",
    [(conv(8, 128, 128, 4, 4), 4), (conv(16, 35, 41, 13, 5), 1), (conv(16, 35, 7, 5, 46), 2),
     (conv(1, 224, 224, 3, 36, 3, padding=1), 4), (conv(1, 64, 64, 3, 1), 1)],
    ids=["vae-k4", "k5", "k46", "k36-3x3", "k1"],
)  # fmt: skip
def test_the_rule_takes_k_not_a_multiple_of_8_at_its_widest_vector(problem, vector):
    config = direct_dense_config(problem, 2, 2)
    expected = GroupedDirectConfig(problem.C, problem.K, filter_krsc=True, vector=vector)
    assert config == replace(expected, pixels=pixels_per_thread(problem, expected))
    assert heuristic_config(problem, 132) == config
    check_direct_dense_fits(config, problem, 2, 2, PLAIN)  # no raise


@pytest.mark.parametrize("k,vector", [(8, 8), (24, 8), (12, 4), (36, 4), (6, 2), (86, 2), (5, 1),
                                      (13, 1), (1, 1)])  # fmt: skip
def test_output_vector_is_the_widest_that_divides(k, vector):
    assert output_vector(k) == vector


def test_the_rule_bounds_per_pixel_total_and_pixels():
    # 3x3, C=3 (staged on the tensor cores): 27 * K multiply-adds a pixel.
    k = DIRECT_MAX_PIXEL_MACS // 27  # 37
    assert direct_dense_config(conv(1, 64, 64, 3, k, 3, padding=1), 2, 2) is not None
    assert direct_dense_config(conv(1, 64, 64, 3, k + 1, 3, padding=1), 2, 2) is None
    batch = DIRECT_MAX_MACS // (27 * k) // 1024  # of 32x32 output maps
    assert direct_dense_config(conv(batch, 32, 32, 3, k, 3, padding=1), 2, 2) is not None
    assert direct_dense_config(conv(batch + 1, 32, 32, 3, k, 3, padding=1), 2, 2) is None
    side = int(DIRECT_MIN_PIXELS**0.5)  # 2048 is no square: 45 * 45 < 2048 <= 45 * 46
    assert direct_dense_config(conv(1, side, side + 1, 4, 8), 2, 2) is not None
    assert direct_dense_config(conv(1, side, side, 4, 8), 2, 2) is None


def test_staged_convs_take_the_direct_form_up_to_a_k_bound():
    # 1x1s of C=4: staged (padded to 8) on the tensor cores.
    k = DIRECT_STAGED_MAX_K
    assert direct_dense_config(conv(4, 64, 64, 4, k), 2, 2) is not None
    assert direct_dense_config(conv(4, 64, 64, 4, k + 8), 2, 2) is None
    wide = conv(4, 64, 64, 4, 256)  # 1024 multiply-adds a pixel: inside the other bounds
    assert _direct_dense_config(wide, 2, 2, True, staged_max_k=math.inf) is not None
    assert isinstance(heuristic_config(wide, 132), Conv2dConfig)
    with pytest.raises(TypeError, match="staged_max_k must be None or a number"):
        _direct_dense_config(wide, 2, 2, True, staged_max_k="48")


def test_unstaged_convs_take_the_direct_form_at_few_outputs_on_many_pixels():
    # C of 8 or 16: whole TMA rows, which the tensor cores read as they are.
    for problem in (conv(8, 64, 64, 8, 8), conv(1, 112, 112, 16, 64), conv(2, 48, 48, 8, 8, 3)):
        assert not copies_activation(problem, 2)
    assert copies_activation(STEM, 2) and copies_activation(conv(1, 64, 64, 4, 4), 2)
    k, w = DIRECT_UNSTAGED_MAX_K, DIRECT_UNSTAGED_MIN_PIXELS // 128
    assert direct_dense_config(conv(1, 128, w, 8, k), 2, 2) is not None
    assert direct_dense_config(conv(1, 128, w - 1, 8, k), 2, 2) is None
    assert direct_dense_config(conv(1, 128, w, 8, k + 8), 2, 2) is None
    assert direct_dense_config(conv(1, 128, w, 16, k), 2, 2) is not None
    # The validation corpus's 1x1s of C=16 at batch 1 on 112x112 maps run on the tensor cores.
    for k in (16, 64):
        problem = conv(1, 112, 112, 16, k)
        assert direct_dense_config(problem, 2, 2) is None
        assert isinstance(heuristic_config(problem, 132), Conv2dConfig)


def test_the_gemv_rule_comes_first():
    problem = conv(1, 1, 32, 8, 48)  # 32 output pixels: also under the direct rule's M bound
    assert isinstance(heuristic_config(problem, 132), PointwiseGemvConfig)


# ---- the checks of a config against a call ----

PLAIN = EpilogueSpec()


@pytest.mark.parametrize(
    "config,element_bytes,epilogue,match",
    [(GroupedDirectConfig(3, 32, filter_krsc=True), 1, PLAIN, "16-bit inputs"),
     (GroupedDirectConfig(3, 16, filter_krsc=True), 2, PLAIN, "group_in=3, group_out=32"),
     (GroupedDirectConfig(1, 32, filter_krsc=True), 2, PLAIN, "got group_in=1"),
     (GroupedDirectConfig(3, 32), 2, PLAIN, "filter_krsc=True"),
     (GroupedDirectConfig(3, 32, channel_norm_eps=1e-6, filter_krsc=True), 2, PLAIN,
      "no row window or channel norm"),
     (GroupedDirectConfig(3, 32, filter_krsc=True), 2, EpilogueSpec(has_amax=True),
      "out_amax"),
     (GroupedDirectConfig(3, 32, filter_krsc=True), 2, EpilogueSpec(epilogue_fn=abs),
      "epilogue_fn")],
    ids=["fp8", "group-out", "group-in", "staged-filter", "norm", "amax", "epilogue-fn"],
)  # fmt: skip
def test_a_config_that_cannot_run_the_call_is_refused(config, element_bytes, epilogue, match):
    with pytest.raises(ValueError, match=match):
        check_direct_dense_fits(config, STEM, element_bytes, 2, epilogue)


def test_check_config_fits_points_a_direct_config_to_its_own_check():
    from cute_conv import check_config_fits

    with pytest.raises(TypeError, match="check_direct_dense_fits checks those"):
        check_config_fits(GroupedDirectConfig(3, 32, filter_krsc=True), STEM)


def test_the_config_the_rule_makes_fits_its_call():
    check_direct_dense_fits(direct_dense_config(STEM, 2, 2), STEM, 2, 2, PLAIN)  # no raise


# ---- the config ----


@pytest.mark.parametrize(
    "kwargs,match",
    [(dict(group_out=5, vector=8), "vector=8: group_out=5 takes vector=1"),
     (dict(group_out=12, vector=8), "vector=8: group_out=12 takes vector=4"),
     (dict(group_out=6, vector=4), "vector=4: group_out=6 takes vector=2"),
     (dict(group_out=24, vector=4), r"vector=4: group_out=24 takes vector=8, the widest of "
                                    r"\(8, 4, 2, 1\) that divides it \(grouped form\)"),
     (dict(group_out=1, vector=True), "vector=True: group_out=1 takes vector=1"),
     (dict(group_out=2, vector=2.0), "vector=2.0: group_out=2 takes vector=2")],
    ids=["k5-v8", "k12-v8", "k6-v4", "k24-v4", "bool", "float"],
)  # fmt: skip
def test_the_grouped_forms_vector_divides_its_output_channels(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GroupedDirectConfig(3, filter_krsc=True, **kwargs)
    group_out = kwargs["group_out"]
    GroupedDirectConfig(3, group_out, filter_krsc=True, vector=output_vector(group_out))


def test_a_depthwise_config_keeps_its_own_vectors():
    with pytest.raises(ValueError, match=r"vector=1: one of \(8, 4, 2\) \(depthwise form\)"):
        GroupedDirectConfig(1, 1, vector=1)


def test_filter_krsc_is_a_bool_and_survives_the_ops_string():
    with pytest.raises(ValueError, match="filter_krsc must be a bool"):
        GroupedDirectConfig(3, 32, filter_krsc=1)
    for config in (GroupedDirectConfig(3, 32, pixels=4, filter_krsc=True),
                   GroupedDirectConfig(13, 5, pixels=4, filter_krsc=True, vector=1)):  # fmt: skip
        check_config_type(config)  # does not raise
        assert config_from_str(config_to_str(config)) == config


# ---- the dispatch ----


def config_for(epilogue: EpilogueSpec):
    x = torch.empty(1, 224, 224, 3, dtype=torch.bfloat16)  # shapes and dtype only
    return _config_for_call(None, ARCHS["sm_90a"], STEM, STEM, x, (32, 3, 3, 3), torch.bfloat16,
                            132, epilogue)  # fmt: skip


def test_the_dispatch_runs_the_direct_form_only_for_an_epilogue_it_has(monkeypatch):
    # Nothing stored or tuned (the autotuner would time on a GPU): the heuristic's config.
    monkeypatch.setattr("cute_conv.dispatch.stored_or_tuned_config", lambda *a, **k: None)
    for epilogue in (EpilogueSpec(has_bias=True, activation="relu"),
                     EpilogueSpec(has_bias=True, activation="relu", has_residual=True)):  # fmt: skip
        assert config_for(epilogue) == direct_dense_config(STEM, 2, 2)
    for epilogue in (EpilogueSpec(epilogue_fn=abs), EpilogueSpec(has_amax=True)):
        assert not isinstance(config_for(epilogue), GroupedDirectConfig)


# ---- the kernel ----


def filter_loads(config: GroupedDirectConfig) -> dict[str, int]:
    ptx = compile_kernel("sm_90a", config=config).ptx
    loads = re.findall(r"ld\.global(?:\.nc)?\.(\S+)\s", ptx)
    return {width: loads.count(width) for width in set(loads)}


def test_the_krsc_filter_is_read_a_channel_at_a_time():
    """A pixel's 3 input channels: 3 activation loads per pixel either way; the staged
    filter's 8 output channels one 16-byte load per input channel, the KRSC filter's 8
    scalar loads (its output channels R * S * C apart)."""
    staged = filter_loads(GroupedDirectConfig(3, 32, pixels=4))
    krsc = filter_loads(GroupedDirectConfig(3, 32, pixels=4, filter_krsc=True))
    assert staged == {"b16": 3 * 4, "v4.b32": 3}
    assert krsc == {"b16": 3 * 4 + 3 * 8}


def test_one_channel_in_and_out_runs_on_the_tensor_cores():
    # GroupedDirectConfig(1, 1) is the depthwise form, whose threads take 2+ channels.
    problem = conv(1, 64, 64, 1, 1, 3, padding=1)
    assert direct_dense_config(problem, 2, 2) is None
    assert isinstance(heuristic_config(problem, 132), Conv2dConfig)
