"""The measuring loop the config sweeps share: problems measured one at a time into a JSON
results file's ``rows``, the file rewritten after each (an interrupted sweep keeps what it
measured, and a rerun skips it), within a time bound."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

# The bounds on 256-row tiles the sweeps before sweep_tall_tiles.py ran with: the suite's 4
# waves for narrow tiles, none for 128-wide ones (``default_config``'s keywords).
SUITE_TALL_TILES = {"min_waves_tall": 4, "min_waves_tall_wide": math.inf}
# ``default_config``'s keyword that leaves out the 2x1 clusters of 1x1s with partly empty
# k-tiles (sweep_paired_m.py), as the sweeps before it measured.
BEFORE_PAIRED_M = {"paired_m_max_channel_fill": 0}
# ``default_config``'s bound that leaves out the 128x128 split tiles (sweep_square_split.py),
# as the sweeps before it measured.
BEFORE_SQUARE_SPLIT = {"square_split_min_k_tiles": math.inf}
# ``untuned_with``'s bound that leaves out the last-wave rule (sweep_last_wave.py), as the
# sweeps before it measured.
BEFORE_LAST_WAVE = {"last_wave_max_fill": 0}
# ``untuned_with``'s bound on 256-row tiles before sweep_tall_tiles.py --form fused fitted it
# for calls with a residual: the suite's 4 waves for them, plain calls' fitted bound (None).
FUSED_TALL_BEFORE_FIT = {"plain": None, "fused": SUITE_TALL_TILES["min_waves_tall"]}
# The gather rule's bounds before ``sweep_gather.py --joint`` refitted them on an H200's rows
# too (its H100 fit).
GATHER_H100_BOUNDS = {"pad": 50176, "im2col": 28672}
# ``untuned_with``'s bounds of the rules fitted since sweep_pointwise_pair.py, in the order they
# were fitted, each with the value that leaves it out: the lone-CTA rule (sweep_lone_cta.py),
# the ring rule (sweep_single_tile_ring.py), the narrowing of residual 1x1s
# (sweep_residual_pointwise_width.py), fused calls' 256-row tiles (sweep_tall_tiles.py --form
# fused), the gather rule's joint refit and its packed taps (sweep_gather.py --joint). A sweep
# run before one of them measured without it and every one after it (``fitted_before``); a
# rule fitted next goes at the end.
RULES_IN_FIT_ORDER = (
    ("lone_cta_max_k_tiles", 0), ("single_tile_ring_max_k_tiles", 0),
    ("residual_narrow_pointwise_max_k", 0), ("min_waves_tall", FUSED_TALL_BEFORE_FIT),
    ("gather_max_loads_per_sm", GATHER_H100_BOUNDS), ("gather_pack_taps", False),
)  # fmt: skip
# ``untuned_with``'s keywords that put every rule it defaults off (as the sweeps before those
# rules measured) at its fitted bound: a sweep run now measures against what calls run today.
EVERY_RULE_FITTED = dict(
    single_warpgroup_max_k_tiles=None, single_warpgroup_widen_max_k_tiles=None,
    whole_source_min_k=None, halo_min_column_fill=None, halo_narrow_min_column_fill=None,
    wide_epilogue_max_k_tiles=None, min_waves_tall=None, min_waves_tall_wide=None,
    wide_cluster_min_share=None, pingpong_max_k_tiles=None, wide_split_residual=True,
    paired_m_max_channel_fill=None, square_split_min_k_tiles=None, last_wave_max_fill=None,
    last_wave_min_k_tiles=None, pointwise_pair_max_k_tiles=None, lone_cta_max_k_tiles=None,
    single_tile_ring_max_k_tiles=None, residual_narrow_pointwise_max_k=None,
    gather_max_loads_per_sm=None, gather_pack_taps=True,
)  # fmt: skip


def fitted_before(rule: str) -> dict:
    """``EVERY_RULE_FITTED`` with ``rule`` (one of ``RULES_IN_FIT_ORDER``) and every rule
    fitted after it off: the calls a sweep run before ``rule`` was fitted measured."""
    names = [name for name, _ in RULES_IN_FIT_ORDER]
    return EVERY_RULE_FITTED | dict(RULES_IN_FIT_ORDER[names.index(rule) :])


def gpu_results_paths(stem: str) -> tuple[Path, Path]:
    """A sweep's results files on an H200 and on an H100: ``benchmarks/STEM_H200.json`` and
    ``benchmarks/STEM_H100.json``."""
    here = Path(__file__).resolve().parent
    return here / f"{stem}_H200.json", here / f"{stem}_H100.json"


def sample_rank(key: str) -> str:
    """A corpus key's place in sample order (the sha256 of the key): any prefix of the
    problems sorted by it is a sample of them."""
    return hashlib.sha256(key.encode()).hexdigest()


def load_results(path: Path) -> dict:
    """The results file's contents, or an empty one."""
    return json.loads(path.read_text()) if path.exists() else {"rows": []}


