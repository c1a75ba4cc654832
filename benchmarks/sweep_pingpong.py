"""Ping-pong tiles against the heuristic's config without them, for the pointwise convs where
ping-pong pays by its rule (``config.pingpong_pays``): which calls the default gives them to.

    python benchmarks/sweep_pingpong.py [--max-seconds 500]   # H100/H200, all three forms
    python benchmarks/sweep_pingpong.py --report              # no GPU

The problems: every unstaged corpus problem whose default config (of the call's form) has
128-row tiles wider than 32, no stream-K and ``pingpong_pays``: where the rule before session
24 took ping-pong. Three forms: ``plain`` (bf16), ``fused`` (``relu(conv + b) + r``, bf16)
and ``fp8`` (plain, e4m3 inputs, bf16 output). Per problem and form, in one process: the
default without ping-pong ("default") and the rule's ping-pong config ("pingpong": 128x128
on a single-CTA cluster, statically scheduled), each checked against a float32 reference
(fp8: on the dequantized inputs), then timed eagerly and replayed from CUDA graphs,
interleaved as ``bench.py`` times, cuDNN's replay beside them. ``--report`` prints, per form,
train and held-out, the geomean of ping-pong's time over the default's: above 1, the default
without ping-pong is the faster.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import geomean  # noqa: E402
from bench_corpus import problem_shape  # noqa: E402
from sweep_rows import (  # noqa: E402
    SUITE_TALL_TILES,
    by_split,
    measure_configs,
    sweep_main,
    sweep_new_problems,
    timed_rows,
)

RESULTS_PATH = HERE / "pingpong_sweep.json"
NUM_SMS = 132  # H100 SXM: the SM count the rows' configs are chosen for
FORMS = ("plain", "fused", "fp8")


def form_configs(problem, form: str):
    """``(default, pingpong)`` configs of ``problem`` called in ``form``: the heuristic's
    without ping-pong, and the rule's ping-pong one; None where the rule would not take
    ping-pong (or the problem is staged)."""
    from cute_conv import config as config_module
    from cute_conv.staging import kernel_problem_for

    element_bytes = 1 if form == "fp8" else 2
    if kernel_problem_for(problem, element_bytes) != problem:
        return None
    pays = config_module.pingpong_pays
    config_module.pingpong_pays = lambda *args: False  # the heuristic as if it never paid
    try:
        default = config_module.default_config(
            problem, NUM_SMS, has_residual=form == "fused", element_bytes=element_bytes,
            **SUITE_TALL_TILES,
        )
    finally:
        config_module.pingpong_pays = pays
    takes = default.tile_m == 128 and default.tile_n > 32 and not default.stream_k
    if not (takes and pays(problem, default.tile_k, NUM_SMS, max_k_tiles=math.inf)):
        return None
    # 128-wide ping-pong tiles keep the plan's stages (a whole tile of C is for wider ones).
    pingpong = dataclasses.replace(
        default, tile_n=128, cluster_m=1, cluster_n=1, dynamic_schedule=False, pingpong=True,
        stages=0,
    )  # fmt: skip
    return default, pingpong


def pingpong_problems(problems: list[dict]) -> list[dict]:
    """One entry per (problem, form) the sweep measures: the corpus problem with ``form``."""
    return [
        p | {"form": form}
        for p in problems
        for form in FORMS
        if form_configs(problem_shape(p), form) is not None
    ]


def measure(p: dict) -> dict:
    problem = problem_shape(p)
    default, pingpong = form_configs(problem, p["form"])
    row = {k: p[k] for k in ("key", "split", "gflop", "form")}
    row |= {"default": repr(default), "pingpong": repr(pingpong)}
    return row | measure_configs(p, p["form"], {"default": default, "pingpong": pingpong})


def sweep(max_seconds: float) -> None:
    sweep_new_problems(
        RESULTS_PATH, pingpong_problems, measure, max_seconds, ("key", "form", "ms"),
        identity=lambda entry: (entry["key"], entry["form"]),
    )  # fmt: skip


def measured_rows(form: str) -> list[dict]:
    """The committed rows of ``form`` with both variants timed."""
    return [r for r in timed_rows(RESULTS_PATH, ("default", "pingpong")) if r["form"] == form]


def pingpong_over_default(rows: list[dict], suffix: str = "") -> float:
    """Geomean of ping-pong's time over the default's (> 1: the default is faster)."""
    return geomean(r["ms"]["pingpong" + suffix] / r["ms"]["default" + suffix] for r in rows)


def report() -> None:
    for form in FORMS:
        train, heldout = by_split(measured_rows(form))
        print(f"{form}:")
        for name, part in (("train", train), ("held-out", heldout)):
            eager, graphs = pingpong_over_default(part), pingpong_over_default(part, "_graph")
            print(f"  {name} ({len(part)}): ping-pong / default {eager:.3f} eager, "
                  f"{graphs:.3f} replayed")  # fmt: skip


def main() -> None:
    sweep_main(__doc__, sweep, report, "--report")


if __name__ == "__main__":
    main()
