"""Where a small conv's time goes: the heuristic's config against single changes of it, on
the corpus's latency-bound problems, replayed from CUDA graphs (the GPU's time, not the
host's).

    python benchmarks/sweep_latency.py --split train [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_latency.py --split heldout                     # the judged part
    python benchmarks/sweep_latency.py --fit                               # no GPU

The problems: corpus problems of at most ``MAX_GFLOP`` GFLOP that run unstaged (C a multiple
of 8, no stem staging), where a launch's fixed costs are most of the time. Per problem, in one
process: the heuristic's config (``default_config``), each of ``variants`` of it (one field
changed: no cluster, no programmatic launch, 32-wide k-tiles, stream-K toggled, a 128-wide
tile), and cuDNN's ``F.conv2d``, each checked against the float32 reference, captured in a
CUDA graph and its replays timed as ``bench.py`` times (interleaved rounds of ``do_bench``
medians, the L2 flushed between calls). Rows are appended to ``latency_sweep.json`` as they
are measured; a rerun skips the problems already there.

``--fit`` reports, per variant, the geomean over the training problems of the heuristic's
time over the variant's (> 1: the change pays), and the same on the held-out problems, which
a rule fitted on the first must then hold on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean, time_interleaved  # noqa: E402
from bench_corpus import load_corpus, problem_shape  # noqa: E402
from sweep_stream_k import with_stream_k  # noqa: E402

RESULTS_PATH = HERE / "latency_sweep.json"
MAX_GFLOP = 0.5


def latency_bound(problems: list[dict]) -> list[dict]:
    """The problems of the sweep (see the module docstring)."""
    from cute_conv.staging import kernel_problem_for

    return [
        p
        for p in problems
        if p["gflop"] <= MAX_GFLOP and kernel_problem_for(problem_shape(p)).C == p["C"]
    ]


def variants(config) -> dict[str, object]:
    """Single changes of the heuristic's ``config`` that apply to it, by name."""
    replace = dataclasses.replace
    changed = {
        "no_cluster": replace(config, cluster_m=1, cluster_n=1)
        if config.cluster_m * config.cluster_n > 1
        else None,
        "no_pdl": replace(config, programmatic_launch=False),
        "tile_k32": replace(config, tile_k=32) if config.tile_k == 64 else None,
        "stream_k": with_stream_k(config, not config.stream_k),
        "tile_n128": replace(config, tile_n=128, tile_m=128, tile_w=0, halo_h=0, halo_w=0)
        if config.tile_n == 64
        else None,
    }
    return {name: c for name, c in changed.items() if c is not None and c != config}


def measure(p: dict, num_sms: int) -> dict:
    import torch
    import torch.nn.functional as F
    from models import replay_of

    import cute_conv
    from cute_conv.reference import conv2d_reference
    from cute_conv.staging import kernel_problem_for
    from cute_conv.testing import compare_to_reference, random_conv_inputs

    problem = problem_shape(p)
    geom = dict(stride=problem.stride, padding=problem.padding, dilation=problem.dilation)
    x, flt = random_conv_inputs(*(p[d] for d in "NHWCKRS"))
    ref = conv2d_reference(x, flt, **geom)
    heuristic = cute_conv.default_config(kernel_problem_for(problem), num_sms)
    configs = {"heuristic": heuristic, **variants(heuristic)}
    row = {
        "key": p["key"], "split": p["split"], "tags": p["tags"], "gflop": p["gflop"],
        "configs": {name: dataclasses.asdict(c) for name, c in configs.items()},
        "errors": {}, "ms": {},
    }  # fmt: skip
    fns = {}
    for name, config in configs.items():
        out = torch.full(problem.output_shape, float("nan"), dtype=x.dtype, device="cuda")

        def conv(config=config, out=out):
            return cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom)

        try:
            replay = replay_of(conv)
            replay()
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - recorded, the other variants still run
            row["errors"][name] = f"{type(e).__name__}: {e}"[:300]
            continue
        check = compare_to_reference(out, ref)
        if check.ok:
            fns[name] = replay
        else:
            row["errors"][name] = f"check failed: rel_err {check.rel_err:.2e}"
    (top, bottom), (left, right) = problem.padding
    if top == bottom and left == right:
        x_cl, w_cl = x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2)
        fns["cudnn"] = replay_of(
            lambda: F.conv2d(x_cl, w_cl, None, problem.stride, (top, left), problem.dilation)
        )
    row["ms"] = time_interleaved(fns)
    return row


def run(args: argparse.Namespace) -> int:
    import torch

    torch.backends.cudnn.benchmark = True
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    data = json.loads(args.results.read_text()) if args.results.exists() else {"rows": []}
    data["device"] = torch.cuda.get_device_name()
    done = {r["key"] for r in data["rows"]}
    start = time.perf_counter()
    chosen = [p for p in latency_bound(load_corpus()) if p["split"] == args.split]
    for p in chosen:
        if p["key"] in done:
            continue
        if time.perf_counter() - start > args.max_seconds:
            print(f"sweep_latency: stopped at --max-seconds {args.max_seconds:g}")
            break
        row = measure(p, num_sms)
        data["rows"].append(row)
        args.results.write_text(json.dumps(data, indent=1) + "\n")
        ms = row["ms"]
        cells = " ".join(f"{n} {_gain(ms, n):.2f}" for n in ms if n != "heuristic")
        print(f"{p['key']:>60} heuristic {ms.get('heuristic', 0) * 1000:.1f} us | {cells}")
    return 0


def _gain(ms: dict[str, float], name: str) -> float:
    """The heuristic's time over variant ``name``'s (> 1: the change pays); for "cudnn",
    cuDNN's time over the heuristic's (> 1: ours is faster)."""
    if name == "cudnn":
        return ms["cudnn"] / ms["heuristic"]
    return ms["heuristic"] / ms[name]


def fit(results: dict) -> str:
    """Per variant and split: the geomean of heuristic time / variant time, and the
    heuristic's own ratio to cuDNN."""
    lines = [f"device: {results.get('device')}", "", "| variant | train | held-out |"]
    lines.append("|---|---|---|")
    names = sorted({n for r in results["rows"] for n in r["ms"]} - {"heuristic"})
    for name in names:
        cells = []
        for split in ("train", "heldout"):
            ratios = [
                _gain(r["ms"], name)
                for r in results["rows"]
                if r["split"] == split and name in r["ms"] and "heuristic" in r["ms"]
            ]
            cells.append(f"{geomean(ratios):.3f} ({len(ratios)})" if ratios else "-")
        label = "heuristic vs cuDNN (cuDNN's time over ours)" if name == "cudnn" else name
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("train", "heldout"), default="train")
    parser.add_argument("--max-seconds", type=float, default=500.0)
    parser.add_argument("--fit", action="store_true", help="report the sweep, no GPU")
    parser.add_argument("--results", type=Path, default=RESULTS_PATH)
    args = parser.parse_args(argv)
    if args.fit:
        print(fit(json.loads(args.results.read_text())))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