def measure_into(
    path: Path,
    results: dict,
    todo: list[dict],
    measure: Callable[[dict], dict],
    max_seconds: float,
    shown: tuple[str, ...],
) -> None:
    """``measure`` each problem of ``todo`` (a failure is recorded as the row's ``error``) and
    append its row to ``results``, saved to ``path``; stop starting new ones after
    ``max_seconds``. Prints the ``shown`` fields of each row."""
    start = time.perf_counter()
    print(f"{len(todo)} problems to measure")
    for i, p in enumerate(todo):
        if time.perf_counter() - start > max_seconds:
            print(f"time bound reached: {len(todo) - i} problems left")
            break
        try:
            row = measure(p)
        except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
            row = {"key": p["key"], "split": p["split"], "error": repr(e)[:300]}
        results["rows"].append(row)
        path.write_text(json.dumps(results, indent=1))
        print(i, {k: row.get(k) for k in shown})


def sweep_new_problems(
    path: Path,
    select: Callable[[list[dict]], list[dict]],
    measure: Callable[[dict], dict],
    max_seconds: float,
    shown: tuple[str, ...],
    identity: Callable[[dict], object] = lambda entry: entry["key"],
    source: Callable[[], list[dict]] | None = None,
) -> None:
    """Measure the entries ``select`` picks from the corpus (or from ``source()``'s problems)
    that ``path`` has no row of yet (by ``identity``, of an entry and of a row alike: the
    corpus key, or the key and what a sweep measures it as; see ``measure_into``), recording
    the GPU's name; cuDNN tunes its algorithms (``cudnn.benchmark``), as the corpus benchmark
    runs it."""
    import torch
    from bench_corpus import load_corpus

    torch.backends.cudnn.benchmark = True
    results = load_results(path)
    done = {identity(r) for r in results["rows"]}
    todo = [p for p in select((source or load_corpus)()) if identity(p) not in done]
    results["device"] = torch.cuda.get_device_name()
    measure_into(path, results, todo, measure, max_seconds, shown)


def by_split(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """``(train, held-out)`` rows."""
    return [r for r in rows if r["split"] == "train"], [r for r in rows if r["split"] == "heldout"]


def middle_of_best(candidates: list[float], score: Callable[[float], float]) -> float:
    """The candidate with the best ``score``; among equal scores the middle one, the farthest
    from the data on both sides."""
    scores = [score(c) for c in candidates]
    best = max(scores)
    tied = [c for c, s in zip(candidates, scores, strict=True) if s >= best - 1e-12]
    return tied[len(tied) // 2]


def problem_inputs(p: dict, dtype=None) -> tuple:
    """A corpus problem's ``(problem, geometry kwargs, x, filter)``: fresh random inputs on
    the GPU, of ``dtype`` (default bf16)."""
    import torch
    from bench_corpus import problem_shape

    from cute_conv.testing import random_conv_inputs

    problem = problem_shape(p)
    geom = dict(stride=problem.stride, padding=problem.padding, dilation=problem.dilation)
    x, flt = random_conv_inputs(*(p[d] for d in "NHWCKRS"), dtype=dtype or torch.bfloat16)
    return problem, geom, x, flt


def bf16_problem(p: dict) -> tuple:
    """A corpus problem's ``(problem, geometry kwargs, x, filter, default config)``: fresh
    random bf16 inputs on the GPU (``problem_inputs``), the untuned config on this device's
    SMs as the sweeps that use it measured it (``untuned_with``: before 64-row tiles)."""
    import torch

    problem, geom, x, flt = problem_inputs(p)
    num_sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    default = untuned_with(problem, num_sms)
    return problem, geom, x, flt, default


def checked_runs(
    x, flt, ref, geom: dict, configs: dict, call=None, fp8_inputs: bool = False
) -> tuple[dict, dict]:
    """Each of ``configs`` (name -> config) run on ``x`` and ``flt`` into a NaN-poisoned
    output and checked against the float32 ``ref``: ``(checks by name, the functions that
    run the configs that passed)``. ``call(config, out)`` runs one (default: the plain
    ``conv2d_fprop`` of ``x`` and ``flt``); ``fp8_inputs``: it runs fp8 inputs, checked with
    their accumulation's tolerance."""
    import torch

    import cute_conv
    from cute_conv.testing import compare_to_reference

    if call is None:

        def call(config, out):
            return cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom)

    checks, fns = {}, {}
    for name, config in configs.items():
        out = torch.full(ref.shape, float("nan"), dtype=x.dtype, device="cuda")

        def run(config=config, out=out):
            return call(config, out)

        run()
        check = compare_to_reference(out, ref, fp8_inputs=fp8_inputs)
        checks[name] = {"ok": check.ok, "rel_err": check.rel_err}
        if check.ok:
            fns[name] = run
    return checks, fns


def cudnn_run(x, flt, problem) -> Callable[[], object]:
    """cuDNN's ``F.conv2d`` of ``problem`` on channels_last views of ``x`` and ``flt``;
    asymmetric padding, which it does not take, by an ``F.pad`` in the timed function (a
    user pays for it too)."""
    import torch.nn.functional as F

    (top, bottom), (left, right) = problem.padding
    x_cl, w_cl = x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2)
    if top == bottom and left == right:
        return lambda: F.conv2d(x_cl, w_cl, None, problem.stride, (top, left), problem.dilation)
    return lambda: F.conv2d(F.pad(x_cl, (left, right, top, bottom)), w_cl, None,
                            problem.stride, 0, problem.dilation)  # fmt: skip


