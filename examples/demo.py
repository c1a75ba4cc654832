"""cute_conv demo: one Conv2D forward pass, checked against torch and timed next to cuDNN.

    python examples/demo.py

On a Hopper GPU (H100/H200) it runs a 3x3 conv, checks it against a float32 torch reference and
prints its time and TFLOP/s next to cuDNN's. Without such a GPU it compiles the kernels for
sm_90a (no GPU needed for that) and says what it could not run.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs

# A 3x3 stage of a large CNN: N=32, 64x64 pixels, 384 -> 384 channels (the gluon-bench layer
# at a quarter of its batch).
N, H, W, C, K, R, S, PAD = 32, 64, 64, 384, 384, 3, 3, 1


def compile_only(reason: str) -> int:
    print(f"demo: {reason}")
    problem = cute_conv.Conv2dProblemShape.from_shapes((N, H, W, C), (K, R, S, C), padding=PAD)
    config = cute_conv.default_config(problem)
    start = time.perf_counter()
    kernel = cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16, config=config)
    seconds = time.perf_counter() - start
    print(
        f"compiled the sm_90a kernel for {config} in {seconds:.1f} s: "
        f"{len(kernel.cubin)} bytes of cubin, {kernel.smem_bytes} bytes of shared memory, "
        f"{kernel.ptx.count('wgmma.mma_async')} wgmma and "
        f"{kernel.ptx.count('.im2col')} im2col TMA instructions in the PTX"
    )
    print("not run: the conv itself, its check against torch and the timing need an H100/H200.")
    return 0


def main() -> int:
    if not torch.cuda.is_available():
        return compile_only("no CUDA GPU on this machine")
    if torch.cuda.get_device_capability() != (9, 0):
        name = torch.cuda.get_device_name()
        return compile_only(f"{name} is not a Hopper (compute capability 9.0) GPU")

    from triton.testing import do_bench

    torch.backends.cudnn.benchmark = True
    act, flt = random_conv_inputs(N, H, W, C, K, R, S)
    start = time.perf_counter()
    out = cute_conv.conv2d_fprop(act, flt, padding=PAD)
    torch.cuda.synchronize()
    first_call = time.perf_counter() - start
    report = compare_to_reference(out, conv2d_reference(act, flt, padding=PAD))
    print(f"conv {N}x{H}x{W}x{C} * {K}x{R}x{S}x{C}, pad {PAD}: {report}")

    problem = cute_conv.Conv2dProblemShape.from_shapes(act.shape, flt.shape, padding=PAD)
    ours = do_bench(
        lambda: cute_conv.conv2d_fprop(act, flt, padding=PAD, out=out), return_mode="median"
    )
    x_cl, w_cl = act.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2)
    cudnn = do_bench(lambda: F.conv2d(x_cl, w_cl, padding=PAD), return_mode="median")
    tflops = lambda ms: problem.flops / ms / 1e9  # noqa: E731
    print(f"first call (compile + run): {first_call:.1f} s")
    print(f"cute_conv: {ours:.3f} ms  {tflops(ours):.0f} TFLOP/s")
    print(
        f"cuDNN:     {cudnn:.3f} ms  {tflops(cudnn):.0f} TFLOP/s  (cute_conv is {cudnn / ours:.2f}x)"
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
