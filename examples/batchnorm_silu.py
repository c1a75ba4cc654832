"""Inference batch norm and SiLU fused into the conv: out = silu(bn(conv(x, w))), in one kernel.

    python examples/batchnorm_silu.py

In eval mode a batch norm is a per-channel affine map, so it folds, once, into the epilogue's
``scale`` and ``bias``: scale = gamma / sqrt(var + eps), bias = beta - mean * scale. The fused
kernel then computes silu(conv * scale + bias). Torch eager runs the conv (cuDNN),
``F.batch_norm`` (eval) and ``F.silu`` as three kernels. On a Hopper GPU this checks the result
against a float32 torch reference and times both; without one it compiles the kernel for
sm_90a and says what it could not run.
"""

from __future__ import annotations

import torch.nn.functional as F

import cute_conv

from _common import BN_EPS, PAD, Variant, batch_norm_operands, run


def operands(problem, device):
    return batch_norm_operands(problem.K, device)


def fused(x, w, t, out=None):
    return cute_conv.conv2d_fprop(
        x, w, padding=PAD, scale=t.scale, bias=t.bias, activation="silu", out=out
    )


def unfused(conv, x, w, t):
    y = conv(x, w, padding=PAD)
    y = F.batch_norm(y, t.mean, t.var, t.gamma, t.beta, training=False, eps=BN_EPS)
    return F.silu(y)


VARIANT = Variant(
    title="folded batch norm + SiLU: out = silu(batch_norm(conv(x, w)))",
    epilogue=cute_conv.EpilogueSpec(has_scale=True, has_bias=True, activation="silu"),
    operands=operands,
    fused=fused,
    unfused=unfused,
)

if __name__ == "__main__":
    raise SystemExit(run(VARIANT))