def _compile_sm90(config, act_dtype: str) -> None:
    import cute_conv

    cute_conv.compile_kernel("sm_90a", config=config, act_dtype=act_dtype)


def precompile(configs: set, act_dtype: str = "bfloat16") -> None:
    """Compile the SM90 kernels of ``configs`` (compiled forms; plain epilogue, ``act_dtype``
    inputs, their default output) into the disk cache in a process per CPU, before a timed
    loop loads them: compiles take seconds each, on one core."""
    import os
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    compile_one = functools.partial(_compile_sm90, act_dtype=act_dtype)
    with ProcessPoolExecutor(os.cpu_count(), mp_context=get_context("spawn")) as pool:
        list(pool.map(compile_one, configs))
    print(f"{len(configs)} kernels compiled")


def sweep_main(doc: str, sweep: Callable[..., None], offline: Callable[..., None],
               offline_flag: str, results: Path | None = None,
               joint: Callable[[], None] | None = None) -> None:  # fmt: skip
    """A sweep's command line: measure within ``--max-seconds`` (GPU), or with
    ``offline_flag`` run ``offline`` (fit or report, no GPU). With ``results`` (the sweep's
    file) it also takes ``--results PATH``, another file to measure into or fit from (a
    second GPU's rows), and passes the path on: ``sweep(max_seconds, path)``,
    ``offline(path)``. With ``joint`` it also takes ``--joint``: run ``joint()`` (a fit on
    every GPU's rows together, no GPU)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--max-seconds", type=float, default=500.0)
    parser.add_argument(offline_flag, action="store_true", help="no GPU: from the results file")
    if results is not None:
        parser.add_argument("--results", type=Path, default=results, help=f"default {results}")
    if joint is not None:
        parser.add_argument("--joint", action="store_true", help="no GPU: every GPU's rows")
    args = parser.parse_args()
    paths = () if results is None else (args.results,)
    if joint is not None and args.joint:
        joint()
    elif getattr(args, offline_flag.lstrip("-")):
        offline(*paths)
    else:
        sweep(args.max_seconds, *paths)


def is_fp8_form(form: str) -> bool:
    """Whether a sweep's ``form`` runs e4m3 inputs (``fp8``, ``fused_fp8``)."""
    return form in ("fp8", "fused_fp8")


def has_residual_form(form: str) -> bool:
    """Whether a sweep's ``form`` runs ``relu(conv + b) + r`` (``fused``, ``fused_fp8``)."""
    return form in ("fused", "fused_fp8")


def measure_configs(p: dict, form: str, configs: dict, eager: bool = True) -> dict:
    """``{"checks", "ms"}`` of corpus problem ``p`` run by each of ``configs`` (name ->
    config) in ``form``: ``plain`` (bf16), ``fused`` (``relu(conv + b) + r``, bf16),
    ``fp8`` (plain on e4m3 inputs, bf16 out) or ``fused_fp8`` (``fused`` on e4m3 inputs, bf16
    residual and out). Each is checked against a float32 reference
    (fp8: on the dequantized inputs) from a NaN-poisoned output, then those that pass are
    timed eagerly (unless ``eager`` is False) and replayed from CUDA graphs (``NAME_graph``),
    interleaved as ``bench.py`` times, with cuDNN's replay (``cudnn_graph``) on the same
    (dequantized) inputs beside them."""
    import torch
    from bench import time_interleaved
    from models import replay_of

    import cute_conv
    from cute_conv.reference import conv2d_reference

    problem, geom, x, flt = problem_inputs(p)
    inputs, scales = (x, flt), {}
    if is_fp8_form(form):
        (qx, sx), (qf, sf) = cute_conv.quantize_fp8(x.float()), cute_conv.quantize_fp8(flt.float())
        x, flt = (qx.float() * sx).to(x.dtype), (qf.float() * sf).to(flt.dtype)  # dequantized
        inputs, scales = (qx, qf), {"x_scale": sx, "w_scale": sf}
    ref = conv2d_reference(x, flt, **geom)
    bias = torch.randn(problem.K, device="cuda", dtype=x.dtype)
    residual = torch.randn(problem.output_shape, device="cuda").to(x.dtype)
    if has_residual_form(form):
        ref = torch.relu(ref + bias.float()) + residual.float()

        def call(config, out):
            return cute_conv.conv2d_fprop_with_residual(
                *inputs, residual, bias=bias, activation="relu", out=out, config=config,
                **scales, **geom,
            )  # fmt: skip
    else:

        def call(config, out):
            return cute_conv.conv2d_fprop(*inputs, out=out, config=config, **scales, **geom)

    checks, fns = checked_runs(x, flt, ref, geom, configs, call, fp8_inputs=is_fp8_form(form))
    # A graph holds no reference to the output its kernels write: ``fns`` (each run binds its
    # output) stays alive while the replays are timed.
    timed = (fns if eager else {}) | {f"{name}_graph": replay_of(run) for name, run in fns.items()}
    timed["cudnn_graph"] = replay_of(cudnn_run(x, flt, problem))
    return {"checks": checks, "ms": time_interleaved(timed)}


