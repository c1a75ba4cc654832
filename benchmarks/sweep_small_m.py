"""Small-M convs: the heuristic's config against 32- and 64-wide tiles without a cluster or a
stream-K split, replayed from CUDA graphs; the fit of ``cute_conv.small_grid_rules.small_m_config``.

    python benchmarks/sweep_small_m.py [--max-seconds 500]   # H100/H200, every group
    python benchmarks/sweep_small_m.py --fit                 # no GPU

The problems: the corpus problems of GEMM M up to ``MAX_GEMM_M``, K >= ``MIN_K`` and at most
``MAX_GFLOP``, where a few M tiles leave most SMs idle, in four groups (``GROUPS``): the
unstaged ones (C whole TMA rows, no stem staging) and those the library gathers (odd C,
``gathered_config``), each as plain convs and as fused calls (``relu(conv + b) + r``), and
the unstaged ones on fp8 (e4m3 inputs, bf16 output; C whole 16-channel rows). Per problem, in one process: the heuristic's config for the call (``default_config``
before the small-M rule; the gathering config where it gathers), ``n32`` and ``n64`` (its
tiles 32 or 64 wide, single CTAs, no split, no ping-pong), each checked against the float32
reference from a NaN-poisoned output, then timed eagerly and replayed from CUDA graphs
(``sweep_rows.measure_configs``), cuDNN's ``F.conv2d`` replayed beside them. A row's ``ms``
holds the replays, ``ms_eager`` the eager times (rows of the first sweep, plain unstaged
only, have replays alone). Rows go to ``small_m_sweep.json``; a rerun skips the problems
already there.

``--fit`` scores, per group, each rule "``n32`` where the conv has at most T 128-row tiles
along M and at most G of GEMM K" by the geomean over the group's train problems of the
heuristic's time over the rule's choice's; prints the grid, the best bounds (the middle of
ties) and the same score on the held-out problems.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean  # noqa: E402
from sweep_rows import (  # noqa: E402
    GATHER_H100_BOUNDS,
    by_split,
    load_results,
    measure_configs,
    middle_of_best,
    sweep_main,
    sweep_new_problems,
)

RESULTS_PATH = HERE / "small_m_sweep.json"
NUM_SMS = 132  # H100 SXM: the SM count the rows' configs are chosen for
MAX_GEMM_M, MIN_K, MAX_GFLOP = 512, 128, 2.0
TILES_M = (1, 2, 3, 4)
GEMM_K = (1024, 1536, 2048, 2304, 2560, 3456, 4608, 10**9)


# (form, path): plain or fused calls, on unstaged convs or on gathered (odd-C) ones.
GROUPS = (
    ("plain", "unstaged"), ("fused", "unstaged"), ("plain", "gathered"), ("fused", "gathered"),
    ("fp8", "unstaged"),
)  # fmt: skip


def arch_as_measured(**rules):
    """The sm_90a arch as this sweep measured it, ``rules`` replaced: its gather rule at the
    H100 bounds, taps unpacked (``sweep_rows.GATHER_H100_BOUNDS``; refitted and packed
    since)."""
    import functools

    from cute_conv.arch import ARCHS
    from cute_conv.gather_rule import gathered_config

    gather_rule = functools.partial(
        gathered_config, max_loads_per_sm=GATHER_H100_BOUNDS, pack_taps=False
    )
    return dataclasses.replace(ARCHS["sm_90a"], gather_rule=gather_rule, **rules)


def path_of(problem) -> str | None:
    """``"unstaged"``, ``"gathered"`` (the library gathers its operands), or None (staged)."""
    from cute_conv.staging import gather_replaces, kernel_problem_for
    from cute_conv.untuned import untuned_config

    if kernel_problem_for(problem) == problem and gather_replaces(problem) is None:
        return "unstaged"
    config = untuned_config(
        arch_as_measured(), problem, kernel_problem_for(problem), NUM_SMS, False, 2,
        cuda_cores=False,
    )  # fmt: skip
    return "gathered" if config.gather else None


def small_m_problems(problems: list[dict]) -> list[dict]:
    """One entry per (problem, group) the sweep measures: the corpus problems of GEMM M <=
    ``MAX_GEMM_M``, K >= ``MIN_K`` and at most ``MAX_GFLOP`` with the ``form`` and ``path``
    of each group (``GROUPS``) they belong to (fp8: unstaged on 8-bit inputs too)."""
    from bench_corpus import problem_shape

    from cute_conv.staging import kernel_problem_for

    chosen = []
    for p in problems:
        problem = problem_shape(p)
        if problem.gemm_m > MAX_GEMM_M or problem.K < MIN_K or p["gflop"] > MAX_GFLOP:
            continue
        path = path_of(problem)
        fp8_unstaged = kernel_problem_for(problem, 1) == problem  # whole 16-channel rows
        chosen += [p | {"form": f, "path": path} for f, g in GROUPS
                   if g == path and (f != "fp8" or fp8_unstaged)]  # fmt: skip
    return chosen


def heuristic_of(problem, form: str):
    """The config a call of ``form`` runs on ``problem`` without the small-M rule: the
    untuned choice (``untuned_config``: the heuristic's, or the gathering config) with that
    rule taken out of the arch's."""
    from cute_conv.staging import kernel_problem_for
    from cute_conv.untuned import untuned_config

    element_bytes = 1 if form == "fp8" else 2
    without_rule = arch_as_measured(small_m_rule=None, pointwise_gemv_rule=None)
    kernel_problem = kernel_problem_for(problem, element_bytes)
    return untuned_config(
        without_rule, problem, kernel_problem, NUM_SMS, form == "fused", element_bytes
    )


def variants(heuristic) -> dict:
    """The heuristic's config, and its tiles 32 and 64 wide as ``small_m_config`` makes them:
    single CTAs, no split, no ping-pong, statically scheduled."""
    unsplit = dict(
        cluster_m=1, cluster_n=1, stream_k=False, stream_k_split=0, dynamic_schedule=False,
        pingpong=False, tile_w=0, halo_h=0, halo_w=0,
    )  # fmt: skip
    return {
        "heuristic": heuristic,
        "n32": dataclasses.replace(heuristic, tile_n=32, **unsplit),
        "n64": dataclasses.replace(heuristic, tile_n=64, **unsplit),
    }


def measure(p: dict) -> dict:
    from bench_corpus import problem_shape

    problem = problem_shape(p)
    heuristic = heuristic_of(problem, p["form"])
    row = {k: p[k] for k in ("key", "split", "gflop", "form", "path")}
    row |= {"gemm_m": problem.gemm_m, "gemm_k": problem.gemm_k, "heuristic": repr(heuristic)}
    timed = measure_configs(p, p["form"], variants(heuristic))
    ms = timed["ms"]
    replays = {name.removesuffix("_graph"): t for name, t in ms.items() if name.endswith("_graph")}
    eager = {name: t for name, t in ms.items() if not name.endswith("_graph")}
    return row | {"checks": timed["checks"], "ms": replays, "ms_eager": eager}


def group_of(row: dict) -> tuple[str, str]:
    """A row's group; the first sweep's rows (plain, unstaged) carry none."""
    return row.get("form", "plain"), row.get("path", "unstaged")


def sweep(max_seconds: float) -> None:
    sweep_new_problems(
        RESULTS_PATH, small_m_problems, measure, max_seconds, ("key", "form", "ms"),
        identity=lambda entry: (entry["key"], group_of(entry)),
    )  # fmt: skip


def score(rows: list[dict], max_tiles_m: int, max_gemm_k: int) -> float:
    """Geomean of the heuristic's time over the time of the rule's choice."""

    def chosen(r: dict) -> str:
        narrow = -(-r["gemm_m"] // 128) <= max_tiles_m and r["gemm_k"] <= max_gemm_k
        return "n32" if narrow else "heuristic"

    return geomean(r["ms"]["heuristic"] / r["ms"][chosen(r)] for r in rows)


def fit(results: dict, group: tuple[str, str] = GROUPS[0]) -> str:
    """The rule's grid, best bounds and scores on ``group``'s rows of ``results``."""
    rows = [r for r in results["rows"]
            if group_of(r) == group and {"heuristic", "n32", "n64"} <= set(r.get("ms", {}))]  # fmt: skip
    train, held = by_split(rows)
    lines = [f"{' '.join(group)} on {results.get('device', '?')}: {len(train)} train, "
             f"{len(held)} held-out problems"]  # fmt: skip
    if not (train and held):
        return lines[0] + ": nothing to fit"
    lines.append("tiles_m <= T, gemm_k <= G: train score per G")
    for t in TILES_M:
        cells = " ".join(f"{g}:{score(train, t, g):.3f}" for g in GEMM_K)
        lines.append(f"  T={t} {cells}")
    t_best = middle_of_best(list(TILES_M), lambda t: max(score(train, t, g) for g in GEMM_K))
    g_best = middle_of_best(list(GEMM_K), lambda g: score(train, t_best, g))
    lines.append(
        f"best: T={t_best}, G={g_best}: train {score(train, t_best, g_best):.3f}, "
        f"held-out {score(held, t_best, g_best):.3f}; n32 everywhere: train "
        f"{geomean(r['ms']['heuristic'] / r['ms']['n32'] for r in train):.3f}, held-out "
        f"{geomean(r['ms']['heuristic'] / r['ms']['n32'] for r in held):.3f}"
    )
    return "\n".join(lines)


def fit_all() -> None:
    results = load_results(RESULTS_PATH)
    print("\n\n".join(fit(results, group) for group in GROUPS))


def main() -> None:
    sweep_main(__doc__, sweep, fit_all, "--fit")


if __name__ == "__main__":
    main()
