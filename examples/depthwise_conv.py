"""A MobileNet block's depthwise conv with its folded batch norm and hardswish, in one kernel:
out = hardswish(dwconv(x, w) * scale + bias), ``cute_conv.grouped_conv2d(groups=C)``.

    python examples/depthwise_conv.py

Grouped and depthwise convs run on a CUDA-core direct kernel (a thread per 8 output channels
of an output pixel). Torch eager runs cuDNN's depthwise conv, the batch norm and the hardswish
as kernels of their own. On a Hopper GPU this checks the result against a float32 torch
reference and times both (CUDA-graph-free medians of ``triton.testing.do_bench``); without one
it compiles the kernel for sm_90a and says what it could not run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference

# MobileNetV3-Large's 14x14 stage at batch 8: 672 channels, 5x5 taps.
N, H, W, C, R, PAD = 8, 14, 14, 672, 5, 2
EPILOGUE = cute_conv.EpilogueSpec(has_bias=True, has_scale=True, activation="hardswish")


def main() -> int:
    config = cute_conv.grouped_limits(C, C, groups=C)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        kernel = cute_conv.compile_kernel("sm_90a", config=config, epilogue=EPILOGUE)
        print(
            f"compiled the sm_90a depthwise kernel ({config}): {len(kernel.cubin)} bytes of "
            f"cubin, no shared memory ({kernel.smem_bytes})"
        )
        print("not run: the conv, its check against torch and the timing need an H100/H200.")
        return 0

    from triton.testing import do_bench

    torch.backends.cudnn.benchmark = True
    x = torch.randn(N, H, W, C, device="cuda").to(torch.bfloat16)  # NHWC
    w = (torch.randn(C, R, R, 1, device="cuda") / R).to(torch.bfloat16)  # [K, R, S, C/groups]
    scale, bias = torch.rand(C, device="cuda") + 0.5, torch.randn(C, device="cuda")

    def ours():
        return cute_conv.grouped_conv2d(
            x, w, groups=C, padding=PAD, scale=scale, bias=bias, activation="hardswish"
        )

    x_nchw, w_kcrs = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)  # channels_last views
    scale_4d, bias_4d = scale.view(1, -1, 1, 1), bias.view(1, -1, 1, 1)

    def torch_eager():
        y = F.conv2d(x_nchw, w_kcrs, padding=PAD, groups=C)
        return F.hardswish(y * scale_4d.to(y.dtype) + bias_4d.to(y.dtype))

    reference = F.hardswish(conv2d_reference(x, w, padding=PAD, groups=C) * scale + bias)
    report = compare_to_reference(ours(), reference)
    print(f"depthwise {N}x{H}x{W}x{C}, {R}x{R}, pad {PAD}, scale + bias + hardswish: {report}")
    ours_ms = do_bench(ours, return_mode="median")
    eager_ms = do_bench(torch_eager, return_mode="median")
    print(f"cute_conv: {ours_ms * 1e3:.1f} us   torch eager: {eager_ms * 1e3:.1f} us "
          f"(cute_conv is {eager_ms / ours_ms:.2f}x)")  # fmt: skip
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
