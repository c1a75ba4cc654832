"""Packed taps (``Conv2dConfig.pack_taps``) against the same gathered config unpacked, on
fresh convs in no corpus that the default config packs:

    python benchmarks/experiments/packed_taps_ab.py --generate     # no GPU: the draws
    python benchmarks/experiments/packed_taps_ab.py --max-seconds 500 --out ROWS.json
    python benchmarks/experiments/packed_taps_ab.py --report ROWS.json  # no GPU

The draws (``packed_taps_fresh_problems.json``, ``--generate``): ``corpus.random_sites``
geometries (the corpus's random part: odd C, 1x7 .. 7x7 filters, strides, dilation,
asymmetric padding) from another seed, kept where the default plain or fused config gathers
with packed taps and the key is in neither corpus. The rule (``gather_rule.gathered_config``)
packs where that takes fewer k-tiles; it was adopted on the 15 corpus rows it packs
(``packed_taps_compare_H200.md``), nothing fitted, so every draw here judges it.

Per problem and form (``plain``; ``fused``, ``relu(conv + b) + r``) whose default config
packs: that config (``packed``) and it with ``pack_taps=False`` (``unpacked``), checked
against a float32 reference and timed in one process, eagerly and replayed from CUDA graphs
(``sweep_rows.measure_configs``); a rerun skips the rows already measured. ``--report``:
per form, the geomean of packed over unpacked time, and the rows where packing lost more
than 3%.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import corpus  # noqa: E402
from bench import geomean  # noqa: E402
from bench_corpus import load_corpus, problem_shape  # noqa: E402
from sweep_rows import load_results, measure_configs, sweep_new_problems  # noqa: E402

PROBLEMS_PATH = HERE / "packed_taps_fresh_problems.json"
SEED = 2026_12_03
COUNT = 30
NUM_SMS = 132  # H100 SXM and H200
FORMS = ("plain", "fused")
LOSS = 1.03  # a row where packed took this much longer than unpacked is listed


def default_config(problem, form: str):
    """The config a call of ``form`` without one runs on ``problem`` (no autotuning)."""
    from cute_conv.untuned import heuristic_config

    return heuristic_config(problem, NUM_SMS, has_residual=form == "fused")


def packs(problem) -> bool:
    """Whether the default plain or fused config of ``problem`` packs its taps."""
    return any(getattr(default_config(problem, f), "pack_taps", False) for f in FORMS)


def generate(seed: int = SEED, count: int = COUNT) -> dict:
    """``count`` distinct fresh problems whose default config packs (module docstring)."""
    taken = {
        p["key"]
        for name in ("corpus.json", "validation_corpus.json")
        for p in load_corpus(HERE.parent / name)
    }
    chosen: dict[str, tuple[corpus.ConvSite, int]] = {}
    for site, n in corpus.random_sites(50 * count, seed=seed):
        problem = corpus._problem(site, n)
        key = corpus.problem_key(problem)
        if key in taken or key in chosen or corpus.rejection(problem, 1) or not packs(problem):
            continue
        chosen[key] = (site, n)
        if len(chosen) == count:
            break
    built = corpus.build_corpus([([site], (n,)) for site, n in chosen.values()])
    built["about"] = f"packed_taps_ab.py --generate, seed {seed}: fresh draws, in no corpus"
    return built


def measure(p: dict) -> dict:
    """Both forms' packed and unpacked runs of problem ``p`` (the forms whose default packs)."""
    row = {k: p[k] for k in ("key", "split")}
    for form in FORMS:
        config = default_config(problem_shape(p), form)
        if getattr(config, "pack_taps", False):
            unpacked = dataclasses.replace(config, pack_taps=False)
            row[form] = measure_configs(p, form, {"packed": config, "unpacked": unpacked})
    return row


def ratios(rows: list[dict], form: str, suffix: str) -> dict[str, float]:
    """Packed over unpacked time per row key, for rows of ``form`` whose both runs passed."""
    out = {}
    for r in rows:
        m = r.get(form)
        if m and all(c["ok"] for c in m["checks"].values()):
            out[r["key"]] = m["ms"]["packed" + suffix] / m["ms"]["unpacked" + suffix]
    return out


def report(path: Path) -> None:
    rows = load_results(path)["rows"]
    failed = [r["key"] for r in rows if "error" in r]
    for form in FORMS:
        for suffix, what in (("", "eager"), ("_graph", "CUDA graphs")):
            got = ratios(rows, form, suffix)
            if not got:
                continue
            losses = ", ".join(f"{k} {v:.2f}x" for k, v in got.items() if v > LOSS)
            print(f"{form} {what}: packed / unpacked {geomean(got.values()):.3f} "
                  f"({len(got)} rows); lost > {LOSS}x: {losses or 'none'}")  # fmt: skip
    print(f"errors: {', '.join(failed) or 'none'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generate", action="store_true", help="no GPU: write the draws")
    parser.add_argument("--report", type=Path, metavar="ROWS", help="no GPU: summarize ROWS")
    parser.add_argument("--out", type=Path, help="the results file to measure into")
    parser.add_argument("--max-seconds", type=float, default=500.0)
    args = parser.parse_args()
    if args.generate:
        PROBLEMS_PATH.write_text(corpus.dumps(generate()))
        print(f"wrote {PROBLEMS_PATH}")
    elif args.report:
        report(args.report)
    elif args.out:
        problems = load_corpus(PROBLEMS_PATH)
        sweep_new_problems(args.out, lambda ps: ps, measure, args.max_seconds, ("key",),
                           source=lambda: problems)  # fmt: skip
    else:
        parser.error("give --generate, --report ROWS or --out ROWS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
