"""The bias/scale L2 prefetch (``kernels/common/epilogue.prefetch_channel_vectors``) against
the same kernels without it, in one process: the measurement behind it (NOTES, session 43).

    python benchmarks/ab_bias_prefetch.py [--form bias_relu] [--max-seconds 200]   # GPU
    python benchmarks/ab_bias_prefetch.py [--form bias_relu] --report              # no GPU

Three kernels of each problem's untuned config, which differ only in code switched at trace
time (``use_variant``):

- ``prefetch``: the kernel as it is;
- ``noprefetch``: ``prefetch_channel_vectors`` a no-op;
- ``const``: no prefetch and a constant in place of the bias loads, the floor that no
  prefetch can beat. Its check against float32 must FAIL: that proves its kernel ran.

Each variant keeps its own in-process kernels, disk cache directory and launch plans. A
launch plan (``dispatch._plans``) holds its kernel under a key of the call's metadata, so a
switch that kept the plans would replay the first variant's kernel under every name (session
42's A/B did, and measured nothing).

Per problem, in one process: the three calls (``fused``: ``relu(conv + b) + r``;
``bias_relu``: ``conv + b -> relu``) and the plain conv, each checked against float32 from a
NaN-poisoned output, then replayed from CUDA graphs, interleaved (``ROUNDS``). The problems:
the device's corpus rows (``corpus_results.json``) whose fused call took under 12 us (the
convs where a bias load is not hidden), the first 30 by sha256 of their key, then 10 of
12-40 us and 6 longer ones. Rows: ``bias_prefetch_ab_H100.json`` (both forms); ``--results``
for another file.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import load_results  # noqa: E402

RESULTS_PATH = HERE / "bias_prefetch_ab_H100.json"
FORMS = ("fused", "bias_relu")
VARIANTS = ("prefetch", "noprefetch", "const")
# Fused call times (us) that bound the selection's groups, and how many of each it takes.
SELECTION = ((0.0, 12.0, 30), (12.0, 40.0, 10), (40.0, math.inf, 6))
ROUNDS = 9  # of interleaved timing: the gaps measured are a few percent
# The variants' disk caches go below the cache directory the process started with.
_BASE_CACHE_DIR = Path(os.environ.get("CUTE_CONV_CACHE_DIR", Path.home() / ".cache" / "cute_conv"))
_VARIANT_KERNELS: dict[str, dict] = {name: {} for name in VARIANTS}


def select_problems(results: dict, device: str) -> list[str]:
    """The corpus keys the A/B measures: ``SELECTION``'s groups of ``device``'s rows by their
    fused call's time, each group's first ones by sha256 of the key."""
    from bench_corpus import latest_rows

    _, rows, _ = latest_rows(results, device)
    fused_us = {r["key"]: r["after_ms"] * 1e3 for r in rows if r.get("after_ms")}
    keys = []
    for low, high, count in SELECTION:
        group = [key for key, us in fused_us.items() if low <= us < high]
        keys += sorted(group, key=lambda k: hashlib.sha256(k.encode()).hexdigest())[:count]
    return keys


def use_variant(name: str) -> None:
    """Make ``name`` (one of ``VARIANTS``) the kernels that compile and launch from now on:
    its kernel code, in-process kernels, disk cache directory, and no launch plan from before
    (each holds its kernel)."""
    import cute_conv.kernels.common.epilogue_store as store
    import cute_conv.kernels.sm90.conv2d_fprop as fprop
    import cutlass
    import cutlass.cute as cute
    from cute_conv.kernels.common.epilogue import load_channel_vectors, prefetch_channel_vectors

    from cute_conv import compile as compile_mod
    from cute_conv import dispatch

    if name not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {name!r}")

    @cute.jit
    def no_prefetch(spec, m_bias, m_scale, tile_n0, tile_n, tidx):
        pass

    @cute.jit
    def constant_vectors(spec, m_bias, m_scale, coords, subtile_n0, r_bias, r_scale):
        for v in cutlass.range_constexpr(cute.size(r_bias)):
            r_bias[v] = cutlass.Float32(0.25)

    fprop.prefetch_channel_vectors = prefetch_channel_vectors if name == "prefetch" else no_prefetch
    store.load_channel_vectors = constant_vectors if name == "const" else load_channel_vectors
    os.environ["CUTE_CONV_CACHE_DIR"] = str(_BASE_CACHE_DIR / f"ab_{name}")
    compile_mod._cache = _VARIANT_KERNELS[name]
    dispatch._plans.clear()


def _epilogue(form: str):
    from cute_conv.epilogue import EpilogueSpec

    return EpilogueSpec(
        has_bias=True, activation="relu", has_residual=form == "fused", vector_dtype="bfloat16"
    )


def _compile(job: tuple) -> None:
    config, name, form = job
    use_variant(name)
    from cute_conv.compile import compile_kernel

    compile_kernel("sm_90a", config=config, act_dtype="bfloat16", epilogue=_epilogue(form))


def measure(p: dict, form: str) -> dict:
    """One problem's row: the three variants' and the plain conv's checks and graph times."""
    import bench
    import torch
    from bench_corpus import problem_shape
    from models import replay_of
    from sweep_rows import cudnn_run, problem_inputs

    import cute_conv
    from cute_conv.reference import conv2d_reference
    from cute_conv.testing import compare_to_reference
    from cute_conv.untuned import heuristic_config

    problem, geom, x, flt = problem_inputs(p)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    config = heuristic_config(problem_shape(p), num_sms, has_residual=form == "fused")
    bias = torch.randn(problem.K, device="cuda", dtype=x.dtype)
    residual = torch.randn(problem.output_shape, device="cuda").to(x.dtype)
    ref = torch.relu(conv2d_reference(x, flt, **geom) + bias.float())
    if form == "fused":
        ref = ref + residual.float()
    graphs, checks = {}, {}

    def call(out):
        if form == "fused":
            return cute_conv.conv2d_fprop_with_residual(
                x, flt, residual, bias=bias, activation="relu", out=out, config=config, **geom
            )
        return cute_conv.conv2d_fprop(
            x, flt, bias=bias, activation="relu", out=out, config=config, **geom
        )

    for name in VARIANTS:
        use_variant(name)
        out = torch.full(ref.shape, float("nan"), dtype=x.dtype, device="cuda")
        call(out)
        check = compare_to_reference(out, ref)
        checks[name] = {"ok": check.ok, "rel_err": check.rel_err}
        graphs[name] = replay_of(functools.partial(call, out))  # which keeps ``out`` alive
    use_variant("prefetch")
    plain_out = torch.empty(ref.shape, dtype=x.dtype, device="cuda")
    graphs["plain"] = replay_of(
        lambda: cute_conv.conv2d_fprop(x, flt, out=plain_out, config=config, **geom)
    )
    graphs["cudnn"] = replay_of(cudnn_run(x, flt, problem))
    ms = bench.time_interleaved(graphs, ROUNDS)
    return {"key": p["key"], "config": repr(config), "checks": checks, "ms": ms}


