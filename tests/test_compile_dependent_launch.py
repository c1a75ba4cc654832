"""Compile-only: programmatic dependent launch (``programmatic_launch``) in both archs' PTX.

With PDL a kernel may start while the previous kernel on the stream still runs, so every
global memory access must come after ``griddepcontrol.wait``: the kernel's inputs may still be
being written, its output still read, and the stream-K / work-queue workspace is shared by
every kernel on the stream. The wait sits in the setup shared by all roles, so in the PTX's
text it precedes every role's code; these tests hold it there. The SM90 load warp (TMA
operands, static schedules) and the gather warps wait later, in their first tile, after that
tile's coordinates and before its first load: a second wait, checked in the SASS. The GPU tests run chains of convs
under CUDA graphs, where the overlap happens (``test_conv2d_sm90.py``). The helper kernels
between the convs (staging, pools, channel scale, fp8 quantization) always launch with PDL.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from cute_conv.kernels.common.pool import PoolWindow

import cute_conv
from cute_conv import Conv2dConfig, Conv2dConfigSm100, EpilogueSpec
from cute_conv.compile import (
    compile_avg_pool,
    compile_channel_scale,
    compile_im2col_columns,
    compile_max_pool,
    compile_quantize,
    compile_space_to_depth,
)

WAIT = "griddepcontrol.wait;"
SIGNAL = "griddepcontrol.launch_dependents;"
BF16 = torch.bfloat16
FUSED_RESIDUAL = EpilogueSpec(has_bias=True, has_scale=True, activation="relu", has_residual=True)

# Instructions that may touch global memory: loads, stores and atomics in the global or the
# generic state space (a generic address may point to global memory), and bulk copies to or
# from global memory. Shared, parameter, local and constant accesses are not hazards.
_MEMORY_OP = re.compile(r"^\s*(?:@!?%p\d+\s+)?((?:ld|st|atom|red)(?:\.[\w:]+)*)\s", re.M)
_LOCAL_SPACES = (".shared", ".param", ".local", ".const")
_BULK_GLOBAL = re.compile(r"^\s*(?:@!?%p\d+\s+)?(c[a-z.]*bulk[\w.:]*\.global)", re.M)

CASES = {
    "sm90-default": ("sm_90a", Conv2dConfig(), None),
    "sm90-stream-k-residual": ("sm_90a", Conv2dConfig(stream_k=True), FUSED_RESIDUAL),
    "sm90-dynamic": ("sm_90a", Conv2dConfig(dynamic_schedule=True), FUSED_RESIDUAL),
    "sm90-pingpong": ("sm_90a", Conv2dConfig(pingpong=True), FUSED_RESIDUAL),
    "sm90-halo": ("sm_90a", Conv2dConfig(tile_w=32, halo_h=6), None),
    "sm90-gather": ("sm_90a", Conv2dConfig(tile_n=64, tile_k=16, gather=True, gather_vector=2), None),
    "sm90-gather-16bit": ("sm_90a", Conv2dConfig(tile_n=64, tile_k=16, gather=True), None),
    "sm90-gather-residual": (
        "sm_90a", Conv2dConfig(tile_m=64, tile_n=32, gather=True, gather_vector=2), FUSED_RESIDUAL,
    ),  # fmt: skip
    "sm100-2sm-residual": ("sm_100a", Conv2dConfigSm100(), FUSED_RESIDUAL),
}
# The configs whose load warp waits in its first tile (a second wait in the PTX).
LATE_LOAD_WAIT = ("sm90-default", "sm90-stream-k-residual", "sm90-pingpong", "sm90-halo")
# The configs whose gather warps wait in their first tile (likewise; not 16-bit gathers).
LATE_GATHER_WAIT = ("sm90-gather", "sm90-gather-residual")
# The configs whose four gather warps' warp 1 loads C too: it waits before its first C load
# (a third wait in the PTX).
SOURCE_LOADER_GATHERS = ("sm90-gather-residual",)


def _first_global_access(ptx: str) -> int | None:
    """Offset of the first instruction that may access global memory (None: there is none)."""
    offsets = [
        m.start(1)
        for m in _MEMORY_OP.finditer(ptx)
        if not any(space in m.group(1) for space in _LOCAL_SPACES)
    ]
    bulk = _BULK_GLOBAL.search(ptx)
    if bulk:
        offsets.append(bulk.start(1))
    return min(offsets, default=None)


def _compile(arch, config, epilogue):
    return cute_conv.compile_kernel(arch, act_dtype=torch.bfloat16, config=config, epilogue=epilogue)


@pytest.mark.parametrize("name", CASES)
def test_the_wait_precedes_every_global_access(name):
    arch, config, epilogue = CASES[name]
    ptx = _compile(arch, config, epilogue).ptx
    waits = 1 + (name in LATE_LOAD_WAIT + LATE_GATHER_WAIT) + (name in SOURCE_LOADER_GATHERS)
    assert ptx.count(WAIT) == waits and ptx.count(SIGNAL) == waits
    wait, signal = ptx.index(WAIT), ptx.index(SIGNAL)
    assert wait < signal, "the next kernel is released only once this one has waited"
    first_access = _first_global_access(ptx)
    assert first_access is not None, "the pattern finds the kernel's loads and stores"
    assert wait < first_access, ptx[first_access : first_access + 200]


_POOL = PoolWindow((3, 3), (2, 2), (1, 1), (1, 1))
# The helper kernels a model's graph runs between the convs: name -> compile call.
HELPERS = {
    "space-to-depth": lambda: compile_space_to_depth("sm_90a", BF16, 3, 4, 8),
    "im2col-columns": lambda: compile_im2col_columns("sm_90a", BF16, 3),
    "im2col-patch-rows": lambda: compile_im2col_columns("sm_90a", BF16, 3, (3, 3)),
    "max-pool": lambda: compile_max_pool("sm_90a", BF16, _POOL),
    "avg-pool": lambda: compile_avg_pool("sm_90a", BF16, _POOL),
    "channel-scale": lambda: compile_channel_scale("sm_90a", BF16),
    "quantize": lambda: compile_quantize("sm_90a", BF16),
    "quantize-from-amax": lambda: compile_quantize("sm_90a", BF16, from_amax=True),
}


@pytest.mark.parametrize("name", HELPERS)
def test_helper_kernels_wait_before_every_global_access(name):
    """The stems' staging, the pools, the squeeze-excitation scale and the fp8 quantization
    launch with PDL too (each overlaps the kernel before it, and the conv after it starts its
    setup during it): one wait, then the signal, before any global memory access."""
    ptx = HELPERS[name]().ptx
    assert ptx.count(WAIT) == 1 and ptx.count(SIGNAL) == 1
    assert ptx.index(WAIT) < ptx.index(SIGNAL)
    first_access = _first_global_access(ptx)
    assert first_access is not None and ptx.index(WAIT) < first_access


@pytest.mark.parametrize("name", LATE_LOAD_WAIT)
def test_the_load_warp_waits_after_its_tile_coordinates(name):
    """In the SASS the load warp's wait (``ACQBULK``) follows its reads of the CTA index (the
    first tile's coordinates) and precedes its first TMA load of the operands."""
    from tests.sass import sass_of

    arch, config, epilogue = CASES[name]
    sass = sass_of(_compile(arch, config, epilogue).cubin)
    waits = [m.start() for m in re.finditer(r"\bACQBULK\b", sass)]
    assert len(waits) == 2, sass[:2000]
    first_load = re.search(r"\bUTMALDG\b", sass).start()
    cta_reads = [m.start() for m in re.finditer(r"S2UR \w+, SR_CTAID", sass)]
    assert waits[1] < first_load
    assert any(waits[0] < read < waits[1] for read in cta_reads), "coordinates before the wait"


