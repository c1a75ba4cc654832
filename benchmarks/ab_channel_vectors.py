"""Kernel variants of how the epilogue gets its bias and scale, against each other in one
process: the measurements behind the L2 prefetch (NOTES, session 43) and the preload into
registers (session 44).

    python benchmarks/ab_channel_vectors.py [--ab preload|lookahead] [--form bias_relu]   # GPU
    python benchmarks/ab_channel_vectors.py [--ab preload] [--form bias_relu] --report

Each experiment (``EXPERIMENTS``) compares kernels of each problem's untuned config that
differ only in code switched at trace time (``use_variant``):

- ``preload``: the kernel as it is: the SM90 consumers load a tile's bias into registers
  before its mainloop where they fit (``PRELOAD_MAX_REGISTERS``), else prefetch it into L2
  before the mainloop and load each subtile's ``VECTOR_LOOKAHEAD_SUBTILES`` subtiles ahead;
- ``per_subtile``: the same but for the lookahead: past the budget, each subtile loads its
  own (the kernel before the lookahead);
- ``prefetch``: no preload; the bias's lines prefetched into L2 before the mainloop
  (``prefetch_channel_vectors``) and loaded per epilogue subtile;
- ``noprefetch``: neither: loaded per subtile;
- ``const``: no loads, a constant in place of the bias, the floor no loading scheme can
  beat. Its check against float32 must FAIL: that proves its kernel ran.

Each variant keeps its own in-process kernels, disk cache directory and launch plans. A
launch plan (``dispatch._plans``) holds its kernel under a key of the call's metadata, so a
switch that kept the plans would replay the first variant's kernel under every name (session
42's A/B did, and measured nothing).

Per problem, in one process: the variants' calls (``fused``: ``relu(conv + b) + r``;
``bias_relu``: ``conv + b -> relu``) and the plain conv, each checked against float32 from a
NaN-poisoned output, then replayed from CUDA graphs, interleaved (``ROUNDS``). The problems:
the device's corpus rows (``corpus_results.json``) in the experiment's groups of fused call
times, each group's first ones by sha256 of their key. Rows: the experiment's results file
(``--results`` for another).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from sweep_rows import load_results, sample_rank  # noqa: E402

FORMS = ("fused", "bias_relu")
VARIANTS = ("preload", "prefetch", "noprefetch", "const", "per_subtile")


class Experiment(NamedTuple):
    """One A/B: its variants (the one landed first, the one it is judged against second, the
    must-fail floor last), its problem groups (fused call times in us that bound each, and how
    many of each) and where its rows go."""

    variants: tuple[str, ...]
    selection: tuple[tuple[float, float, int], ...]
    results: Path
    # Only rows whose fused call ran one of these tile shapes (e.g. "128x256"); () for all.
    tiles: tuple[str, ...] = ()


EXPERIMENTS = {
    "prefetch": Experiment(
        ("prefetch", "noprefetch", "const"),
        ((0.0, 12.0, 30), (12.0, 40.0, 10), (40.0, math.inf, 6)),  # bias loads unhidden
        HERE / "bias_prefetch_ab_H100.json",
    ),
    "preload": Experiment(
        ("preload", "prefetch", "const"),
        ((0.0, 12.0, 16), (12.0, 40.0, 14), (40.0, math.inf, 12)),  # and per-subtile waits
        HERE / "channel_preload_ab_H100.json",
    ),
    # Tiles past the preload budget: their vectors loaded subtiles ahead against per subtile.
    "lookahead": Experiment(
        ("preload", "per_subtile", "const"),
        ((0.0, 20.0, 12), (20.0, 80.0, 12), (80.0, math.inf, 8)),
        HERE / "vector_lookahead_ab_H200.json",
        tiles=("128x256", "256x128"),
    ),
}
ROUNDS = 9  # of interleaved timing: the gaps measured are a few percent
# The variants' disk caches go below the cache directory the process started with.
_BASE_CACHE_DIR = Path(os.environ.get("CUTE_CONV_CACHE_DIR", Path.home() / ".cache" / "cute_conv"))
_VARIANT_KERNELS: dict[str, dict] = {name: {} for name in VARIANTS}
# kernels/sm90/epilogue.py's PRELOAD_MAX_REGISTERS and VECTOR_LOOKAHEAD_SUBTILES as landed,
# before use_variant set them.
_LANDED: dict[str, int] = {}


def select_problems(results: dict, device: str, experiment: Experiment) -> list[str]:
    """The corpus keys the A/B measures: ``experiment``'s groups of ``device``'s rows by their
    fused call's time, each group's first ones by sha256 of the key."""
    from bench_corpus import latest_rows

    _, rows, _ = latest_rows(results, device)
    fused_us = {
        r["key"]: r["after_ms"] * 1e3
        for r in rows
        if r.get("after_ms")
        and (not experiment.tiles or r.get("fused_config", "").split(" ")[0] in experiment.tiles)
    }
    keys = []
    for low, high, count in experiment.selection:
        group = [key for key, us in fused_us.items() if low <= us < high]
        keys += sorted(group, key=sample_rank)[:count]
    return keys


def use_variant(name: str) -> None:
    """Make ``name`` (one of ``VARIANTS``) the kernels that compile and launch from now on:
    its kernel code, in-process kernels, disk cache directory, and no launch plan from before
    (each holds its kernel)."""
    import cute_conv.kernels.common.epilogue_store as store
    import cute_conv.kernels.sm90.epilogue as sm90_epilogue
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

    landed_budget = _LANDED.setdefault("preload", sm90_epilogue.PRELOAD_MAX_REGISTERS)
    keeps_budget = name in ("preload", "per_subtile")
    sm90_epilogue.PRELOAD_MAX_REGISTERS = landed_budget if keeps_budget else 0
    # The other variants load each subtile's vectors in that subtile, none ahead of it.
    landed_ahead = _LANDED.setdefault("ahead", sm90_epilogue.VECTOR_LOOKAHEAD_SUBTILES)
    sm90_epilogue.VECTOR_LOOKAHEAD_SUBTILES = landed_ahead if name == "preload" else 0
    prefetches = name in ("preload", "prefetch", "per_subtile")
    sm90_epilogue.prefetch_channel_vectors = (
        prefetch_channel_vectors if prefetches else no_prefetch
    )
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


def measure(p: dict, form: str, variants: tuple[str, ...]) -> dict:
    """One problem's row: the variants' and the plain conv's checks and graph times."""
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
    config = heuristic_config(  # the tensor-core epilogue's A/B: not the CUDA-core kernel
        problem_shape(p), num_sms, has_residual=form == "fused", cuda_cores=False
    )
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

    for name in variants:
        use_variant(name)
        out = torch.full(ref.shape, float("nan"), dtype=x.dtype, device="cuda")
        call(out)
        check = compare_to_reference(out, ref)
        checks[name] = {"ok": check.ok, "rel_err": check.rel_err}
        graphs[name] = replay_of(functools.partial(call, out))  # which keeps ``out`` alive
    use_variant(variants[0])
    plain_out = torch.empty(ref.shape, dtype=x.dtype, device="cuda")
    graphs["plain"] = replay_of(
        lambda: cute_conv.conv2d_fprop(x, flt, out=plain_out, config=config, **geom)
    )
    graphs["cudnn"] = replay_of(cudnn_run(x, flt, problem))
    ms = bench.time_interleaved(graphs, ROUNDS)
    return {"key": p["key"], "config": repr(config), "checks": checks, "ms": ms}


