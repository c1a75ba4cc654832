"""128x128 tiles split by stream-K against the wide split tiles (CUDA graphs): the measurements
behind ``default_config``'s ``square_split``.

    python benchmarks/sweep_square_split.py [--form plain|fused] [--max-seconds 500]  # H100/H200
    python benchmarks/sweep_square_split.py [--form plain|fused] --report              # no GPU

``--results PATH`` measures into (or reports from) another file than the form's H200 file
(``square_split*_sweep_H200.json``), e.g. an H100's.

Why: the wide split (``config.wide_split_shape``, ``benchmarks/sweep_wide_split.py``) gives
convs of at least ``WIDE_SPLIT_MIN_K_TILES`` k-tiles per tile 128x256 (or 256x128) tiles split
by stream-K, and its sweep timed only those two shapes. ``cute_conv.autotune`` on the H200's
slowest corpus rows (session 48, ``experiments/autotune_headroom_H200.json``) picked 128x128
tiles split the same way for SD's batch-1 32x32 3x3s of K=640, 1.41-1.42x faster. A wide tile
split 4-6 ways writes and reads a 128x256 fp32 partial per way; 128x128 tiles, twice as many,
split fewer ways (2-3) and move half the partial each. Where 128x128 tiles split too
(``stream_k_schedule`` fits their split), the switch takes them.

The problems: the corpus convs whose config (``untuned.untuned_config``, every rule at its
fitted bound) the switch changes, in the form measured (plain bf16, or ``relu(conv + b) + r``),
and, since the corpus holds only five of them, a family of SD-like convs drawn at random for
this sweep (``family_problems``: batch 1-8, 8x8-48x48 maps, C=512-2560, K=320-1280, 1x1 or
3x3; split ``family``, reported apart). Per problem, in one process: both configs, each
checked against the float32 reference from a NaN-poisoned output, then replayed from CUDA
graphs, cuDNN's plain replay beside them; a rerun skips the problems already there.
``--report`` prints, per part (corpus train, corpus held-out, family), the geomean of the wide
tiles' time over the 128x128 tiles' (> 1: the switch gains), the worst row, and cuDNN's time
over ours before and after. The switch has no bound to fit; it was set after seeing every
part (see ``benchmarks/NOTES.md``, session 49).
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean  # noqa: E402
from sweep_rows import (  # noqa: E402
    EVERY_RULE_FITTED,
    load_results,
    measure_into,
    passed_rows,
    precompile,
    replayed_row,
)

RESULTS_PATHS = {
    "plain": HERE / "square_split_sweep_H200.json",
    "fused": HERE / "square_split_fused_sweep_H200.json",
}
NUM_SMS = 132  # H100 SXM and H200: the selection and the report use the same count
WIDE, SQUARE = "wide", "square"
PARTS = ("train", "heldout", "family")
FAMILY_SEED = 49
FAMILY_DRAWS = 400


def family_problems() -> list[dict]:
    """SD-like convs drawn at random (seeded), in the corpus's problem format, split
    ``family``; drawn for this sweep, not part of the corpus."""
    rng, drawn = random.Random(FAMILY_SEED), {}
    for _ in range(FAMILY_DRAWS):
        n, hw = rng.choice((1, 2, 4, 8)), rng.choice((8, 12, 16, 24, 32, 40, 48))
        c = rng.choice((512, 640, 960, 1280, 1920, 2560))
        k = rng.choice((320, 384, 512, 640, 960, 1280))
        r = rng.choice((1, 3, 3, 3))
        key = f"family_n{n}_h{hw}_w{hw}_c{c}_k{k}_r{r}_s{r}"
        gflop = 2 * n * hw * hw * k * c * r * r / 1e9
        drawn[key] = dict(
            key=key, split="family", tags=["family"], gflop=gflop, N=n, H=hw, W=hw, C=c, K=k,
            R=r, S=r, stride=[1, 1], padding=[[r // 2] * 2] * 2, dilation=[1, 1],
        )  # fmt: skip
    return list(drawn.values())


def configs_of(p: dict, form: str) -> dict:
    """``{WIDE: the switch off, SQUARE: on}``: the configs a call of ``form`` without one runs
    on problem ``p``, every other rule at its fitted bound."""
    from bench_corpus import problem_shape
    from sweep_rows import untuned_with

    problem = problem_shape(p)
    fitted = EVERY_RULE_FITTED | {"form": form}
    return {
        WIDE: untuned_with(problem, NUM_SMS, **(fitted | {"square_split": False})),
        SQUARE: untuned_with(problem, NUM_SMS, **(fitted | {"square_split": True})),
    }


def square_split_problems(form: str) -> list[dict]:
    """The problems the sweep measures in ``form``: corpus then family ones (those of a
    corpus conv's shape left out) whose configs the switch changes."""
    from bench_corpus import load_corpus

    def shape(p: dict) -> tuple:
        return tuple(p[d] for d in "NHWCKRS") + (str(p["padding"]), str(p["stride"]))

    corpus = load_corpus()
    in_corpus = {shape(p) for p in corpus}
    family = [p for p in family_problems() if shape(p) not in in_corpus]
    chosen = []
    for p in corpus + family:
        configs = configs_of(p, form)
        if configs[WIDE] != configs[SQUARE]:
            chosen.append(p)
    return chosen


def sweep(max_seconds: float, form: str, path: Path) -> None:
    """Measure the problems ``path`` has no row of yet, kernels compiled first."""
    import torch

    torch.backends.cudnn.benchmark = True
    results = load_results(path)
    done = {r["key"] for r in results["rows"]}
    todo = [p for p in square_split_problems(form) if p["key"] not in done]
    precompile({c.compiled_form() for p in todo for c in configs_of(p, form).values()})
    results["device"] = torch.cuda.get_device_name()

    def measure(p: dict) -> dict:
        return replayed_row(p, form, configs_of(p, form))

    measure_into(path, results, todo, measure, max_seconds, ("key", "ms"))


def report(form: str, path: Path) -> None:
    """Per part: rows, the wide tiles' time over the 128x128 tiles' (geomean, worst), and
    cuDNN's time over ours with the wide and the 128x128 tiles."""
    results = load_results(path)
    rows = passed_rows(results)
    if not rows:
        raise SystemExit(f"{path}: no measured rows (run the sweep on a GPU)")
    print(f"{results.get('device', '?')}, {form}: {len(rows)} problems")
    print("| part | problems | wide / 128x128 | worst | cuDNN / ours, wide -> 128x128 |")
    print("|---|---|---|---|---|")
    for part in PARTS:
        in_part = [r for r in rows if r["split"] == part]
        if not in_part:
            continue
        gains = [r["ms"][WIDE] / r["ms"][SQUARE] for r in in_part]
        before = geomean(r["ms"]["cudnn"] / r["ms"][WIDE] for r in in_part)
        after = geomean(r["ms"]["cudnn"] / r["ms"][SQUARE] for r in in_part)
        print(f"| {part} | {len(in_part)} | {geomean(gains):.3f} | {min(gains):.3f} | "
              f"{before:.3f} -> {after:.3f} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--form", choices=tuple(RESULTS_PATHS), default="plain")
    parser.add_argument("--max-seconds", type=float, default=500.0)
    parser.add_argument("--report", action="store_true", help="no GPU: from the results file")
    parser.add_argument("--results", type=Path, help="default: the form's H200 file")
    args = parser.parse_args()
    path = args.results or RESULTS_PATHS[args.form]
    if args.report:
        report(args.form, path)
    else:
        sweep(args.max_seconds, args.form, path)


if __name__ == "__main__":
    main()
