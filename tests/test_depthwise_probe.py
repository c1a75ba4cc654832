"""The depthwise-conv probe (benchmarks/experiments/depthwise_probe.py) compiles for sm_90a
without a GPU: 16-byte loads of each tap's activation and filter vectors and one 16-byte store
per thread, no shared memory, the wait for the previous grid (with and without an
activation)."""

from __future__ import annotations

import re

import depthwise_probe as probe
import pytest
from cute_conv.kernels.common.epilogue import EpilogueSpec


@pytest.mark.parametrize("activation", [None, "hardswish"])
def test_the_probe_compiles_to_vector_loads_and_one_store(activation):
    spec = EpilogueSpec(has_bias=True, activation=activation, vector_dtype="bfloat16")
    kernel = probe.compile_probe(spec)
    ptx = kernel.ptx
    assert kernel.smem_bytes == 0 and ".shared" not in ptx
    # the tap's activation and filter vectors and the bias vector: 16-byte loads only
    loads = re.findall(r"ld\.global(?:\.\w+)*\.(v\d)\.\w+", ptx)
    assert len(loads) >= 3 and set(loads) == {"v4"}
    assert len(re.findall(r"st\.global(?:\.\w+)*\.v4\.\w+", ptx)) == 1
    assert "griddepcontrol.wait" in ptx