def untuned_with(
    problem, num_sms: int, form: str = "plain", single_warpgroup_max_k_tiles: float | None = 0,
    single_warpgroup_widen_max_k_tiles: float | None = 0,
    single_warpgroup_widen_max_share: float | None = None,
    whole_source_min_k: float | None = math.inf, halo_min_column_fill: float | None = math.inf,
    halo_min_waves: float | None = None, halo_narrow_min_column_fill: float | None = math.inf,
    halo_narrow_min_waves: float | None = None, wide_epilogue_max_k_tiles: float | None = 0,
    wide_epilogue_min_ab_stages: int | None = None,
    min_waves_tall: float | dict | None = SUITE_TALL_TILES["min_waves_tall"],
    min_waves_tall_wide: float | None = SUITE_TALL_TILES["min_waves_tall_wide"],
    wide_cluster_min_share: float | None = math.inf,
    wide_cluster_max_share: float | None = None, wide_cluster_residual: bool = False,
    pingpong_max_k_tiles: float | None = math.inf, wide_split_residual: bool = False,
    paired_m_max_channel_fill: float | None = 0,
    square_split_min_k_tiles: float | None = math.inf, last_wave_max_fill: float | None = 0,
    last_wave_min_k_tiles: float | None = None, pointwise_pair_max_k_tiles: float | None = 0,
    lone_cta_max_k_tiles: float | None = 0, single_tile_ring_max_k_tiles: float | None = 0,
    residual_narrow_pointwise_max_k: float | None = 0,
    gather_max_loads_per_sm: dict | None = GATHER_H100_BOUNDS, gather_pack_taps: bool = False,
    **heuristic_kwargs,
):  # fmt: skip
    """The config a call of ``form`` (``plain``, ``fused``, ``fp8`` or ``fused_fp8``, as in
    ``measure_configs``) without one runs on ``problem`` (``untuned.untuned_config``: staging,
    the gather and small-M rules included) when ``default_config`` takes ``min_waves_tall``,
    ``min_waves_tall_wide`` and ``heuristic_kwargs``, a rule's switch or bound, the
    single-warpgroup rule takes ``single_warpgroup_max_k_tiles``,
    ``single_warpgroup_widen_max_k_tiles`` and ``single_warpgroup_widen_max_share``, the halo
    rule ``halo_min_column_fill``, ``halo_min_waves`` and its narrow tiles'
    ``halo_narrow_min_column_fill`` and ``halo_narrow_min_waves`` and the epilogue rule
    ``wide_epilogue_max_k_tiles`` and ``wide_epilogue_min_ab_stages`` and the cluster rule
    ``wide_cluster_min_share``, ``wide_cluster_max_share`` and ``wide_cluster_residual`` (its
    ``take_residual``), the last-wave rule ``last_wave_max_fill`` and
    ``last_wave_min_k_tiles``, the pair rule ``pointwise_pair_max_k_tiles``, the lone-CTA
    rule ``lone_cta_max_k_tiles``, the ring rule ``single_tile_ring_max_k_tiles`` and the
    gather rule ``gather_max_loads_per_sm`` and ``gather_pack_taps`` (``gathered_config``'s
    ``max_loads_per_sm`` and ``pack_taps``): a sweep's variant of the heuristic.
    The rules fitted after most sweeps ran default to off, as those sweeps measured: the
    single-warpgroup rule and its wider tiles (0), ``default_config``'s
    ``whole_source_min_k`` (inf) and 256-row tiles' bounds
    (``SUITE_TALL_TILES``), the halo rule (a column fill of inf, for narrow tiles too), the
    epilogue rule (0), the cluster rule (a least SM share of inf), the upper bound of
    ping-pong tiles (``pingpong_max_k_tiles``, inf), the wide split of fused calls
    (``wide_split_residual``, False), the 2x1 clusters of short 1x1s
    (``paired_m_max_channel_fill``, 0), the 128x128 split tiles
    (``square_split_min_k_tiles``, inf), the last-wave rule (``last_wave_max_fill``, 0),
    the pair rule (``pointwise_pair_max_k_tiles``, 0), the lone-CTA rule
    (``lone_cta_max_k_tiles``, 0), the ring rule (``single_tile_ring_max_k_tiles``, 0) and
    the narrowing of residual 1x1 convs (``residual_narrow_pointwise_max_k``, 0) and the
    gather rule's refit and packed taps (``GATHER_H100_BOUNDS``, False); None takes a rule's
    fitted bound. ``min_waves_tall`` may be a bound per form (a dict, a form it
    leaves out taking None: ``FUSED_TALL_BEFORE_FIT``)."""
    from cute_conv.arch import ARCHS
    from cute_conv.config import default_config
    from cute_conv.epilogue_rule import wide_epilogue_config
    from cute_conv.gather_rule import gathered_config
    from cute_conv.halo_rule import halo_tiled_config
    from cute_conv.ring_rule import single_tile_ring_config
    from cute_conv.small_grid_rules import (
        last_wave_config,
        lone_cta_config,
        pointwise_pair_config,
        single_warpgroup_config,
        wide_cluster_config,
    )
    from cute_conv.staging import kernel_problem_for
    from cute_conv.untuned import untuned_config

    if isinstance(min_waves_tall, dict):
        min_waves_tall = min_waves_tall.get(form)

    def heuristic(problem, num_sms, has_residual, element_bytes, out_bytes):
        return default_config(
            problem, num_sms, has_residual=has_residual, element_bytes=element_bytes,
            out_bytes=out_bytes, whole_source_min_k=whole_source_min_k,
            min_waves_tall=min_waves_tall, min_waves_tall_wide=min_waves_tall_wide,
            pingpong_max_k_tiles=pingpong_max_k_tiles, wide_split_residual=wide_split_residual,
            paired_m_max_channel_fill=paired_m_max_channel_fill,
            square_split_min_k_tiles=square_split_min_k_tiles,
            residual_narrow_pointwise_max_k=residual_narrow_pointwise_max_k, **heuristic_kwargs,
        )  # fmt: skip

    single_warpgroup_rule = functools.partial(
        single_warpgroup_config,
        max_k_tiles=single_warpgroup_max_k_tiles,
        widen_max_k_tiles=single_warpgroup_widen_max_k_tiles,
        widen_max_share=single_warpgroup_widen_max_share,
    )
    halo_rule = functools.partial(
        halo_tiled_config, min_column_fill=halo_min_column_fill, min_waves=halo_min_waves,
        narrow_min_column_fill=halo_narrow_min_column_fill,
        narrow_min_waves=halo_narrow_min_waves,
    )  # fmt: skip
    epilogue_rule = functools.partial(
        wide_epilogue_config, max_k_tiles=wide_epilogue_max_k_tiles,
        min_ab_stages=wide_epilogue_min_ab_stages,
    )  # fmt: skip
    cluster_rule = functools.partial(
        wide_cluster_config, min_share=wide_cluster_min_share, max_share=wide_cluster_max_share,
        take_residual=wide_cluster_residual,
    )  # fmt: skip
    last_wave_rule = functools.partial(
        last_wave_config, max_fill=last_wave_max_fill, min_k_tiles=last_wave_min_k_tiles
    )
    pair_rule = functools.partial(pointwise_pair_config, max_k_tiles=pointwise_pair_max_k_tiles)
    lone_cta_rule = functools.partial(lone_cta_config, max_k_tiles=lone_cta_max_k_tiles)
    ring_rule = functools.partial(single_tile_ring_config, max_k_tiles=single_tile_ring_max_k_tiles)
    gather_rule = functools.partial(
        gathered_config, max_loads_per_sm=gather_max_loads_per_sm, pack_taps=gather_pack_taps
    )
    arch = dataclasses.replace(
        ARCHS["sm_90a"], heuristic=heuristic, single_warpgroup_rule=single_warpgroup_rule,
        halo_rule=halo_rule, epilogue_rule=epilogue_rule, cluster_rule=cluster_rule,
        last_wave_rule=last_wave_rule, pair_rule=pair_rule, lone_cta_rule=lone_cta_rule,
        ring_rule=ring_rule, gather_rule=gather_rule, pointwise_gemv_rule=None,
        direct_rule=None,  # tensor-core rules
    )  # fmt: skip
    element_bytes = 1 if is_fp8_form(form) else 2
    kernel_problem = kernel_problem_for(problem, element_bytes)
    return untuned_config(
        arch, problem, kernel_problem, num_sms, has_residual_form(form), element_bytes
    )


