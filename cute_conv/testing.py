"""Numerical checks shared by the tests, the examples and the benchmark."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .fold import folds_as_batch_norm

__all__ = [
    "ErrorReport",
    "compare_to_reference",
    "float32_logits",
    "random_conv_inputs",
    "randomize_batchnorm_",
]

REL_TOL = 1e-2
# float8_e4m3fn output: rounding to 3 mantissa bits is off by at most 2^-4 of a value (half an
# ulp), so that bounds the Frobenius relative error of a correct result; the max abs check
# below scales with the reference's own rounding in the output dtype as for any output.
REL_TOL_FP8_OUTPUT = 2.0**-4
# Max abs error allowed, in units of the largest rounding error of the reference itself in the
# output dtype (half an ulp at the largest magnitudes): a few output ulps.
ULP_FACTOR = 4.0
# Plus this fraction of max|ref|: fp32 accumulation in another order. It matters only for a
# float32 output, whose own rounding is nil; a bf16 ulp is ~400 times larger.
ACCUMULATION_RTOL = 2e-5
# fp8 inputs: Hopper's fp8 WGMMA adds its products into the accumulator with fewer than fp32's
# mantissa bits (about 14 kept, per DeepSeek-V3's account of H800 fp8 GEMMs), an error of up to
# 2^-14 of a partial sum per k-step of 32, so at most (K / 32) * 2^-14 of max|ref|: 2^-6.8 at
# K = 4608 (the deepest tested), about sqrt(K / 32) * 2^-14 = 2^-10.4 for random signs, and
# 3-4 times that at the largest of ~10^5 values. Allowed: 2^-7, between those. (Measured on an
# H100, K = 4608: 2^-8.4 of max|ref|, above fp32's 2e-5.)
ACCUMULATION_RTOL_FP8 = 2.0**-7


@dataclass(frozen=True)
class ErrorReport:
    rel_err: float  # ||out - ref|| / ||ref|| (Frobenius)
    max_abs_err: float
    max_abs_allowed: float
    nan_count: int
    rel_tol: float = REL_TOL

    @property
    def ok(self) -> bool:
        return (
            self.nan_count == 0
            and self.rel_err < self.rel_tol
            and self.max_abs_err <= self.max_abs_allowed
        )

    def __str__(self) -> str:
        return (
            f"rel_err={self.rel_err:.2e} (< {self.rel_tol:.2e}), "
            f"max_abs_err={self.max_abs_err:.3e} (<= {self.max_abs_allowed:.3e}), "
            f"nan={self.nan_count}"
        )


def compare_to_reference(
    out: torch.Tensor, ref: torch.Tensor, *, fp8_inputs: bool = False
) -> ErrorReport:
    """Compare a kernel output with a float32 reference of the same shape (for fp8 inputs, a
    reference computed on their dequantized values: ``fp8_inputs`` allows for the fp8 MMA's
    accumulation, and a float8 output for its rounding)."""
    out32 = out.float()
    ref32 = ref.float().to(out32.device)
    nan_count = int(torch.isnan(out32).sum().item())
    diff = (out32 - ref32).nan_to_num(nan=float("inf"))
    ref_norm = ref32.norm().item()
    rel_err = diff.norm().item() / ref_norm if ref_norm > 0 else diff.norm().item()
    rounding = (ref32.to(out.dtype).float() - ref32).abs().max().item() if ref32.numel() else 0.0
    ref_max = ref32.abs().max().item() if ref32.numel() else 0.0
    accumulation = ACCUMULATION_RTOL_FP8 if fp8_inputs else ACCUMULATION_RTOL
    allowed = ULP_FACTOR * rounding + accumulation * ref_max
    max_abs = diff.abs().max().item() if diff.numel() else 0.0
    rel_tol = REL_TOL_FP8_OUTPUT if out.dtype == torch.float8_e4m3fn else REL_TOL
    return ErrorReport(rel_err, max_abs, allowed, nan_count, rel_tol)


def random_conv_inputs(
    n: int,
    h: int,
    w: int,
    c: int,
    k: int,
    r: int,
    s: int,
    *,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cuda",
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh NHWC activation and KRSC filter, scaled so outputs are O(1) whatever C*R*S is."""
    act = torch.randn(n, h, w, c, device=device, generator=generator)
    flt = torch.randn(k, r, s, c, device=device, generator=generator) / (c * r * s) ** 0.5
    return act.to(dtype), flt.to(dtype)


def randomize_batchnorm_(
    model: nn.Module, *, generator: torch.Generator | None = None
) -> nn.Module:
    """Draw fresh statistics and affine parameters for every batch norm of ``model`` (torch's
    and torchvision's ``FrozenBatchNorm2d``), in place.

    A randomly initialized torchvision model has identity batch norms (mean 0, variance 1, weight
    1, bias 0), which a BN fold would pass unchanged. The values drawn here make every fold
    visible and keep eval-mode activations O(1) through ResNet-50's 16 residual blocks:
    running_mean ~ N(0, 0.1^2), running_var ~ U(0.5, 1.5), weight ~ U(0.5, 1.0) (below 1, so
    that the residual sums do not grow block after block), bias ~ N(0, 0.1^2). Values are drawn
    on the CPU (``generator`` is a CPU generator), so a seed gives the same model on any device.
    Returns ``model``.
    """
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
                shape = (module.num_features,)
            elif folds_as_batch_norm(module):  # torchvision's FrozenBatchNorm2d
                shape = module.running_mean.shape
            else:
                continue
            stats = {
                "running_mean": torch.randn(shape, generator=generator) * 0.1,
                "running_var": torch.rand(shape, generator=generator) + 0.5,
                "weight": torch.rand(shape, generator=generator) * 0.5 + 0.5,
                "bias": torch.randn(shape, generator=generator) * 0.1,
            }
            for name, value in stats.items():
                tensor = getattr(module, name)
                if tensor is not None:  # affine=False or track_running_stats=False: absent
                    tensor.copy_(value)
    return model


def float32_logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``model(x)`` in IEEE float32, the reference of a reduced-precision model: TF32 is off in
    cuDNN and cuBLAS for the call (the caller's flags are restored), no autograd."""
    # The two flags themselves: ``cudnn.flags()`` would also reset cuDNN's other settings.
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = matmul.allow_tf32, cudnn.allow_tf32
    try:
        matmul.allow_tf32 = cudnn.allow_tf32 = False
        with torch.no_grad():
            return model(x.float())
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved
