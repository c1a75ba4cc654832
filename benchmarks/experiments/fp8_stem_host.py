"""Where an eager fp8 stem call's time goes (H100/H200): per-call host and GPU-paced time,
the kernels' CUPTI durations, and a cProfile of the host path:

    python benchmarks/experiments/fp8_stem_host.py > fp8_stem_host.log

Three convs (the s2 and s1 RGB stems, C=3, and a tiny 8x8 C=64 3x3), each called as fp8
(e4m3, per-tensor scales; with and without ``config=``, as the fp8 corpus calls) and as bf16.
Per call: the time to enqueue ``--calls`` calls, and the time until they have run (a
synchronize after the loop), medians of five loops. Where the two agree, the host sets the
pace.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile

import cute_conv
from cute_conv.testing import random_conv_inputs
from cute_conv.untuned import heuristic_config


def calls_of(n, h, c, k, r, stride, pad) -> dict[str, Callable[[], object]]:
    x, f = random_conv_inputs(n, h, h, c, k, r, r)
    geom = dict(stride=stride, padding=pad)
    (qx, x_scale), (qf, w_scale) = (cute_conv.quantize_fp8(t.float()) for t in (x, f))
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, f.shape, **geom)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    config = heuristic_config(problem, sms, element_bytes=1)
    out = torch.empty(problem.output_shape, device="cuda", dtype=torch.bfloat16)
    scales = dict(x_scale=x_scale, w_scale=w_scale)
    conv = cute_conv.conv2d_fprop
    return {
        "fp8 cfg": lambda: conv(qx, qf, out=out, config=config, **scales, **geom),
        "fp8": lambda: conv(qx, qf, out=out, **scales, **geom),
        "bf16": lambda: conv(x, f, out=out, **geom),
    }


def enqueue_and_paced_us(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    loops = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        enqueued = time.perf_counter()
        torch.cuda.synchronize()
        done = time.perf_counter()
        loops.append(((enqueued - start) / calls * 1e6, (done - start) / calls * 1e6))
    loops.sort(key=lambda loop: loop[1])
    return loops[len(loops) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per timed loop")
    args = parser.parse_args()
    convs = {
        "stem s2 c3 k32": calls_of(1, 224, 3, 32, 3, 2, 1),
        "stem s1 c3 k64": calls_of(1, 224, 3, 64, 3, 1, 1),
        "tiny 8x8 c64": calls_of(1, 8, 64, 64, 3, 1, 1),
    }
    for name, fns in convs.items():
        for label, fn in fns.items():
            enqueue, paced = enqueue_and_paced_us(fn, args.calls)
            print(
                f"{name:16s} {label:8s} enqueue {enqueue:6.1f} us/call, paced {paced:6.1f} us/call"
            )
    for label in ("fp8 cfg", "bf16"):
        fn = convs["stem s2 c3 k32"][label]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
        print(f"== stem s2 c3 k32 {label}: torch profiler, 20 calls")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=12))
    for name, label in (
        ("stem s2 c3 k32", "fp8 cfg"),
        ("tiny 8x8 c64", "fp8"),
        ("tiny 8x8 c64", "fp8 cfg"),
    ):
        fn = convs[name][label]
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(300):
            fn()
        profiler.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(18)
        print(f"== cProfile {name} {label}, 300 calls (tottime)\n{text.getvalue()}")


if __name__ == "__main__":
    main()
