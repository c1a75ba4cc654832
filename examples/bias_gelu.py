"""Bias and GELU fused into the conv: out = gelu(conv(x, w) + bias), in one kernel.

    python examples/bias_gelu.py

The per-output-channel bias (float32, length K) and the exact (erf) GELU are applied to the
float32 accumulator before the single bf16 store. Torch eager runs the conv with its bias
(cuDNN) and the GELU as a second kernel. On a Hopper GPU this checks the result against a
float32 torch reference and times both; without one it compiles the kernel for sm_90a and says
what it could not run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import cute_conv

from _common import PAD, Variant, run


def operands(problem, device):
    return {"bias": torch.randn(problem.K, device=device)}


def fused(x, w, t, out=None):
    return cute_conv.conv2d_fprop(x, w, padding=PAD, bias=t.bias, activation="gelu", out=out)


def unfused(conv, x, w, t):
    return F.gelu(conv(x, w, t.bias, padding=PAD))


VARIANT = Variant(
    title="bias + GELU: out = gelu(conv(x, w) + bias)",
    epilogue=cute_conv.EpilogueSpec(has_bias=True, activation="gelu"),
    operands=operands,
    fused=fused,
    unfused=unfused,
)

if __name__ == "__main__":
    raise SystemExit(run(VARIANT))
