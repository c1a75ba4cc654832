"""A check shared by GPU tests: plain and fused calls, repeated, on NaN-poisoned outputs (kernels
that keep counters in a workspace between calls: stream-K, dynamic scheduling; halo tiles)."""

from __future__ import annotations

import torch

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference


def assert_repeated_calls_match(act, flt, pad, config, calls: int = 3, dilation=1) -> None:
    """``calls`` plain and fused (relu(conv + bias) + residual) calls with ``config``, each on
    a NaN-poisoned output, all match the float32 reference: a counter left dirty by one call
    would break the next."""
    geometry = {"padding": pad, "dilation": dilation}
    ref = conv2d_reference(act, flt, **geometry)
    bias = torch.randn(ref.shape[-1], device="cuda")
    source = torch.randn(ref.shape, device="cuda").to(torch.bfloat16)
    fused_ref = torch.relu(ref.float() + bias) + source.float()
    for _ in range(calls):
        out = torch.full(ref.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        cute_conv.conv2d_fprop(act, flt, out=out, config=config, **geometry)
        report = compare_to_reference(out, ref)
        assert report.ok, f"plain: {report}"
        fused = torch.full(ref.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
        cute_conv.conv2d_fprop_with_residual(
            act, flt, source, bias=bias, activation="relu", out=fused, config=config, **geometry
        )
        report = compare_to_reference(fused, fused_ref)
        assert report.ok, f"fused: {report}"
