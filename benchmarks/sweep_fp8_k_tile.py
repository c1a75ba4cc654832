"""fp8 k-tile width: measure 32/64/128-channel k-tiles on the corpus, fit the k-tile cost.

    python benchmarks/sweep_fp8_k_tile.py [--max-seconds 500]   # H100/H200, both splits
    python benchmarks/sweep_fp8_k_tile.py --fit                 # no GPU

The problems: every corpus problem of at least ``MIN_GFLOP`` whose channels, padded to fp8's 16,
are more than 64 and no multiple of 128, so that the k-tile width is a choice between padding
and k-tile count (``config.k_tile_width``). Per problem, in one process: the fp8 default
config with each k-tile width (everything else as the heuristic chose it; halo tiles, which
need 128-byte rows, off for the narrower ones), each checked against a float32 reference on
the dequantized inputs, then timed as ``bench.py`` times. Rows go to ``fp8_k_tile_sweep.json``
as they are measured; a rerun skips the problems already there.

``--fit`` chooses the fp8 k-tile cost (channels) that maximizes the training problems' geomean
of (fastest width) / (chosen width), the middle of the tied range, and reports the same
geomean on the held-out problems, which the fit never sees, against the heuristic's cost.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean, time_interleaved  # noqa: E402
from bench_corpus import problem_shape  # noqa: E402
from sweep_rows import (  # noqa: E402
    by_split,
    middle_of_best,
    problem_inputs,
    sweep_main,
    sweep_new_problems,
)

RESULTS_PATH = HERE / "fp8_k_tile_sweep.json"
MIN_GFLOP, MAX_GFLOP = 2.0, 400.0
NUM_SMS = 132
WIDTHS = (32, 64, 128)
COSTS = [c / 2 for c in range(0, 129)]  # 0..64 channels in half-channel steps


def k_tile_problems(problems: list[dict]) -> list[dict]:
    """The problems where the fp8 k-tile width is a choice (see the module docstring), each
    with its fp8 kernel channels ``C``."""
    from cute_conv.staging import kernel_problem_for

    chosen = []
    for p in problems:
        channels = kernel_problem_for(problem_shape(p), 1).C
        if MIN_GFLOP <= p["gflop"] <= MAX_GFLOP and channels > 64 and channels % 128:
            chosen.append(p | {"C": channels})
    return chosen


def widths_for(channels: int) -> tuple[int, ...]:
    """The widths worth timing: 32-channel k-tiles only where 128 would pad a third or more."""
    return tuple(w for w in WIDTHS if w > 32 or channels <= 192)


def measure(p: dict) -> dict:
    import torch

    import cute_conv
    from cute_conv.reference import conv2d_reference
    from cute_conv.staging import kernel_problem_for
    from cute_conv.testing import compare_to_reference

    problem, geom, x, flt = problem_inputs(p, torch.float32)
    qx, x_scale = cute_conv.quantize_fp8(x)
    qf, w_scale = cute_conv.quantize_fp8(flt)
    ref = conv2d_reference(qx.float() * x_scale, qf.float() * w_scale, **geom)
    default = cute_conv.default_config(kernel_problem_for(problem, 1), NUM_SMS, element_bytes=1)
    row = {k: p[k] for k in ("key", "split", "gflop", "C")}
    row |= {"default_tile_k": default.tile_k, "checks": {}}
    fns = {}
    for width in widths_for(p["C"]):
        config = default
        if width != default.tile_k:
            config = dataclasses.replace(default, tile_k=width, tile_w=0, halo_h=0)
        out = torch.full(problem.output_shape, float("nan"), dtype=torch.bfloat16, device="cuda")

        def run(config=config, out=out):
            return cute_conv.conv2d_fprop(qx, qf, out=out, x_scale=x_scale, w_scale=w_scale,
                                          config=config, **geom)  # fmt: skip

        run()
        check = compare_to_reference(out, ref, fp8_inputs=True)
        row["checks"][str(width)] = {"ok": check.ok, "rel_err": check.rel_err}
        if check.ok:
            fns[str(width)] = run
    return row | {"ms": time_interleaved(fns)}


def sweep(max_seconds: float) -> None:
    shown = ("key", "default_tile_k", "ms")
    sweep_new_problems(RESULTS_PATH, k_tile_problems, measure, max_seconds, shown)


def score(rows: list[dict], cost: float | None) -> float:
    """Geomean over ``rows`` of (the fastest width's time) / (the time of the width
    ``k_tile_width`` picks at ``cost``; None: the heuristic's own cost)."""
    from cute_conv.config import k_tile_width

    def chosen(row: dict) -> float:
        ms = row["ms"]
        widths = [int(w) for w in ms]
        width = k_tile_width(row["C"], 1, cost)
        # The rule may pick a width the sweep did not time (32 where C > 192): its neighbour.
        return ms[str(min(widths, key=lambda w: abs(w - width)))]

    return geomean(min(r["ms"].values()) / chosen(r) for r in rows)


def fit_cost(train: list[dict]) -> float:
    """The cost with the best ``score`` on ``train`` (the middle one of equal scores)."""
    return middle_of_best(COSTS, lambda cost: score(train, cost))


def measured_rows() -> list[dict]:
    rows = json.loads(RESULTS_PATH.read_text())["rows"]
    return [r for r in rows if len(r.get("ms", {})) >= 2]


def fit() -> None:
    train, heldout = by_split(measured_rows())
    fitted = fit_cost(train)
    print(f"{len(train)} train, {len(heldout)} held-out problems")
    print(f"fitted fp8 k-tile cost: {fitted:g} channels")
    print("| part | cost | fastest / chosen (geomean) |")
    print("|---|---|---|")
    for name, part in (("train", train), ("held-out", heldout)):
        for label, cost in (("equal bytes (32)", 32.0), ("heuristic", None), ("fitted", fitted)):
            print(f"| {name} | {label} | {score(part, cost):.3f} |")


def main() -> None:
    sweep_main(__doc__, sweep, fit, "--fit")


if __name__ == "__main__":
    main()
