"""What the fused-epilogue examples share: the layer, the GPU check, the check against torch and
the timing. Each example script declares one ``Variant`` and calls ``run`` on it.

A variant is written twice: once as the single fused ``cute_conv`` call, once as the same layer
in torch eager, op by op. The torch version serves both as the baseline that is timed (in bf16,
cuDNN for the conv) and, run in float32 on the IEEE float32 reference conv, as the reference
the fused result is checked against.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import torch
import torch.nn.functional as F

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs

# A 3x3 conv of a ResNet/UNet stage: N=32, 56x56 pixels, 128 -> 128 channels, padding 1.
N, H, W, C, K, R, S, PAD = 32, 56, 56, 128, 128, 3, 3, 1
DTYPE = torch.bfloat16
BN_EPS = 1e-5


def batch_norm_operands(k: int, device: torch.device) -> dict:
    """An eval batch norm of ``k`` channels (gamma, beta, mean, var) and its fold into the
    epilogue: scale = gamma / sqrt(var + eps), bias = beta - mean * scale."""
    gamma, beta = torch.rand(k, device=device) + 0.5, 0.1 * torch.randn(k, device=device)
    mean, var = 0.1 * torch.randn(k, device=device), torch.rand(k, device=device) + 0.5
    scale = gamma / torch.sqrt(var + BN_EPS)
    bias = beta - mean * scale
    return {"gamma": gamma, "beta": beta, "mean": mean, "var": var, "scale": scale, "bias": bias}


@dataclass(frozen=True)
class Variant:
    """One fused epilogue, as its cute_conv call and as the same layer in torch.

    title: what it computes, e.g. ``"out = gelu(conv(x, w) + bias)"``.
    epilogue: the ``EpilogueSpec`` that ``fused`` compiles (compiled alone without a GPU).
    operands: ``(problem, device) -> dict`` of the epilogue's tensors (bias, skip, ...), made
        fresh: 4-D ones ``[N, P, Q, K]`` (NHWC), vectors of length K in float32.
    fused: ``(x, w, t, out=None) -> [N, P, Q, K]``: the cute_conv call. ``x`` is NHWC, ``w``
        KRSC, ``t`` a namespace of the operands as ``operands`` made them.
    unfused: ``(conv, x, w, t) -> [N, K, P, Q]``: the same layer in torch, with ``conv`` in
        place of ``F.conv2d``. ``x``, ``w`` and the 4-D operands in ``t`` are NCHW
        (channels_last) views of the same memory.
    """

    title: str
    epilogue: cute_conv.EpilogueSpec
    operands: Callable[[cute_conv.Conv2dProblemShape, torch.device], dict]
    fused: Callable[..., torch.Tensor]
    unfused: Callable[..., torch.Tensor]


def run(variant: Variant) -> int:
    """Check and time ``variant`` on a Hopper GPU, or only compile its kernel without one."""
    print(f"{variant.title}\nlayer: N={N} {H}x{W} C={C} -> K={K}, {R}x{S}, pad {PAD}, {DTYPE}")
    problem = cute_conv.Conv2dProblemShape.from_shapes((N, H, W, C), (K, R, S, C), padding=PAD)
    if not torch.cuda.is_available():
        return _compile_only(variant, problem, "no CUDA GPU on this machine")
    if torch.cuda.get_device_capability() != (9, 0):
        reason = f"{torch.cuda.get_device_name()} is not a Hopper (compute capability 9.0) GPU"
        return _compile_only(variant, problem, reason)

    from triton.testing import do_bench

    print(f"device: {torch.cuda.get_device_name()}")
    torch.backends.cudnn.benchmark = True
    x, w = random_conv_inputs(N, H, W, C, K, R, S, dtype=DTYPE)
    ops = variant.operands(problem, x.device)
    t = SimpleNamespace(**ops)
    start = time.perf_counter()
    out = variant.fused(x, w, t)
    torch.cuda.synchronize()
    first_call = time.perf_counter() - start

    x_cl, w_cl = _nchw(x), _nchw(w)
    ref_ops = SimpleNamespace(**{name: _nchw(v).float() for name, v in ops.items()})
    ref = variant.unfused(_reference_conv, x_cl, w_cl, ref_ops).permute(0, 2, 3, 1)
    report = compare_to_reference(out, ref)
    print(f"check against the float32 torch reference: {report}  {'ok' if report.ok else 'FAILED'}")

    # The torch baseline runs the model in bf16: its epilogue tensors too.
    eager_ops = SimpleNamespace(**{name: _nchw(v).to(DTYPE) for name, v in ops.items()})
    fused_ms = do_bench(lambda: variant.fused(x, w, t, out=out), return_mode="median")
    eager_ms = do_bench(
        lambda: variant.unfused(F.conv2d, x_cl, w_cl, eager_ops), return_mode="median"
    )
    conv_ms = do_bench(lambda: F.conv2d(x_cl, w_cl, padding=PAD), return_mode="median")
    tflops = problem.flops / fused_ms / 1e9
    print(f"first call (compile or disk-cache load, then run): {first_call:.1f} s")
    print(f"cute_conv, fused:  {fused_ms:.3f} ms  ({tflops:.0f} TFLOP/s)")
    print(
        f"torch eager:       {eager_ms:.3f} ms  (of which the cuDNN conv alone: {conv_ms:.3f} ms)"
    )
    print(f"speedup of the fused kernel: {eager_ms / fused_ms:.2f}x")
    return 0 if report.ok else 1


def _nchw(t: torch.Tensor) -> torch.Tensor:
    """An NHWC (or KRSC) tensor as the NCHW (KCRS) channels_last view torch ops expect."""
    return t.permute(0, 3, 1, 2) if t.dim() == 4 else t


def _reference_conv(x, w, bias=None, stride=1, padding=0, dilation=1) -> torch.Tensor:
    """``F.conv2d`` on channels_last NCHW views, computed by the IEEE float32 reference."""
    y = conv2d_reference(
        x.permute(0, 2, 3, 1), w.permute(0, 2, 3, 1), stride=stride, padding=padding,
        dilation=dilation,
    ).permute(0, 3, 1, 2)  # fmt: skip
    return y if bias is None else y + bias.float()[:, None, None]


def _compile_only(variant: Variant, problem: cute_conv.Conv2dProblemShape, reason: str) -> int:
    print(reason)
    config = cute_conv.default_config(problem)
    start = time.perf_counter()
    kernel = cute_conv.compile_kernel(
        "sm_90a", act_dtype=DTYPE, config=config, epilogue=variant.epilogue
    )
    seconds = time.perf_counter() - start
    print(
        f"compiled (or loaded from the disk cache) the sm_90a kernel with the "
        f"{variant.epilogue.name} epilogue for {config} in {seconds:.1f} s: "
        f"{len(kernel.cubin)} bytes of cubin, {kernel.smem_bytes} bytes of shared memory"
    )
    print(
        "not run: the fused conv, its check against torch and its timing next to torch eager "
        "need an H100/H200."
    )
    return 0