def valid_rows(rows: list[dict]) -> list[dict]:
    """The rows whose prefetch and no-prefetch kernels passed their checks and whose
    constant-bias kernel failed its (so that every variant provably ran)."""
    return [
        r for r in rows
        if r["checks"]["prefetch"]["ok"] and r["checks"]["noprefetch"]["ok"]
        and not r["checks"]["const"]["ok"]
    ]  # fmt: skip


def ratio(rows: list[dict], slower: str, faster: str) -> float:
    """Geomean over ``rows`` of ``slower``'s time over ``faster``'s."""
    return math.exp(sum(math.log(r["ms"][slower] / r["ms"][faster]) for r in rows) / len(rows))


def report(results: dict, form: str) -> str:
    """The A/B's geomeans over ``form``'s valid rows of ``results``."""
    rows = valid_rows([r for r in results["rows"] if r.get("form") == form])
    if not rows:
        return f"{form}: no valid rows"
    return (
        f"{results.get('device', '?')}, {form}: {len(rows)} rows; without / with the prefetch "
        f"{ratio(rows, 'noprefetch', 'prefetch'):.3f}x; over the plain conv: without "
        f"{ratio(rows, 'noprefetch', 'plain'):.3f}x, with {ratio(rows, 'prefetch', 'plain'):.3f}x,"
        f" constant bias {ratio(rows, 'const', 'plain'):.3f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=FORMS, default=FORMS[0])
    parser.add_argument("--max-seconds", type=float, default=200.0)
    parser.add_argument("--report", action="store_true", help="no GPU: from the results file")
    parser.add_argument("--results", type=Path, default=RESULTS_PATH)
    args = parser.parse_args()
    results = load_results(args.results)
    if args.report:
        print(report(results, args.form))
        return
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    import torch
    from bench_corpus import RESULTS_PATH as CORPUS_RESULTS
    from bench_corpus import load_corpus, problem_shape

    from cute_conv.untuned import heuristic_config

    device = torch.cuda.get_device_name()
    keys = select_problems(json.loads(CORPUS_RESULTS.read_text()), device)
    corpus = {p["key"]: p for p in load_corpus()}
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    configs = {
        heuristic_config(problem_shape(corpus[k]), num_sms, has_residual=args.form == "fused")
        for k in keys
    }
    jobs = {(c.compiled_form(), name, args.form) for c in configs for name in VARIANTS}
    with ProcessPoolExecutor(os.cpu_count(), mp_context=get_context("spawn")) as pool:
        list(pool.map(_compile, jobs))
    results.setdefault("device", device)
    start = time.perf_counter()
    for key in keys:
        if time.perf_counter() - start > args.max_seconds:
            print("time bound reached")
            break
        row = {"form": args.form, **measure(corpus[key], args.form)}
        results["rows"].append(row)
        args.results.write_text(json.dumps(results, indent=1))
        print(key, {name: round(t * 1e3, 2) for name, t in row["ms"].items()})
    print(report(results, args.form))


if __name__ == "__main__":
    main()
