"""CPU checks of ``benchmarks/experiments/packed_taps_ab.py``: its draws are fresh (in no
corpus), distinct, packed by the default config, and the committed file is the one its seed
makes; its report takes packed over unpacked time from rows whose runs passed."""

from __future__ import annotations

import json

import packed_taps_ab as ab
from bench_corpus import load_corpus, problem_shape


def test_the_draws_are_fresh_and_packed():
    problems = ab.generate(seed=7, count=8)["problems"]
    corpus_keys = {p["key"] for p in load_corpus()}
    assert len({p["key"] for p in problems}) == 8
    for p in problems:
        assert p["key"] not in corpus_keys
        assert ab.packs(problem_shape(p))


def test_the_committed_draws_are_the_seed():
    committed = json.loads(ab.PROBLEMS_PATH.read_text())
    assert committed["problems"] == ab.generate()["problems"]


def _measured(packed: float, unpacked: float, ok: bool = True) -> dict:
    checks = {"packed": {"ok": ok}, "unpacked": {"ok": True}}
    ms = {"packed": packed, "unpacked": unpacked, "packed_graph": packed,
          "unpacked_graph": unpacked}  # fmt: skip
    return {"checks": checks, "ms": ms}


def test_the_report_takes_rows_whose_runs_passed(tmp_path, capsys):
    rows = [
        {"key": "a", "split": "train", "plain": _measured(1.0, 2.0)},
        {"key": "b", "split": "heldout", "plain": _measured(2.0, 1.0), "fused": _measured(1, 1)},
        {"key": "c", "split": "train", "plain": _measured(9.0, 1.0, ok=False)},
        {"key": "d", "split": "train", "error": "RuntimeError()"},
    ]
    assert ab.ratios(rows, "plain", "_graph") == {"a": 0.5, "b": 2.0}
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"rows": rows}))
    ab.report(path)
    out = capsys.readouterr().out
    assert "plain CUDA graphs: packed / unpacked 1.000 (2 rows); lost > 1.03x: b 2.00x" in out
    assert "fused eager: packed / unpacked 1.000 (1 rows); lost > 1.03x: none" in out
    assert "errors: d" in out
