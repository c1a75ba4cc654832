"""The channel-vector A/B's CPU parts (benchmarks/ab_channel_vectors.py): that each variant
compiles its own code and a switch drops the launch plans (which hold their kernels), and
that the committed H100 rows hold the measurements the prefetch and the preload landed on."""

from __future__ import annotations

import json

import ab_channel_vectors as ab
import cute_conv.kernels.common.epilogue_store as store
import cute_conv.kernels.sm90.epilogue as sm90_epilogue
import pytest
import torch

from cute_conv import Conv2dConfig, dispatch
from cute_conv import compile as compile_mod
from tests.test_compile_channel_vectors import loads_around_the_mainloop


@pytest.fixture
def restored(monkeypatch):
    """What ``use_variant`` switches, put back after the test."""
    for module, name in ((sm90_epilogue, "prefetch_channel_vectors"), (store, "load_channel_vectors"),
                         (compile_mod, "_cache"),
                         (sm90_epilogue, "PRELOAD_MAX_REGISTERS"),
                         (sm90_epilogue, "VECTOR_LOOKAHEAD_SUBTILES")):  # fmt: skip
        monkeypatch.setattr(module, name, getattr(module, name))
    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(ab._BASE_CACHE_DIR))


def test_each_variant_compiles_its_own_code_and_drops_the_plans(restored):
    config = Conv2dConfig(tile_m=64, tile_n=64)
    code = {}
    for name in ab.VARIANTS:
        dispatch._plans.memo(lambda: ("stale",), lambda: "a stale plan", ())
        ab.use_variant(name)
        assert not dispatch._plans
        assert compile_mod._cache is ab._VARIANT_KERNELS[name]
        ptx = compile_mod.compile_kernel(
            "sm_90a", config=config, act_dtype=torch.bfloat16, epilogue=ab._epilogue("fused")
        ).ptx
        code[name] = (ptx.count("prefetch.global.L2"), *loads_around_the_mainloop(ptx))
    # 64-wide tiles: 16 distinct channels per thread, loaded before the mainloop or after it
    assert code["preload"] == (0, 16, 0)
    assert code["prefetch"] == (1, 0, 16)
    assert code["noprefetch"] == (0, 0, 16)
    assert code["const"] == (0, 0, 0)


def test_an_unknown_variant_is_rejected(restored):
    with pytest.raises(ValueError, match="variant must be one of preload, prefetch, noprefetch"):
        ab.use_variant("off")


@pytest.mark.parametrize("form", ab.FORMS)
def test_the_committed_rows_show_the_prefetch_paying(form):
    experiment = ab.EXPERIMENTS["prefetch"]
    results = json.loads(experiment.results.read_text())
    rows = [r for r in results["rows"] if r["form"] == form]
    # Every row valid: both real kernels passed, the constant-bias one failed (so it ran).
    assert len(rows) == len(ab.valid_rows(rows, experiment.variants)) >= 30
    assert ab.ratio(rows, "noprefetch", "prefetch") > 1.02
    assert ab.ratio(rows, "prefetch", "plain") < ab.ratio(rows, "noprefetch", "plain")


@pytest.mark.parametrize("gpu", ["H100", "H200"])
@pytest.mark.parametrize("form, gain", [("fused", 1.005), ("bias_relu", 1.02)])
def test_the_committed_rows_show_the_preload_paying(gpu, form, gain):
    experiment = ab.EXPERIMENTS["preload"]
    path = experiment.results.with_name(experiment.results.name.replace("H100", gpu))
    results = json.loads(path.read_text())
    rows = [r for r in results["rows"] if r["form"] == form]
    assert len(rows) == len(ab.valid_rows(rows, experiment.variants)) >= 16
    assert ab.ratio(rows, "prefetch", "preload") > gain
    # Within 1% of the kernel that loads no bias at all.
    assert ab.ratio(rows, "preload", "plain") < ab.ratio(rows, "const", "plain") * 1.01


def test_the_lookahead_ab_keeps_to_the_tiles_past_the_preload_budget():
    rows = [
        {"key": "wide", "after_ms": 0.010, "fused_config": "128x256 1x2 3 stages"},
        {"key": "tall", "after_ms": 0.030, "fused_config": "256x128 2x1"},
        {"key": "narrow", "after_ms": 0.010, "fused_config": "128x128 1x1"},
    ]
    results = {"runs": [{"run_id": "1", "device": "H", "rows": rows}]}
    keys = ab.select_problems(results, "H", ab.EXPERIMENTS["lookahead"])
    assert sorted(keys) == ["tall", "wide"]
    assert len(ab.select_problems(results, "H", ab.EXPERIMENTS["preload"])) == 3


def test_the_per_subtile_variant_keeps_the_preload_but_looks_no_subtile_ahead(restored):
    ab.use_variant("per_subtile")
    assert sm90_epilogue.PRELOAD_MAX_REGISTERS == ab._LANDED["preload"]
    assert sm90_epilogue.VECTOR_LOOKAHEAD_SUBTILES == 0
    ab.use_variant("preload")
    assert sm90_epilogue.VECTOR_LOOKAHEAD_SUBTILES == ab._LANDED["ahead"] >= 1
