"""Host time per call of corpus problems, staged and not (H100/H200):

    python benchmarks/experiments/staged_host_time.py --out host_time.json \
        n8_h11_w4_c346_k460_r2_s2_pad0.1.0.0_str3.3_dil1.1 \
        n8_h13_w21_c256_k3_r1_s1_pad0.0.0.0_str1.1_dil1.1

The corpus's worst eager rows are staged calls (C not a multiple of 8, unfolded strides)
whose CUDA-graph replays win: the host, not the GPU, sets their eager pace. Per problem and
per call form (the plain conv and both fused orders, at the heuristic's configs, as
``bench_corpus.py`` calls them): ``host_us``, the time to issue 300 calls with no
synchronize between them; ``eager_us`` and ``graph_us``, ``triton.testing.do_bench``'s
median of the call and of its CUDA-graph replay; ``python_calls``, the Python function calls
per call, and ``top_functions``, the functions of most own time over ``PROFILED_CALLS`` calls
(cProfile: its own overhead inflates the times, so read them against each other);
``kernels``, the kernels one call launches (torch.profiler). Nothing is checked here: ``bench_corpus.py`` checks these
calls. ``--fp8`` adds the fp8 plain call (e.g. the RGB stem's, which the fp8 corpus timed at
44.5 us eager against 13.8 replayed on an H200: ``fp8_stem_host_H200.log``).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

import torch
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
from bench_corpus import ORDERS, load_corpus, problem_operands  # noqa: E402
from models import replay_of  # noqa: E402

import cute_conv  # noqa: E402
from cute_conv.untuned import heuristic_config  # noqa: E402

ISSUED_CALLS = 300
PROFILED_CALLS = 100
TOP_FUNCTIONS = 25


def call_forms(p: dict, fp8: bool = False) -> dict:
    """The plain call and the two fused orders of corpus problem ``p``, on fresh operands
    (``fp8``: and the plain call on their e4m3 quantization, per-tensor scales, bf16 output,
    the heuristic's fp8 config, as ``bench_corpus.py --fp8`` calls it)."""
    problem, geom, x, flt, config, fused_config = problem_operands(p)
    out = torch.empty(problem.output_shape, dtype=x.dtype, device="cuda")
    bias = torch.randn(p["K"], device="cuda", dtype=x.dtype)
    res = torch.randn(problem.output_shape, device="cuda").to(x.dtype)
    fused_out = torch.empty_like(res)
    forms = {"plain": lambda: cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom)}
    for order in ORDERS:
        forms[order] = lambda order=order: cute_conv.conv2d_fprop_with_residual(
            x, flt, res, bias=bias, activation="relu", residual_order=order, out=fused_out,
            config=fused_config, **geom,
        )  # fmt: skip
    if fp8:
        (qx, x_scale), (qf, w_scale) = (cute_conv.quantize_fp8(t.float()) for t in (x, flt))
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        fp8_config = heuristic_config(problem, sms, element_bytes=1)
        forms["fp8"] = lambda: cute_conv.conv2d_fprop(
            qx, qf, out=out, x_scale=x_scale, w_scale=w_scale, config=fp8_config, **geom
        )
    return forms


def measure(fn) -> dict:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(ISSUED_CALLS):
        fn()
    host_us = (time.perf_counter() - start) / ISSUED_CALLS * 1e6
    torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.runcall(fn)
    calls = pstats.Stats(profile).total_calls
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(PROFILED_CALLS):
        fn()
    profile.disable()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return {
        "host_us": host_us,
        "eager_us": do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3,
        "graph_us": do_bench(replay_of(fn), warmup=25, rep=100, return_mode="median") * 1e3,
        "python_calls": calls,
        "top_functions": top_functions(profile),
        "kernels": kernels,
    }


def top_functions(profile: cProfile.Profile) -> list[dict]:
    """The functions of most own time in ``profile``, per call of the form."""
    stats = pstats.Stats(profile).stats
    rows = [
        {
            "function": f"{Path(file).name}:{line}:{name}",
            "calls": calls / PROFILED_CALLS,
            "own_us": own / PROFILED_CALLS * 1e6,
            "cumulative_us": cumulative / PROFILED_CALLS * 1e6,
        }
        for (file, line, name), (_, calls, own, cumulative, _) in stats.items()
    ]
    return sorted(rows, key=lambda row: -row["own_us"])[:TOP_FUNCTIONS]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keys", nargs="+", help="corpus keys")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--fp8", action="store_true", help="also the fp8 plain call")
    args = parser.parse_args()
    corpus = {p["key"]: p for p in load_corpus()}
    rows = []
    for key in args.keys:
        for form, fn in call_forms(corpus[key], args.fp8).items():
            rows.append({"key": key, "form": form, **measure(fn)})
            shown = {k: v for k, v in rows[-1].items() if k not in ("kernels", "top_functions")}
            print(json.dumps(shown), flush=True)
            args.out.write_text(
                json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1)
            )


if __name__ == "__main__":
    main()