def valid_rows(rows: list[dict], variants: tuple[str, ...]) -> list[dict]:
    """The rows whose real kernels (all of ``variants`` but the last) passed their checks and
    whose constant-bias kernel (the last) failed its (so that every variant provably ran)."""
    *real, floor = variants
    return [
        r for r in rows
        if all(r["checks"][name]["ok"] for name in real) and not r["checks"][floor]["ok"]
    ]  # fmt: skip


def ratio(rows: list[dict], slower: str, faster: str) -> float:
    """Geomean over ``rows`` of ``slower``'s time over ``faster``'s."""
    return math.exp(sum(math.log(r["ms"][slower] / r["ms"][faster]) for r in rows) / len(rows))


def report(results: dict, form: str, experiment: Experiment) -> str:
    """The A/B's geomeans over ``form``'s valid rows of ``results``: the landed variant's
    gain over the one it is judged against, and each variant's time over the plain conv's."""
    landed, judged, floor = experiment.variants
    rows = valid_rows([r for r in results["rows"] if r.get("form") == form], experiment.variants)
    if not rows:
        return f"{form}: no valid rows"
    over_plain = ", ".join(
        f"{name} {ratio(rows, name, 'plain'):.3f}x" for name in (judged, landed, floor)
    )
    return (
        f"{results.get('device', '?')}, {form}: {len(rows)} rows; {judged} / {landed} "
        f"{ratio(rows, judged, landed):.3f}x; over the plain conv: {over_plain}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ab", choices=EXPERIMENTS, default="preload")
    parser.add_argument("--form", choices=FORMS, default=FORMS[0])
    parser.add_argument("--max-seconds", type=float, default=200.0)
    parser.add_argument("--report", action="store_true", help="no GPU: from the results file")
    parser.add_argument("--results", type=Path, help="default: the experiment's")
    args = parser.parse_args()
    experiment = EXPERIMENTS[args.ab]
    results_path = args.results or experiment.results
    results = load_results(results_path)
    if args.report:
        print(report(results, args.form, experiment))
        return
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    import torch
    from bench_corpus import RESULTS_PATH as CORPUS_RESULTS
    from bench_corpus import load_corpus, problem_shape

    from cute_conv.untuned import heuristic_config

    device = torch.cuda.get_device_name()
    keys = select_problems(json.loads(CORPUS_RESULTS.read_text()), device, experiment)
    corpus = {p["key"]: p for p in load_corpus()}
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    configs = {
        heuristic_config(
            problem_shape(corpus[k]), num_sms, has_residual=args.form == "fused",
            cuda_cores=False,
        )  # fmt: skip
        for k in keys
    }
    jobs = {(c.compiled_form(), v, args.form) for c in configs for v in experiment.variants}
    with ProcessPoolExecutor(os.cpu_count(), mp_context=get_context("spawn")) as pool:
        list(pool.map(_compile, jobs))
    results.setdefault("device", device)
    start = time.perf_counter()
    for key in keys:
        if time.perf_counter() - start > args.max_seconds:
            print("time bound reached")
            break
        row = {"form": args.form, **measure(corpus[key], args.form, experiment.variants)}
        results["rows"].append(row)
        results_path.write_text(json.dumps(results, indent=1))
        print(key, {name: round(t * 1e3, 2) for name, t in row["ms"].items()})
    print(report(results, args.form, experiment))


if __name__ == "__main__":
    main()
