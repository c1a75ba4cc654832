"""One profiled call each of our plain conv and cuDNN's (``F.conv2d``), for Nsight Compute
(H100/H200):

    ncu --profile-from-start off --clock-control none --set full -o deep_1x1 \
        python benchmarks/experiments/ncu_conv.py n8_h65_w65_c1024_k512_r1_s1_pad0.0.0.0_str1.1_dil1.1
    python benchmarks/experiments/ncu_conv.py --report deep_1x1.ncu-rep > deep_1x1.txt

For each suite shape or corpus key (``:field=value`` after it overrides a field of the
heuristic's bf16 config, as ``kernel_durations.py`` takes them), both calls run warm (our
kernel compiled, cuDNN's algorithm chosen) outside the profiled range, then once each inside
it, so the report holds exactly their kernels. ``--report`` reads such a report back
(``ncu --import``): per kernel the headline metrics, its stall reasons by warp-state sample
and the SASS instructions that gathered the most samples, to compare where our kernel's
warps wait against cuDNN's on the same problem.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
from pathlib import Path

# Metrics of the report's raw page that say how busy each unit was and at which clock.
HEADLINE = (
    "gpu__time_duration.sum",
    "sm__cycles_elapsed.avg.per_second",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active",
    "lts__t_sector_hit_rate.pct",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "smsp__inst_executed.sum",
    "launch__grid_size",
    "launch__cluster_dim_x",
    "launch__cluster_dim_y",
)
TOP_INSTRUCTIONS = 25


def profile_calls(specs: list[str]) -> None:
    """Run each spec's two calls warm, then once each between ``cudaProfilerStart/Stop``."""
    import torch
    from kernel_durations import conv_calls  # beside this script

    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    for spec in specs:
        pair = conv_calls(spec, num_sms)
        calls = (pair.ours, pair.cudnn)
        for call in calls:
            for _ in range(3):
                call()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for call in calls:
            call()
            torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def ncu_csv(report: Path, *args: str) -> list[list[str]]:
    text = subprocess.run(
        ["ncu", "--import", str(report), "--csv", *args],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return list(csv.reader(io.StringIO(text)))


def _number(cell: str) -> float:
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return 0.0


STALL_PREFIX = "smsp__pcsamp_warps_issue_stalled_"


def summarize(report: Path) -> str:
    """Each kernel's headline metrics and stall reasons, and its most-sampled SASS lines."""
    lines = []
    raw = ncu_csv(report, "--page", "raw", "--metrics", ",".join(HEADLINE))
    header, rows = raw[0], [r for r in raw[2:] if r]
    for row in rows:
        lines.append(
            f"== kernel {row[header.index('ID')]}: {row[header.index('Kernel Name')][:110]}"
        )
        lines += [f"  {m} = {row[header.index(m)]}" for m in HEADLINE if m in header]
    stalls = ncu_csv(report, "--page", "raw", "--metrics", f"regex:{STALL_PREFIX}.*")
    s_header, s_rows = stalls[0], [r for r in stalls[2:] if r]
    reasons = [
        (i, name[len(STALL_PREFIX) :])
        for i, name in enumerate(s_header)
        if name.startswith(STALL_PREFIX) and not name.endswith("_not_issued")
    ]
    for row in s_rows:
        pairs = sorted(((_number(row[i]), reason) for i, reason in reasons), reverse=True)
        total = sum(v for v, _ in pairs) or 1.0
        top = ", ".join(f"{reason} {v / total:.0%}" for v, reason in pairs[:10])
        lines.append(f"== stalls, kernel {row[s_header.index('ID')]}: {top}")
    for kernel in range(len(rows)):
        lines.append(f"== most-sampled SASS, kernel {kernel}")
        source = ncu_csv(
            report, "--page", "source", "--print-source", "sass",
            "--launch-skip", str(kernel), "--launch-count", "1",
        )  # fmt: skip
        head_at = next(i for i, r in enumerate(source) if "Source" in r)
        head, body = source[head_at], [r for r in source[head_at + 1 :] if len(r) > 3]
        col = next(
            (i for i, h in enumerate(head) if h.startswith("Warp Stall Sampling (All")), None
        )
        if col is None:
            lines.append(f"  no sampling column in {head}")
            continue
        total = sum(_number(r[col]) for r in body) or 1.0
        for r in sorted(body, key=lambda r: _number(r[col]), reverse=True)[:TOP_INSTRUCTIONS]:
            lines.append(f"  {_number(r[col]) / total:6.1%}  {r[head.index('Source')][:100]}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="*", help="NAME[:field=value...]: suite name or corpus key")
    parser.add_argument("--report", type=Path, help="summarize this .ncu-rep instead")
    args = parser.parse_args()
    if args.report is not None:
        print(summarize(args.report))
        return 0
    if not args.specs:
        parser.error("give specs to profile, or --report")
    profile_calls(args.specs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
