"""The bias-prefetch A/B's CPU parts (benchmarks/ab_bias_prefetch.py): that each variant
compiles its own code and a switch drops the launch plans (which hold their kernels), and
that the committed H100 rows hold the measurement the prefetch landed on."""

from __future__ import annotations

import json

import ab_bias_prefetch as ab
import cute_conv.kernels.common.epilogue_store as store
import cute_conv.kernels.sm90.conv2d_fprop as fprop
import pytest
import torch

from cute_conv import Conv2dConfig, dispatch
from cute_conv import compile as compile_mod


@pytest.fixture
def restored(monkeypatch):
    """What ``use_variant`` switches, put back after the test."""
    for module, name in ((fprop, "prefetch_channel_vectors"), (store, "load_channel_vectors"),
                         (compile_mod, "_cache")):  # fmt: skip
        monkeypatch.setattr(module, name, getattr(module, name))
    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(ab._BASE_CACHE_DIR))


def test_each_variant_compiles_its_own_code_and_drops_the_plans(restored):
    config = Conv2dConfig(tile_m=64, tile_n=64)
    loads = {}
    for name in ab.VARIANTS:
        dispatch._plans[("stale",)] = None
        ab.use_variant(name)
        assert not dispatch._plans
        assert compile_mod._cache is ab._VARIANT_KERNELS[name]
        ptx = compile_mod.compile_kernel(
            "sm_90a", config=config, act_dtype=torch.bfloat16, epilogue=ab._epilogue("fused")
        ).ptx
        loads[name] = (ptx.count("prefetch.global.L2"), ptx.count("ld.global"))
    assert loads["prefetch"][0] == 1 and loads["noprefetch"][0] == 0
    assert loads["prefetch"][1] == loads["noprefetch"][1] > 0 and loads["const"] == (0, 0)


def test_an_unknown_variant_is_rejected(restored):
    with pytest.raises(ValueError, match="variant must be one of prefetch, noprefetch, const"):
        ab.use_variant("off")


@pytest.mark.parametrize("form", ab.FORMS)
def test_the_committed_rows_show_the_prefetch_paying(form):
    results = json.loads(ab.RESULTS_PATH.read_text())
    rows = [r for r in results["rows"] if r["form"] == form]
    # Every row valid: both real kernels passed, the constant-bias one failed (so it ran).
    assert len(rows) == len(ab.valid_rows(rows)) >= 30
    assert ab.ratio(rows, "noprefetch", "prefetch") > 1.02
    assert ab.ratio(rows, "prefetch", "plain") < ab.ratio(rows, "noprefetch", "plain")
