"""The measuring loop the config sweeps share: problems measured one at a time into a JSON
results file's ``rows``, the file rewritten after each (an interrupted sweep keeps what it
measured, and a rerun skips it), within a time bound."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path


def load_results(path: Path) -> dict:
    """The results file's contents, or an empty one."""
    return json.loads(path.read_text()) if path.exists() else {"rows": []}


def measure_into(
    path: Path,
    results: dict,
    todo: list[dict],
    measure: Callable[[dict], dict],
    max_seconds: float,
    shown: tuple[str, ...],
) -> None:
    """``measure`` each problem of ``todo`` (a failure is recorded as the row's ``error``) and
    append its row to ``results``, saved to ``path``; stop starting new ones after
    ``max_seconds``. Prints the ``shown`` fields of each row."""
    start = time.perf_counter()
    print(f"{len(todo)} problems to measure")
    for i, p in enumerate(todo):
        if time.perf_counter() - start > max_seconds:
            print(f"time bound reached: {len(todo) - i} problems left")
            break
        try:
            row = measure(p)
        except Exception as e:  # noqa: BLE001 - recorded, the sweep goes on
            row = {"key": p["key"], "split": p["split"], "error": repr(e)[:300]}
        results["rows"].append(row)
        path.write_text(json.dumps(results, indent=1))
        print(i, {k: row.get(k) for k in shown})


def by_split(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """``(train, held-out)`` rows."""
    return [r for r in rows if r["split"] == "train"], [r for r in rows if r["split"] == "heldout"]


def middle_of_best(candidates: list[float], score: Callable[[float], float]) -> float:
    """The candidate with the best ``score``; among equal scores the middle one, the farthest
    from the data on both sides."""
    scores = [score(c) for c in candidates]
    best = max(scores)
    tied = [c for c, s in zip(candidates, scores, strict=True) if s >= best - 1e-12]
    return tied[len(tied) // 2]
