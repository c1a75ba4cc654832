"""Gathered operands against staged copies, for convs whose C is not a multiple of 8: measure
both, and fit the gather rule's bounds (``gather_rule.MAX_GATHER_LOADS_PER_SM``).

    python benchmarks/sweep_gather.py [--max-seconds 500]   # H100/H200, both splits
    python benchmarks/sweep_gather.py --fit                 # no GPU
    python benchmarks/sweep_gather.py --results benchmarks/gather_sweep_H200.json [--fit]
    python benchmarks/sweep_gather.py --joint               # no GPU: the rule's bounds

The problems: every corpus problem whose staging a gather spares (``staging.gather_replaces``:
C zero-padded, or unfolded into im2col columns). Per problem, in one process: the heuristic's
config on the staged kernel problem ("staged": a padded or unfolded copy of the activation per
call, and a staged filter per CUDA-graph replay), the heuristic's config for the
channel-padded problem with both operands gathered ("gathered",
``gather_rule.with_gathered_operands``), and cuDNN's ``F.conv2d``, each checked against the
float32 reference, then timed eagerly and replayed from CUDA graphs, interleaved as
``bench.py`` times. Rows go to ``gather_sweep.json`` (an H100's; ``--results``: another
GPU's file, ``gather_sweep_H200.json`` an H200's) with the staging spared and each problem's
gather loads per SM (``gather_rule.gather_loads_per_sm``); a rerun skips the problems
already there. ``--fit`` picks a bound per staging on one file's train part and reports both
parts: the score of a bound is the geomean, over the problems, of the faster variant's time
over the chosen one's, eager and replayed alike (their geomean: an eager caller and a
captured model both count); the best score wins, ties going to the middle one. ``--joint``
fits on every GPU's train rows together (the rule's bounds, one for all GPUs) and reports
each GPU's parts.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean, time_interleaved  # noqa: E402
from bench_corpus import problem_shape  # noqa: E402
from sweep_rows import (  # noqa: E402
    best_over_chosen,
    by_split,
    checked_runs,
    cudnn_run,
    load_results,
    middle_of_best,
    problem_inputs,
    sweep_main,
    sweep_new_problems,
    timed_rows,
)

RESULTS_PATH = HERE / "gather_sweep.json"
JOINT_PATHS = (RESULTS_PATH, HERE / "gather_sweep_H200.json")
NUM_SMS = 132  # H100 SXM: the SM count the bound's rows are counted on


def gather_problems(problems: list[dict]) -> list[dict]:
    from cute_conv.staging import gather_replaces

    return [p for p in problems if gather_replaces(problem_shape(p)) is not None]


def measure(p: dict) -> dict:
    from models import replay_of

    import cute_conv
    from cute_conv.gather_rule import gather_loads_per_sm, with_gathered_operands
    from cute_conv.reference import conv2d_reference
    from cute_conv.staging import channels_padded, gather_replaces, kernel_problem_for

    problem, geom, x, flt = problem_inputs(p)
    staged = cute_conv.default_config(kernel_problem_for(problem), NUM_SMS)
    padded = channels_padded(problem)
    base = cute_conv.default_config(padded, NUM_SMS)
    gathered = with_gathered_operands(base, problem.C)
    configs = {"staged": staged, "gathered": gathered}
    checks, fns = checked_runs(x, flt, conv2d_reference(x, flt, **geom), geom, configs)
    fns["cudnn"] = cudnn_run(x, flt, problem)
    fns |= {f"{name}_graph": replay_of(fn) for name, fn in list(fns.items())}
    row = {k: p[k] for k in ("key", "split", "gflop")} | {"default": repr(staged)}
    row["replaces"] = gather_replaces(problem)
    row["loads_per_sm"] = gather_loads_per_sm(gathered, padded, NUM_SMS)
    return row | {"checks": checks, "ms": time_interleaved(fns)}


def sweep(max_seconds: float, path: Path = RESULTS_PATH) -> None:
    sweep_new_problems(path, gather_problems, measure, max_seconds, ("key", "ms"))


VARIANTS = ("staged", "gathered")


def _chosen(row: dict, bound: float) -> str:
    """The variant the rule picks at ``bound``."""
    return "gathered" if row["loads_per_sm"] <= bound else "staged"


def chosen_ms(row: dict, bound: float, suffix: str = "") -> float:
    """The time of the variant the rule picks at ``bound``."""
    return row["ms"][_chosen(row, bound) + suffix]


def score(rows: list[dict], bound: float, suffix: str = "") -> float:
    """Geomean of the best variant's time over the chosen one's (1.0: always the faster)."""
    return best_over_chosen(rows, VARIANTS, lambda r: _chosen(r, bound), suffix)


def measured_rows(replaces: str | None = None, path: Path = RESULTS_PATH) -> list[dict]:
    """The rows of ``path`` with both variants timed (of the staging ``replaces`` spares, if
    given)."""
    rows = timed_rows(path, VARIANTS)
    return [r for r in rows if replaces is None or r["replaces"] == replaces]


def fit_bound(rows: list[dict]) -> float:
    """The bound with the best score on ``rows``, eager and replayed (see the module
    docstring); candidates: every row's loads_per_sm, and 0."""
    candidates = sorted({0, *(r["loads_per_sm"] for r in rows)})
    return middle_of_best(candidates, lambda b: (score(rows, b) * score(rows, b, "_graph")) ** 0.5)


def _ratio_to_chosen(rows: list[dict], variant: str, bound: float, suffix: str) -> float:
    """Geomean of ``variant``'s time over the chosen variant's."""
    return geomean(r["ms"][variant] / chosen_ms(r, bound, suffix) for r in rows)


def joint_train_rows(replaces: str, paths: tuple[Path, ...] = JOINT_PATHS) -> list[dict]:
    """The train rows of every file of ``paths`` (several GPUs' sweeps) for ``replaces``."""
    return [r for path in paths for r in by_split(measured_rows(replaces, path))[0]]


def fit(path: Path = RESULTS_PATH) -> None:
    for replaces in ("pad", "im2col"):
        train, heldout = by_split(measured_rows(replaces, path))
        bound = fit_bound(train)
        print(f"{replaces}: bound fitted on {len(train)} train problems: {bound} loads per SM")
        _report(train, heldout, bound)


def joint_fit(paths: tuple[Path, ...] = JOINT_PATHS) -> None:
    for replaces in ("pad", "im2col"):
        bound = fit_bound(joint_train_rows(replaces, paths))
        print(f"{replaces}: bound fitted on every GPU's train problems: {bound} loads per SM")
        for path in paths:
            print(f" {path.name} ({load_results(path).get('device', 'no device')}):")
            _report(*by_split(measured_rows(replaces, path)), bound)


def _report(train: list[dict], heldout: list[dict], bound: float) -> None:
    """Each part's score at ``bound``, and the staged path's and cuDNN's times over it."""
    for name, part in (("train", train), ("held-out", heldout)):
        print(f"  {name} ({len(part)} problems):")
        for suffix, what in (("", "eager"), ("_graph", "CUDA graphs")):
            best = score(part, bound, suffix)
            staged = _ratio_to_chosen(part, "staged" + suffix, bound, suffix)
            cudnn = _ratio_to_chosen(part, "cudnn" + suffix, bound, suffix)
            print(f"    {what}: chosen at {best:.3f} of the best; staged / chosen "
                  f"{staged:.3f}; cuDNN / chosen {cudnn:.3f}")  # fmt: skip


def main() -> None:
    sweep_main(__doc__, sweep, fit, "--fit", results=RESULTS_PATH, joint=joint_fit)


if __name__ == "__main__":
    main()
