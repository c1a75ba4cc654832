"""Benchmark cute_conv against cuDNN and torch on the shape suite, in one process.

    python benchmarks/bench.py [--shapes NAME,...] [--autotune] [--no-compile] [--no-fp8]
                               [--output benchmarks/RESULTS.md] [--chart benchmarks/ratios.png]

For every shape of ``benchmarks/shapes.json`` (NHWC bf16):
- plain conv: cute_conv.conv2d_fprop vs cuDNN (torch conv2d on channels_last views of the same
  memory, cudnn.benchmark=True), TFLOP/s and the share of the bf16 GEMM ceiling
  (torch.matmul 8192^3, measured in the same run);
- fused ``relu(conv + bias) + residual``: one cute_conv.conv2d_fprop_with_residual call vs the
  same expression in torch eager and under torch.compile;
- fp8 (``bench_fp8.fp8_comparison``): ours on e4m3 inputs, and the cuDNN frontend's fp8 graph
  where it is installed, timed with the plain conv, as a table of their own.
Every result is checked against a float32 reference before it is timed. The functions compared
on a shape are timed in ``ROUNDS`` rounds of ``triton.testing.do_bench`` (each a median), their
order reversed every other round so that none always runs right after the others' load; a time
is the median over the rounds. Also reports the host overhead of a cached call (and cuDNN's on
the same host) and the compile and disk-load times of a kernel. Writes a Markdown report and a
PNG chart of the ratios.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

import cute_conv
from cute_conv import compile as compile_mod
from cute_conv import tuning
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs
from cute_conv.untuned import heuristic_config

HERE = Path(__file__).resolve().parent
# Rounds of timing per shape: single do_bench runs of the same kernel differ by 5-10% between
# runs on a power-capped GPU, more than the gaps being measured.
ROUNDS = 3
# The host overhead: the median over loops of this many cached calls (the host's pace varies
# between loops).
HOST_LOOPS, HOST_CALLS_PER_LOOP = 5, 1000


def do_bench(fn) -> float:
    """Median milliseconds of ``fn``."""
    from triton.testing import do_bench as triton_do_bench

    return triton_do_bench(fn, warmup=25, rep=100, return_mode="median")


def time_interleaved(
    fns: dict[str, Callable[[], object]], rounds: int = ROUNDS
) -> dict[str, float]:
    """Milliseconds of each of ``fns``: the median over ``rounds`` rounds of ``do_bench``,
    with the order of the functions reversed every other round."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for i in range(rounds):
        for name in names if i % 2 == 0 else reversed(names):
            times[name].append(do_bench(fns[name]))
    return {name: statistics.median(values) for name, values in times.items()}


def gemm_ceiling_tflops() -> float:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = time_interleaved({"matmul": lambda: torch.matmul(a, b)})["matmul"]
    return 2 * 8192**3 / ms / 1e9


def fused_torch(x, w, bias, res, stride, padding, dilation):
    return torch.relu(F.conv2d(x, w, bias, stride, padding, dilation)) + res


