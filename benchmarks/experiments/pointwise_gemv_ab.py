"""Few-row 1x1 convs on the CUDA-core kernel (``PointwiseGemv``) against the call's
tensor-core kernel and cuDNN (H100/H200):

    python benchmarks/experiments/pointwise_gemv_ab.py \
        n1_h1_w1_c222_k888_r1_s1_pad0.0.0.0_str1.1_dil1.1 --out gemv.json

For each corpus key (a 1x1 conv without padding) and each of a few ``PointwiseGemvConfig``
shapes: the kernel launched directly (``CompiledConv2d.launch``) on the call's tensors, plain
and fused (``relu(conv + b) + r``), each output checked against float32 from a NaN-poisoned
output (``compare_to_reference``; the committed ``pointwise_gemv*_H200.json`` were written
before, with the largest error over the output's largest magnitude); then CUPTI kernel durations (``kernel_durations``) and CUDA-graph replays (rounds
interleaved, medians) of the plain and fused calls of the default path, of the gemv
variants and of cuDNN (``bench_corpus.cudnn_conv2d``, ``cudnn.benchmark``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import torch
from cute_conv.kernels.common.epilogue import EpilogueSpec
from cute_conv.kernels.common.pointwise_gemv import PointwiseGemvConfig
from kernel_durations import kernel_durations
from tile_timeline import shape_of  # beside this script; puts benchmarks/ on the path

import cute_conv
from cute_conv.compile import compile_kernel, kernel_scalars
from cute_conv.gemv_rule import check_pointwise_gemv_fits, widest_vector
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_corpus import cudnn_conv2d  # noqa: E402
from models import replayed_us  # noqa: E402

# Config shapes timed, named r{rows}c{channels_per_warp}u{unroll} (``--variants`` replaces them).
VARIANTS = ("r1c2u2", "r2c2u2", "r4c2u2", "r8c2u1")


def gemv_call(problem, x, flt, out, source, bias, config, fused: bool):
    spec = EpilogueSpec(
        has_bias=fused, activation="relu" if fused else None, has_residual=fused,
        vector_dtype="bfloat16",
    )  # fmt: skip
    kernel = compile_kernel("sm_90a", act_dtype="bfloat16", config=config, epilogue=spec)
    scalars = kernel_scalars(problem, 1.0, 1.0 if fused else 0.0, 1)
    pointers = (
        x.data_ptr(), flt.data_ptr(), out.data_ptr(),
        source.data_ptr() if fused else 0, bias.data_ptr() if fused else 0, 0,
        0, 0, 0, 0, 0, 0, 0,
    )  # fmt: skip
    # The stream at call time: a CUDA-graph capture runs on a side stream.
    return lambda: kernel.launch(pointers, scalars, torch.cuda.current_stream().cuda_stream)


def variant_shape(name: str) -> tuple[int, int, int]:
    """``(rows, channels_per_warp, unroll)`` of a variant name such as ``r8c4u2``."""
    match = re.fullmatch(r"r(\d+)c(\d+)u(\d+)", name)
    if match is None:
        raise ValueError(f"variant {name!r} is not r<rows>c<channels per warp>u<unroll>")
    return tuple(int(g) for g in match.groups())


def gemv_problem(key: str) -> tuple[dict, cute_conv.Conv2dProblemShape]:
    """The corpus shape of ``key`` and its problem; ``ValueError`` unless the kernel runs it
    (a 1x1 without padding)."""
    shape = shape_of(key)
    problem = cute_conv.Conv2dProblemShape.from_shapes(
        [shape[x] for x in "NHWC"], [shape[x] for x in "KRSC"],
        stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"],
    )  # fmt: skip
    check_pointwise_gemv_fits(PointwiseGemvConfig(widest_vector(problem.C)), problem, 2, 2)
    return shape, problem


def measure(key: str, rounds: int, variants: tuple[str, ...]) -> dict:
    shape, problem = gemv_problem(key)
    n, h, w, c, k, r, s = (shape[x] for x in "NHWCKRS")
    geom = dict(stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"])
    x32, f32 = random_conv_inputs(n, h, w, c, k, r, s, dtype=torch.float32)
    vector = widest_vector(c)
    x, flt = x32.bfloat16(), f32.bfloat16()
    bias = torch.randn(k, device="cuda", dtype=torch.bfloat16)
    source = torch.randn(problem.output_shape, device="cuda", dtype=torch.bfloat16)
    ref = conv2d_reference(x.float(), flt.float(), **geom)
    ref_fused = torch.relu(ref + bias.float()) + source.float()
    row = {"key": key, "gemm_m": problem.gemm_m, "checks": {}, "kernel_us": {}, "graph_us": {}}

    def poisoned():
        return torch.full(problem.output_shape, float("nan"), device="cuda", dtype=torch.bfloat16)

    plain, fused = {}, {}
    out = poisoned()
    plain["ours"] = lambda out=out: cute_conv.conv2d_fprop(x, flt, out=out, **geom)
    out_f = poisoned()
    fused["ours"] = lambda out=out_f: cute_conv.conv2d_fprop_with_residual(
        x, flt, source, bias=bias, activation="relu", out=out, **geom
    )
    plain["cudnn"] = cudnn_conv2d(x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2), problem)
    checks = [("ours", plain["ours"], out, ref), ("ours_fused", fused["ours"], out_f, ref_fused)]
    for name in variants:
        rows, per_warp, unroll = variant_shape(name)
        config = PointwiseGemvConfig(vector, rows, per_warp, unroll)
        out_g, out_gf = poisoned(), poisoned()
        plain[name] = gemv_call(problem, x, flt, out_g, source, bias, config, False)
        fused[name] = gemv_call(problem, x, flt, out_gf, source, bias, config, True)
        checks += [
            (name, plain[name], out_g, ref),
            (f"{name}_fused", fused[name], out_gf, ref_fused),
        ]
    for name, call, result, expected in checks:
        call()
        torch.cuda.synchronize()
        check = compare_to_reference(result, expected)
        row["checks"][name] = {"ok": check.ok, "rel_err": check.rel_err}
    for label, calls in (("plain", plain), ("fused", fused)):
        for name, call in calls.items():
            row["kernel_us"][f"{label}:{name}"] = sum(kernel_durations(call)["us"])
        us = replayed_us(calls, rounds)
        row["graph_us"].update({f"{label}:{name}": t for name, t in us.items()})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keys", nargs="+")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    variants = tuple(args.variants.split(","))
    for name in variants:
        variant_shape(name)  # a bad name or key fails before any GPU work
    for key in args.keys:
        gemv_problem(key)
    rows = []
    for key in args.keys:
        row = measure(key, args.rounds, variants)
        rows.append(row)
        bad = [name for name, check in row["checks"].items() if not check["ok"]]
        g, kd = row["graph_us"], row["kernel_us"]
        best = min(variants, key=lambda v: g[f"plain:{v}"])
        best_f = min(variants, key=lambda v: g[f"fused:{v}"])
        print(
            f"{key[:-26]:34s} M={row['gemm_m']:4d} graph plain ours {g['plain:ours']:5.1f} "
            f"cudnn {g['plain:cudnn']:5.1f} gemv {best} {g[f'plain:{best}']:5.1f} | fused ours "
            f"{g['fused:ours']:5.1f} gemv {best_f} {g[f'fused:{best_f}']:5.1f} | kernel ours "
            f"{kd['plain:ours']:4.1f} cudnn {kd['plain:cudnn']:4.1f} gemv {kd[f'plain:{best}']:4.1f}"
            f" bad {bad}",
            flush=True,
        )
        args.out.write_text(
            json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
