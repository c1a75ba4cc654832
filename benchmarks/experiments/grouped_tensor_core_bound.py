"""How fast could wide-group convs run on the tensor cores? A bound, before such a kernel is
built (H100/H200):

    python benchmarks/experiments/grouped_tensor_core_bound.py --models regnet_y_8gf \
        --batches 1 8 32 --out grouped_tensor_core_bound.json

At batch 8 and more cuDNN beats the CUDA-core grouped kernel on groups of 48 or more channels
(``grouped_rule`` sends those calls to it), and there its grouped kernels run far below the
tensor cores' rate: RegNetY-8GF's 56-wide groups at batch 8 ~30 TMAC/s, 70% of its forward.
A conv of ``G`` groups is ``G`` dense convs of ``C / G`` channels side by side; one launch
that took the group as a grid dimension would run the tiles of all of them. This times that
work on today's tensor-core kernel: ``as_batch``, ``cute_conv.conv2d_fprop`` (the default
config, bias and activation fused) on the activation rearranged to ``[G * N, H, W, C / G]``
(done once, outside the timing) with group 0's filter: the same tiles, multiply-adds and
output bytes as the grouped call, its operands contiguous. ``per_group`` is what the package
can run today without such a kernel: the activation copied to ``[G, N, H, W, C / G]`` (timed),
then one ``conv2d_fprop`` per group on its filter and bias, writing its channel slice of the
output in place (``G`` launches). Beside them ``cudnn`` (the grouped conv with its bias, then
the activation) and ``grouped`` (the CUDA-core kernel at the rules' pixels and split).
``as_batch`` is checked against float32 on its own operands, the others against the grouped
conv's. Calls of fewer than ``--min-group-in`` (default ``MIN_GROUP``) input channels per
group, or input or output channels per group not a multiple of 8, are skipped.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from grouped_direct_ab import ab_calls, checks, random_operands, rule_total, run_ab
from models import replayed_us  # on the path grouped_direct_ab puts benchmarks/ on
from torch import nn

import cute_conv
from cute_conv import grouped_tensor_cores
from cute_conv.grouped_rule import runs_grouped_kernel
from cute_conv.reference import TORCH_ACTIVATIONS

MIN_GROUP = 48  # the narrowest groups cuDNN wins at batch 8 (session 84's bounds)
METHODS = ("cudnn", "grouped", "as_batch", "per_group", "tensor_cores")


def conv_geometry(conv: nn.Conv2d) -> dict:
    """``conv``'s stride, padding and dilation as ``conv2d_fprop``'s keyword arguments."""
    return dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation)


def groups_as_images(x_nhwc: torch.Tensor, groups: int) -> torch.Tensor:
    """``[N, H, W, C]`` as ``[G, N, H, W, C / G]`` (a view): each group's channels an image
    of their own."""
    n, h, w, c = x_nhwc.shape
    return x_nhwc.reshape(n, h, w, groups, c // groups).permute(3, 0, 1, 2, 4)


def as_batch_call(conv: nn.Conv2d, shape: tuple, activation: str | None):
    """``(call, ref)``: the grouped call's work as one dense conv over ``[G * N, H, W, C / G]``
    with group 0's filter and bias, and its float32 reference."""
    groups = conv.groups
    n, c, h, w = shape
    geom = conv_geometry(conv)
    x, weight, bias = random_operands(conv, shape)
    k_group = conv.out_channels // groups
    weight, bias = weight[:k_group].bfloat16(), bias[:k_group].bfloat16()
    x_batch = groups_as_images(x.permute(0, 2, 3, 1), groups)
    x_batch = x_batch.reshape(groups * n, h, w, c // groups).contiguous()
    filter_krsc = weight.permute(0, 2, 3, 1).contiguous()
    act = TORCH_ACTIVATIONS[activation]
    ref = act(F.conv2d(x_batch.permute(0, 3, 1, 2).float(), weight.float(), bias.float(), **geom))

    def call():
        return cute_conv.conv2d_fprop(
            x_batch, filter_krsc, bias=bias, activation=activation, **geom
        ).permute(0, 3, 1, 2)

    return call, ref


def per_group_call(conv: nn.Conv2d, shape: tuple, activation: str | None):
    """The grouped call as a copy of the activation to ``[G, N, H, W, C / G]`` and one
    ``conv2d_fprop`` per group into its channel slice of the output (NPQK viewed NCHW)."""
    groups = conv.groups
    n, c, h, w = shape
    geom = conv_geometry(conv)
    x, weight, bias = random_operands(conv, shape)
    k_group = conv.out_channels // groups
    filters = weight.bfloat16().permute(0, 2, 3, 1).contiguous().view(
        groups, k_group, *conv.kernel_size, c // groups
    )
    biases = bias.bfloat16().view(groups, k_group)
    x_nhwc = x.permute(0, 2, 3, 1)
    problem = cute_conv.Conv2dProblemShape.from_shapes(
        (n, h, w, c // groups), tuple(filters.shape[1:]), **geom
    )
    out = torch.empty(*problem.output_shape[:3], conv.out_channels, device=x.device,
                      dtype=torch.bfloat16)  # fmt: skip

    def call():
        x_groups = groups_as_images(x_nhwc, groups).contiguous()
        for g in range(groups):
            cute_conv.conv2d_fprop(
                x_groups[g], filters[g], bias=biases[g], activation=activation,
                out=out[..., g * k_group:(g + 1) * k_group], **geom,
            )  # fmt: skip
        return out.permute(0, 3, 1, 2)

    return call


def tensor_core_call(conv: nn.Conv2d, shape: tuple, activation: str | None, config=None):
    """The grouped call on the tensor-core kernel (``grouped_conv2d_tensor_cores``, at
    ``config``; None: its default)."""
    geom = conv_geometry(conv)
    x, weight, bias = random_operands(conv, shape)
    x_nhwc = x.permute(0, 2, 3, 1)  # a view of the channels_last tensor: contiguous NHWC
    filter_krsc = weight.bfloat16().permute(0, 2, 3, 1).contiguous()
    bias = bias.bfloat16()

    def call():
        return grouped_tensor_cores.grouped_conv2d_tensor_cores(
            x_nhwc, filter_krsc, groups=conv.groups, bias=bias, activation=activation,
            config=config, **geom,
        ).permute(0, 3, 1, 2)  # fmt: skip

    return call


def measure(conv: nn.Conv2d, shape: tuple, activation: str | None, rounds: int) -> dict:
    n, c, _, _ = shape
    k, groups = conv.out_channels, conv.groups
    r, s = conv.kernel_size
    cudnn, kernel, ref = ab_calls(conv, shape, activation)
    batched, batched_ref = as_batch_call(conv, shape, activation)
    per_group = per_group_call(conv, shape, activation)
    fns = {"cudnn": cudnn, "grouped": kernel(None), "as_batch": batched, "per_group": per_group,
           "tensor_cores": tensor_core_call(conv, shape, activation)}  # fmt: skip
    verdicts = checks({name: fn for name, fn in fns.items() if name != "as_batch"}, ref)
    verdicts.update(checks({"as_batch": batched}, batched_ref))
    macs = n * k * ref.shape[2] * ref.shape[3] * r * s * c // groups
    return {"module": repr(conv), "input": list(shape), "activation": activation, "macs": macs,
            "rule_takes_kernel": runs_grouped_kernel(macs, c // groups, k // groups, groups, r * s),
            "checks": verdicts, "graph_us": replayed_us(fns, rounds)}  # fmt: skip


def wide_groups(conv: nn.Conv2d) -> bool:
    """A grouped (not depthwise) conv the tensor cores take at some width: multiples of 8
    input and output channels per group (``--min-group-in``, default ``MIN_GROUP``, sets the
    narrowest group timed)."""
    group_in = conv.in_channels // conv.groups
    group_out = conv.out_channels // conv.groups
    return conv.groups > 1 and group_in % 8 == 0 and group_out % 8 == 0


if __name__ == "__main__":
    run_ab(
        __doc__.splitlines()[0], measure, METHODS, ["regnet_y_8gf"], rule_total,
        takes=wide_groups, min_group_in=MIN_GROUP,
    )  # fmt: skip
