"""Per-tile cycle marks of the SM90 kernel, with ``tile_timeline_probe.patch`` applied (H100/H200):

    git apply benchmarks/experiments/tile_timeline_probe.patch
    CC_PROBE_TIMELINE=1 python benchmarks/experiments/tile_timeline.py r50-c3-3x3:fp8 r50-c3-3x3:bf16 \
        --out timeline.json
    CC_PROBE_TIMELINE=1 CC_PROBE_A_FREE=1 python ...   # the same, A's loads left out
    git checkout kernels/

For each suite shape (``NAME:fp8`` or ``NAME:bf16``, the default config): three warm-up calls,
then one call whose printf lines (consumer thread 0 of every CTA: ``TL block tile_no work
start ready first_stage mainloop_done epilogue_done``, clock64 cycles) are captured from this
process's stdout and summarized: per tile the wait for its first ring stage, the mainloop after
it and the epilogue, split into each CTA's first tile and the rest (the printf stalls a CTA
between tiles, so every later tile starts with a full ring). Nothing is checked: the
A-free variant computes wrong outputs by design.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

import cute_conv
from cute_conv.testing import random_conv_inputs
from cute_conv.untuned import heuristic_config

SHAPES = Path(__file__).resolve().parent.parent / "shapes.json"


def one_call(name: str, dtype: str, num_sms: int):
    """The default call on suite shape ``name`` in ``dtype`` (fp8: e4m3 in, bf16 out)."""
    shape = next(s for s in json.loads(SHAPES.read_text())["shapes"] if s["name"] == name)
    n, h, w, c, k, r, s = (shape[x] for x in "NHWCKRS")
    geom = dict(stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"])
    x32, f32 = random_conv_inputs(n, h, w, c, k, r, s, dtype=torch.float32)
    problem = cute_conv.Conv2dProblemShape.from_shapes(x32.shape, f32.shape, **geom)
    out = torch.empty(problem.output_shape, device="cuda", dtype=torch.bfloat16)
    if dtype == "fp8":
        (qx, x_scale), (qf, w_scale) = cute_conv.quantize_fp8(x32), cute_conv.quantize_fp8(f32)
        config = heuristic_config(problem, num_sms, element_bytes=1)
        return config, lambda: cute_conv.conv2d_fprop(
            qx, qf, out=out, x_scale=x_scale, w_scale=w_scale, config=config, **geom
        )
    x, flt = x32.bfloat16(), f32.bfloat16()
    config = heuristic_config(problem, num_sms)
    return config, lambda: cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom)


def captured_marks(call) -> list[list[int]]:
    """The ``TL`` lines one ``call`` prints from the device (fd 1 redirected to a file)."""
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
    return [[int(v) for v in line.split()[1:]] for line in lines if line.startswith("TL ")]


def summary(marks: list[list[int]], num_ctas: int) -> dict:
    """Medians, 10th and 90th percentiles of each part of a tile, in cycles. A static
    schedule gives CTA ``work % num_ctas`` the tiles ``work``, in ``tile_no`` order."""
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

    def stats(values: list[int]) -> dict:
        ordered = sorted(values)
        return {"median": statistics.median(ordered), "p10": ordered[len(ordered) // 10],
                "p90": ordered[9 * len(ordered) // 10], "n": len(ordered)}  # fmt: skip

    return {"tiles": len(marks), "cycles": {name: stats(v) for name, v in parts.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+", help="NAME:fp8 or NAME:bf16 (suite shapes)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if os.environ.get("CC_PROBE_TIMELINE") != "1":
        parser.error("set CC_PROBE_TIMELINE=1 (and apply tile_timeline_probe.patch)")
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    results = {"device": torch.cuda.get_device_name(), "a_free": os.environ.get("CC_PROBE_A_FREE") == "1"}
    for problem in args.problems:
        name, dtype = problem.split(":")
        config, call = one_call(name, dtype, num_sms)
        for _ in range(3):
            call()
        results[problem] = {"config": repr(config)} | summary(captured_marks(call), num_sms)
        print(problem, json.dumps(results[problem]["cycles"]), flush=True)
    args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
