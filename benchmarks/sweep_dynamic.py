"""Dynamic against static scheduling of the pointwise convs on single-CTA clusters with more
than a wave of tiles, and the fit of the rule's bound (``config.MIN_WAVES_DYNAMIC``).

    python benchmarks/sweep_dynamic.py [--max-seconds 500]   # H100/H200
    python benchmarks/sweep_dynamic.py --fit                 # no GPU

The problems: every unstaged corpus problem whose default (plain, bf16) config is pointwise
on single-CTA clusters with neither stream-K nor ping-pong and has more tiles than SMs: where
the rule before session 24 scheduled dynamically. Per problem, in one process: the default
config with ``dynamic_schedule`` on ("dynamic") and off ("static"), each checked against a
float32 reference, then timed eagerly and replayed from CUDA graphs, interleaved as
``bench.py`` times (``sweep_rows.measure_configs``). ``--fit`` picks, on the train part, the
bound in waves of tiles from which the rule schedules dynamically: candidates are the
midpoints between the rows' wave counts; the score of a bound is the geomean, over the
problems, of the faster variant's time over the chosen one's, eager and replayed alike
(their geomean); ties go to the middle one.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_corpus import problem_shape  # noqa: E402
from sweep_rows import (  # noqa: E402
    BEFORE_PAIRED_M,
    SUITE_TALL_TILES,
    best_over_chosen,
    by_split,
    measure_configs,
    middle_of_best,
    sweep_main,
    sweep_new_problems,
    timed_rows,
)

RESULTS_PATH = HERE / "dynamic_sweep.json"
NUM_SMS = 132  # H100 SXM: the SM count the rows' waves are counted on


def waves_if_dynamic(problem) -> float | None:
    """The default config's waves of tiles on ``problem`` where the rule before session 24
    scheduled it dynamically (see the module docstring), else None."""
    from cute_conv.config import default_config
    from cute_conv.schedule import schedule_shape
    from cute_conv.staging import kernel_problem_for

    if kernel_problem_for(problem) != problem or not problem.R == problem.S == 1:
        return None
    config = default_config(problem, NUM_SMS, **SUITE_TALL_TILES, **BEFORE_PAIRED_M)
    if config.cluster_shape_mn != (1, 1) or config.stream_k or config.pingpong:
        return None
    tiles, _ = schedule_shape(problem, config.tile_m, config.tile_n, config.tile_k)
    return tiles / NUM_SMS if tiles > NUM_SMS else None


def dynamic_problems(problems: list[dict]) -> list[dict]:
    return [p for p in problems if waves_if_dynamic(problem_shape(p)) is not None]


def measure(p: dict) -> dict:
    from cute_conv.config import default_config

    problem = problem_shape(p)
    config = default_config(problem, NUM_SMS, **SUITE_TALL_TILES, **BEFORE_PAIRED_M)
    configs = {
        "dynamic": dataclasses.replace(config, dynamic_schedule=True),
        "static": dataclasses.replace(config, dynamic_schedule=False),
    }
    row = {k: p[k] for k in ("key", "split", "gflop")} | {"config": repr(configs["static"])}
    row["waves"] = waves_if_dynamic(problem)
    return row | measure_configs(p, "plain", configs)


def sweep(max_seconds: float) -> None:
    sweep_new_problems(RESULTS_PATH, dynamic_problems, measure, max_seconds, ("key", "ms"))


VARIANTS = ("dynamic", "static")


def measured_rows() -> list[dict]:
    """The committed rows with both variants timed."""
    return timed_rows(RESULTS_PATH, VARIANTS)


def _chosen(row: dict, bound: float) -> str:
    """The variant the rule picks at ``bound`` (dynamic from ``bound`` waves)."""
    return "dynamic" if row["waves"] >= bound else "static"


def score(rows: list[dict], bound: float, suffix: str = "") -> float:
    """Geomean of the faster variant's time over the chosen one's (1.0: always the faster)."""
    return best_over_chosen(rows, VARIANTS, lambda r: _chosen(r, bound), suffix)


def fit_bound(rows: list[dict]) -> float:
    """The bound with the best score on ``rows``, eager and replayed (module docstring)."""
    waves = sorted({r["waves"] for r in rows})
    between = ((a + b) / 2 for a, b in zip(waves, waves[1:], strict=False))
    candidates = [waves[0] / 2, *between, waves[-1] * 2]
    return middle_of_best(candidates, lambda b: (score(rows, b) * score(rows, b, "_graph")) ** 0.5)


def fit() -> None:
    train, heldout = by_split(measured_rows())
    bound = fit_bound(train)
    print(f"bound fitted on {len(train)} train problems: dynamic from {bound:.2f} waves")
    for name, part in (("train", train), ("held-out", heldout)):
        print(f"  {name} ({len(part)} problems):")
        for suffix, what in (("", "eager"), ("_graph", "CUDA graphs")):
            always = score(part, 0.0, suffix)
            print(f"    {what}: chosen at {score(part, bound, suffix):.3f} of the best "
                  f"(always dynamic: {always:.3f})")  # fmt: skip


def main() -> None:
    sweep_main(__doc__, sweep, fit, "--fit")


if __name__ == "__main__":
    main()
