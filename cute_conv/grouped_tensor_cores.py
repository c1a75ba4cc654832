"""Grouped convs of wide groups on the SM90 tensor-core kernel (``Conv2dConfig.groups``).

A conv of ``G`` groups is ``G`` dense convs of ``C / G`` channels side by side. Its KRSC
filter, ``[K, R, S, C / G]``, is a dense filter of ``C / G`` channels. The kernel views the
filter's and the output's K as (k in the group, group) (``filter_gemm_view``,
``output_gemm_view``): an output tile's channels lie in one group, a group's last tile may
reach past it (zeros read, nothing stored there: 56 channels a group on 64-wide tiles), and
the tile's activation loads read its group's channels (``Im2colLoader.channel_group``).
Measured as a bound before it was built (``benchmarks/experiments/grouped_tensor_core_bound.py``):
the same work as one dense conv ran 3-9x cuDNN's grouped convs on RegNet's wide groups at
batch 8 and 32; built, it runs 0.85-1.03x that bound's time at batch 8 and 32, 1.09-1.45x
at batch 1, and faster than cuDNN and the CUDA-core grouped kernel on every call of groups
of 24 to 256 channels measured but two (``experiments/grouped_tensor_cores*_H200.json``), and
on 16-wide groups up to a size (``tensor_cores_pay``). ``tensor_cores_take`` says which convs
``cute_conv.nn.Conv2d`` sends here, ``tensor_cores_pay`` which of their calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .autograd import EpilogueArgs
from .autograd import backward as _backward
from .autograd import setup_context as _setup_context
from .compile import CompiledConv2d, compile_kernel, forget_on_clear, kernel_scalars
from .config import check_config_fits
from .cuda_context import current_raw_stream, device_arch, on_device
from .dispatch import freeze_arg, out_overlaps_inputs, tensor_key
from .dtypes import dtype_name
from .epilogue import kernel_vector_dtype, validate_epilogue_args
from .grouped import SIXTEEN_BIT_DTYPES, vector_operand
from .kernels.common.config_checks import check_choice
from .kernels.sm90.config import (
    HALF_STEP_MIN_K_TILE_BYTES,
    TILE_K_CHOICES,
    TILE_N_CHOICES,
    Conv2dConfig,
    is_half_step,
)
from .occupancy import resident_clusters
from .ops import meta_stand_ins, padding_pairs, takes_torch_path
from .plan_cache import PlanCache
from .problem import Conv2dProblemShape, normalize_padding, normalize_pair
from .schedule import launch_clusters
from .staging import span_bytes
from .validation import (
    IM2COL_3D,
    check_alignment,
    check_tensor,
    out_pixel_stride,
    validate_conv_inputs,
)
from .workspace import workspace_pointers, workspace_size_sm90

__all__ = [
    "MIN_GROUP_IN",
    "SM90_ARCH",
    "default_tile_k",
    "default_tile_n",
    "grouped_conv2d_tensor_cores",
    "runs_on_tensor_cores",
    "tensor_cores_pay",
    "tensor_cores_take",
    "tiles_per_group",
]

SM90_ARCH = "sm_90a"  # the kernel that takes groups (Conv2dConfig.groups); SM100's does not

# Groups of at least WIDE_GROUP_IN channels ran faster on the tensor cores than on cuDNN and
# on the CUDA-core grouped kernel at the sizes measured (H200,
# ``experiments/grouped_tensor_cores_narrow_H200.json``): fitted on RegNetY-1.6GF's 24-wide and
# ResNeXt-50's 32-wide groups, judged on RegNetY-3.2GF's 24 and ResNeXt-101's 32 (0.47-0.78x
# the rule's time at batch 1 to 32, one call at 1.02x).
WIDE_GROUP_IN = 24
# Narrower groups, down to MIN_GROUP_IN, pay only up to NARROW_GROUP_MAX_MACS a call. On
# their own 16-channel k-tiles (``default_tile_k``,
# ``experiments/grouped_tensor_core_bound_16k_H200.json``) ResNeXt-50's 16-wide calls ran
# 0.61-0.63x the rule's time at 116M multiply-adds a call, 0.73-0.78x at 462M, 0.93-0.98x at
# 925M; the bound is the geometric mean of the last two, the largest clear win and the first
# near tie (the same rule put it at 231M on 64-channel k-tiles). Judged on models no rule
# saw: RegNetX-800MF's and ResNeXt-101 64x4d's 16-wide calls within it ran 0.51-0.76x, past
# it (925M) 0.91-0.98x. 8-wide groups on 16-channel k-tiles ran 1.8-2.8x the rule's time at
# 116M-925M (ResNeXt-50, ``experiments/grouped_tensor_core_bound_8wide_H200.json``).
MIN_GROUP_IN = 16
NARROW_GROUP_MAX_MACS = 654_000_000
DEFAULT_TILE_K = Conv2dConfig.tile_k  # 64 channels: a 128-byte row
# 256-row tiles of a narrow group's own k-tile pay from about one and a half waves of them
# (``_default_config``): at 1.06-1.33 waves they ran 1.04-1.13x the 128-row tiles' time, from
# 1.48 waves 0.86-0.97x (``experiments/grouped_tensor_core_ktiles_256rows_H200.json``).
NARROW_K_TILE_MIN_WAVES_256 = 1.4
ELEMENT_BYTES = 2  # of SIXTEEN_BIT_DTYPES, the activations grouped calls take

Tensor = torch.Tensor


def tiles_per_group(group_out: int, tile_n: int) -> int:
    """The output tiles of ``tile_n`` channels a group of ``group_out`` takes (the kernel's
    own count: its last one may reach past the group)."""
    return -(-group_out // tile_n)


def default_tile_n(group_out: int) -> int:
    """The tile width (``TILE_N_CHOICES``) whose tiles cover ``group_out`` output channels
    per group with the fewest columns past the group (its last tile's, computed and not
    stored), the widest of those: one that divides it where any does, else e.g. 64 for 56
    and 128 for 120."""
    _check_group_width("group_out", group_out)
    return min(
        sorted(TILE_N_CHOICES, reverse=True), key=lambda t: tiles_per_group(group_out, t) * t
    )


def default_tile_k(group_in: int, tile_n: int) -> int:
    """The k-tile (``TILE_K_CHOICES``) of a group of ``group_in`` input channels: the
    narrowest that covers the group, at most the kernel's default 64 (a wider group loops
    over 64-channel k-tiles). A k-tile past the group multiplies zeros: 64 channels on a
    16-wide group are three quarters zeros. Half-step tile widths (``is_half_step``) keep
    k-tiles of at least ``HALF_STEP_MIN_K_TILE_BYTES``."""
    _check_group_width("group_in", group_in)
    check_choice("tile_n", tile_n, TILE_N_CHOICES)
    floor = HALF_STEP_MIN_K_TILE_BYTES // ELEMENT_BYTES if is_half_step(tile_n) else 0
    return min(t for t in TILE_K_CHOICES if t >= min(max(group_in, floor), DEFAULT_TILE_K))


def _check_group_width(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


def tensor_cores_take(in_channels: int, out_channels: int, groups: int) -> bool:
    """Whether grouped convs of these channels run on the tensor cores: at least two groups
    of at least ``MIN_GROUP_IN`` input channels, and input and output channels per group
    multiples of 8 (16-byte filter rows and output group strides)."""
    if groups < 2 or in_channels % groups or out_channels % groups:
        return False
    group_in, group_out = in_channels // groups, out_channels // groups
    return group_in >= MIN_GROUP_IN and group_in % 8 == 0 and group_out % 8 == 0


def tensor_cores_pay(group_in: int, macs: int) -> bool:
    """Whether a call of convs ``tensor_cores_take`` takes runs faster on the tensor cores than
    where ``grouped_rule`` sends it: always for groups of at least ``WIDE_GROUP_IN`` input
    channels, up to ``NARROW_GROUP_MAX_MACS`` multiply-adds (``N*P*Q*K*R*S*C/G``) for
    narrower ones."""
    return group_in >= WIDE_GROUP_IN or macs <= NARROW_GROUP_MAX_MACS


def runs_on_tensor_cores(device: torch.device) -> bool:
    """Whether ``device`` runs grouped convs on the tensor cores: an SM90 GPU."""
    return device.type == "cuda" and device_arch(device.index) == SM90_ARCH


def grouped_conv2d_tensor_cores(
    x: Tensor,
    filter: Tensor,  # noqa: A002
    /,
    *,
    groups: int,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | Sequence[Sequence[int]] = 0,
    dilation: int | Sequence[int] = 1,
    bias: Tensor | None = None,
    scale: Tensor | None = None,
    activation: str | None = None,
    out: Tensor | None = None,
    config: Conv2dConfig | None = None,
) -> Tensor:
    """A grouped conv with a fused epilogue on the tensor cores, in one kernel:

        out = act(conv(x, filter, groups) * scale + bias)

    Args:
        x: ``[N, H, W, C]`` contiguous (NHWC), bfloat16 or float16, on a Hopper GPU.
        filter: ``[K, R, S, C / groups]`` contiguous, of ``x``'s dtype.
        groups: at least 2, dividing C and K; ``C / groups`` and ``K / groups`` multiples
            of 8 (16-byte filter rows and output group strides).
        stride, padding, dilation: as ``cute_conv.conv2d_fprop`` takes them.
        bias, scale, activation: as ``cute_conv.conv2d_fprop`` takes them.
        out: optional ``[N, P, Q, K]`` output of ``x``'s dtype: contiguous, or a channel
            slice of a contiguous ``[N, P, Q, L]`` tensor, written in place; else a new one.
        config: a ``Conv2dConfig`` whose ``groups`` is ``groups``; None: ``default_tile_n``,
            256 rows where tiles narrower than 128 channels fill the SMs once, 64 where
            128-row tiles would fill at most half of them, else 128 (``_default_config``).

    Returns:
        ``out`` or the new output. Sums are float32.

    Non-finite inputs stay in their group, as in torch: a tile reads ``x`` as a 3-d conv's
    view whose batch is the group (``kernels.common.im2col.activation_im2col_view``), so the
    channels of a k-tile past its group are zeros, not the next group's values.

    Raises:
        TypeError, ValueError: bad input, before anything is launched or written.
    """
    stride, dilation = normalize_pair("stride", stride), normalize_pair("dilation", dilation)
    pairs = normalize_padding(padding)
    if takes_torch_path(x, filter, None, bias, scale, None):
        if out is not None or config is not None:
            raise TypeError(
                "out= and config= are not taken under torch.compile or with inputs that "
                "require grad: use the returned tensor"
            )
        return torch.ops.cute_conv.grouped_conv2d_tensor_cores(
            x, filter, bias, scale, groups, list(stride), [*pairs[0], *pairs[1]],
            list(dilation), activation,
        )  # fmt: skip
    return _run(x, filter, bias, scale, groups, stride, pairs, dilation, activation, out, config)


@dataclass(frozen=True)
class _Plan:
    """What a call of one metadata launches (``_plan``)."""

    out_shape: tuple[int, int, int, int]
    vector_dtype: torch.dtype
    kernel: CompiledConv2d
    scalars: tuple
    workspace: tuple[int, int] | None  # the dynamic schedule's counters, if it takes them
    empty: bool  # N*P*Q == 0: nothing to launch


def _run(x, filter, bias, scale, groups, stride, padding, dilation, activation, out,  # noqa: A002
         config) -> Tensor:  # fmt: skip
    """The direct path: the call's plan (validated and compiled once per metadata), the
    checks that read data pointers, the launch."""
    plan = _plans.memo(
        _plan_key, _make_plan,
        (x, filter, bias, scale, out, (groups, stride, padding, dilation, activation, config)),
    )  # fmt: skip
    for name, t in (("activation", x), ("filter", filter), ("out", out)):
        if t is not None:
            check_alignment(name, t)
    if out is not None and out_overlaps_inputs(
        out.data_ptr(), x.data_ptr(), filter.data_ptr(), 0,
        tuple(span_bytes(t) for t in (x, filter, out)),
    ):  # fmt: skip
        raise ValueError("out overlaps activation or filter: pass a separate output tensor")
    if out is None:
        out = torch.empty(plan.out_shape, dtype=x.dtype, device=x.device)
    if plan.empty:
        return out
    # Bias and scale in one dtype, contiguous and aligned (copies only where they are not).
    bias, scale = (None if t is None else vector_operand(t, plan.vector_dtype)
                   for t in (bias, scale))  # fmt: skip
    pointers = (x.data_ptr(), filter.data_ptr(), out.data_ptr(), 0,
                0 if bias is None else bias.data_ptr(), 0 if scale is None else scale.data_ptr(),
                *([0] * 5))  # fmt: skip
    index = x.device.index
    with on_device(index):
        stream = current_raw_stream(index)
        pointers += workspace_pointers(plan.workspace, index, stream)
        plan.kernel.launch(pointers, plan.scalars, stream)
    return out


def _plan_key(x, filter, bias, scale, out, args: tuple) -> tuple:  # noqa: A002
    return (
        *(None if t is None else tensor_key(t) for t in (x, filter, bias, scale, out)),
        *(freeze_arg(a) for a in args[:5]),
        args[5],  # the config: frozen and hashable, or None
    )


_plans: PlanCache[_Plan] = PlanCache()
forget_on_clear(_plans.clear)  # a plan holds its kernel: compile.clear_cache drops both


def _make_plan(x, filter, bias, scale, out, args: tuple) -> _Plan:  # noqa: A002
    problem, config, spec = _validate(x, filter, bias, scale, out, *args)
    for name, t in (("filter", filter), ("bias", bias), ("scale", scale), ("out", out)):
        if t is not None and t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but activation is on {x.device}")
    if x.device.type != "cuda":
        raise ValueError(f"activation is on {x.device}; cute_conv runs on CUDA tensors")
    index = x.device.index
    arch = device_arch(index)
    if arch != SM90_ARCH:
        raise ValueError(
            f"activation is on a {arch} device; grouped convs on the tensor cores run on "
            f"{SM90_ARCH} (H100/H200) only: use cute_conv.grouped_conv2d"
        )
    num_sms = torch.cuda.get_device_properties(index).multi_processor_count
    if config is None:
        config = _default_config(problem, args[0], num_sms)
    kernel = compile_kernel(
        arch, act_dtype=dtype_name(x.dtype), filter_dtype=dtype_name(x.dtype),
        out_dtype=dtype_name(x.dtype), config=config, epilogue=spec,
    )  # fmt: skip
    clusters = launch_clusters(problem, config, num_sms, resident_clusters(index, config.cluster_m))
    out_pixels = None if out is None else out_pixel_stride(out)
    scalars = kernel_scalars(problem, 1.0, 0.0, clusters, out_pixel_stride=out_pixels)
    return _Plan(problem.output_shape, kernel_vector_dtype(bias, scale), kernel, scalars,
                 workspace_size_sm90(problem, config, clusters), problem.gemm_m == 0)  # fmt: skip


def _default_config(problem: Conv2dProblemShape, groups: int, num_sms: int) -> Conv2dConfig:
    """``default_tile_n`` of a group's output channels, ``default_tile_k`` of its input
    channels; 256-row tiles where tiles narrower than 128 channels fill the ``num_sms`` SMs
    at least once (``NARROW_K_TILE_MIN_WAVES_256`` times on narrow k-tiles), 64-row ones
    where 128-row ones would fill at most half of them, else 128.

    Measured on an H200 (``experiments/grouped_tensor_core_tiles.py``), per forward over a
    model's grouped calls. 64 rows: fitted on RegNetX-3.2GF and RegNetY-16GF at batch 1, 8
    and 32, 0.88-0.93x the 128-row tiles' time at batch 1, 0.77x on the held-out
    RegNetX-16GF, batch 8 and 32 as they were. 256 rows: fitted on the same two (48- and
    112-wide tiles), 0.91x at batch 32 and 0.997-1.006x at batch 8; judged on RegNetY-8GF's
    64-wide tiles, 0.96x / 0.87x at batch 8 / 32. 256x128 tiles ran 1.04-1.12x on
    RegNetX-16GF and are not taken. A narrow group's own k-tile (16 or 32 channels): fitted
    on ResNeXt-50's 16- and 32-wide and RegNetX-400MF's 16-wide calls, 0.70-0.94x the
    64-channel k-tiles' time at batch 8 and 32, 0.89-1.02x at batch 1; judged on ResNeXt-101
    32x8d's and RegNetY-800MF's (0.66-0.86x) and on RegNetY-1.6GF's 24-wide groups, a width
    no fit had (32-channel k-tiles, 0.88-0.97x at batch 1, 0.79-0.95x at 8 and 32)
    (``experiments/grouped_tensor_core_ktiles_16wide_H200.json``). Its 256-row tiles from 1.4
    waves, against 128 rows: fitted on those two models and four RegNets, judged on
    ResNeXt-101 32x8d and 64x4d and RegNetX-800MF at batch 8 and 32, 0.80-1.01x a call,
    0.84-0.99x per forward (``experiments/grouped_tensor_core_ktiles_256rows_H200.json``)."""
    group_out = problem.K // groups
    tile_n = default_tile_n(group_out)
    tile_k = default_tile_k(problem.C // groups, tile_n)
    per_row = groups * tiles_per_group(group_out, tile_n)  # tiles along N
    min_waves = 1 if tile_k == DEFAULT_TILE_K else NARROW_K_TILE_MIN_WAVES_256
    if tile_n < 128 and -(-problem.gemm_m // 256) * per_row >= min_waves * num_sms:
        tile_m = 256
    elif 2 * -(-problem.gemm_m // 128) * per_row <= num_sms:
        tile_m = 64
    else:
        tile_m = 128
    return Conv2dConfig(tile_m=tile_m, tile_n=tile_n, tile_k=tile_k, groups=groups)


def _validate(x, filter, bias, scale, out, groups, stride, padding, dilation, activation,  # noqa: A002
              config):  # fmt: skip
    """Check a call; return its dense problem (C, K the whole conv's), its config (None
    where it takes the default: ``_default_config``, which needs the device) and epilogue
    spec. Reads shapes, dtypes and strides only (meta tensors pass)."""
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError(f"groups must be an int, got {type(groups).__name__}")
    if groups < 2:
        raise ValueError(f"groups must be >= 2, got {groups}")
    check_tensor("activation", x, SIXTEEN_BIT_DTYPES)
    check_tensor("filter", filter, SIXTEEN_BIT_DTYPES)
    if filter.dtype != x.dtype:
        raise TypeError(f"filter has dtype {filter.dtype}; activation has {x.dtype}")
    c, (k, r, s, group_in) = x.shape[3], filter.shape
    if c != group_in * groups or k % groups:
        raise ValueError(
            f"filter has shape {tuple(filter.shape)}; a conv of {c} channels in {groups} "
            f"groups takes [K, R, S, {c // groups}] with K a multiple of {groups}"
        )
    if group_in % 8:
        raise ValueError(f"C / groups = {group_in}: a multiple of 8 (16-byte filter rows)")
    if (k // groups) % 8:
        raise ValueError(
            f"K / groups = {k // groups}: a multiple of 8 (16-byte output group strides)"
        )
    if config is not None and not isinstance(config, Conv2dConfig):
        raise TypeError(f"config must be a Conv2dConfig, got {type(config).__name__}")
    if config is not None and config.groups != groups:
        raise ValueError(f"config has groups={config.groups}; this call takes groups={groups}")
    # The dense problem over all channels (a stand-in filter of C channels): the geometry's
    # limits, P and Q, C (the activation's pixel stride) and K (the output's).
    dense_filter = torch.empty((k, r, s, c), dtype=x.dtype, device="meta")
    # IM2COL_3D: the kernel's view of x (activation_im2col_view).
    problem, _ = validate_conv_inputs(
        x, dense_filter, stride=stride, padding=padding, dilation=dilation, out=out,
        out_dtype=x.dtype, limits=IM2COL_3D,
    )  # fmt: skip
    if config is not None:
        check_config_fits(config, problem)
    spec = validate_epilogue_args(
        problem, x.dtype, x.device, alpha=1.0, bias=bias, scale=scale, activation=activation,
        epilogue_fn=None,
    )  # fmt: skip
    return problem, config, spec


@torch.library.custom_op("cute_conv::grouped_conv2d_tensor_cores", mutates_args=())
def _tensor_cores_op(
    x: Tensor,
    filter: Tensor,  # noqa: A002
    bias: Optional[Tensor],
    scale: Optional[Tensor],
    groups: int,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    activation: Optional[str],
) -> Tensor:
    """``grouped_conv2d_tensor_cores`` as an op (autograd runs it with grad mode off)."""
    return _run(x, filter, bias, scale, groups, tuple(stride), padding_pairs(padding),
                tuple(dilation), activation, None, None)  # fmt: skip


@_tensor_cores_op.register_fake
def _(x, filter, bias, scale, groups, stride, padding, dilation, activation):  # noqa: A002
    with unset_fake_temporarily():
        metas = meta_stand_ins((x, filter, bias, scale))
        problem, _, _ = _validate(*metas, None, groups, tuple(stride), padding_pairs(padding),
                                  tuple(dilation), activation, None)  # fmt: skip
    return x.new_empty(problem.output_shape)


def _needs_grad(ctx) -> tuple[bool, ...]:
    """Which of the shared backward's ``(x, filter, source, bias, scale)`` need a gradient:
    the op's ``(x, filter, bias, scale)`` inputs', no source."""
    return (*ctx.needs_input_grad[:2], False, *ctx.needs_input_grad[2:4])


def _setup(ctx, inputs, output) -> None:
    x, filter, bias, scale, groups, stride, padding, dilation, activation = inputs  # noqa: A001
    args = EpilogueArgs(stride, padding, dilation, 1.0, 0.0, activation, "after_activation",
                        groups)  # fmt: skip
    _setup_context(ctx, (x, filter, None, bias, scale), args, output, _needs_grad(ctx))


def _backward_op(ctx, grad_out):
    gx, gw, _, gb, gsc = _backward(ctx, grad_out, _needs_grad(ctx))
    return (gx, gw, gb, gsc) + (None,) * 5


_tensor_cores_op.register_autograd(_backward_op, setup_context=_setup)
