"""Concurrent first calls from several threads (a model served by a thread pool): each kernel
compiles once, each problem tunes once, and every call gets the right kernel and result.

The compile and tuning tests run on a CPU (compile-only, sm_90a); the end-to-end ones need an
H100/H200.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import cute_conv
from cute_conv import Conv2dConfig, Conv2dProblemShape, EpilogueSpec, dispatch, tuning, workspace
from cute_conv import compile as compile_mod
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs
from tests.gpu import requires_sm90

THREADS = 8


def run_together(fn, args: list) -> list:
    """``fn(arg)`` for every arg, each in its own thread, all released at once."""
    barrier = threading.Barrier(len(args))

    def call(arg):
        barrier.wait()
        return fn(arg)

    with ThreadPoolExecutor(len(args)) as pool:
        return list(pool.map(call, args))


@pytest.fixture
def counted_compiles(monkeypatch):
    """The keys ``compile._compile`` ran for (each a miss of the in-memory cache)."""
    keys = []
    real = compile_mod._compile

    def counting(key):
        keys.append(key)
        return real(key)

    monkeypatch.setattr(compile_mod, "_compile", counting)
    return keys


def compile_with(epilogue: EpilogueSpec):
    return cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16, epilogue=epilogue)


def test_threads_compile_each_kernel_once_and_share_it(counted_compiles):
    """Real compiles (the DSL's tracing is not thread-safe: they must take turns)."""
    # Fresh epilogue functions: two keys no other test compiled (and never on disk).
    specs = [EpilogueSpec(epilogue_fn=lambda y: y * 0.5), EpilogueSpec(epilogue_fn=lambda y: -y)]
    kernels = run_together(compile_with, [specs[i % 2] for i in range(2 * THREADS)])
    assert sorted(key.epilogue is specs[1] for key in counted_compiles) == [False, True]
    for i, kernel in enumerate(kernels):
        assert kernel is kernels[i % 2]
        assert kernel.key.epilogue is specs[i % 2]
        assert "wgmma.mma_async" in kernel.ptx


def test_a_waiting_thread_takes_the_kernel_compiled_while_it_waited(monkeypatch):
    """With compiles stretched out, all threads arrive during the first one's compile."""
    compiled = []

    def slow_compile(key):
        compiled.append(key)
        time.sleep(0.2)
        return object()

    monkeypatch.setattr(compile_mod, "_cache", {})
    monkeypatch.setattr(compile_mod, "_compile", slow_compile)
    configs = [Conv2dConfig(tile_n=64), Conv2dConfig(tile_n=96)]
    kernels = run_together(
        lambda config: cute_conv.compile_kernel("sm_90a", config=config),
        [configs[i % 2] for i in range(2 * THREADS)],
    )
    assert len(compiled) == 2
    assert all(kernel is kernels[i % 2] for i, kernel in enumerate(kernels))
    assert kernels[0] is not kernels[1]


def test_a_failed_compile_is_not_cached(monkeypatch):
    calls = []

    def failing(key):
        calls.append(key)
        raise RuntimeError("compiler crashed")

    monkeypatch.setattr(compile_mod, "_cache", {})
    monkeypatch.setattr(compile_mod, "_compile", failing)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="compiler crashed"):
            cute_conv.compile_kernel("sm_90a")
    assert len(calls) == 2


def test_threads_tune_a_new_problem_once(tmp_path, monkeypatch):
    """``CUTE_CONV_AUTOTUNE=1``: concurrent first calls of one problem run one tuning; the
    others wait for it and take its stored choice."""
    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUTE_CONV_AUTOTUNE", "1")
    monkeypatch.setattr(tuning, "_device_name", lambda index: "Fake H100")
    problem = Conv2dProblemShape.from_shapes((2, 8, 8, 64), (64, 3, 3, 64), padding=1)
    x = torch.empty(problem.activation_shape, dtype=torch.bfloat16, device="meta")
    tuned = Conv2dConfig(tile_n=64, swizzle=1)
    tunings = []

    def fake_autotune(x_shape, filter_shape, *, device, has_residual, **geometry):
        tunings.append(x_shape)
        time.sleep(0.2)  # every thread arrives while the first one tunes
        key = tuning.problem_key(problem, torch.bfloat16, torch.bfloat16, has_residual)
        tuning._store(device, key, tuned, {})
        return tuned

    monkeypatch.setattr(tuning, "autotune", fake_autotune)
    _unused = dispatch.config_runner  # handed to fake_autotune, never called
    chosen = run_together(
        lambda _: tuning.stored_or_tuned_config(
            problem, problem, x, problem.filter_shape, torch.bfloat16, make_runner=_unused
        ),
        list(range(THREADS)),
    )
    assert tunings == [problem.activation_shape]
    assert chosen == [tuned] * THREADS


def test_a_grown_workspace_buffer_keeps_the_one_it_replaced(monkeypatch):
    monkeypatch.setattr(workspace, "_replaced", [])
    old = torch.zeros(100)
    assert workspace._at_least(old, 100, torch.zeros) is old  # big enough: kept in use
    new = workspace._at_least(old, 101, torch.zeros)
    assert new.numel() == 200  # at least doubled: the replaced buffers stay smaller than it
    assert workspace._replaced == [old]  # alive: a thread may still launch with its address
    assert workspace._at_least(None, 7, torch.zeros).numel() == 7


@pytest.fixture
def first_calls(monkeypatch):
    """Empty plan, kernel and workspace caches, as in a fresh process."""
    monkeypatch.setattr(dispatch, "_plans", {})
    monkeypatch.setattr(compile_mod, "_cache", {})
    monkeypatch.setattr(workspace, "_buffers", {})


def _calls_in_threads(config=None) -> None:
    """``THREADS`` threads' concurrent calls of one problem, each on its own NaN-poisoned
    output, each checked against the float32 reference."""
    inputs = [random_conv_inputs(4, 14, 14, 64, 128, 3, 3) for _ in range(THREADS)]

    def call(i):
        x, flt = inputs[i]
        out = torch.full((4, 14, 14, 128), float("nan"), dtype=torch.bfloat16, device="cuda")
        cute_conv.conv2d_fprop(x, flt, padding=1, out=out, config=config)
        torch.cuda.current_stream().synchronize()
        return out

    outs = run_together(call, list(range(THREADS)))
    for (x, flt), out in zip(inputs, outs, strict=True):
        report = compare_to_reference(out, conv2d_reference(x, flt, padding=1))
        assert report.ok, report


@requires_sm90
def test_concurrent_first_calls_compile_once_and_are_correct(first_calls, counted_compiles):
    _calls_in_threads()
    assert len(counted_compiles) == 1


@requires_sm90
def test_concurrent_first_stream_k_calls_share_one_workspace(first_calls, counted_compiles):
    _calls_in_threads(Conv2dConfig(stream_k=True))
    assert len(counted_compiles) == 1
    assert len(workspace._buffers) == 1  # one stream: one pair of buffers, grown once
