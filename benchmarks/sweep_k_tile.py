"""k-tile width: measure each k-tile width on the corpus, fit the k-tile cost, per precision.

    python benchmarks/sweep_k_tile.py --dtype fp8 [--max-seconds 500]   # H100/H200, both splits
    python benchmarks/sweep_k_tile.py --dtype fp8 --fit                 # no GPU
    (--dtype bf16: the same for 16-bit inputs)

The problems: every corpus problem of at least ``MIN_GFLOP`` whose kernel channels (padded to
fp8's 16 or 16-bit's 8) are more than half a 128-byte row and no multiple of a whole one (fp8:
more than 64 and no multiple of 128; bf16: more than 32 and no multiple of 64), so that the
k-tile width is a choice between k-tile count and a partial last k-tile per tap
(``config.k_tile_width``). Per problem, in one process: the default config with each k-tile
width (everything else as the heuristic chose it; halo tiles, which need 128-byte rows, off
for the narrower ones), each checked against a float32 reference (fp8: on the dequantized
inputs), then timed as ``bench.py`` times. Rows go to ``<dtype>_k_tile_sweep.json`` as they
are measured; a rerun skips the problems already there.

``--fit`` chooses the k-tile cost (channels) that maximizes the training problems' geomean
of (fastest width) / (chosen width), the middle of the tied range, and reports the same
geomean on the held-out problems, which the fit never sees, against the heuristic's cost.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean, time_interleaved  # noqa: E402
from bench_corpus import problem_shape  # noqa: E402
from sweep_rows import by_split, middle_of_best, problem_inputs, sweep_new_problems  # noqa: E402

MIN_GFLOP, MAX_GFLOP = 2.0, 400.0
NUM_SMS = 132
COSTS = [c / 2 for c in range(0, 129)]  # 0..64 channels in half-channel steps


@dataclasses.dataclass(frozen=True)
class Precision:
    """One input precision's sweep: its element size, the k-tile widths (channels) from a
    quarter of a 128-byte row to a whole one, and its results file."""

    name: str
    element_bytes: int

    @property
    def widths(self) -> tuple[int, ...]:
        row = 128 // self.element_bytes
        return (row // 4, row // 2, row)

    @property
    def results_path(self) -> Path:
        return HERE / f"{self.name}_k_tile_sweep.json"


PRECISIONS = {"fp8": Precision("fp8", 1), "bf16": Precision("bf16", 2)}


def k_tile_problems(problems: list[dict], precision: Precision) -> list[dict]:
    """The problems where the k-tile width is a choice (see the module docstring), each with
    its kernel channels ``C``."""
    from cute_conv.staging import kernel_problem_for

    row = precision.widths[-1]
    chosen = []
    for p in problems:
        channels = kernel_problem_for(problem_shape(p), precision.element_bytes).C
        if MIN_GFLOP <= p["gflop"] <= MAX_GFLOP and channels > row // 2 and channels % row:
            chosen.append(p | {"C": channels})
    return chosen


def widths_for(channels: int, precision: Precision) -> tuple[int, ...]:
    """The widths worth timing: the narrowest only where a whole row would pad a third or more
    (fp8: C <= 192, bf16: C <= 96)."""
    narrowest, *_, row = precision.widths
    return tuple(w for w in precision.widths if w > narrowest or channels <= row * 3 // 2)


def measure(p: dict, precision: Precision) -> dict:
    import torch

    import cute_conv
    from cute_conv.reference import conv2d_reference
    from cute_conv.staging import kernel_problem_for
    from cute_conv.testing import compare_to_reference

    problem, geom, x, flt = problem_inputs(p, torch.float32)
    scales, fp8 = {}, precision.element_bytes == 1
    if fp8:
        x, scales["x_scale"] = cute_conv.quantize_fp8(x)
        flt, scales["w_scale"] = cute_conv.quantize_fp8(flt)
        ref = conv2d_reference(x.float() * scales["x_scale"], flt.float() * scales["w_scale"], **geom)
    else:
        x, flt = x.to(torch.bfloat16), flt.to(torch.bfloat16)
        ref = conv2d_reference(x, flt, **geom)
    kernel_problem = kernel_problem_for(problem, precision.element_bytes)
    default = cute_conv.default_config(kernel_problem, NUM_SMS, element_bytes=precision.element_bytes)
    row = {k: p[k] for k in ("key", "split", "gflop", "C")}
    row |= {"default_tile_k": default.tile_k, "checks": {}}
    fns = {}
    for width in widths_for(p["C"], precision):
        config = default
        if width != default.tile_k:
            config = dataclasses.replace(
                default, tile_k=width, tile_w=0, halo_h=0, halo_w=0
            )
        out = torch.full(problem.output_shape, float("nan"), dtype=torch.bfloat16, device="cuda")

        def run(config=config, out=out):
            return cute_conv.conv2d_fprop(x, flt, out=out, config=config, **scales, **geom)

        run()
        check = compare_to_reference(out, ref, fp8_inputs=fp8)
        row["checks"][str(width)] = {"ok": check.ok, "rel_err": check.rel_err}
        if check.ok:
            fns[str(width)] = run
    return row | {"ms": time_interleaved(fns)}


def sweep(precision: Precision, max_seconds: float) -> None:
    sweep_new_problems(
        precision.results_path,
        lambda problems: k_tile_problems(problems, precision),
        lambda p: measure(p, precision),
        max_seconds,
        ("key", "default_tile_k", "ms"),
    )


def score(rows: list[dict], cost: float | None, precision: Precision) -> float:
    """Geomean over ``rows`` of (the fastest width's time) / (the time of the width
    ``k_tile_width`` picks at ``cost``; None: the heuristic's own cost)."""
    from cute_conv.config import k_tile_width

    def chosen(row: dict) -> float:
        ms = row["ms"]
        widths = [int(w) for w in ms]
        width = k_tile_width(row["C"], precision.element_bytes, cost)
        # The rule may pick a width the sweep did not time (the narrowest where C is wide):
        # its neighbour.
        return ms[str(min(widths, key=lambda w: abs(w - width)))]

    return geomean(min(r["ms"].values()) / chosen(r) for r in rows)


def fit_cost(train: list[dict], precision: Precision) -> float:
    """The cost with the best ``score`` on ``train`` (the middle one of equal scores)."""
    return middle_of_best(COSTS, lambda cost: score(train, cost, precision))


def measured_rows(precision: Precision) -> list[dict]:
    rows = json.loads(precision.results_path.read_text())["rows"]
    return [r for r in rows if len(r.get("ms", {})) >= 2]


def fit(precision: Precision) -> None:
    train, heldout = by_split(measured_rows(precision))
    fitted = fit_cost(train, precision)
    equal_bytes = 32.0 / precision.element_bytes
    print(f"{len(train)} train, {len(heldout)} held-out problems")
    print(f"fitted {precision.name} k-tile cost: {fitted:g} channels")
    print("| part | cost | fastest / chosen (geomean) |")
    print("|---|---|---|")
    for name, part in (("train", train), ("held-out", heldout)):
        for label, cost in (
            (f"equal bytes ({equal_bytes:g})", equal_bytes), ("heuristic", None), ("fitted", fitted)
        ):  # fmt: skip
            print(f"| {name} | {label} | {score(part, cost, precision):.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=tuple(PRECISIONS), required=True)
    parser.add_argument("--max-seconds", type=float, default=500.0)
    parser.add_argument("--fit", action="store_true", help="no GPU: from the results file")
    args = parser.parse_args()
    precision = PRECISIONS[args.dtype]
    if args.fit:
        fit(precision)
    else:
        sweep(precision, args.max_seconds)


if __name__ == "__main__":
    main()
