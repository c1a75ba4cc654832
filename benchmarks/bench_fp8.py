"""fp8 conv benchmark on the shape suite, in one process:

    python benchmarks/bench_fp8.py [--shapes NAME,...] [--output benchmarks/FP8.md]

For every shape of ``benchmarks/shapes.json``: cute_conv on float8_e4m3fn inputs (per-tensor
scales, bf16 output, the default heuristic's config), cute_conv on bf16 inputs, cuDNN bf16
(torch conv2d on channels_last views, cudnn.benchmark=True) and, where the cuDNN frontend is
installed and builds it, the frontend's fp8 graph (conv on e4m3 -> x_scale * w_scale -> bf16,
best of its first plans). Each result is checked against a float32 reference first (fp8: one
computed on the dequantized inputs). Timing as ``bench.py``: interleaved rounds, medians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from bench import HERE, do_bench, geomean, time_interleaved

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs
from cute_conv.untuned import heuristic_config

FRONTEND_PLANS = 10
# The class of large problems: GEMM M >= 32k and GEMM K >= 1152.
LARGE_M, LARGE_K = 32768, 1152


def frontend_fp8(problem, qx, qf, x_scale, w_scale, out):
    """The cuDNN frontend's fp8 conv graph with its dequantization, on our tensors' channels_last
    views, and the best of its first plans; None (and why) where it cannot be built."""
    try:
        import cudnn
    except ImportError:
        return None, "cudnn frontend not installed"
    try:
        handle = cudnn.create_handle()
        cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
        g = cudnn.pygraph(io_data_type=cudnn.data_type.FP8_E4M3,
                          intermediate_data_type=cudnn.data_type.FLOAT,
                          compute_data_type=cudnn.data_type.FLOAT, handle=handle)  # fmt: skip
        x_cl, w_cl, out_cl = qx.permute(0, 3, 1, 2), qf.permute(0, 3, 1, 2), out.permute(0, 3, 1, 2)
        X = g.tensor(name="X", dim=list(x_cl.shape), stride=list(x_cl.stride()),
                     data_type=cudnn.data_type.FP8_E4M3)  # fmt: skip
        W = g.tensor(name="W", dim=list(w_cl.shape), stride=list(w_cl.stride()),
                     data_type=cudnn.data_type.FP8_E4M3)  # fmt: skip
        SX = g.tensor(name="SX", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.FLOAT)
        SW = g.tensor(name="SW", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=cudnn.data_type.FLOAT)
        (top, bottom), (left, right) = problem.padding
        y = g.conv_fprop(image=X, weight=W, pre_padding=[top, left], post_padding=[bottom, right],
                         stride=list(problem.stride), dilation=list(problem.dilation),
                         compute_data_type=cudnn.data_type.FLOAT)  # fmt: skip
        y = g.mul(a=g.mul(a=y, b=SX), b=SW)
        y.set_output(True).set_data_type(cudnn.data_type.BFLOAT16).set_stride(list(out_cl.stride()))
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        pack = {X: x_cl, W: w_cl, SX: x_scale.reshape(1, 1, 1, 1), SW: w_scale.reshape(1, 1, 1, 1),
                y: out_cl}  # fmt: skip
        best = None
        for index in range(min(FRONTEND_PLANS, int(g.get_execution_plan_count()))):
            try:
                g.build_plan_at_index(index)
                ws = torch.empty(max(int(g.get_workspace_size_plan_at_index(index)), 1),
                                 device="cuda", dtype=torch.uint8)  # fmt: skip
                run = lambda i=index, w=ws: g.execute_plan_at_index(pack, w, index=i, handle=handle)  # noqa: E731
                run()
                ms = do_bench(run)
            except Exception:  # a plan that does not build or run: the next one
                continue
            if best is None or ms < best[0]:
                best = (ms, run)
        if best is None:
            return None, "no plan ran"
        return best[1], ""
    except Exception as exc:
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"


def fp8_comparison(row: dict, problem, geom: dict, x: torch.Tensor, flt: torch.Tensor,
                   frontend: bool, num_sms: int) -> dict:  # fmt: skip
    """The fp8 side of one problem, on ``x`` and ``flt`` quantized per tensor to e4m3: ours
    (``fp8_ms``) and, with ``frontend``, the cuDNN frontend's fp8 graph (``cudnn_fp8_ms``),
    each checked first against a float32 reference on the dequantized inputs (into
    ``row["checks"]``; a frontend that does not build or check is noted in ``row``). Returns
    the functions to time."""
    qx, x_scale = cute_conv.quantize_fp8(x.float())
    qf, w_scale = cute_conv.quantize_fp8(flt.float())
    config = heuristic_config(problem, num_sms, element_bytes=1)
    row["fp8_config"] = repr(config)
    out = torch.full(problem.output_shape, float("nan"), device="cuda", dtype=torch.bfloat16)

    def ours():
        return cute_conv.conv2d_fprop(qx, qf, out=out, x_scale=x_scale, w_scale=w_scale,
                                      config=config, **geom)  # fmt: skip

    fns = {}
    ours()
    ref = conv2d_reference(qx.float() * x_scale, qf.float() * w_scale, **geom)
    check = compare_to_reference(out, ref, fp8_inputs=True)
    row.setdefault("checks", {})["fp8"] = {"ok": check.ok, "rel_err": check.rel_err}
    if check.ok:
        fns["fp8_ms"] = ours
    row["frontend_note"] = "not asked for"
    if frontend:
        out_fe = torch.full_like(out, float("nan"))
        fe, row["frontend_note"] = frontend_fp8(problem, qx, qf, x_scale, w_scale, out_fe)
        if fe is not None:
            fe()
            fe_check = compare_to_reference(out_fe, ref, fp8_inputs=True)
            if fe_check.ok:
                fns["cudnn_fp8_ms"] = fe
            else:
                row["frontend_note"] = f"wrong result: {fe_check}"
    return fns


def bench_shape(shape: dict, num_sms: int) -> dict:
    n, h, w, c, k, r, s = (shape[x] for x in "NHWCKRS")
    geom = dict(stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"])
    x32, f32 = random_conv_inputs(n, h, w, c, k, r, s, dtype=torch.float32)
    x, flt = x32.to(torch.bfloat16), f32.to(torch.bfloat16)
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    row = dict(name=shape["name"], gemm_m=problem.gemm_m, gemm_k=problem.gemm_k,
               flops=problem.flops)  # fmt: skip
    fns = fp8_comparison(row, problem, geom, x32, f32, True, num_sms)
    check = row["checks"]["fp8"]
    if "fp8_ms" not in fns:
        raise RuntimeError(f"{shape['name']}: the fp8 result failed its check ({check})")
    row["fp8_ok"], row["fp8_check"] = check["ok"], f"rel_err={check['rel_err']:.2e}"
    out16 = torch.full(problem.output_shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    bf16 = lambda: cute_conv.conv2d_fprop(x, flt, out=out16, **geom)  # noqa: E731
    bf16()
    row["bf16_ok"] = compare_to_reference(out16, conv2d_reference(x, flt, **geom)).ok
    row["fp8_vs_exact"] = exact_error(fns["fp8_ms"](), x32, f32, geom)
    x_cl, w_cl = x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2)
    fns |= {"bf16_ms": bf16, "cudnn_ms": lambda: F.conv2d(x_cl, w_cl, **geom)}
    row.update(time_interleaved(fns))
    row["config"] = row.pop("fp8_config")
    return row


def fp8_table(rows: list[dict]) -> list[str]:
    """The fp8 table and its summary, in Markdown lines. A row holds ``name``, ``gemm_m``,
    ``gemm_k``, ``flops``, the times ``fp8_ms``, ``bf16_ms`` (ours), ``cudnn_ms`` (cuDNN
    bf16) and, where the frontend ran, ``cudnn_fp8_ms``; ``fp8_ok``, ``fp8_vs_exact``,
    ``frontend_note`` and ``config`` (the fp8 config's repr). A row without ``fp8_ms``
    (its check failed) is listed as failed."""

    def tflops(row, key):
        return row["flops"] / row[key] / 1e9 if key in row else math.nan

    lines = [
        "| shape | GEMM M | GEMM K | ours fp8 TFLOP/s | ours bf16 | cuDNN bf16 | cuDNN-FE fp8 | "
        "fp8 / our bf16 | fp8 / cuDNN bf16 | fp8 check | fp8 vs exact fp32 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    failed = [row["name"] for row in rows if "fp8_ms" not in row]
    rows = [row for row in rows if "fp8_ms" in row]  # a failed check is not timed
    for row in rows:
        fe = f"{tflops(row, 'cudnn_fp8_ms'):.0f}" if "cudnn_fp8_ms" in row else "n/a"
        lines.append(
            f"| {row['name']} | {row['gemm_m']} | {row['gemm_k']} | {tflops(row, 'fp8_ms'):.0f} | "
            f"{tflops(row, 'bf16_ms'):.0f} | {tflops(row, 'cudnn_ms'):.0f} | {fe} | "
            f"{row['bf16_ms'] / row['fp8_ms']:.2f}x | {row['cudnn_ms'] / row['fp8_ms']:.2f}x | "
            f"{'ok' if row['fp8_ok'] else 'FAIL'} | {row['fp8_vs_exact']:.3f} |"
        )
    large = [r for r in rows if r["gemm_m"] >= LARGE_M and r["gemm_k"] >= LARGE_K]
    lines += [
        "",
        f"- Suite geomean, ours fp8 / ours bf16: "
        f"{geomean(r['bf16_ms'] / r['fp8_ms'] for r in rows):.2f}x; / cuDNN bf16: "
        f"{geomean(r['cudnn_ms'] / r['fp8_ms'] for r in rows):.2f}x.",
        f"- Large problems (GEMM M >= {LARGE_M}, K >= {LARGE_K}; {len(large)}): fp8 / our bf16 "
        f"{geomean(r['bf16_ms'] / r['fp8_ms'] for r in large):.2f}x, fp8 TFLOP/s "
        f"{', '.join(format(tflops(r, 'fp8_ms'), '.0f') for r in large)}.",
        "- cuDNN frontend fp8 not timed on: "
        + ("; ".join(f"{r['name']} ({r['frontend_note']})" for r in rows if r["frontend_note"])
           or "none"),
        "- Configs (the default heuristic, element_bytes=1): "
        + "; ".join(f"{r['name']} {r['config']}" for r in rows),
    ]
    if failed:
        lines.append(f"- **fp8 result failed its check (not timed): {', '.join(failed)}**")
    return lines


def exact_error(out: torch.Tensor, x32: torch.Tensor, f32: torch.Tensor, geom: dict) -> float:
    """The relative error of an fp8 conv's ``out`` against the float32 conv of the
    unquantized inputs: what quantization itself costs."""
    exact = conv2d_reference(x32, f32, **geom)
    return ((out.float() - exact).norm() / exact.norm()).item()


def write_report(rows: list[dict], path: Path, device: str) -> str:
    lines = [
        "# fp8 conv (float8_e4m3fn in, bf16 out) on the suite",
        "",
        f"Device: {device}; torch {torch.__version__}; cuDNN {torch.backends.cudnn.version()}; "
        f"{datetime.date.today()}. `python benchmarks/bench_fp8.py`; one process, "
        "interleaved rounds, medians. TFLOP/s count 2*M*N*K of the conv.",
        "",
        *fp8_table(rows),
    ]
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="")
    parser.add_argument("--output", type=Path, default=HERE / "FP8.md")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    shapes = json.loads((HERE / "shapes.json").read_text())["shapes"]
    if args.shapes:
        wanted = set(args.shapes.split(","))
        shapes = [s for s in shapes if s["name"] in wanted]
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for shape in shapes:
        row = bench_shape(shape, num_sms)
        print(row["name"], {k: v for k, v in row.items() if k.endswith("_ms")}, row["fp8_check"],
              row["frontend_note"], flush=True)  # fmt: skip
        rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    print(write_report(rows, args.output, torch.cuda.get_device_name()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
