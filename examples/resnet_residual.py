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

from _common import PAD, Variant, run

EPS = 1e-5


def operands(problem, device):
    k = problem.K
    gamma, beta = torch.rand(k, device=device) + 0.5, 0.1 * torch.randn(k, device=device)
    mean, var = 0.1 * torch.randn(k, device=device), torch.rand(k, device=device) + 0.5
    scale = gamma / torch.sqrt(var + EPS)  # the batch norm, folded
    identity = torch.randn(problem.output_shape, device=device).to(torch.bfloat16)
    return {"gamma": gamma, "beta": beta, "mean": mean, "var": var, "scale": scale,
            "bias": beta - mean * scale, "identity": identity}  # fmt: skip


def fused(x, w, t, out=None):
    return cute_conv.conv2d_fprop_with_residual(
        x, w, t.identity, residual_order="before_activation", padding=PAD,
        scale=t.scale, bias=t.bias, activation="relu", out=out,
    )  # fmt: skip


def unfused(conv, x, w, t):
    y = conv(x, w, padding=PAD)
    y = F.batch_norm(y, t.mean, t.var, t.gamma, t.beta, training=False, eps=EPS)
    return F.relu(y + t.identity)


VARIANT = Variant(
    title="ResNet order: out = relu(batch_norm(conv(x, w)) + identity)",
    epilogue=cute_conv.EpilogueSpec(
        has_scale=True, has_bias=True, activation="relu", has_residual=True,
        residual_order="before_activation",
    ),  # fmt: skip
    operands=operands,
    fused=fused,
    unfused=unfused,
)

if __name__ == "__main__":
    raise SystemExit(run(VARIANT))
