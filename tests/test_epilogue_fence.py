"""Compile-only: the shared epilogue driver (``kernels/common/epilogue_store.py``) orders the
epilogue's generic-proxy reads of a residual C buffer before the buffer goes back to the TMA
loads that overwrite it, with a ``fence.proxy.async`` ahead of the release, on both archs."""

from __future__ import annotations

import re

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfig, Conv2dConfigSm100, EpilogueSpec
from tests.ptx_dataflow import definitions

_LINE = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.:]*)(?:\s+([^;]*))?;")


def _source_reads(ptx: str) -> set[str]:
    """The registers loaded from SMEM that become residual values: the bf16 C, converted to
    f32 (nothing else in these kernels is a bf16 read from SMEM)."""
    defs = definitions(ptx)
    reads = set()
    for opcode, operands in re.findall(r"^\s*([a-z][\w.:]*)\s+([^;]*);", ptx, re.M):
        if not opcode.startswith("cvt.f32.bf16"):
            continue
        frontier = re.findall(r"%[a-z]+\d+", operands)[1:]
        for _ in range(4):  # the load, maybe a mov that unpacks a bf16 pair
            frontier = [r for r in frontier if r in defs]
            reads.update(r for r in frontier if defs[r][0].startswith("ld.shared"))
            frontier = [s for r in frontier for s in defs[r][1]]
    return reads


def _arrives_after_unfenced_reads(ptx: str) -> int:
    """mbarrier arrives (releases) reached, in program order, after a read of C and before
    any ``fence.proxy.async``."""
    reads, pending, unfenced = _source_reads(ptx), False, 0
    for line in ptx.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        opcode, operands = match.group(1), match.group(2) or ""
        if opcode.startswith("ld.shared") and set(re.findall(r"%[a-z]+\d+", operands)) & reads:
            pending = True
        elif opcode.startswith("fence.proxy.async"):
            pending = False
        elif opcode.startswith("mbarrier.arrive") and "expect_tx" not in opcode and pending:
            unfenced += 1
    return unfenced


@pytest.mark.parametrize(
    "arch,config",
    [
        ("sm_90a", Conv2dConfig(tile_n=64)),
        ("sm_90a", Conv2dConfig(pingpong=True)),
        ("sm_100a", Conv2dConfigSm100.default_bf16()),
    ],
    ids=["sm90", "sm90-pingpong", "sm100"],
)
def test_source_buffer_is_released_after_a_proxy_fence(arch, config):
    kernel = cute_conv.compile_kernel(
        arch, act_dtype=torch.bfloat16, config=config, epilogue=EpilogueSpec(has_residual=True)
    )
    assert _source_reads(kernel.ptx), "no SMEM read of the residual found in the PTX"
    assert _arrives_after_unfenced_reads(kernel.ptx) == 0
