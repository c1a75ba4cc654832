"""The GPU time of a conv's kernels, ours against cuDNN's (H100/H200):

    python benchmarks/experiments/kernel_durations.py r50-c3-3x3 \
        n1_h1_w1_c120_k30_r1_s1_pad0.0.0.0_str1.1_dil1.1:stages=2 --out durations.json

For each suite shape or corpus key (``:field=value`` after it overrides a field of the
heuristic's bf16 config; ``:cuda_cores=False`` first takes the tensor-core config where a
CUDA-core rule takes the conv, e.g. ``KEY:cuda_cores=False:gather=True:pack_taps=True``),
the plain call (``conv2d_fprop``) and ``F.conv2d`` on its
channels_last views (``cudnn.benchmark``): CUPTI's duration of each kernel a call launches
(``torch.profiler``, the median over calls on L2-resident inputs, each waited for), in
microseconds, with the kernels' names; beside them one trivial torch kernel's. Small convs
(session 59) spend a CUDA-graph replay of ~4.4 us plus their kernels, so tenths of a
microsecond of kernel time decide their ratios; this shows which kernel time differs,
without the replay's noise. Launch overheads outside the kernels do not show here.

With ``--fused`` each conv also gets its fused ``relu(conv + b) + r`` call
(``conv2d_fprop_with_residual``, the heuristic's config for a call with a residual, the
overrides applied) and, where the cuDNN frontend is installed, the frontend's fused graph
(the corpus benchmark's: its fastest correct plan of the first ten): what the fused kernels
add to the plain ones, apart from the graph replays' launch costs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path
from typing import Callable, NamedTuple

import torch
from tile_timeline import parse_field, shape_of  # beside this script; puts benchmarks/ on the path
from torch.profiler import ProfilerActivity, profile

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.testing import random_conv_inputs
from cute_conv.untuned import heuristic_config

CALLS = 30


def kernel_durations(call, calls: int = CALLS) -> dict:
    """``{"kernels": names, "us": median duration of each}`` of the kernels one ``call``
    launches (the same kernels on every call). Each call is waited for before the next: our
    kernels launch with programmatic dependent launch, so back to back a kernel starts as the
    previous one's first CTAs exit and its duration would include waiting for the rest."""
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


class ConvCalls(NamedTuple):
    """A spec's plain call and cuDNN's on the same fresh operands."""

    problem: cute_conv.Conv2dProblemShape
    x: torch.Tensor
    flt: torch.Tensor
    overrides: dict
    config: cute_conv.Conv2dConfig
    ours: Callable[[], object]
    cudnn: Callable[[], object]


def conv_calls(spec: str, num_sms: int) -> ConvCalls:
    """Our plain call (the heuristic's config, ``spec``'s overrides applied) and
    ``F.conv2d`` on its channels_last views (``cudnn.benchmark``) for ``spec``
    (``NAME[:field=value...]``)."""
    from bench_corpus import cudnn_conv2d

    name, *fields = spec.split(":")
    shape = shape_of(name)
    n, h, w, c, k, r, s = (shape[x] for x in "NHWCKRS")
    geom = dict(stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"])
    x32, f32 = random_conv_inputs(n, h, w, c, k, r, s, dtype=torch.float32)
    x, flt = x32.bfloat16(), f32.bfloat16()
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    overrides = {key: parse_field(value) for key, value in (f.split("=") for f in fields)}
    config = overridden_default(problem, num_sms, overrides)
    out = torch.empty(problem.output_shape, device="cuda", dtype=torch.bfloat16)
    x_cl, w_cl = x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2)
    return ConvCalls(
        problem, x, flt, overrides, config,
        lambda: cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom),
        # Asymmetric padding: the pad kernel is among cuDNN's, as in the corpus benchmark.
        cudnn_conv2d(x_cl, w_cl, problem),
    )  # fmt: skip


def overridden_default(problem, num_sms: int, overrides: dict, has_residual: bool = False):
    """The heuristic's config for ``problem`` with ``overrides``' fields; their pseudo-field
    ``cuda_cores`` (default True) goes to ``heuristic_config`` instead (False: the
    tensor-core config where a CUDA-core rule takes the conv)."""
    fields = dict(overrides)
    cuda_cores = fields.pop("cuda_cores", True)
    default = heuristic_config(problem, num_sms, has_residual=has_residual, cuda_cores=cuda_cores)
    return dataclasses.replace(default, **fields)


def conv_durations(spec: str, num_sms: int, fused: bool = False, cudnn=None) -> dict:
    """Our call's and cuDNN's kernel durations for ``spec`` (``NAME[:field=value...]``);
    ``fused``: also our fused call's and, with ``cudnn`` (the frontend module), the
    frontend's fused graph's (``fused_durations``)."""
    calls = conv_calls(spec, num_sms)
    row = {
        "config": repr(calls.config),
        "ours": kernel_durations(calls.ours),
        "cudnn": kernel_durations(calls.cudnn),
    }
    if fused:
        fused_config = overridden_default(calls.problem, num_sms, calls.overrides, True)
        row |= fused_durations(calls.x, calls.flt, calls.problem, fused_config, cudnn)
    return row


def fused_durations(x, flt, problem, config, cudnn) -> dict:
    """Kernel durations of our ``relu(conv + b) + r`` call with ``config`` and, with
    ``cudnn``, of the frontend's fused graph (its fastest correct plan, as the corpus
    benchmark screens them; ``frontend_fused`` None where no plan checks)."""
    from bench_corpus import FrontendGraph, best_frontend_plan

    geom = dict(stride=problem.stride, padding=problem.padding, dilation=problem.dilation)
    bias = torch.randn(flt.shape[0], device="cuda", dtype=torch.bfloat16)
    res = torch.randn(problem.output_shape, device="cuda").bfloat16()
    out = torch.empty_like(res)
    row = {
        "fused_config": repr(config),
        "ours_fused": kernel_durations(
            lambda: cute_conv.conv2d_fprop_with_residual(
                x, flt, res, bias=bias, activation="relu", out=out, config=config, **geom
            )
        ),
    }
    if cudnn is not None:
        ref = torch.relu(conv2d_reference(x, flt, **geom) + bias.float()) + res.float()
        fe_out = torch.empty_like(res)
        graph = FrontendGraph(
            cudnn, problem, "after_activation", x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2),
            bias, res.permute(0, 3, 1, 2), fe_out.permute(0, 3, 1, 2),
        )  # fmt: skip
        screen = best_frontend_plan(graph, fe_out, ref)
        row["frontend_fused"] = None if screen["plan"] is None else kernel_durations(graph)
    return row


def summary_line(row: dict) -> str:
    """Each measured call's total kernel microseconds, by name."""
    names = ("ours", "cudnn", "ours_fused", "frontend_fused")
    return "  ".join(
        f"{name} {sum(row[name]['us']):7.2f} us" for name in names if row.get(name) is not None
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="+", help="NAME[:field=value...]: suite name or corpus key")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--fused", action="store_true",
        help="also the fused relu(conv + b) + r call and the cuDNN frontend's fused graph",
    )  # fmt: skip
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    cudnn = None
    if args.fused:
        from bench_corpus import _frontend

        cudnn = _frontend()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    trivial = torch.zeros(8, device="cuda")
    results = {
        "device": torch.cuda.get_device_name(),
        "trivial_kernel_us": kernel_durations(lambda: trivial.add_(1))["us"][0],
        "convs": {},
    }
    for spec in args.specs:
        row = results["convs"][spec] = conv_durations(spec, num_sms, args.fused, cudnn)
        print(f"{spec[:60]:60s} {summary_line(row)}", flush=True)
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