@pytest.mark.parametrize("name", LATE_GATHER_WAIT)
def test_the_gather_warps_wait_after_their_tile_coordinates(name):
    """In the SASS the gather warps' wait follows their reads of the CTA index (the first
    tile's coordinates) and precedes their first gathered load (``LDG``, or ``LDGSTS`` for
    8-byte copies); the residual's TMA loads (``UTMALDG``) come after the other wait (where
    warp 1 loads C among the gather warps, after a wait of its own, before its first C load)."""
    from tests.sass import sass_of

    arch, config, epilogue = CASES[name]
    sass = sass_of(_compile(arch, config, epilogue).cubin)
    waits = [m.start() for m in re.finditer(r"\bACQBULK\b", sass)]
    assert len(waits) == 2 + (name in SOURCE_LOADER_GATHERS), sass[:2000]
    first_gather = re.search(r"\bLDG(STS)?\.E", sass).start()
    cta_reads = [m.start() for m in re.finditer(r"S2U?R \w+, SR_CTAID", sass)]
    assert waits[1] < first_gather
    assert any(waits[0] < read < waits[1] for read in cta_reads), "coordinates before the wait"
    assert all(waits[0] < m.start() for m in re.finditer(r"\bUTMALDG\b", sass))


@pytest.mark.parametrize("arch, config, epilogue", CASES.values(), ids=CASES.keys())
def test_plain_launch_has_no_grid_dependency_control(arch, config, epilogue):
    plain = dataclasses.replace(config, programmatic_launch=False)
    ptx = _compile(arch, plain, epilogue).ptx
    assert "griddepcontrol" not in ptx


def test_the_access_pattern_sees_global_loads_and_skips_shared_ones():
    ptx = "\tld.shared.u32 %r1, [%r2];\n\tst.param.b32 [p], %r1;\n\tld.global.nc.u32 %r3, [%rd1];\n"
    assert _first_global_access(ptx) == ptx.index("ld.global")
    assert _first_global_access("\tld.u32 %r1, [%rd2];\n") == 1  # generic: may be global
    bulk = "\tcp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd1, {%r1, %r2}], [%r3];\n"
    assert _first_global_access(bulk) == 1
    assert _first_global_access("\tmbarrier.init.shared::cta.b64 [%r1], 1;\n") is None


def test_programmatic_launch_must_be_a_bool():
    with pytest.raises(TypeError, match="programmatic_launch must be a bool"):
        Conv2dConfig(programmatic_launch=1)
    with pytest.raises(TypeError, match="programmatic_launch must be a bool"):
        Conv2dConfigSm100(programmatic_launch="yes")