def bench_shape(shape: dict, *, autotune: bool, with_compile: bool, fp8: bool) -> dict:
    n, h, w, c, k, r, s = (shape[x] for x in "NHWCKRS")
    geom = dict(stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"])
    x, flt = random_conv_inputs(n, h, w, c, k, r, s)
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    num_sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    # Explicit configs, so that a stored autotuner choice cannot stand in for the heuristic's.
    if autotune:
        config = tuned_config(x, flt, problem, geom, has_residual=False)
        fused_config = tuned_config(x, flt, problem, geom, has_residual=True)
    else:  # what a call without a config runs (the heuristic on the staged problem, rules)
        config = heuristic_config(problem, num_sms)
        fused_config = heuristic_config(problem, num_sms, has_residual=True)
    row = dict(
        name=shape["name"], problem=problem, config=config, fused_config=fused_config,
        tuned=autotune,
    )  # fmt: skip

    # ---- plain conv vs cuDNN ----
    out = torch.full(problem.output_shape, float("nan"), dtype=x.dtype, device="cuda")
    cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom)
    ref = conv2d_reference(x, flt, **geom)
    row["check"] = compare_to_reference(out, ref)
    x_cl, w_cl = x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2)  # channels_last NCHW views
    plain = {
        "ours_ms": lambda: cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom),
        "cudnn_ms": lambda: F.conv2d(x_cl, w_cl, **geom),
    }
    if fp8:  # timed with the plain conv: one interleaved group
        from bench_fp8 import exact_error, fp8_comparison

        fp8_row: dict = {}
        x32, f32 = x.float(), flt.float()
        plain |= fp8_comparison(fp8_row, problem, geom, x32, f32, True, num_sms)
    row.update(time_interleaved(plain))
    if fp8:
        check = fp8_row["checks"]["fp8"]
        row["fp8"] = dict(
            name=shape["name"], gemm_m=problem.gemm_m, gemm_k=problem.gemm_k,
            flops=problem.flops, bf16_ms=row["ours_ms"], cudnn_ms=row["cudnn_ms"],
            fp8_ok=check["ok"], frontend_note=fp8_row["frontend_note"],
            config=fp8_row["fp8_config"],
        )  # fmt: skip
        for key in ("fp8_ms", "cudnn_fp8_ms"):
            if key in row:
                row["fp8"][key] = row.pop(key)
        if check["ok"]:
            row["fp8"]["fp8_vs_exact"] = exact_error(plain["fp8_ms"](), x32, f32, geom)

    # ---- fused relu(conv + bias) + residual ----
    bias = torch.randn(k, device="cuda", dtype=x.dtype)
    res = torch.randn(problem.output_shape, device="cuda").to(x.dtype)
    res_cl = res.permute(0, 3, 1, 2)
    fused_out = torch.full_like(res, float("nan"))

    def ours_fused():
        return cute_conv.conv2d_fprop_with_residual(
            x, flt, res, bias=bias, activation="relu", out=fused_out, config=fused_config, **geom
        )

    ours_fused()
    fused_ref = torch.relu(ref + bias.float()) + res.float()
    row["fused_check"] = compare_to_reference(fused_out, fused_ref)
    args = (x_cl, w_cl, bias, res_cl, geom["stride"], geom["padding"], geom["dilation"])
    fused = {"fused_ms": ours_fused, "eager_ms": lambda: fused_torch(*args)}
    if with_compile:
        compiled = torch.compile(fused_torch, dynamic=False)
        compiled(*args)
        fused["compile_ms"] = lambda: compiled(*args)
    row.update(time_interleaved(fused))
    return row


def tuned_config(x, flt, problem, geom: dict, *, has_residual: bool) -> cute_conv.Conv2dConfig:
    """This device's stored autotuner choice for the shape (plain or with a residual), tuning
    it first when there is none."""
    key = tuning.problem_key(problem, x.dtype, x.dtype, has_residual)
    return tuning.lookup(x.device, key) or cute_conv.autotune(
        x.shape, flt.shape, **geom, device=x.device, has_residual=has_residual
    )


def host_overhead_us() -> tuple[float, float]:
    """Host time of a cached call on a tiny problem (no CUDA graph), ours and cuDNN's
    (F.conv2d of the same conv, for the host's pace): each the median over ``HOST_LOOPS``
    loops of ``HOST_CALLS_PER_LOOP`` calls."""
    x, flt = random_conv_inputs(1, 8, 8, 64, 64, 3, 3)
    out = torch.empty(1, 8, 8, 64, dtype=x.dtype, device="cuda")
    x_nchw, flt_nchw = x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2)
    ours = lambda: cute_conv.conv2d_fprop(x, flt, padding=1, out=out)  # noqa: E731
    cudnn = lambda: F.conv2d(x_nchw, flt_nchw, padding=1)  # noqa: E731
    return _host_us_per_call(ours), _host_us_per_call(cudnn)


def _host_us_per_call(call) -> float:
    for _ in range(100):
        call()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(HOST_LOOPS):
        start = time.perf_counter()
        for _ in range(HOST_CALLS_PER_LOOP):
            call()
        per_call.append((time.perf_counter() - start) / HOST_CALLS_PER_LOOP * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_call)


