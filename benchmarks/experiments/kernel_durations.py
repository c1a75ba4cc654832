"""The GPU time of a conv's kernels, ours against cuDNN's (H100/H200):

    python benchmarks/experiments/kernel_durations.py r50-c3-3x3 \
        n1_h1_w1_c120_k30_r1_s1_pad0.0.0.0_str1.1_dil1.1:stages=2 --out durations.json

For each suite shape or corpus key (``:field=value`` after it overrides a field of the
heuristic's bf16 config), the plain call (``conv2d_fprop``) and ``F.conv2d`` on its
channels_last views (``cudnn.benchmark``): CUPTI's duration of each kernel a call launches
(``torch.profiler``, the median over back-to-back calls on L2-resident inputs), in
microseconds, with the kernels' names; beside them one trivial torch kernel's. Small convs
(session 59) spend a CUDA-graph replay of ~4.4 us plus their kernels, so tenths of a
microsecond of kernel time decide their ratios; this shows which kernel time differs,
without the replay's noise. Launch overheads outside the kernels do not show here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F
from tile_timeline import parse_field, shape_of  # beside this script
from torch.profiler import ProfilerActivity, profile

import cute_conv
from cute_conv.testing import random_conv_inputs
from cute_conv.untuned import heuristic_config

CALLS = 30


def kernel_durations(call, calls: int = CALLS) -> dict:
    """``{"kernels": names, "us": median duration of each}`` of the kernels one ``call``
    launches (the same kernels on every call)."""
    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    events = sorted(
        (e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start
    )
    per_call = len(events) // calls
    return {
        "kernels": [e.name for e in events[:per_call]],
        "us": [
            statistics.median(e.time_range.elapsed_us() for e in events[i::per_call])
            for i in range(per_call)
        ],
    }


def conv_durations(spec: str, num_sms: int) -> dict:
    """Our call's and cuDNN's kernel durations for ``spec`` (``NAME[:field=value...]``)."""
    name, *fields = spec.split(":")
    shape = shape_of(name)
    n, h, w, c, k, r, s = (shape[x] for x in "NHWCKRS")
    (top, bottom), (left, right) = shape["pad"]
    if top != bottom or left != right:
        raise ValueError(f"{name}: asymmetric padding (F.conv2d pads symmetrically)")
    geom = dict(stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"])
    x32, f32 = random_conv_inputs(n, h, w, c, k, r, s, dtype=torch.float32)
    x, flt = x32.bfloat16(), f32.bfloat16()
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    overrides = {key: parse_field(value) for key, value in (f.split("=") for f in fields)}
    config = dataclasses.replace(heuristic_config(problem, num_sms), **overrides)
    out = torch.empty(problem.output_shape, device="cuda", dtype=torch.bfloat16)
    x_cl, w_cl = x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2)
    return {
        "config": repr(config),
        "ours": kernel_durations(
            lambda: cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom)
        ),
        "cudnn": kernel_durations(
            lambda: F.conv2d(x_cl, w_cl, None, shape["stride"], (top, left), shape["dilation"])
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="+", help="NAME[:field=value...]: suite name or corpus key")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    trivial = torch.zeros(8, device="cuda")
    results = {
        "device": torch.cuda.get_device_name(),
        "trivial_kernel_us": kernel_durations(lambda: trivial.add_(1))["us"][0],
        "convs": {},
    }
    for spec in args.specs:
        row = results["convs"][spec] = conv_durations(spec, num_sms)
        ours, cudnn = sum(row["ours"]["us"]), sum(row["cudnn"]["us"])
        print(f"{spec[:60]:60s} ours {ours:7.2f} us  cudnn {cudnn:7.2f} us", flush=True)
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
