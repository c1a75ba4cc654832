"""The persistent compile cache: a later process loads a kernel instead of compiling it."""

from __future__ import annotations

import pytest
import torch

import cute_conv
from cute_conv import compile as compile_mod
from cute_conv import disk_cache

CONFIG = cute_conv.Conv2dConfig(tile_n=64, stages=3, swizzle=5)  # unused elsewhere in tests


def test_second_compile_loads_from_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    compile_mod.clear_cache()
    first = cute_conv.compile_kernel("sm_90a", act_dtype=torch.float16, config=CONFIG)
    entries = list(tmp_path.glob("*/*/meta.json"))
    assert len(entries) == 1

    def no_compiling(*args, **kwargs):
        raise AssertionError("the kernel was compiled again instead of loaded from disk")

    monkeypatch.setattr(compile_mod.cute, "compile", no_compiling)
    compile_mod.clear_cache()
    again = cute_conv.compile_kernel("sm_90a", act_dtype=torch.float16, config=CONFIG)
    assert again is not first
    assert again.ptx == first.ptx and again.cubin == first.cubin
    assert again.smem_bytes == first.smem_bytes
    compile_mod.clear_cache()


def test_disabled_or_user_function_kernels_are_not_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    spec = cute_conv.EpilogueSpec(epilogue_fn=lambda y: y * 3.0)
    cute_conv.compile_kernel("sm_90a", config=CONFIG, epilogue=spec)
    monkeypatch.setenv("CUTE_CONV_DISK_CACHE", "0")
    assert not disk_cache.enabled()
    cute_conv.compile_kernel("sm_90a", config=CONFIG, out_dtype=torch.float32)
    assert list(tmp_path.glob("*/*/meta.json")) == []


@pytest.mark.gpu
def test_fresh_and_loaded_kernels_launch_through_plain_tvm_ffi_functions(tmp_path, monkeypatch):
    """A fresh compile is launched without the DSL's keyword-argument wrapper, as a kernel
    loaded from disk is."""
    import tvm_ffi

    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    config = cute_conv.Conv2dConfig(tile_n=96, stages=3)
    compile_mod.clear_cache()
    fresh = cute_conv.compile_kernel("sm_90a", config=config)
    compile_mod.clear_cache()
    loaded = cute_conv.compile_kernel("sm_90a", config=config)
    assert type(fresh._fn) is tvm_ffi.Function
    assert type(loaded._fn) is tvm_ffi.Function
    compile_mod.clear_cache()