def rule_bound_config(
    bound_kwarg: str | tuple[str, ...], num_sms: int, **fixed: float | None
) -> Callable[[object, float, str], object]:
    """``BoundSweep.config_for`` of a rule whose bound is ``untuned_with``'s keyword
    ``bound_kwarg`` (or whose bounds, a tuple, are the keywords of a tuple of them, fitted
    together): the config a call of ``form`` without one runs with the rule at ``bound``, the
    other rules as ``untuned_with`` defaults them or as ``fixed`` sets them (e.g.
    ``single_warpgroup_max_k_tiles=None``: the 64-row rule at its fitted bound, for a sweep
    run after it; ``EVERY_RULE_FITTED``, the swept rule's keyword in it overridden by the
    bound)."""

    def config_for(problem, bound, form: str = "plain"):
        if isinstance(bound_kwarg, tuple):
            bounds = dict(zip(bound_kwarg, bound, strict=True))
        else:
            bounds = {bound_kwarg: bound}
        return untuned_with(problem, num_sms, form, **(fixed | bounds))

    return config_for


def replayed_row(p: dict, form: str, configs: dict) -> dict:
    """Corpus problem ``p``'s row of ``configs`` (name -> config) run in ``form``: its corpus
    fields, the configs, their checks, and the milliseconds of their CUDA-graph replays and
    cuDNN's (``measure_configs`` without eager calls), by name."""
    timed = measure_configs(p, form, configs, eager=False)
    replays = {name.removesuffix("_graph"): t for name, t in timed["ms"].items()}
    row = {k: p[k] for k in ("key", "split", "tags", "gflop")}
    row |= {"configs": {name: repr(c) for name, c in configs.items()}}
    return row | {"checks": timed["checks"], "ms": replays}


