"""ResNet's block ending fused into the conv: out = relu(bn(conv(x, w)) + identity), one kernel.

    python examples/resnet_residual.py

torchvision's BasicBlock and Bottleneck add the identity *before* the final ReLU. With
``residual_order="before_activation"`` the epilogue does the same: the eval batch norm folded
into ``scale``/``bias``, then ``+ identity``, then the ReLU, before the single store. Torch eager
runs the conv (cuDNN), the batch norm, the add and the ReLU as four kernels. On a Hopper GPU
this checks the result against a float32 torch reference and times both; without one it
compiles the kernel for sm_90a and says what it could not run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import cute_conv

from _common import BN_EPS, PAD, Variant, batch_norm_operands, run


def operands(problem, device):
    identity = torch.randn(problem.output_shape, device=device).to(torch.bfloat16)
    return {**batch_norm_operands(problem.K, device), "identity": identity}


def fused(x, w, t, out=None):
    return cute_conv.conv2d_fprop_with_residual(
        x, w, t.identity, residual_order="before_activation", padding=PAD,
        scale=t.scale, bias=t.bias, activation="relu", out=out,
    )  # fmt: skip


def unfused(conv, x, w, t):
    y = conv(x, w, padding=PAD)
    y = F.batch_norm(y, t.mean, t.var, t.gamma, t.beta, training=False, eps=BN_EPS)
    return F.relu(y + t.identity)


VARIANT = Variant(
    title="ResNet order: out = relu(batch_norm(conv(x, w)) + identity)",
    epilogue=cute_conv.EpilogueSpec(
        has_scale=True,
        has_bias=True,
        activation="relu",
        has_residual=True,
        residual_order="before_activation",
    ),  # fmt: skip
    operands=operands,
    fused=fused,
    unfused=unfused,
)

if __name__ == "__main__":
    raise SystemExit(run(VARIANT))
