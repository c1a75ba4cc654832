"""A whole ResNet-50 through cute_conv.optimize: what it fuses, its logits against torch's, its speed.

    python examples/resnet50.py

Builds torchvision's ResNet-50 with random weights and randomized batch-norm statistics (nothing
is downloaded), eval, bfloat16, channels_last, and runs a batch of 32 224x224 images through
``cute_conv.optimize(model)``: the batch norms folded, each conv -> BN -> ReLU and
conv -> BN -> add -> ReLU one cute_conv kernel. It prints the optimize report, the relative
error and top-1 agreement of the logits against the float32 model (TF32 off) and against torch's
own bfloat16 model, and images/s next to torch eager (cuDNN, ``cudnn.benchmark``; medians of
``triton.testing.do_bench``, no CUDA graph: each time includes its host's launch work).

Needs an H100/H200 (compute capability 9.0): without one it says so and exits with code 1. Exit
code 1 too when the optimized logits are further from the float32 model's than torch's bf16
logits are, by more than ``ERROR_SLACK``.
"""

from __future__ import annotations

import copy
import time

import torch

import cute_conv
from cute_conv.testing import compare_to_reference, float32_logits, randomize_batchnorm_

BATCH, IMAGE_SIZE, SEED = 32, 224, 0
# Both models round to bf16 at different places (cute_conv once per fused chain, with the batch
# norm applied in float32; torch after every op), so their errors differ by chance too.
ERROR_SLACK = 1.25


def hopper_missing() -> str | None:
    """Why this machine cannot run the example, or None."""
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine"
    if torch.cuda.get_device_capability() != (9, 0):
        return f"{torch.cuda.get_device_name()} is not a Hopper (compute capability 9.0) GPU"
    return None


def top1_agreement(logits: torch.Tensor, ref: torch.Tensor) -> float:
    """The share of images whose highest logit is the same class in both."""
    return (logits.argmax(dim=1) == ref.argmax(dim=1)).float().mean().item()


def main() -> int:
    reason = hopper_missing()
    if reason is not None:
        print(f"resnet50: {reason}; cute_conv's kernels need an H100/H200, nothing was run.")
        return 1

    import torchvision
    from triton.testing import do_bench

    print(f"device: {torch.cuda.get_device_name()}")
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(SEED)
    model = torchvision.models.resnet50(weights=None)
    randomize_batchnorm_(model, generator=torch.Generator().manual_seed(SEED))
    model32 = model.eval().cuda()
    model16 = copy.deepcopy(model32).to(torch.bfloat16, memory_format=torch.channels_last)
    x32 = torch.randn(BATCH, 3, IMAGE_SIZE, IMAGE_SIZE, device="cuda")
    x = x32.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    print(f"ResNet-50, batch {BATCH}, {IMAGE_SIZE}x{IMAGE_SIZE}, bfloat16, channels_last")

    with torch.no_grad():
        start = time.perf_counter()
        optimized = cute_conv.optimize(model16)  # a copy: model16 stays torch's bf16 model
        ours = optimized(x)
        torch.cuda.synchronize()
        first_call = time.perf_counter() - start
        print(optimized.cute_conv_report)
        theirs = model16(x)
        ref = float32_logits(model32, x32)
        ours_ms = do_bench(lambda: optimized(x), return_mode="median")
        eager_ms = do_bench(lambda: model16(x), return_mode="median")

    ours_err = compare_to_reference(ours, ref).rel_err  # inf where there is a NaN
    theirs_err = compare_to_reference(theirs, ref).rel_err
    print("logits' relative error and top-1 agreement against the float32 model (TF32 off):")
    print(f"  cute_conv:  {ours_err:.2e}, top-1 {top1_agreement(ours, ref):.0%}")
    print(f"  torch bf16: {theirs_err:.2e}, top-1 {top1_agreement(theirs, ref):.0%}")
    print(
        f"cute_conv against torch bf16: {compare_to_reference(ours, theirs).rel_err:.2e}, "
        f"top-1 {top1_agreement(ours, theirs):.0%}"
    )
    print(f"first call (optimize, kernels compiled or loaded from the disk cache, run): "
          f"{first_call:.1f} s")  # fmt: skip
    images_per_s = lambda ms: BATCH / ms * 1000  # noqa: E731
    print(f"cute_conv.optimize:  {ours_ms:.2f} ms  {images_per_s(ours_ms):.0f} images/s")
    print(f"torch eager (cuDNN): {eager_ms:.2f} ms  {images_per_s(eager_ms):.0f} images/s")
    print(f"speedup of cute_conv: {eager_ms / ours_ms:.2f}x")
    if ours_err > ERROR_SLACK * theirs_err:
        print(
            f"FAILED: cute_conv's error {ours_err:.2e} is more than {ERROR_SLACK}x torch bf16's "
            f"{theirs_err:.2e}"
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
