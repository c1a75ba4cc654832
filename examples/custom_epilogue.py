"""A custom epilogue function compiled into the conv: out = hard_swish(conv(x, w) + bias).

    python examples/custom_epilogue.py

``epilogue_fn`` takes the float32 values after bias (and ``activation``, none here) as a
``cute.TensorSSA`` and returns new ones; it is traced into the kernel, so it is written with
arithmetic operators and ``cutlass.cute.math`` functions. Here it is the hard swish of
MobileNetV3, y * clamp(y + 3, 0, 6) / 6, which is not one of the built-in activations; its
torch twin is written next to it. Torch eager runs the conv with its bias (cuDNN) and
``F.hardswish`` as two kernels. On a Hopper GPU this checks the result against a float32 torch
reference and times both; without one it compiles the kernel for sm_90a and says what it could
not run.
"""

from __future__ import annotations

import cutlass.cute as cute
import torch
import torch.nn.functional as F

import cute_conv

from _common import PAD, Variant, run


def hard_swish(y):  # in the kernel: y is a float32 cute.TensorSSA
    # cute.math.min/max (and so clamp) want TensorSSA bounds, not Python floats.
    zero, six = cute.full_like(y, 0.0), cute.full_like(y, 6.0)
    return y * cute.math.clamp(y + 3.0, zero, six) * (1.0 / 6.0)


def hard_swish_torch(y):  # the same function in torch: y * clamp(y + 3, 0, 6) / 6
    return F.hardswish(y)


def operands(problem, device):
    return {"bias": torch.randn(problem.K, device=device)}


def fused(x, w, t, out=None):
    return cute_conv.conv2d_fprop(x, w, padding=PAD, bias=t.bias, epilogue_fn=hard_swish, out=out)


def unfused(conv, x, w, t):
    return hard_swish_torch(conv(x, w, t.bias, padding=PAD))


VARIANT = Variant(
    title="custom epilogue_fn: out = hard_swish(conv(x, w) + bias)",
    epilogue=cute_conv.EpilogueSpec(has_bias=True, epilogue_fn=hard_swish),
    operands=operands,
    fused=fused,
    unfused=unfused,
)

if __name__ == "__main__":
    raise SystemExit(run(VARIANT))
