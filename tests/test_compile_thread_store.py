"""Compile-only: the SM90 epilogue that stores the output by threads
(``EpilogueSpec.store_by_threads``, for K whose rows are not whole 16-byte units), in the
schedules the GPU tests run it with, and the host's choice of it. The numerics are checked on
the GPU (``tests/test_thread_store_sm90.py``)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfig, Conv2dConfigSm100, EpilogueSpec
from cute_conv.config import (
    BULK_TILE_STORE_MIN_BYTES,
    bulk_tile_store_pays,
    tiles_hold_whole_rows,
)
from cute_conv.staging import kernel_problem_for, staging_plan

STORE = EpilogueSpec(has_bias=True, has_scale=True, activation="relu", store_by_threads=True)
# TMA stores (SMEM -> global), and the threads' own 16-bit stores of output values (each
# behind a branch on its bounds predicate, into which the compiler sinks the value's math:
# the GPU tests check the predicates, against a guard band around the output).
_TMA_STORE = re.compile(r"cp\.async\.bulk\.tensor\.\w+\.global\.shared")
_THREAD_STORE = re.compile(r"^\s*st\.global\.b16\s", re.M)

CASES = {
    "default": Conv2dConfig(),
    "cluster-1x2": Conv2dConfig(tile_n=64, cluster_n=2),
    "m256-2x1": Conv2dConfig(tile_m=256, tile_n=64, cluster_m=2),
    "m192": Conv2dConfig(tile_m=192, tile_n=128),
    "stream-k": Conv2dConfig(stream_k=True),
    "dynamic": Conv2dConfig(dynamic_schedule=True),
    "pingpong": Conv2dConfig(pingpong=True),
    "halo": Conv2dConfig(tile_m=256, tile_n=64, tile_w=64, halo_h=6),
}


@pytest.mark.parametrize("config", CASES.values(), ids=CASES.keys())
def test_the_output_is_stored_by_predicated_thread_stores(config):
    ptx = cute_conv.compile_kernel(
        "sm_90a", act_dtype=torch.bfloat16, config=config, epilogue=STORE
    ).ptx
    assert not _TMA_STORE.search(ptx), "a thread-store kernel issued a TMA store"
    # One store per value a consumer thread holds: tile_n / 2 per 64-row WGMMA atom.
    assert len(_THREAD_STORE.findall(ptx)) >= config.tile_n // 2


def test_the_tma_store_kernel_is_unchanged():
    ptx = cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16).ptx
    assert _TMA_STORE.search(ptx)
    assert not _THREAD_STORE.search(ptx)


def test_a_thread_store_spec_names_itself():
    assert STORE.name == "scale-bias-relu-thread-store"
    assert not STORE.loads_source_by_tma
    assert replace(STORE, thread_store_pairs=True).name == "scale-bias-relu-thread-store-pairs"


def test_pairs_need_thread_stores():
    with pytest.raises(ValueError, match="thread_store_pairs=True needs store_by_threads=True"):
        EpilogueSpec(thread_store_pairs=True)


# An even K's pairs of adjacent channels: one access of two values each.
PAIR_ACCESSES = {
    "bfloat16": (r"st\.global\.b32", r"ld\.global[\w.]*\.b32", r"\.global[\w.]*\.b16"),
    "float32": (r"st\.global\.(v2\.b32|b64)", r"ld\.global[\w.]*\.(v2\.b32|b64)", r"\.global(\.(?!v2)\w+)*\.[bf]32\b"),
    "float8_e4m3fn": (r"st\.global\.v2\.b8", r"ld\.global[\w.]*\.v2\.b8", r"\.global(\.(?!v2)\w+)*\.b8\b"),
}


@pytest.mark.parametrize("out_dtype", PAIR_ACCESSES)
@pytest.mark.parametrize(
    "arch, config", [("sm_90a", Conv2dConfig()), ("sm_100a", Conv2dConfigSm100())],
    ids=["sm90", "sm100"],
)  # fmt: skip
def test_even_k_is_stored_and_read_in_pairs(arch, config, out_dtype):
    store, load, single = PAIR_ACCESSES[out_dtype]
    act_dtype = torch.float8_e4m3fn if out_dtype == "float8_e4m3fn" else torch.bfloat16
    spec = EpilogueSpec(has_residual=True, store_by_threads=True, thread_store_pairs=True)
    ptx = cute_conv.compile_kernel(
        arch, act_dtype=act_dtype, out_dtype=getattr(torch, out_dtype), config=config,
        epilogue=spec,
    ).ptx  # fmt: skip
    assert not _TMA_STORE.search(ptx)
    # Half as many accesses as values: SM90 holds tile_n / 2 values per 64-row atom, SM100 a
    # row of epi_n per subtile.
    values = config.tile_n // 2 if arch == "sm_90a" else config.epi_n
    assert len(re.findall(store, ptx)) >= values // 2
    assert len(re.findall(load, ptx)) >= values // 2
    assert not re.search(single, ptx), "a value was stored or read alone"


@pytest.mark.parametrize("order", ["after_activation", "before_activation"])
@pytest.mark.parametrize("config", [Conv2dConfig(), Conv2dConfig(pingpong=True)], ids=["coop", "pingpong"])
def test_the_residual_is_read_by_the_threads_too(config, order):
    spec = EpilogueSpec(has_residual=True, residual_order=order, store_by_threads=True)
    assert spec.has_residual and not spec.loads_source_by_tma
    kernel = cute_conv.compile_kernel(
        "sm_90a", act_dtype=torch.bfloat16, config=config, epilogue=spec
    )
    ptx = kernel.ptx
    assert not _TMA_STORE.search(ptx)
    # One 16-bit load of C and one store of D per value, by the consumer threads.
    assert len(re.findall(r"ld\.global[\w.]*\.b16", ptx)) >= config.tile_n // 2
    assert len(_THREAD_STORE.findall(ptx)) >= config.tile_n // 2


@pytest.mark.parametrize(
    "config, preloads",
    [
        (Conv2dConfig(tile_m=64, tile_n=32, stages=2), True),  # 16 values a thread
        (Conv2dConfig(tile_m=64, tile_n=64, stages=2), True),  # 32
        (Conv2dConfig(tile_m=64, tile_n=32, gather=True, gather_vector=2), True),
        (Conv2dConfig(tile_m=128, tile_n=128, stages=2), False),  # 64
    ],
    ids=["64x32", "64x64", "gathered", "128x128"],
)
def test_small_tiles_read_their_residual_before_the_mainloop(config, preloads):
    """In the SASS, every global load of a small tile's C (and of its bias) precedes the first
    WGMMA: they land under the mainloop. Past ``SOURCE_PRELOAD_MAX_VALUES`` C is read in the
    epilogue, after it."""
    from tests.sass import sass_of

    spec = EpilogueSpec(
        has_bias=True, activation="relu", has_residual=True, store_by_threads=True,
        thread_store_pairs=True,
    )  # fmt: skip
    kernel = cute_conv.compile_kernel(
        "sm_90a", act_dtype=torch.bfloat16, config=config, epilogue=spec
    )
    sass = sass_of(kernel.cubin)
    first_mma = sass.index("HGMMA")
    loads_after = len(re.findall(r"\bLDG\b", sass[first_mma:]))
    assert (loads_after == 0) == preloads, loads_after
    assert not re.search(r"\b(STL|LDL)\b", sass), "spilled registers"


@pytest.mark.parametrize(
    "config", [Conv2dConfigSm100(), Conv2dConfigSm100(cta_group=1, mma_m=128, mma_n=64)],
    ids=["2sm", "1sm"],
)  # fmt: skip
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_sm100_stores_by_threads_too(config, residual):
    """Compile-verified only (no Blackwell GPU): the tcgen05 epilogue's values go through
    ``store_subtile_by_threads``, 32 columns a thread per subtile, C read the same way."""
    spec = EpilogueSpec(has_residual=True, store_by_threads=True) if residual else STORE
    ptx = cute_conv.compile_kernel(
        "sm_100a", act_dtype=torch.bfloat16, config=config, epilogue=spec
    ).ptx
    assert not _TMA_STORE.search(ptx)
    assert len(_THREAD_STORE.findall(ptx)) >= config.epi_n
    loads = len(re.findall(r"ld\.global[\w.]*\.b16", ptx))
    assert loads >= config.epi_n if residual else loads == 0


@pytest.mark.parametrize(
    "c, k, stages_filter",
    [(48, 12, False), (888, 84, False), (12, 120, True), (30, 1, True)],
    ids=["c48-k12", "c888-k84", "c12-k120", "c30-k1"],
)
def test_k_is_never_padded(c, k, stages_filter):
    problem = cute_conv.Conv2dProblemShape.from_shapes((2, 5, 5, c), (k, 1, 1, c))
    for element_bytes in (2, 1):
        kernel_problem = kernel_problem_for(problem, element_bytes)
        alignment = 16 // element_bytes
        assert kernel_problem.K == k and kernel_problem.C == -(-c // alignment) * alignment
    kernel_problem = kernel_problem_for(problem)
    # Only C padding copies the filter; a C-aligned call launches directly.
    assert staging_plan(problem, kernel_problem, 2).stages_filter == stages_filter
    assert (kernel_problem is problem) == (not stages_filter)


BULK = EpilogueSpec(has_bias=True, activation="relu", store_by_threads=True,
                    thread_store_pairs=True, bulk_tile_store=True)  # fmt: skip
_BULK_STORE = re.compile(r"cp\.async\.bulk\.global\.shared::cta\.bulk_group")


@pytest.mark.parametrize(
    "config", [Conv2dConfig(), Conv2dConfig(tile_n=64, cluster_m=2), Conv2dConfig(stream_k=True)],
    ids=["default", "128x64-2x1", "stream-k"],
)  # fmt: skip
def test_whole_row_tiles_go_out_in_one_bulk_copy(config):
    """``bulk_tile_store``: the values go to SMEM (pairs: 4-byte stores), one bulk copy per
    tile moves them out, its reads awaited before the buffer is written again; only the last
    elements that do not fill 16 bytes are stored to global memory by threads."""
    ptx = cute_conv.compile_kernel(
        "sm_90a", act_dtype=torch.bfloat16, config=config, epilogue=BULK
    ).ptx
    assert len(_BULK_STORE.findall(ptx)) == 1
    assert not _TMA_STORE.search(ptx)
    assert re.search(r"cp\.async\.bulk\.wait_group\.read", ptx)
    assert len(re.findall(r"st\.shared\.b32", ptx)) >= config.tile_n // 4  # pairs of its values
    assert len(re.findall(r"st\.global\.b16", ptx)) == 1  # the tail
    assert BULK.name == "bias-relu-thread-store-pairs-bulk"


def test_whole_row_tiles_need_fitting_configs():
    wide = cute_conv.Conv2dProblemShape.from_shapes((1, 8, 8, 64), (96, 1, 1, 64))
    assert tiles_hold_whole_rows(Conv2dConfig(), wide, "bfloat16", "bfloat16")
    assert not tiles_hold_whole_rows(Conv2dConfig(tile_n=64), wide, "bfloat16", "bfloat16")
    for config in (Conv2dConfig(pingpong=True), CASES["halo"]):
        assert not tiles_hold_whole_rows(config, wide, "bfloat16", "bfloat16")
        with pytest.raises(ValueError, match="bulk_tile_store=True needs an SM90 config"):
            cute_conv.compile_kernel("sm_90a", config=config, epilogue=BULK)
    # 256-wide tiles: four 32-wide staging buffers of 128 rows hold half a tile.
    assert not tiles_hold_whole_rows(Conv2dConfig(tile_n=256), wide, "bfloat16", "bfloat16")
    with pytest.raises(ValueError, match="bulk_tile_store=True needs an SM90 config"):
        cute_conv.compile_kernel("sm_100a", config=Conv2dConfigSm100(), epilogue=BULK)
    with pytest.raises(ValueError, match="bulk_tile_store=True needs store_by_threads=True"):
        EpilogueSpec(bulk_tile_store=True)
    with pytest.raises(ValueError, match="bulk_tile_store=True is for outputs without a residual"):
        EpilogueSpec(has_residual=True, store_by_threads=True, bulk_tile_store=True)


def test_bulk_tile_stores_for_large_plain_outputs():
    # ShuffleNet's n8 56x56 K=58 1x1: 2.8 MiB of bf16 output; its n1 7x7 form: 5.6 KiB.
    large = cute_conv.Conv2dProblemShape.from_shapes((8, 56, 56, 24), (58, 1, 1, 24))
    small = cute_conv.Conv2dProblemShape.from_shapes((1, 7, 7, 24), (58, 1, 1, 24))
    assert bulk_tile_store_pays(large, 16, has_residual=False)
    assert not bulk_tile_store_pays(large, 16, has_residual=True)
    assert not bulk_tile_store_pays(small, 16, has_residual=False)
    edge = cute_conv.Conv2dProblemShape.from_shapes((1, 64, 64, 24), (32, 1, 1, 24))
    assert edge.gemm_m * 32 * 2 == BULK_TILE_STORE_MIN_BYTES
    assert bulk_tile_store_pays(edge, 16, has_residual=False)
    assert not bulk_tile_store_pays(edge, 8, has_residual=False)
