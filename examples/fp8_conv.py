"""An fp8 conv with its dequantization and epilogue fused: float8_e4m3fn activation and
filter, per-tensor activation scale, per-output-channel filter scales, then bias and ReLU, bf16
out, in one kernel.

    python examples/fp8_conv.py

On a Hopper GPU this quantizes a bf16 layer (``cute_conv.quantize_fp8``), checks the fp8
result against a float32 reference on the dequantized inputs and against the unquantized bf16
conv (what quantization costs), and times it next to our bf16 kernel and cuDNN's bf16 conv;
without one it compiles the fp8 kernel for sm_90a and says what it could not run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.staging import kernel_problem_for
from cute_conv.testing import compare_to_reference, random_conv_inputs

from _common import PAD, C, H, K, N, R, S, W

FP8 = torch.float8_e4m3fn


def main() -> int:
    print(f"relu(dequant(conv_fp8(x, w)) + bias): N={N} {H}x{W} C={C} -> K={K}, {R}x{S}")
    problem = cute_conv.Conv2dProblemShape.from_shapes((N, H, W, C), (K, R, S, C), padding=PAD)
    config = cute_conv.default_config(kernel_problem_for(problem, 1), element_bytes=1)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        epilogue = cute_conv.EpilogueSpec(has_bias=True, has_scale=True, activation="relu")
        kernel = cute_conv.compile_kernel("sm_90a", act_dtype=FP8, out_dtype=torch.bfloat16,
                                          config=config, epilogue=epilogue)  # fmt: skip
        print(f"no H100/H200 here: compiled the fp8 kernel for sm_90a ({config}), "
              f"{kernel.smem_bytes} bytes of shared memory; not run")  # fmt: skip
        return 0
    from triton.testing import do_bench

    torch.backends.cudnn.benchmark = True
    x, w = random_conv_inputs(N, H, W, C, K, R, S, dtype=torch.float32)
    bias = torch.randn(K, device="cuda")
    qx, x_scale = cute_conv.quantize_fp8(x)  # per tensor
    qw, w_channel = cute_conv.quantize_fp8(w, per_channel_dim=0)  # per output channel
    one = torch.ones((), device="cuda")

    def fp8():
        return cute_conv.conv2d_fprop(qx, qw, padding=PAD, x_scale=x_scale, w_scale=one,
                                      scale=w_channel, bias=bias, activation="relu")  # fmt: skip

    out = fp8()
    deq = conv2d_reference(qx.float() * x_scale, qw.float() * w_channel.reshape(K, 1, 1, 1),
                           padding=PAD)  # fmt: skip
    report = compare_to_reference(out, torch.relu(deq + bias), fp8_inputs=True)
    exact = torch.relu(conv2d_reference(x, w, padding=PAD) + bias)
    quantization = ((out.float() - exact).norm() / exact.norm()).item()
    print(f"check against the float32 reference on the dequantized inputs: {report}  "
          f"{'ok' if report.ok else 'FAILED'}")  # fmt: skip
    print(f"relative error against the unquantized float32 layer: {quantization:.3f}")

    xb, wb = x.to(torch.bfloat16), w.to(torch.bfloat16)
    x_cl, w_cl = xb.permute(0, 3, 1, 2), wb.permute(0, 3, 1, 2)
    times = {
        "cute_conv fp8": do_bench(fp8, return_mode="median"),
        "cute_conv bf16": do_bench(lambda: cute_conv.conv2d_fprop(
            xb, wb, padding=PAD, bias=bias, activation="relu"), return_mode="median"),
        "cuDNN bf16 conv alone": do_bench(lambda: F.conv2d(x_cl, w_cl, padding=PAD),
                                          return_mode="median"),
    }  # fmt: skip
    for name, ms in times.items():
        print(f"{name:>22}: {ms:.3f} ms ({problem.flops / ms / 1e9:.0f} TFLOP/s)")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
