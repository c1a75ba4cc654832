"""Compile-only: the SM90 epilogue that stores the output by threads
(``EpilogueSpec.store_by_threads``, for K whose rows are not whole 16-byte units), in the
schedules the GPU tests run it with, and the host's choice of it. The numerics are checked on
the GPU (``tests/test_thread_store_sm90.py``)."""

from __future__ import annotations

import re

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfig, Conv2dConfigSm100, EpilogueSpec
from cute_conv.arch import ARCHS
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


def test_sm100_refuses_the_thread_store():
    assert not ARCHS["sm_100a"].stores_by_threads and ARCHS["sm_90a"].stores_by_threads
    with pytest.raises(ValueError, match="store_by_threads=True\\) is SM90-only"):
        cute_conv.compile_kernel(
            "sm_100a", act_dtype=torch.bfloat16, config=Conv2dConfigSm100(), epilogue=STORE
        )


@pytest.mark.parametrize(
    "c, k, stages_filter",
    [(48, 12, False), (888, 84, False), (12, 120, True), (30, 1, True)],
    ids=["c48-k12", "c888-k84", "c12-k120", "c30-k1"],
)
def test_unpadded_k_needs_no_filter_copy_or_scratch(c, k, stages_filter):
    problem = cute_conv.Conv2dProblemShape.from_shapes((2, 5, 5, c), (k, 1, 1, c))
    padded, unpadded = kernel_problem_for(problem), kernel_problem_for(problem, pad_k=False)
    assert padded.K == -(-k // 8) * 8 and unpadded.K == k
    assert unpadded.C == padded.C == -(-c // 8) * 8
    plan = staging_plan(problem, unpadded)
    assert plan.k_pad == 0  # no scratch output, no copy of it
    assert plan.stages_filter == stages_filter  # only C padding copies the filter
    if not stages_filter:
        assert unpadded is problem  # the call launches directly
