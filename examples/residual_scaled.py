"""Scaled residual fused into the conv: out = conv(x, w) + 0.5 * skip, in one kernel.

    python examples/residual_scaled.py

``beta`` scales the residual source; it is a runtime scalar, so any beta runs the same compiled
kernel as ``residual_skip.py`` (to scale the conv branch instead, as in Inception-ResNet, pass
``alpha``). Torch eager does the conv (cuDNN) and ``torch.add(y, skip, alpha=beta)`` as two
kernels. On a Hopper GPU this checks the result against a float32 torch reference and times
both; without one it compiles the kernel for sm_90a and says what it could not run.
"""

from __future__ import annotations

import torch

import cute_conv

from _common import PAD, Variant, run

BETA = 0.5


def operands(problem, device):
    return {"skip": torch.randn(problem.output_shape, device=device).to(torch.bfloat16)}


def fused(x, w, t, out=None):
    return cute_conv.conv2d_fprop_with_residual(x, w, t.skip, beta=BETA, padding=PAD, out=out)


def unfused(conv, x, w, t):
    return torch.add(conv(x, w, padding=PAD), t.skip, alpha=BETA)


VARIANT = Variant(
    title=f"scaled residual: out = conv(x, w) + {BETA} * skip",
    epilogue=cute_conv.EpilogueSpec(has_residual=True),
    operands=operands,
    fused=fused,
    unfused=unfused,
)

if __name__ == "__main__":
    raise SystemExit(run(VARIANT))
