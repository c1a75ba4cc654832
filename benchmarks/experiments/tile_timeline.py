"""Per-tile cycle marks of the SM90 kernel, with ``tile_timeline_probe.patch`` applied (H100/H200):

    git apply benchmarks/experiments/tile_timeline_probe.patch
    CC_PROBE_TIMELINE=1 python benchmarks/experiments/tile_timeline.py r50-c3-3x3:fp8 r50-c3-3x3:bf16 \
        --out timeline.json
    CC_PROBE_TIMELINE=1 CC_PROBE_A_FREE=1 python ...   # the same, A's loads left out
    CC_PROBE_TIMELINE=1 CC_PROBE_STAGE0=1 python ...   # every k-tile's WGMMAs read ring stage 0
    CC_PROBE_TIMELINE=1 CC_PROBE_WAITS=1 python ...    # also each tile's waits for k-tiles 2..
    CC_PROBE_TOTALS=1 python ...   # no per-tile printf: sums per warpgroup, printed at its end
    CC_PROBE_TOTALS=1 CC_PROBE_A_FREE=1 CC_PROBE_B_FREE=1 python ...   # neither operand loaded
    ... CC_PROBE_NO_WAIT=1 (with both free: no consumer waits), CC_PROBE_SUM_EPILOGUE=1 (the
    epilogue only sums the accumulators), CC_PROBE_NO_EPILOGUE=1 (none: ptxas then drops
    the WGMMAs too, so its mainloop times are meaningless), CC_PROBE_NO_MMA=1 (no WGMMAs, the
    loads, waits and releases kept: the tile's time at the loads' own pace),
    CC_PROBE_PINGPONG_SOLO=1 (ping-pong configs: consumer 0 runs every tile alone, no turns)
    CC_PROBE_TOTALS=1 CC_PROBE_PRODUCER=1 python ...   # the load warp's side too (TP)
    CC_PROBE_TOTALS=1 CC_PROBE_EPILOGUE=1 python ...   # the epilogue's parts too (TE)
    git apply -R benchmarks/experiments/tile_timeline_probe.patch

For each suite shape or corpus key (``NAME:fp8``, ``NAME:bf16`` or ``NAME:fused``, the
default config; ``fused`` is bf16 ``relu(conv + b) + r``, the config a call with a residual
runs; ``:field=value`` after it overrides a config field, e.g.
``r50-c3-3x3:fp8:pingpong=True``): three warm-up calls, then one call whose printf lines are
captured from this process's stdout and summarized.

- ``TL`` (``CC_PROBE_TIMELINE``; consumer thread 0 of every CTA, per tile: ``block tile_no
  work start ready first_stage mainloop_done epilogue_done``, clock64 cycles): per tile the
  wait for its first ring stage, the mainloop after it and the epilogue, each CTA's first
  tile apart from the rest. The printf stalls the CTA between tiles (so every later tile
  starts with a full ring) and lets its other warpgroup run ahead.
- ``TW`` (``CC_PROBE_WAITS``, with ``TL``): ``block waited longest``, the cycles the tile's
  mainloop spent waiting for ring stages after the first, in all and the longest wait.
- ``TS`` (``CC_PROBE_TOTALS``, no per-tile printf): each consumer warpgroup sums those parts
  over its tiles and prints them once after its last (``block warpgroup tiles cycles
  first_stage_waits mainloops epilogues k_tile_waits nanoseconds``); ``totals`` reduces them
  to cycles per tile and the SM clock of the loop. This is the undisturbed measurement.
  Each ``TS`` line also carries four absolute ``%globaltimer`` nanoseconds: the CTA's entry,
  the loop's begin and end, and its exit after the output stores drained; ``spans``
  reduces them to microseconds from the first CTA's entry (the launch ramp across CTAs,
  each CTA's setup, loop and drain, when the loops end, the last exit), to lay against
  the kernel's duration (``kernel_durations.py``, unpatched).
- ``TP`` (``CC_PROBE_PRODUCER``; im2col tiles, data-parallel): the load warp's sums, printed
  once (``block tiles cycles load_tile acquire_waits``): its time in ``load_tile`` and, of
  it, the waits for free ring stages; ``producer`` reduces them to cycles per tile, the
  rest of ``load_tile`` being the TMA issue and its bookkeeping.
- ``TE`` (``CC_PROBE_EPILOGUE``, with ``TS``; TMA-stored epilogues): each consumer warpgroup's
  sums over its tiles of ``store_subtile``'s parts, printed after its ``TS`` line (``block
  warpgroup tiles c_waits compute_subtile0 compute_rest stores``): the waits for C's
  subtiles, the math, SMEM reads and writes of the first subtile (with the waits for the
  tile's bias and scale loads, which the compiler hoists to the epilogue's start) and of
  the others, and the barriers around each TMA store (with the store warp's wait for a free
  staging buffer); ``epilogue_parts`` reduces them to cycles per tile.

Nothing is checked: the A-free, B-free, stage-0 and summing variants compute wrong outputs by
design. The probes act at trace time and the disk cache's fingerprint does not see them, so
this script compiles without the cache.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import compare_versions  # noqa: E402

import cute_conv  # noqa: E402
from cute_conv.testing import random_conv_inputs  # noqa: E402
from cute_conv.untuned import heuristic_config  # noqa: E402

DTYPES = ("bf16", "fp8", "fused")


def shape_of(name: str) -> dict:
    """A suite shape by name, else a corpus problem by key, as ``bench_shape`` takes it."""
    suite = {shape["name"]: shape for shape in compare_versions.select_shapes(None)}
    return suite[name] if name in suite else compare_versions.corpus_shapes(name)[0]


def one_call(name: str, dtype: str, num_sms: int, overrides: dict[str, int]):
    """The default call on ``name`` (a suite shape or a corpus key) in ``dtype`` (fp8: e4m3
    in, bf16 out; fused: bf16 ``relu(conv + b) + r``), its config's fields replaced by
    ``overrides``."""
    if dtype not in DTYPES:
        raise ValueError(f"{name}: the dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    shape = shape_of(name)
    n, h, w, c, k, r, s = (shape[x] for x in "NHWCKRS")
    geom = dict(stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"])
    x32, f32 = random_conv_inputs(n, h, w, c, k, r, s, dtype=torch.float32)
    problem = cute_conv.Conv2dProblemShape.from_shapes(x32.shape, f32.shape, **geom)
    out = torch.empty(problem.output_shape, device="cuda", dtype=torch.bfloat16)
    if dtype == "fp8":
        (qx, x_scale), (qf, w_scale) = cute_conv.quantize_fp8(x32), cute_conv.quantize_fp8(f32)
        config = dataclasses.replace(
            heuristic_config(problem, num_sms, element_bytes=1), **overrides
        )
        return config, lambda: cute_conv.conv2d_fprop(
            qx, qf, out=out, x_scale=x_scale, w_scale=w_scale, config=config, **geom
        )
    x, flt = x32.bfloat16(), f32.bfloat16()
    fused = dtype == "fused"
    config = dataclasses.replace(
        heuristic_config(problem, num_sms, has_residual=fused), **overrides
    )
    if fused:
        bias = torch.randn(k, device="cuda", dtype=torch.bfloat16)
        source = torch.randn(problem.output_shape, device="cuda").bfloat16()
        return config, lambda: cute_conv.conv2d_fprop_with_residual(
            x, flt, source, bias=bias, activation="relu", out=out, config=config, **geom
        )
    return config, lambda: cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom)


def captured_marks(call) -> dict[str, list[list[int]]]:
    """The ``TL``, ``TW``, ``TS``, ``TP`` and ``TE`` lines one ``call`` prints from the device (fd 1
    redirected to a file), their integer fields by tag."""
    torch.cuda.synchronize()
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+") as sink:
        os.dup2(sink.fileno(), 1)
        try:
            call()
            torch.cuda.synchronize()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        sink.seek(0)
        lines = sink.read().splitlines()
    marks: dict[str, list[list[int]]] = {"TL": [], "TW": [], "TS": [], "TP": [], "TE": []}
    for line in lines:
        tag, *fields = line.split()
        if tag in marks:
            marks[tag].append([int(v) for v in fields])
    return marks


def summary(marks: list[list[int]], num_ctas: int, waits: list[list[int]] = ()) -> dict:
    """Medians, 10th and 90th percentiles of each part of a tile, in cycles (and of the
    ``TW`` lines' waits, when given). A static schedule gives CTA ``work % num_ctas`` the
    tiles ``work``, in ``tile_no`` order."""
    by_cta = collections.defaultdict(list)
    for mark in marks:
        by_cta[mark[2] % num_ctas].append(mark)
    parts = collections.defaultdict(list)
    for tiles in by_cta.values():
        for _, tile_no, _, _, ready, first, mainloop, end in sorted(tiles, key=lambda m: m[1]):
            which = "first_tile" if tile_no == 0 else "later_tiles"
            parts[f"{which}_wait_first_stage"].append(first - ready)
            parts[f"{which}_mainloop_after_it"].append(mainloop - first)
            parts["epilogue"].append(end - mainloop)
    for _, waited, longest in waits:
        parts["k_tile_waits_per_tile"].append(waited)
        parts["longest_k_tile_wait"].append(longest)

    def stats(values: list[int]) -> dict:
        ordered = sorted(values)
        return {"median": statistics.median(ordered), "p10": ordered[len(ordered) // 10],
                "p90": ordered[9 * len(ordered) // 10], "n": len(ordered)}  # fmt: skip

    return {"tiles": len(marks), "cycles": {name: stats(v) for name, v in parts.items()}}


def parse_field(value: str) -> int | bool:
    """A config override's value: ``True``/``False`` or an integer."""
    return value == "True" if value in ("True", "False") else int(value)


def totals(lines: list[list[int]]) -> dict:
    """Cycles per tile of each warpgroup's ``TS`` sums (median over warpgroups), what they
    leave out of its whole loop ("other": the hand-off between tiles) and, where the line
    has the loop's nanoseconds (``%globaltimer``) too, the SM clock it ran at (MHz, median
    over warpgroups: a power-capped GPU runs below its listed clock)."""
    result = _medians_per_tile(
        (tiles, {"cycles": cycles, "first_stage_wait": first, "mainloop": main,
                 "k_tile_waits_in_mainloop": waits, "epilogue": epilogue,
                 "other": cycles - first - main - epilogue})
        for _, _, tiles, cycles, first, main, epilogue, waits, *_ in lines
    )  # fmt: skip
    clocks = [line[3] * 1e3 / line[8] for line in lines if len(line) > 8 and line[2] and line[8]]
    if clocks:
        result["sm_mhz"] = statistics.median(clocks)
    return result


def spans(lines: list[list[int]]) -> dict:
    """Microseconds of each warpgroup's ``TS`` timestamps (fields 9-12: entry, loop begin,
    loop end, exit), counted from the first entry: how far the entries spread (the launch
    ramp), the medians of the setup before the loop, the loop and the drain after it, the
    loop ends' 10th percentile, median and last, and the last exit. Empty without them."""
    stamped = [line[9:13] for line in lines if len(line) >= 13]
    if not stamped:
        return {}
    first = min(entry for entry, *_ in stamped)

    def us(ns: float) -> float:
        return ns / 1e3

    ends = sorted(end - first for _, _, end, _ in stamped)
    return {
        "warpgroups": len(stamped),
        "entry_spread_us": us(max(entry for entry, *_ in stamped) - first),
        "setup_us": us(statistics.median(begin - entry for entry, begin, _, _ in stamped)),
        "loop_us": us(statistics.median(end - begin for _, begin, end, _ in stamped)),
        "drain_us": us(statistics.median(out - end for _, _, end, out in stamped)),
        "loop_end_p10_us": us(ends[len(ends) // 10]),
        "loop_end_median_us": us(statistics.median(ends)),
        "loop_end_last_us": us(ends[-1]),
        "last_exit_us": us(max(out for *_, out in stamped) - first),
    }


def producer_totals(lines: list[list[int]]) -> dict:
    """Cycles per tile of the load warps' ``TP`` sums (median over CTAs)."""
    return _medians_per_tile(
        (tiles, {"cycles": cycles, "load_tile": load, "waits_for_free_stages": waits,
                 "issue": load - waits})
        for _, tiles, cycles, load, waits in lines
    )  # fmt: skip


def epilogue_parts(lines: list[list[int]]) -> dict:
    """Cycles per tile of the consumer warpgroups' ``TE`` sums (median over warpgroups)."""
    return _medians_per_tile(
        (tiles, {"c_waits": c_waits, "compute_subtile0": first, "compute_rest": rest,
                 "stores": stores})
        for _, _, tiles, c_waits, first, rest, stores in lines
    )  # fmt: skip


def _medians_per_tile(sums: Iterable[tuple[int, dict[str, int]]]) -> dict:
    """Per named sum, the median over its printers (those with tiles) of the sum per tile;
    ``tiles`` the median tile count."""
    parts = collections.defaultdict(list)
    for tiles, named in sums:
        if tiles == 0:
            continue
        for name, value in named.items():
            parts[name].append(value / tiles)
        parts["tiles"].append(tiles)
    return {name: statistics.median(values) for name, values in parts.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "problems", nargs="+",
        help="NAME:bf16, NAME:fp8 or NAME:fused (a suite shape or corpus key), then "
        ":field=value config overrides (True/False or integers)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if "1" not in (os.environ.get("CC_PROBE_TIMELINE"), os.environ.get("CC_PROBE_TOTALS")):
        parser.error("set CC_PROBE_TIMELINE=1 or CC_PROBE_TOTALS=1 (and apply the probe patch)")
    os.environ["CUTE_CONV_DISK_CACHE"] = "0"  # its fingerprint does not see the probes' env
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    probes = ("CC_PROBE_A_FREE", "CC_PROBE_B_FREE", "CC_PROBE_STAGE0", "CC_PROBE_WAITS",
              "CC_PROBE_TOTALS", "CC_PROBE_NO_WAIT", "CC_PROBE_NO_EPILOGUE",
              "CC_PROBE_SUM_EPILOGUE", "CC_PROBE_NO_MMA", "CC_PROBE_PINGPONG_SOLO",
              "CC_PROBE_PRODUCER", "CC_PROBE_EPILOGUE")  # fmt: skip
    results = {"device": torch.cuda.get_device_name()}
    results |= {name: os.environ.get(name) == "1" for name in probes}
    for problem in args.problems:
        name, dtype, *fields = problem.split(":")
        overrides = {k: parse_field(v) for k, v in (f.split("=") for f in fields)}
        config, call = one_call(name, dtype, num_sms, overrides)
        for _ in range(3):
            call()
        marks = captured_marks(call)
        results[problem] = {"config": repr(config)}
        if marks["TP"]:
            results[problem]["producer"] = producer_totals(marks["TP"])
        if marks["TE"]:
            results[problem]["epilogue"] = epilogue_parts(marks["TE"])
        if marks["TS"]:
            results[problem]["totals"] = totals(marks["TS"])
            results[problem]["spans"] = spans(marks["TS"])
        else:
            results[problem] |= summary(marks["TL"], num_sms, marks["TW"])
        shown = results[problem].get("totals") or results[problem]["cycles"]
        print(problem, json.dumps(shown), json.dumps(results[problem].get("producer", {})),
              json.dumps(results[problem].get("epilogue", {})),
              json.dumps(results[problem].get("spans", {})), flush=True)  # fmt: skip
    args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
