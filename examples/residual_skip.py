"""Skip connection fused into the conv: out = conv(x, w) + skip, in one kernel.

    python examples/residual_skip.py

The residual add of a ResNet block. ``conv2d_fprop_with_residual`` reads the skip tensor
(``[N, P, Q, K]``, like the output) with a dedicated loader warp while the mainloop runs, so
the sum is written once instead of writing the conv's output and reading it back for the add.
Torch eager does the conv (cuDNN) and the add as two kernels. On a Hopper GPU this checks the
result against a float32 torch reference and times both; without one it compiles the kernel
for sm_90a and says what it could not run.
"""

from __future__ import annotations

import torch

import cute_conv

from _common import PAD, Variant, run


def operands(problem, device):
    return {"skip": torch.randn(problem.output_shape, device=device).to(torch.bfloat16)}


def fused(x, w, t, out=None):
    return cute_conv.conv2d_fprop_with_residual(x, w, t.skip, beta=1.0, padding=PAD, out=out)


def unfused(conv, x, w, t):
    return conv(x, w, padding=PAD) + t.skip


VARIANT = Variant(
    title="skip connection: out = conv(x, w) + skip",
    epilogue=cute_conv.EpilogueSpec(has_residual=True),
    operands=operands,
    fused=fused,
    unfused=unfused,
)

if __name__ == "__main__":
    raise SystemExit(run(VARIANT))
