"""Autotuning: measure the candidate configs of a problem and remember the fastest.

Choices persist in ``$CUTE_CONV_CACHE_DIR/autotune.json`` (default ``~/.cache/cute_conv``),
keyed by device name and the problem the kernel runs (after staging: N*P*Q, K, C, R, S, stride,
dilation), dtypes, and whether the epilogue reads a residual (its C loads and SMEM change which
tile wins). A call with ``config=None`` uses a stored choice when there is one; with
``CUTE_CONV_AUTOTUNE=1`` it tunes a problem it has no choice for on first use. Otherwise the
fast heuristic ``default_config`` decides.

Tuning never touches the caller's tensors: it times each candidate on scratch tensors of the
same shapes, through a ``RunnerFactory`` its caller passes in (``dispatch.config_runner``), so
this module imports nothing above it. Tunings in one process take turns (they would time each
other's kernels), and threads making the first call of one problem at once tune it once.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import os
import statistics
import threading
from collections.abc import Callable, Sequence

import torch

from . import disk_cache
from .config import (
    WHOLE_SOURCE_AB_STAGES,
    Conv2dConfig,
    check_config_fits,
    check_element_bytes,
    check_heuristic_args,
    default_config,
    pingpong_halo_tile,
    pingpong_pays,
    takes_whole_source,
    tile_widths,
)
from .epilogue_rule import wide_epilogue_config
from .halo_rule import HALO_TILE_M, halo_tile_config
from .kernels.sm90.config import MAX_TILE_ELEMS, TILE_M_CHOICES
from .kernels.sm90.schedule_checks import MAX_K_TILE_BYTES, PITCHED_TILE_W
from .problem import Conv2dProblemShape
from .schedule import stream_k_for_tiles
from .small_grid_rules import single_warpgroup_fits
from .staging import kernel_problem_for
from .untuned import heuristic_config
from .validation import INPUT_DTYPES, check_compute_capability, validate_conv_inputs

__all__ = [
    "RunnerFactory",
    "autotune",
    "candidate_configs",
    "lookup",
    "pick_finalists",
    "pick_fastest",
    "problem_key",
]


# A tuned config replaces the heuristic's only if it is at least this much faster in the
# final timing: do_bench's medians of one config differ by 2% between rounds.
_MIN_GAIN = 0.05
# Screening: every candidate in short interleaved rounds, to find the few worth a final timing.
_SCREEN_ROUNDS, _SCREEN_ROUND_MS = 4, 20.0
# Final timing of the fastest screened candidates and the heuristic's config, as the
# benchmark's do_bench times: each round warms a candidate up, then runs it for ~100 ms.
# Short rounds alone mislead on long convs (H100, session 13): they timed sd-128-320 9% faster
# than do_bench did (likely clocks that a power-capped GPU does not hold for long), and a
# full screen ranked two fused configs of gluon-bench 9% apart that do_bench ranked 9% the
# other way.
_FINALISTS = 4
_FINAL_ROUNDS, _FINAL_ROUND_MS, _FINAL_WARMUP_MS = 4, 100.0, 25.0
# The fewest and most runs of a candidate in one round (or one warmup), whatever its time.
_MIN_REPS, _MAX_REPS = 5, 1000
# More than an H100's or H200's L2 (50 MB), as do_bench's flush buffer.
_L2_FLUSH_BYTES = 256 << 20
# Held while timing (re-entered by stored_or_tuned_config's tuning on first use).
_tune_lock = threading.RLock()


def autotune_on_first_use() -> bool:
    return os.environ.get("CUTE_CONV_AUTOTUNE", "0") == "1"


def problem_key(
    problem: Conv2dProblemShape,
    act_dtype: torch.dtype,
    out_dtype: torch.dtype,
    has_residual: bool = False,
) -> str:
    """What the best config depends on: the problem the kernel runs (``kernel_problem_for``:
    the stem's super-pixel view or fold, padded channels), whose padding only changes P and
    Q, which N*P*Q holds. Keyed on the user's problem, a choice tuned on one staging would
    serve another (a C=8 stem's view needs W a multiple of 4). Residual epilogues are tuned
    apart: a tile that wins plain can lose fused (128x256 on ResNet-50's 1x1 with K=1024: 5%
    faster plain, 17-20% slower fused on an H100)."""
    p = kernel_problem_for(problem, act_dtype.itemsize)
    return (
        f"m{p.gemm_m}-k{p.K}-c{p.C}-r{p.R}s{p.S}-st{p.stride[0]}x{p.stride[1]}"
        f"-dil{p.dilation[0]}x{p.dilation[1]}-{str(act_dtype).removeprefix('torch.')}"
        f"-{str(out_dtype).removeprefix('torch.')}{'-residual' if has_residual else ''}"
    )


def candidate_widths(k: int) -> list[int]:
    """For each count of N tiles, the narrowest tile width that covers K channels in that many
    tiles (K=320: 160, 128, 96); wider ones only add padding. Widths under half the widest
    are left out: they re-read the activation more than twice as often."""
    allowed = tile_widths(k)
    widths = set()
    for tile_n in allowed:
        tiles_n = -(-k // tile_n)
        widths.add(min(n for n in allowed if n * tiles_n >= k))
    return sorted(n for n in widths if 2 * n >= max(widths))


def candidate_configs(
    problem: Conv2dProblemShape,
    num_sms: int = 132,
    element_bytes: int = 2,
    has_residual: bool = False,
) -> list[Conv2dConfig]:
    """``candidate_widths``, each alone and in both 2-CTA clusters, two rasterizations, 128-
    row tiles and, up to 160 wide, 192-row ones and, up to 128 wide, 256-row ones, and 64-row
    ones (each with its whole K) where they fit one wave; for plain 16-bit convs each also with
    64-wide epilogue subtiles where it keeps 4 A/B stages (``epilogue_rule``); the k-tile
    width, stream-K (split by the heuristic's rule on each candidate's tiles) and (for
    single-CTA clusters) dynamic scheduling choices of the default heuristic, ping-pong where
    ``pingpong_pays`` without its upper k-tile bound (on the 128-row tiles at most 128 wide
    it takes, with or without a residual; where the heuristic takes dynamic scheduling, each
    of the two alone), for the problem the kernel runs (after staging) on ``num_sms`` SMs
    with inputs of ``element_bytes`` (1: fp8); and 128x128 ping-pong halo tiles where they
    fit (``pingpong_halo_tile``: faster than the default on some devices only; they need
    128-byte k-tiles); halo tiles of 128 and 256 rows, whole-row or pitched, where they run
    the problem (``_halo_candidates``). With ``has_residual`` (16-bit inputs), the 128-row
    candidates wider than 192 also with three A/B stages, which leave SMEM for their whole
    tile of C (``config.WHOLE_SOURCE_MIN_TILES_PER_SM``: 0.85-1.15x per conv on an H100, so
    worth timing per device)."""
    check_heuristic_args(problem, num_sms, has_residual)
    check_element_bytes(element_bytes)
    kernel_problem = kernel_problem_for(problem, element_bytes)
    heuristic = default_config(kernel_problem, num_sms, element_bytes=element_bytes)
    tile_k, stream_k = heuristic.tile_k, heuristic.stream_k
    dynamic = heuristic.dynamic_schedule  # single-CTA clusters only
    # 128-row tiles at most 128 wide only; tried plain too, and on mainloops of any length,
    # where the default leaves it out
    pingpong = pingpong_pays(kernel_problem, tile_k, num_sms, max_k_tiles=math.inf)
    pingpong = pingpong and heuristic.tile_m == 128
    pingpong = pingpong and not stream_k
    shapes = [
        (tile_m, tile_n)
        for tile_n in candidate_widths(kernel_problem.K)
        for tile_m in TILE_M_CHOICES
        if tile_m * tile_n <= MAX_TILE_ELEMS
        and (tile_m != 64 or single_warpgroup_fits(kernel_problem, tile_n, tile_k, num_sms))
    ]
    candidates = [
        Conv2dConfig(tile_m=tile_m, tile_n=tile_n, tile_k=tile_k,
                     cluster_m=cluster_m, cluster_n=cluster_n, swizzle=swizzle,
                     stream_k=stream_k and tile_m != 64,
                     dynamic_schedule=dynamic_schedule, pingpong=with_pingpong)
        for (tile_m, tile_n), (cluster_m, cluster_n), swizzle in itertools.product(
            shapes, ((1, 1), (2, 1), (1, 2)), (1, 8)
        )
        for dynamic_schedule, with_pingpong in _schedule_choices(
            dynamic and cluster_m * cluster_n == 1,
            pingpong and tile_m == 128 and tile_n <= 128,
        )
    ]  # fmt: skip
    candidates = [_with_heuristic_split(c, kernel_problem, num_sms) for c in candidates]
    if not has_residual:
        # 64-wide epilogue subtiles where the wider buffers leave the A/B ring its depth, at
        # any mainloop length (the epilogue rule takes them on short ones only).
        candidates += [
            wide for c in candidates
            if (wide := wide_epilogue_config(c, kernel_problem, num_sms, False, element_bytes,
                                             max_k_tiles=math.inf)) != c
        ]  # fmt: skip
    tile_w, halo_h = pingpong_halo_tile(kernel_problem, num_sms)
    if tile_w and tile_k * element_bytes == MAX_K_TILE_BYTES and not stream_k:
        candidates.append(
            Conv2dConfig(tile_m=128, tile_n=128, tile_k=tile_k,
                         tile_w=tile_w, halo_h=halo_h, pingpong=True)
        )  # fmt: skip
    if has_residual:
        candidates += [
            dataclasses.replace(c, stages=WHOLE_SOURCE_AB_STAGES)
            for c in candidates
            if takes_whole_source(c.tile_m, c.tile_n, element_bytes)
        ]
    # After the whole-source variants: beside a halo, a whole tile of C does not fit.
    return candidates + _halo_candidates(kernel_problem, element_bytes, has_residual)


def _halo_candidates(
    problem: Conv2dProblemShape, element_bytes: int, has_residual: bool
) -> list[Conv2dConfig]:
    """Halo tiles of 128 and 256 rows of 64 columns (whole-row or pitched,
    ``halo_rule.halo_tile_config``) for each candidate width, where they run ``problem`` and
    fit the SMEM even with fp32 output. The halo rule takes the 256-row ones where they paid
    on the corpus; elsewhere either can still win (odd-5x5 fp8: 128-row pitched tiles ran
    1.28x the default on an H100)."""
    halos: list[Conv2dConfig] = []
    for tile_n, tile_m in itertools.product(candidate_widths(problem.K), (128, HALO_TILE_M)):
        base = Conv2dConfig(tile_n=tile_n)  # halo_tile_config narrows it for 256 rows
        halo = halo_tile_config(
            base, problem, tile_m, PITCHED_TILE_W, element_bytes, out_bytes=4,
            has_residual=has_residual,
        )  # fmt: skip
        if halo is not None and halo not in halos:
            halos.append(halo)
    return halos


def _schedule_choices(dynamic: bool, pingpong: bool) -> list[tuple[bool, bool]]:
    """The ``(dynamic_schedule, pingpong)`` pairs a candidate is tried with: as wanted, or,
    where both are wanted (the heuristic takes dynamic scheduling and ping-pong pays), each
    alone, since the kernel cannot combine them."""
    if dynamic and pingpong:
        return [(False, True), (True, False)]
    return [(dynamic, pingpong)]


def _with_heuristic_split(
    config: Conv2dConfig, problem: Conv2dProblemShape, num_sms: int
) -> Conv2dConfig:
    """A stream-K candidate with the heuristic's split rule applied to its own tiles."""
    if not config.stream_k:
        return config
    _, split = stream_k_for_tiles(
        problem, *config.tile_shape_mnk, *config.cluster_shape_mn, num_sms
    )
    return dataclasses.replace(config, stream_k_split=split)


def _table_path():
    return disk_cache.cache_root() / "autotune.json"


def _read_table() -> dict:
    path = _table_path()
    return json.loads(path.read_text()) if path.is_file() else {}


@functools.lru_cache(maxsize=None)
def _device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def lookup(device: torch.device, key: str) -> Conv2dConfig | None:
    """The stored choice for ``key`` on ``device``'s kind of GPU, if any."""
    entry = _read_table().get(_device_name(device.index), {}).get(key)
    return Conv2dConfig(**entry["config"]) if entry else None


def _store(device: torch.device, key: str, config: Conv2dConfig, timings: dict) -> None:
    path = _table_path()
    with disk_cache.locked(path.parent):
        table = _read_table()
        table.setdefault(_device_name(device.index), {})[key] = {
            "config": dataclasses.asdict(config),
            "ms": timings,
        }
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
        os.replace(tmp, path)


def _time_candidates(
    fns: Sequence, device: torch.device, rounds: int, round_ms: float, warmup_ms: float = 0.0
) -> list[float]:
    """Median milliseconds of each function, sampled in interleaved rounds, the order reversed
    every other round: the GPU's clocks drift during a tuning run (power capping on long
    convs), and timing the candidates one after the other would hand that drift to whichever
    came first. Each run starts from an L2 cache emptied by writing a buffer larger than it
    (as ``triton.testing.do_bench`` does, the benchmark's timing): runs back to back on the
    same tensors find the previous run's data in L2 and favoured configs that reuse it (H200,
    session 12). A round runs a candidate untimed for ``warmup_ms``, then timed for at least
    ``round_ms``."""
    flush = torch.empty(_L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    run_ms = []
    for fn in fns:  # compile and warm up, then measure a run and its flush
        fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        flush.zero_()
        fn()
        end.record()
        end.synchronize()
        run_ms.append(max(start.elapsed_time(end), 1e-3))

    def reps(ms: float, budget_ms: float) -> int:
        return min(max(_MIN_REPS, math.ceil(budget_ms / ms)), _MAX_REPS)

    samples: list[list[float]] = [[] for _ in fns]
    order = list(range(len(fns)))
    for round_index in range(rounds):
        for i in order if round_index % 2 == 0 else reversed(order):
            fn = fns[i]
            for _ in range(reps(run_ms[i], warmup_ms) if warmup_ms else 0):
                fn()
            n = reps(run_ms[i], round_ms)
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            for start, end in zip(starts, ends, strict=True):
                flush.zero_()
                start.record()
                fn()
                end.record()
            ends[-1].synchronize()
            samples[i].extend(a.elapsed_time(b) for a, b in zip(starts, ends, strict=True))
    return [statistics.median(times) for times in samples]


# For one problem (kernel dtype, output dtype, device, whether a residual is read): the
# function that runs it once with a given config, on scratch tensors it allocated once.
RunnerFactory = Callable[
    [Conv2dProblemShape, torch.dtype, torch.dtype, torch.device, bool],
    Callable[[Conv2dConfig], object],
]


def autotune(
    x_shape: Sequence[int],
    filter_shape: Sequence[int],
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] | Sequence[Sequence[int]] = 0,
    dilation: int | Sequence[int] = 1,
    dtype: torch.dtype = torch.bfloat16,
    out_dtype: torch.dtype | None = None,
    device: torch.device | str = "cuda",
    configs: Sequence[Conv2dConfig] | None = None,
    has_residual: bool = False,
    make_runner: RunnerFactory,
) -> Conv2dConfig:
    """Time ``configs`` (default: ``candidate_configs`` and the config a call without one
    runs, ``untuned.heuristic_config``, called "the heuristic's" here) on this problem; store
    and return the fastest, or the heuristic's config when none beats it by ``_MIN_GAIN``
    (see ``pick_fastest``). Shapes are NHWC / KRSC as for ``conv2d_fprop``.
    All candidates are screened in short rounds; the ``_FINALISTS`` fastest and the
    heuristic's config are then timed in ~100 ms rounds, which decide. Takes a few seconds
    per problem once its kernels are compiled (compiling is ~1 s per candidate).

    ``has_residual``: tune for ``conv2d_fprop_with_residual`` (timed with a residual add);
    its choice is stored apart from the plain conv's and serves only residual calls. Plain
    choices serve every epilogue without a residual (bias, scale, activations).

    Raises:
        TypeError, ValueError: on bad arguments (checked first, with no GPU needed), on a
            device that is not an H100/H200, or on a config in ``configs`` that cannot run
            the problem.
        RuntimeError: when torch has no CUDA GPU to time on.
    """
    problem, out_dtype, configs = _check_autotune_args(
        x_shape, filter_shape, stride, padding, dilation, dtype, out_dtype, configs, has_residual
    )
    device = _tuning_device(device)
    with _tune_lock:
        run = make_runner(problem, dtype, out_dtype, device, has_residual)
        return _autotune(problem, dtype, out_dtype, device, configs, has_residual, run)


def _check_autotune_args(
    x_shape, filter_shape, stride, padding, dilation, dtype, out_dtype, configs, has_residual
) -> tuple[Conv2dProblemShape, torch.dtype, list[Conv2dConfig] | None]:
    """``autotune``'s arguments, checked with no CUDA query: the problem, the output dtype and
    the configs to time (None: the candidates)."""
    for name, shape, layout in (("x_shape", x_shape, "[N, H, W, C]"),
                                ("filter_shape", filter_shape, "[K, R, S, C]")):  # fmt: skip
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
            raise TypeError(f"{name} must be a sequence of 4 ints {layout}, got {shape!r}")
        if len(shape) != 4:
            raise ValueError(f"{name} must be {layout} (4 values), got {tuple(shape)}")
    problem = Conv2dProblemShape.from_shapes(x_shape, filter_shape)  # sizes: ints, >= 1
    if problem.N == 0:
        raise ValueError(f"x_shape={tuple(x_shape)} has N=0: there is nothing to time")
    if not isinstance(dtype, torch.dtype) or dtype not in INPUT_DTYPES:
        raise TypeError(
            f"dtype must be one of {', '.join(map(str, INPUT_DTYPES))} (the activation's and "
            f"the filter's), got {dtype!r}"
        )
    # The call's own checks (geometry, im2col limits, out_dtype), on tensors without storage.
    problem, out_dtype = validate_conv_inputs(
        torch.empty(problem.activation_shape, dtype=dtype, device="meta"),
        torch.empty(problem.filter_shape, dtype=dtype, device="meta"),
        stride=stride, padding=padding, dilation=dilation, out_dtype=out_dtype,
    )  # fmt: skip
    if not isinstance(has_residual, bool):
        raise TypeError(
            f"has_residual must be a bool, got {has_residual!r} ({type(has_residual).__name__})"
        )
    if configs is None:
        return problem, out_dtype, None
    if (
        not isinstance(configs, Sequence)
        or not configs
        or not all(isinstance(config, Conv2dConfig) for config in configs)
    ):
        raise TypeError(
            f"configs must be None or a non-empty sequence of Conv2dConfig, got {configs!r}"
        )
    kernel_problem = kernel_problem_for(problem, dtype.itemsize)
    for config in configs:
        check_config_fits(config, kernel_problem)
    return problem, out_dtype, list(configs)


def _tuning_device(device: object) -> torch.device:
    """The CUDA device to tune on, with its index; a clear error where there is none."""
    if isinstance(device, bool) or not isinstance(device, (torch.device, str, int)):
        raise TypeError(
            "device must be a torch.device, a name ('cuda', 'cuda:1') or an index, got "
            f"{device!r} ({type(device).__name__})"
        )
    try:
        device = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device={device!r} is not a device name: {exc}") from None
    if device.type != "cuda":
        raise ValueError(f"device={device} must be a CUDA device: autotune times kernels on it")
    if not torch.cuda.is_available():
        raise RuntimeError(
            "autotune times kernels on a GPU: it needs an H100/H200 (compute capability 9.0) "
            "and a CUDA build of torch, and torch.cuda.is_available() is False here "
            "(without a GPU, default_config(problem) picks a config)"
        )
    count = torch.cuda.device_count()
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    elif device.index >= count:
        raise ValueError(f"device={device} does not exist: torch sees {count} CUDA device(s)")
    arch = check_compute_capability(torch.cuda.get_device_capability(device), device)
    if arch != "sm_90a":
        raise ValueError(
            f"{device} runs {arch} kernels, which autotune does not tune (default_config_sm100 "
            "picks their config); it tunes sm_90a kernels (H100/H200)"
        )
    return device


def _autotune(
    problem: Conv2dProblemShape,
    dtype: torch.dtype,
    out_dtype: torch.dtype,
    device: torch.device,
    configs: list[Conv2dConfig] | None,
    has_residual: bool,
    run: Callable[[Conv2dConfig], object],
) -> Conv2dConfig:
    num_sms = torch.cuda.get_device_properties(device).multi_processor_count
    element_bytes = dtype.itemsize
    candidates = list(configs or candidate_configs(problem, num_sms, element_bytes, has_residual))
    # What a call with config=None would otherwise run on this device (gathered operands
    # and the small-M rule included), timed beside the candidates: a stored choice replaces
    # it only where it is faster.
    # Tensor-core configs only: the calls that run the CUDA-core kernel never consult the
    # autotuner (``dispatch``), and its choices are stored as ``Conv2dConfig``.
    heuristic = heuristic_config(
        problem, num_sms, has_residual=has_residual, element_bytes=element_bytes,
        out_bytes=torch.finfo(out_dtype).bits // 8, cuda_cores=False,
    )  # fmt: skip
    if configs is None and heuristic not in candidates:
        candidates.append(heuristic)
    fns = [functools.partial(run, config) for config in candidates]
    screen = _time_candidates(fns, device, _SCREEN_ROUNDS, _SCREEN_ROUND_MS)
    finalists = pick_finalists(candidates, screen, heuristic)
    final = _time_candidates(
        [fns[i] for i in finalists], device, _FINAL_ROUNDS, _FINAL_ROUND_MS, _FINAL_WARMUP_MS
    )
    best = pick_fastest([candidates[i] for i in finalists], final, heuristic)
    timings = {
        "screen": {_config_id(c): t for c, t in zip(candidates, screen, strict=True)},
        "final": {_config_id(candidates[i]): t for i, t in zip(finalists, final, strict=True)},
    }
    _store(device, problem_key(problem, dtype, out_dtype, has_residual), best, timings)
    return best


def pick_finalists(
    candidates: Sequence[Conv2dConfig], screen: Sequence[float], heuristic: Conv2dConfig
) -> list[int]:
    """Indices of the ``_FINALISTS`` fastest screened candidates, and of the heuristic's config
    when it is a candidate, which the final timing needs to compare against."""
    finalists = sorted(range(len(candidates)), key=screen.__getitem__)[:_FINALISTS]
    if heuristic in candidates and (index := list(candidates).index(heuristic)) not in finalists:
        finalists.append(index)
    return finalists


def pick_fastest(
    candidates: Sequence[Conv2dConfig], times: Sequence[float], heuristic: Conv2dConfig
) -> Conv2dConfig:
    """The fastest candidate, unless the heuristic's config is among them and within
    ``_MIN_GAIN`` of it: then the heuristic's, as the difference is within timing noise."""
    fastest = min(range(len(times)), key=times.__getitem__)
    if heuristic in candidates:
        if times[fastest] > (1 - _MIN_GAIN) * times[list(candidates).index(heuristic)]:
            return heuristic
    return candidates[fastest]


def _config_id(config: Conv2dConfig) -> str:
    return (
        f"m{config.tile_m}-n{config.tile_n}-k{config.tile_k}"
        f"-c{config.cluster_m}x{config.cluster_n}-s{config.stages}"
        f"-sw{config.swizzle}-{'m' if config.raster_along_m else 'n'}"
        f"{'-sk' if config.stream_k else ''}{'-dyn' if config.dynamic_schedule else ''}"
        f"{'-pp' if config.pingpong else ''}"
        f"{f'-halo{config.tile_w}x{config.halo_h}' if config.tile_w else ''}"
        f"{f'p{config.halo_w}' if config.halo_w else ''}"
        f"{f'-gather{config.gather_vector}' if config.gather else ''}"
        f"{'-packed' if config.pack_taps else ''}"
        f"{f'-epi{config.epi_n}' if config.epi_n else ''}"
    )


def stored_or_tuned_config(
    problem: Conv2dProblemShape,
    kernel_problem: Conv2dProblemShape,
    x: torch.Tensor,
    filter_shape: Sequence[int],
    out_dtype: torch.dtype,
    has_residual: bool = False,
    *,
    make_runner: RunnerFactory,
) -> Conv2dConfig | None:
    """The autotuner's config for a call with ``config=None``: stored, or tuned now (timed
    through ``make_runner``, with ``CUTE_CONV_AUTOTUNE=1`` on an unstaged problem); None if it
    has none, and the call takes the heuristic's. Calls with a residual take the choices
    tuned with one (see ``autotune``)."""
    key = problem_key(problem, x.dtype, out_dtype, has_residual)
    stored = lookup(x.device, key)
    if stored is not None:
        return stored
    if autotune_on_first_use() and kernel_problem is problem:
        with _tune_lock:  # concurrent first calls: one tunes, the others take its choice
            stored = lookup(x.device, key)
            if stored is not None:
                return stored
            return autotune(
                tuple(x.shape), tuple(filter_shape), stride=problem.stride,
                padding=problem.padding, dilation=problem.dilation, dtype=x.dtype,
                out_dtype=out_dtype, device=x.device, has_residual=has_residual,
                make_runner=make_runner,
            )  # fmt: skip
    return None
