"""ReLU then residual add, fused into the conv: out = relu(conv(x, w)) + skip, in one kernel.

    python examples/relu_residual.py

The epilogue applies the activation before the residual add; ``relu(conv + skip)``, the order
of the ResNet block, is ``residual_order="before_activation"`` (examples/resnet_residual.py). Torch eager runs the conv (cuDNN), the ReLU and
the add as three kernels. On a Hopper GPU this checks the result against a float32 torch
reference and times both; without one it compiles the kernel for sm_90a and says what it could
not run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import cute_conv

from _common import PAD, Variant, run


def operands(problem, device):
    return {"skip": torch.randn(problem.output_shape, device=device).to(torch.bfloat16)}


def fused(x, w, t, out=None):
    return cute_conv.conv2d_fprop_with_residual(
        x, w, t.skip, activation="relu", padding=PAD, out=out
    )


def unfused(conv, x, w, t):
    return F.relu(conv(x, w, padding=PAD)) + t.skip


VARIANT = Variant(
    title="ReLU then residual: out = relu(conv(x, w)) + skip",
    epilogue=cute_conv.EpilogueSpec(activation="relu", has_residual=True),
    operands=operands,
    fused=fused,
    unfused=unfused,
)

if __name__ == "__main__":
    raise SystemExit(run(VARIANT))