def passed_rows(results: dict) -> list[dict]:
    """The rows of ``results`` whose every config passed its check and was timed."""
    return [
        r for r in results["rows"]
        if "ms" in r and all(c["ok"] for c in r["checks"].values())
        and set(r["checks"]) <= set(r["ms"])
    ]  # fmt: skip


def family_problem(n: int, h: int, w: int, c: int, k: int, r: int) -> dict:
    """A drawn conv (stride 1, "same" padding, an r x r filter) in the corpus's problem format,
    split ``family``: a sweep's problem outside the corpus (``BoundSweep.family``)."""
    return dict(
        key=f"family_n{n}_h{h}_w{w}_c{c}_k{k}_r{r}_s{r}", split="family", tags=["family"],
        gflop=2 * n * h * w * k * c * r * r / 1e9, N=n, H=h, W=w, C=c, K=k, R=r, S=r,
        stride=[1, 1], padding=[[r // 2] * 2] * 2, dilation=[1, 1],
    )  # fmt: skip


@functools.cache
def _family_problems(family: Callable[[], list[dict]] | None) -> dict[str, dict]:
    """A sweep's family problems (``BoundSweep.family``) by key."""
    return {p["key"]: p for p in family()} if family else {}


@functools.cache
def corpus_problem(key: str):
    """The ``Conv2dProblemShape`` of the corpus problem ``key``."""
    from bench_corpus import load_corpus, problem_shape

    return problem_shape(next(p for p in load_corpus() if p["key"] == key))


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as ``(I, N)``, with 0 <= I < N."""
    import argparse

    i, sep, n = text.partition("/")
    if not (sep and i.isdigit() and n.isdigit() and int(i) < int(n)):
        raise argparse.ArgumentTypeError(f"must be I/N with 0 <= I < N, got {text!r}")
    return int(i), int(n)


def merge_results(path: Path, shards: list[Path]) -> None:
    """Add to the results file ``path`` the rows of the ``shards`` (results files that GPUs
    of one kind measured, each a shard) whose keys it has no row of, all rows then in sample
    order (``sample_rank``, as ``BoundSweep.problems``); a clear error where a shard was
    measured on another GPU than ``path``'s rows."""
    results = load_results(path)
    keys = {r["key"] for r in results["rows"]}
    for shard_path in shards:
        shard = load_results(shard_path)
        device = results.setdefault("device", shard.get("device"))
        if shard.get("device") != device:
            raise SystemExit(f"{shard_path}: measured on {shard.get('device')}, {path} on {device}")
        new = [r for r in shard["rows"] if r["key"] not in keys]
        results["rows"] += new
        keys |= {r["key"] for r in new}
        print(f"{shard_path}: {len(new)} rows added")
    results["rows"].sort(key=lambda r: sample_rank(r["key"]))
    path.write_text(json.dumps(results, indent=1))


def timed_rows(path: Path, variants: tuple[str, ...]) -> list[dict]:
    """The rows of the results file ``path`` with every one of ``variants`` timed."""
    return [r for r in load_results(path)["rows"] if set(variants) <= set(r.get("ms", {}))]


def best_over_chosen(
    rows: list[dict], variants: tuple[str, ...], chosen: Callable[[dict], str], suffix: str = ""
) -> float:
    """Geomean over ``rows`` of the fastest of ``variants``' times over the time of the
    variant a rule picks, ``chosen(row)`` (1.0: the rule always picks the fastest);
    ``suffix`` ``"_graph"`` scores the CUDA-graph replays."""
    from bench import geomean

    return geomean(
        min(r["ms"][v + suffix] for v in variants) / r["ms"][chosen(r) + suffix] for r in rows
    )


def _fit_parts(path: Path, results: dict) -> tuple[list[dict], list[dict]]:
    """The train and held-out rows of ``path``'s ``results`` that passed their checks; a
    clear error where there are no train rows to fit on."""
    train, held = by_split(passed_rows(results))
    if not train:
        raise SystemExit(f"{path}: no measured train rows to fit on (run the sweep on a GPU)")
    return train, held


@dataclasses.dataclass(frozen=True)
class BoundSweep:
    """A heuristic rule with a bound, swept over the corpus: per problem, the call's config
    with the rule left out (``baseline``) against it taken at any bound (``variant``), both
    checked against float32 and replayed from CUDA graphs beside cuDNN (``replayed_row``),
    on every problem where they differ, in sha256-of-key order (any prefix is a sample);
    then the bound fitted on the train rows over ``grid``. ``config_for(problem, bound,
    form)`` is the config a call of ``form`` runs with the rule at ``bound``; ``off`` and
    ``on`` are the bounds that leave it out and take it everywhere; ``constants`` names, per
    form, the ``cute_conv.config`` constant the fit is for (a tuple of names where a bound
    is a tuple of several rules' bounds, fitted together), in ``constants_module``.
    ``family``, where given, draws problems outside the corpus in its format (split
    ``family``, no corpus conv's shape): measured with the corpus's and reported beside the
    held-out part as a check on convs the corpus does not hold; never fitted on, unless
    ``fit_on_family`` (a rule the corpus holds too few convs of, fitted on train and family
    rows together)."""

    config_for: Callable[[object, float, str], object]
    off: float
    on: float
    baseline: str
    variant: str
    grid: tuple[float, ...]
    constants: dict[str, str | tuple[str, ...]]
    constants_module: str = "cute_conv.config"
    family: Callable[[], list[dict]] | None = None
    fit_on_family: bool = False

    def all_problems(self) -> list[dict]:
        """The corpus's problems and the family's."""
        from bench_corpus import load_corpus

        return load_corpus() + (self.family() if self.family else [])

    def problem_of(self, key: str):
        """The ``Conv2dProblemShape`` of the corpus or family problem ``key``."""
        from bench_corpus import problem_shape

        family = _family_problems(self.family)
        return problem_shape(family[key]) if key in family else corpus_problem(key)

    def configs_of(self, problem, form: str = "plain") -> dict:
        """``{baseline: the rule left out, variant: the rule at any bound}``."""
        return {
            self.baseline: self.config_for(problem, self.off, form),
            self.variant: self.config_for(problem, self.on, form),
        }

    def problems(self, problems: list[dict], form: str = "plain") -> list[dict]:
        """The corpus problems the sweep measures, in sample order."""
        from bench_corpus import problem_shape

        chosen = []
        for p in problems:
            configs = self.configs_of(problem_shape(p), form)
            if configs[self.baseline] != configs[self.variant]:
                chosen.append(p)
        return sorted(chosen, key=lambda p: sample_rank(p["key"]))

    def measure(self, p: dict, form: str = "plain") -> dict:
        from bench_corpus import problem_shape

        return replayed_row(p, form, self.configs_of(problem_shape(p), form))

    def shard(self, problems: list[dict], form: str, shard: tuple[int, int]) -> list[dict]:
        """Shard ``(i, n)`` of the problems the sweep measures: every n-th from the i-th, so
        that n GPUs, each into its own results file, measure them all (``merge``)."""
        i, n = shard
        return self.problems(problems, form)[i::n]

    def sweep(
        self, max_seconds: float, form: str, path: Path, shard: tuple[int, int] = (0, 1)
    ) -> None:
        """Measure the problems of ``shard`` that ``path`` has no row of yet (kernels compiled
        first; ``max_seconds`` 0 only compiles them)."""
        from bench_corpus import problem_shape

        select = functools.partial(self.shard, form=form, shard=shard)
        done = {r["key"] for r in load_results(path)["rows"]}
        todo = [p for p in select(self.all_problems()) if p["key"] not in done]
        configs = {
            c.compiled_form() for p in todo
            for c in self.configs_of(problem_shape(p), form).values()
        }  # fmt: skip
        precompile(configs, "float8_e4m3fn" if is_fp8_form(form) else "bfloat16")
        sweep_new_problems(
            path, select, functools.partial(self.measure, form=form), max_seconds, ("key", "ms"),
            source=self.all_problems,
        )  # fmt: skip

    def chosen_name(self, row: dict, bound: float, form: str = "plain") -> str:
        """The name under which ``row`` timed the config the rule with ``bound`` gives its
        problem."""
        config = self.config_for(self.problem_of(row["key"]), bound, form)
        names = [name for name, timed in row["configs"].items() if timed == repr(config)]
        if not names:
            raise ValueError(f"{row['key']}: the rule's config {config!r} was not timed")
        return names[0]

    def score(self, rows: list[dict], bound: float, form: str = "plain") -> float:
        """Geomean of the baseline's time over the time of the rule's choice (> 1: it gains)."""
        from bench import geomean

        return geomean(
            r["ms"][self.baseline] / r["ms"][self.chosen_name(r, bound, form)] for r in rows
        )

    def fit(self, form: str, path: Path) -> float:
        """Per bound of ``grid``, the score on the rows fitted on (train, and the family's with
        ``fit_on_family``) and on held-out, and how many problems take the variant; the best
        on the former (the middle of ties) against the constant, and cuDNN's time over ours
        before and after. Prints the table; returns the bound."""
        import importlib

        from bench import geomean

        module = importlib.import_module(self.constants_module)
        results = load_results(path)
        fitted, held = _fit_parts(path, results)
        family = [r for r in passed_rows(results) if r["split"] == "family"]
        fitted_name = "train"
        if self.fit_on_family:
            fitted, family, fitted_name = fitted + family, [], "train + family"
        print(f"{results.get('device', '?')}, {form}: {len(fitted)} {fitted_name}, "
              f"{len(held)} held-out")  # fmt: skip
        print(f"| bound | {fitted_name} | held-out | problems taking {self.variant} "
              f"({fitted_name}, held-out) |")  # fmt: skip
        print("|---|---|---|---|")
        for bound in self.grid:
            takes = [
                sum(self.chosen_name(r, bound, form) == self.variant for r in part)
                for part in (fitted, held)
            ]
            print(f"| {bound} | {self.score(fitted, bound, form):.3f} | "
                  f"{self.score(held, bound, form):.3f} | {takes[0]}, {takes[1]} |")  # fmt: skip
        best = middle_of_best(list(self.grid), lambda bound: self.score(fitted, bound, form))
        names = self.constants[form]
        names = names if isinstance(names, tuple) else (names,)
        where = self.constants_module.removeprefix("cute_conv.")
        committed = ", ".join(f"{where}.{name} = {getattr(module, name)}" for name in names)
        print(f"fitted on {fitted_name}: {best} ({committed})")
        if family:
            print(f"| bound | family ({len(family)}, never fitted on) | problems taking it |")
            print("|---|---|---|")
            for bound in self.grid:
                takes = sum(self.chosen_name(r, bound, form) == self.variant for r in family)
                print(f"| {bound} | {self.score(family, bound, form):.3f} | {takes} |")
        parts = [(fitted_name, fitted), ("held-out", held)]
        if family:
            parts.append(("family", family))
        for name, part in parts:
            before = geomean(r["ms"]["cudnn"] / r["ms"][self.baseline] for r in part)
            after = geomean(
                r["ms"]["cudnn"] / r["ms"][self.chosen_name(r, best, form)] for r in part
            )
            print(f"  {name}: cuDNN's plain conv / ours {before:.3f} -> {after:.3f}")
        return best

    def joint_fit(self, form: str, paths: tuple[Path, ...]) -> float:
        """The bound of ``grid`` with the best geomean of the train scores of several GPUs'
        results files (the middle of ties); prints each bound's joint train and held-out
        scores."""
        return self.joint_fit_over(
            tuple((form, path) for path in paths), f"{form}, {len(paths)} GPUs' rows"
        )

    def joint_fit_over(self, sources: tuple[tuple[str, Path], ...], title: str) -> float:
        """The bound of ``grid`` with the best geomean of the train scores of several
        ``(form, results file)`` sources (the middle of ties): several GPUs' rows of one form,
        or one GPU's rows of several forms. Prints ``title`` and each bound's joint train and
        held-out scores."""
        from bench import geomean

        parts = [(form, _fit_parts(path, load_results(path))) for form, path in sources]

        def joint(bound: float, split: int) -> float:
            return geomean(self.score(part[split], bound, form) for form, part in parts)

        print(title)
        print("| bound | train | held-out |\n|---|---|---|")
        train = {bound: joint(bound, 0) for bound in self.grid}
        for bound in self.grid:
            print(f"| {bound} | {train[bound]:.4f} | {joint(bound, 1):.4f} |")
        best = middle_of_best(list(self.grid), train.__getitem__)
        print(f"fitted on their train rows together: {best}")
        return best

    def joint_forms_fit(self, results_paths: dict[str, Path]) -> float:
        """The bound of one constant every form shares: ``joint_fit_over`` the forms'
        results files (``results_paths``, by form) together."""
        *others, last = results_paths
        forms = f"{', '.join(others)} and {last}" if others else last
        return self.joint_fit_over(tuple(results_paths.items()), f"{forms} rows")

    def main(
        self,
        doc: str,
        results_paths: dict[str, Path],
        joint_paths: tuple[Path, ...] | dict[str, tuple[Path, ...]] = (),
        joint_forms: bool = False,
    ) -> None:
        """The sweep's command line: ``--form``, ``--max-seconds``, ``--fit`` (no GPU),
        ``--results`` (another file than the form's in ``results_paths``), ``--shard I/N``
        (``shard``), ``--merge FILE...`` (``merge_results``, no GPU) and ``--joint``: where
        the sweep has ``joint_paths`` (several GPUs' results; a dict of them by form where the
        forms have their own), ``joint_fit``; with ``joint_forms`` (one constant for every
        form), ``joint_forms_fit``."""
        import argparse

        parser = argparse.ArgumentParser(description=doc.splitlines()[0])
        parser.add_argument(
            "--form", choices=tuple(results_paths), default=next(iter(results_paths))
        )
        parser.add_argument("--max-seconds", type=float, default=500.0)
        parser.add_argument("--fit", action="store_true", help="no GPU: from the results file")
        parser.add_argument("--results", type=Path, help="default: the form's file")
        parser.add_argument(
            "--shard", type=parse_shard, default=(0, 1), metavar="I/N",
            help="measure every N-th problem from the I-th (one GPU of N)",
        )  # fmt: skip
        parser.add_argument(
            "--merge", type=Path, nargs="+", metavar="FILE",
            help="no GPU: add these shards' rows to the results file",
        )  # fmt: skip
        if joint_paths or joint_forms:
            rows = "every form's" if joint_forms else "every GPU's"
            parser.add_argument("--joint", action="store_true", help=f"no GPU: {rows} rows")
        args = parser.parse_args()
        path = args.results or results_paths[args.form]
        if joint_forms and args.joint:
            self.joint_forms_fit(results_paths)
        elif joint_paths and args.joint:
            paths = joint_paths[args.form] if isinstance(joint_paths, dict) else joint_paths
            self.joint_fit(args.form, paths)
        elif args.merge:
            merge_results(path, args.merge)
        elif args.fit:
            self.fit(args.form, path)
        else:
            self.sweep(args.max_seconds, args.form, path, args.shard)