def compile_and_load_seconds() -> tuple[float, float]:
    """Compile time of a kernel no cache holds, and the time to load it back from disk."""
    config = cute_conv.Conv2dConfig(tile_n=192, stages=3, swizzle=7)
    key = dict(act_dtype=torch.float16, out_dtype=torch.float32, config=config)
    os.environ["CUTE_CONV_DISK_CACHE"] = "0"
    start = time.perf_counter()
    cute_conv.compile_kernel("sm_90a", **key)
    compile_s = time.perf_counter() - start
    os.environ["CUTE_CONV_DISK_CACHE"] = "1"
    compile_mod.clear_cache()
    cute_conv.compile_kernel("sm_90a", **key)  # compiles once more and stores
    compile_mod.clear_cache()
    start = time.perf_counter()
    cute_conv.compile_kernel("sm_90a", **key)
    return compile_s, time.perf_counter() - start


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def write_chart(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["name"] for r in rows]
    series = [("vs cuDNN (plain conv)", [r["cudnn_ms"] / r["ours_ms"] for r in rows])]
    series.append(("vs torch eager (fused)", [r["eager_ms"] / r["fused_ms"] for r in rows]))
    if all("compile_ms" in r for r in rows):
        series.append(("vs torch.compile (fused)", [r["compile_ms"] / r["fused_ms"] for r in rows]))
    fig, ax = plt.subplots(figsize=(12, 5))
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series):
        ax.bar([j + i * width for j in range(len(names))], values, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(names))])
    ax.set_xticklabels(names, rotation=45, ha="right")
    ax.set_ylabel("speedup of cute_conv (x)")
    ax.set_title(f"cute_conv on {torch.cuda.get_device_name()}: speedup per shape")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_report(rows, ceiling, host_us, compile_s, load_s, path: Path, chart: Path) -> str:
    ours_us, cudnn_us = host_us  # per cached call: ours, cuDNN's
    props = torch.cuda.get_device_properties(0)
    has_compile = all("compile_ms" in r for r in rows)
    plain = geomean(r["cudnn_ms"] / r["ours_ms"] for r in rows)
    fused_eager = geomean(r["eager_ms"] / r["fused_ms"] for r in rows)
    lines = [
        "# Benchmark results",
        "",
        f"- device: {props.name} ({props.multi_processor_count} SMs); date "
        f"{datetime.date.today().isoformat()}",
        f"- torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
        f"nvidia-cutlass-dsl {_version('nvidia-cutlass-dsl')}, apache-tvm-ffi "
        f"{_version('apache-tvm-ffi')}, Python {platform.python_version()}",
        f"- bf16 in/out, fp32 accumulation; everything in one process. Per shape, the functions "
        f"compared are timed in {ROUNDS} rounds of triton.testing.do_bench (medians), the order "
        f"reversed every other round; a time is the median round. cuDNN: torch conv2d on "
        f"channels_last views, cudnn.benchmark=True.",
        "- configs: "
        + (
            "autotuned per shape, plain and fused apart (this device's stored choices)"
            if rows and rows[0]["tuned"]
            else "default heuristic"
        ),
        f"- bf16 GEMM ceiling (torch.matmul 8192^3, this run): {ceiling:.0f} TFLOP/s",
        f"- **plain conv, geomean speedup vs cuDNN: {plain:.3f}x** "
        f"(min {min(r['cudnn_ms'] / r['ours_ms'] for r in rows):.2f}x)",
        f"- **fused relu(conv + bias) + residual, geomean speedup vs torch eager: "
        f"{fused_eager:.3f}x**",
    ]
    if has_compile:
        fused_compile = geomean(r["compile_ms"] / r["fused_ms"] for r in rows)
        lines.append(f"- fused, geomean speedup vs torch.compile: {fused_compile:.3f}x")
    lines += [
        f"- host overhead of a cached call (1x8x8x64 conv, no CUDA graph; median of {HOST_LOOPS} "
        f"loops of {HOST_CALLS_PER_LOOP} calls): {ours_us:.1f} us (cuDNN's F.conv2d of the same "
        f"conv on this host: {cudnn_us:.1f} us)",
        f"- compile time of a new kernel: {compile_s:.1f} s; loading it from the disk cache in a "
        f"fresh in-memory cache: {load_s * 1000:.0f} ms",
        "",
        "## Plain conv vs cuDNN",
        "",
        "| shape | GEMM M x N x K | tile, cluster | ours ms | cuDNN ms | ours TFLOP/s "
        "| cuDNN TFLOP/s | speedup | % of GEMM ceiling | check |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r["problem"]
        tflops = p.flops / r["ours_ms"] / 1e9
        lines.append(
            f"| {r['name']} | {p.gemm_m} x {p.gemm_n} x {p.gemm_k} | {_tile(r['config'])} "
            f"| {r['ours_ms']:.3f} | {r['cudnn_ms']:.3f} "
            f"| {tflops:.0f} | {p.flops / r['cudnn_ms'] / 1e9:.0f} "
            f"| {r['cudnn_ms'] / r['ours_ms']:.2f}x | {100 * tflops / ceiling:.0f}% "
            f"| {'ok' if r['check'].ok else 'FAIL'} ({r['check'].rel_err:.1e}) |"
        )
    lines += [
        "",
        "## Fused relu(conv + bias) + residual",
        "",
        "| shape | tile, cluster | ours ms | eager ms | torch.compile ms | vs eager "
        "| vs torch.compile | check |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        comp = r.get("compile_ms")
        comp_ms, comp_ratio = (
            ("-", "-") if comp is None else (f"{comp:.3f}", f"{comp / r['fused_ms']:.2f}x")
        )
        lines.append(
            f"| {r['name']} | {_tile(r['fused_config'])} | {r['fused_ms']:.3f} "
            f"| {r['eager_ms']:.3f} | {comp_ms} "
            f"| {r['eager_ms'] / r['fused_ms']:.2f}x | {comp_ratio} "
            f"| {'ok' if r['fused_check'].ok else 'FAIL'} ({r['fused_check'].rel_err:.1e}) |"
        )
    fp8_rows = [r["fp8"] for r in rows if "fp8" in r]
    if fp8_rows:
        from bench_fp8 import fp8_table

        lines += [
            "",
            "## fp8 (float8_e4m3fn in, bf16 out) vs our bf16 and cuDNN bf16",
            "",
            "Ours on e4m3 inputs quantized per tensor (the default heuristic's fp8 config, also "
            "with --autotune), timed in the plain conv's interleaved rounds; cuDNN-FE fp8: the "
            "cuDNN frontend's fp8 conv graph (best of its first plans). Checked against a "
            "float32 reference on the dequantized inputs.",
            "",
            *fp8_table(fp8_rows),
        ]
    text = "\n".join(lines) + f"\n\n![speedups]({chart.name})\n"
    path.write_text(text)
    return text


def _tile(config: cute_conv.Conv2dConfig) -> str:
    return f"{config.tile_m}x{config.tile_n}, {config.cluster_m}x{config.cluster_n}"


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", help="comma-separated shape names (default: all)")
    parser.add_argument(
        "--autotune",
        action="store_true",
        help="run each shape's autotuned configs (plain and fused), tuning those this device "
        "has no stored choice for first",
    )
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--no-fp8", action="store_true", help="skip the fp8 comparison")
    parser.add_argument("--output", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument("--chart", type=Path, default=HERE / "ratios.png")
    args = parser.parse_args()
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("bench: needs an H100/H200 (compute capability 9.0); nothing was measured.")
        return 1
    torch.backends.cudnn.benchmark = True
    shapes = json.loads((HERE / "shapes.json").read_text())["shapes"]
    if args.shapes:
        shapes = [s for s in shapes if s["name"] in set(args.shapes.split(","))]
    ceiling = gemm_ceiling_tflops()
    rows = []
    for shape in shapes:
        row = bench_shape(
            shape, autotune=args.autotune, with_compile=not args.no_compile, fp8=not args.no_fp8
        )
        comp = row.get("compile_ms")
        print(
            f"{row['name']:>16}: plain {row['cudnn_ms'] / row['ours_ms']:.2f}x cuDNN | fused "
            f"{row['eager_ms'] / row['fused_ms']:.2f}x eager"
            + (f", {comp / row['fused_ms']:.2f}x compile" if comp else "")
            + f" | {row['check']} | {row['fused_check']}",
            flush=True,
        )
        rows.append(row)
    overhead = host_overhead_us()
    compile_s, load_s = compile_and_load_seconds()
    write_chart(rows, args.chart)
    print(write_report(rows, ceiling, overhead, compile_s, load_s, args.output, args.chart))
    checks_ok = all(
        r["check"].ok and r["fused_check"].ok and r.get("fp8", {}).get("fp8_ok", True) for r in rows
    )
    return 0 if checks_ok else 2


if __name__ == "__main__":
    raise SystemExit(main())
