"""Host microseconds of each step of an eager call, bf16 against fp8, unstaged against the
staged stems (H100/H200):

    python benchmarks/experiments/host_parts.py --rounds 3 > host_parts.log

Each step is called in loops of ``bench.HOST_CALLS_PER_LOOP`` calls without synchronizing
(the GPU work of these convs is a few microseconds, so the host sets the pace), and reported
as the median of five loops, as ``bench.py`` times its host overhead (``host_parts_H200.log``
came from a first copy that warmed each step up by 50 calls, not 100). The steps: the public
call, ``dispatch.conv2d`` under it, the cached plan lookup and its key, an output
allocation, and the launches (the staging kernel's and the conv kernel's alone; since session
97 also the staging kernel into a kept buffer and both launches in turn). The
host's speed moves between and within runs: compare steps measured in one round.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from bench import _host_us_per_call as host_us  # noqa: E402

import cute_conv  # noqa: E402
from cute_conv import dispatch  # noqa: E402
from cute_conv.cuda_context import current_raw_stream  # noqa: E402
from cute_conv.staging import _bytes, _stage_filter, staged_weights  # noqa: E402
from cute_conv.testing import random_conv_inputs  # noqa: E402
from cute_conv.untuned import heuristic_config  # noqa: E402


def steps(n, h, c, k, r, stride, pad, fp8, config) -> tuple[str, dict[str, float]]:
    """The host time of each step of one conv's eager call (square maps and filters)."""
    x, f = random_conv_inputs(n, h, h, c, k, r, r)
    geom = dict(stride=stride, padding=pad)
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, f.shape, **geom)
    out = torch.empty(problem.output_shape, device="cuda", dtype=torch.bfloat16)
    scales, scale_kwargs = None, {}
    if fp8:
        (x, x_scale), (f, w_scale) = (cute_conv.quantize_fp8(t.float()) for t in (x, f))
        scale_kwargs = dict(x_scale=x_scale, w_scale=w_scale)
        scales = (x_scale, w_scale, None, None, None)
    if config == "heuristic":
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        config = heuristic_config(problem, sms, element_bytes=1 if fp8 else 2)

    def call() -> None:
        cute_conv.conv2d_fprop(x, f, out=out, config=config, **scale_kwargs, **geom)

    call()
    args = (stride, pad, 1, 1.0, 0.0, "after_activation", None, None, None, config)
    plan = dispatch._plan(x, f, None, out, None, None, args, scales)
    raw = current_raw_stream(0)
    row = {
        "call": host_us(call),
        "dispatch.conv2d": host_us(
            lambda: dispatch.conv2d(x, f, None, None, None, out, None, args, scales)
        ),
        "_plan (cached)": host_us(
            lambda: dispatch._plan(x, f, None, out, None, None, args, scales)
        ),
        "_plan_key": host_us(lambda: dispatch._plan_key(x, f, None, out, None, None, args, scales)),
        "current_raw_stream": host_us(lambda: current_raw_stream(0)),
        "torch.cuda.is_current_stream_capturing": host_us(torch.cuda.is_current_stream_capturing),
        "x.new_empty(out shape)": host_us(lambda: x.new_empty(plan.out_shape)),
    }
    scale_pointers = (0,) * 5 if scales is None else dispatch._scale_pointers(scales)
    if plan.needs_staging:
        staging, launch = plan.staging, plan.staging.activation_launch
        x_bytes = _bytes(x)
        row["x.view(uint8)"] = host_us(lambda: x.view(torch.uint8))
        row["activation_launch.run"] = host_us(lambda: launch.run(x_bytes, raw))
        x_k = launch.run(x_bytes, raw).view(x.dtype)
        f_k = _stage_filter(_bytes(f), staging).view(f.dtype)
        out_k = out.view(staging.kernel_problem.output_shape) if staging.on_view else out

        def conv_launch() -> None:
            plan.launch(
                x_k, f_k, out_k, None, None, None,
                scale_pointers=scale_pointers, device_index=0, stream=raw,
            )  # fmt: skip

        row["plan.launch (conv kernel only)"] = host_us(conv_launch)
        # The staging kernel into a kept buffer (no allocation), then both launches of a
        # staged call in turn: does a launch cost more after another kernel's?
        staging_kernel = next(iter(launch.kernels.values()))
        kept = x_bytes.new_empty(launch.shape)

        def staging_launch() -> None:
            staging_kernel.launch(x_bytes.data_ptr(), kept.data_ptr(), *launch.geometry, raw)

        def both_launches() -> None:
            staging_launch()
            conv_launch()

        row["staging kernel.launch (kept buffer)"] = host_us(staging_launch)
        row["staging + conv launches in turn"] = host_us(both_launches)
        how = (staging, raw)
        row["staged_weights.get (hit)"] = host_us(
            lambda: staged_weights.get(f, how, lambda: f_k, capturing=False)
        )
    else:
        pointers = (x.data_ptr(), f.data_ptr(), out.data_ptr(), 0, 0, 0, *scale_pointers, 0, 0)
        row["kernel.launch (conv kernel only)"] = host_us(
            lambda: plan.kernel.launch(pointers, plan.scalars, raw)
        )
    return f"{type(plan.kernel.key.config).__name__} staged={plan.needs_staging}", row


# The bf16 s2 stem's own default is the direct CUDA-core kernel (unstaged): this config stages it
# as the fp8 call is staged.
TENSOR_CORES = cute_conv.Conv2dConfig(tile_m=128, tile_n=32, tile_k=32)

CASES = {
    # label: (N, H, C, K, R, stride, padding, fp8, config)
    "tiny 8x8 C=64 bf16": (1, 8, 64, 64, 3, 1, 1, False, None),
    "tiny 8x8 C=64 fp8": (1, 8, 64, 64, 3, 1, 1, True, None),
    "tiny 8x8 C=64 fp8 config=": (1, 8, 64, 64, 3, 1, 1, True, "heuristic"),
    "stem s2 C=3 K=32 fp8 config=": (1, 224, 3, 32, 3, 2, 1, True, "heuristic"),
    "stem s2 C=3 K=32 bf16 tensor-core config": (1, 224, 3, 32, 3, 2, 1, False, TENSOR_CORES),
    "stem s1 C=3 K=64 fp8": (1, 224, 3, 64, 3, 1, 1, True, None),
    "stem s1 C=3 K=64 bf16": (1, 224, 3, 64, 3, 1, 1, False, None),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="passes over every case")
    args = parser.parse_args()
    for i in range(args.rounds):
        print(f"#### round {i}")
        for label, case in CASES.items():
            try:
                plan, row = steps(*case)
            except Exception:  # noqa: BLE001 - one case failing leaves the others to run
                print(f"== {label} FAILED")
                traceback.print_exc()
                continue
            print(f"== {label}: config {plan}", flush=True)
            for name, value in row.items():
                print(f"   {name:42s} {value:7.2f} us", flush=True)


if __name__ == "__main__":
    main()
