"""Benchmark conv2d_fprop against cuDNN on the shape suite, in one process.

    python benchmarks/bench.py [--shapes NAME,NAME] [--output benchmarks/RESULTS.md]

For every shape of ``benchmarks/shapes.json``: check the result against a float32 reference,
then time cute_conv and cuDNN (torch conv2d on channels_last tensors, cudnn.benchmark=True)
with the median of ``triton.testing.do_bench``, and report TFLOP/s, the ratio and the share of
the bf16 GEMM ceiling (torch.matmul 8192^3 measured in the same run). Writes a Markdown report.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
from pathlib import Path

import torch
import torch.nn.functional as F

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs

HERE = Path(__file__).resolve().parent


def do_bench(fn) -> float:
    """Median milliseconds of ``fn``."""
    from triton.testing import do_bench as triton_do_bench

    return triton_do_bench(fn, warmup=25, rep=100, return_mode="median")


def gemm_ceiling_tflops() -> float:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = do_bench(lambda: torch.matmul(a, b))
    return 2 * 8192**3 / ms / 1e9


def bench_shape(shape: dict) -> dict:
    n, h, w, c, k, r, s = (shape[x] for x in "NHWCKRS")
    geom = dict(stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"])
    act, flt = random_conv_inputs(n, h, w, c, k, r, s)
    problem = cute_conv.Conv2dProblemShape.from_shapes(act.shape, flt.shape, **geom)
    out = torch.full(problem.output_shape, float("nan"), dtype=act.dtype, device="cuda")
    cute_conv.conv2d_fprop(act, flt, out=out, **geom)
    report = compare_to_reference(out, conv2d_reference(act, flt, **geom))

    ours_ms = do_bench(lambda: cute_conv.conv2d_fprop(act, flt, out=out, **geom))
    # cuDNN on the same NHWC memory: NCHW-shaped channels_last views, no copies.
    x_cl = act.permute(0, 3, 1, 2)
    w_cl = flt.permute(0, 3, 1, 2)
    cudnn_ms = do_bench(lambda: F.conv2d(x_cl, w_cl, **geom))
    flops = problem.flops
    return dict(
        name=shape["name"],
        gemm=(problem.gemm_m, problem.gemm_n, problem.gemm_k),
        config=cute_conv.default_config(problem),
        ours_ms=ours_ms,
        cudnn_ms=cudnn_ms,
        ours_tflops=flops / ours_ms / 1e9,
        cudnn_tflops=flops / cudnn_ms / 1e9,
        ratio=cudnn_ms / ours_ms,
        check=report,
    )


def write_report(rows: list[dict], ceiling: float, path: Path) -> str:
    props = torch.cuda.get_device_properties(0)
    geomean = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    lines = [
        "# Benchmark: cute_conv.conv2d_fprop vs cuDNN",
        "",
        f"- device: {props.name} ({props.multi_processor_count} SMs)",
        f"- date: {datetime.date.today().isoformat()}; torch {torch.__version__}, cuDNN "
        f"{torch.backends.cudnn.version()}, nvidia-cutlass-dsl {_dsl_version()}, "
        f"Python {platform.python_version()}",
        "- bf16 in/out, fp32 accumulation; cuDNN = torch conv2d on channels_last tensors with "
        "cudnn.benchmark=True; median of triton.testing.do_bench; all in one process",
        f"- bf16 GEMM ceiling (torch.matmul 8192^3, same run): {ceiling:.0f} TFLOP/s",
        f"- **geomean speed ratio (cuDNN time / ours): {geomean:.3f}x** over {len(rows)} shapes",
        "",
        "| shape | GEMM M x N x K | config (tile_n) | ours ms | cuDNN ms | ours TFLOP/s "
        "| cuDNN TFLOP/s | ratio | % of GEMM ceiling | check |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m, n, k = r["gemm"]
        lines.append(
            f"| {r['name']} | {m} x {n} x {k} | {r['config'].tile_n} | {r['ours_ms']:.3f} "
            f"| {r['cudnn_ms']:.3f} | {r['ours_tflops']:.0f} | {r['cudnn_tflops']:.0f} "
            f"| {r['ratio']:.2f}x | {100 * r['ours_tflops'] / ceiling:.0f}% "
            f"| {'ok' if r['check'].ok else 'FAIL'} (rel {r['check'].rel_err:.1e}) |"
        )
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def _dsl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-cutlass-dsl")
    except PackageNotFoundError:
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", help="comma-separated shape names (default: all)")
    parser.add_argument("--output", type=Path, default=HERE / "RESULTS.md")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench: no CUDA GPU here; the benchmark needs an H100/H200.")
        return 1
    torch.backends.cudnn.benchmark = True
    shapes = json.loads((HERE / "shapes.json").read_text())["shapes"]
    if args.shapes:
        wanted = set(args.shapes.split(","))
        shapes = [s for s in shapes if s["name"] in wanted]
    ceiling = gemm_ceiling_tflops()
    rows = []
    for shape in shapes:
        row = bench_shape(shape)
        print(
            f"{row['name']:>18}: ours {row['ours_tflops']:6.0f} TFLOP/s, cuDNN "
            f"{row['cudnn_tflops']:6.0f}, ratio {row['ratio']:.2f}x, {row['check']}",
            flush=True,
        )
        rows.append(row)
    print(write_report(rows, ceiling, args.output))
    return 0 if all(r["check"].ok for r in rows) else 2


if __name__ == "__main__":
    raise SystemExit(main())
