"""The gather sweep's CPU parts (benchmarks/sweep_gather.py): the problems it measures, and
the fit behind ``gather_rule.MAX_GATHER_LOADS_PER_SM``."""

from __future__ import annotations

import json

import pytest
import sweep_gather
from bench_corpus import load_corpus, problem_shape

from cute_conv.gather_rule import MAX_GATHER_LOADS_PER_SM
from cute_conv.staging import gather_replaces


@pytest.mark.parametrize("path", sweep_gather.JOINT_PATHS, ids=lambda p: p.name)
def test_the_selection_is_the_staged_c_and_is_what_was_measured(path):
    chosen = sweep_gather.gather_problems(load_corpus())
    for p in chosen:
        assert problem_shape(p).C % 8 and gather_replaces(problem_shape(p)) in ("pad", "im2col")
    rows = sweep_gather.measured_rows(path=path)
    assert {r["key"] for r in rows} == {p["key"] for p in chosen}
    assert all(r["replaces"] == gather_replaces(problem_shape(r)) for r in _with_shapes(rows))


def _with_shapes(rows: list[dict]) -> list[dict]:
    corpus = {p["key"]: p for p in load_corpus()}
    return [corpus[r["key"]] | {"replaces": r["replaces"]} for r in rows]


@pytest.mark.parametrize("replaces", ["pad", "im2col"])
def test_each_bound_is_the_joint_fit_of_the_committed_sweeps(replaces):
    per_gpu = [sweep_gather.joint_train_rows(replaces, (p,)) for p in sweep_gather.JOINT_PATHS]
    assert all(per_gpu) and all(r["split"] == "train" for rows in per_gpu for r in rows)
    train = sweep_gather.joint_train_rows(replaces)
    assert len(train) == sum(map(len, per_gpu))
    assert sweep_gather.fit_bound(train) == MAX_GATHER_LOADS_PER_SM[replaces]


def test_the_rule_picks_by_the_bound():
    row = {"loads_per_sm": 100, "ms": {"staged": 2.0, "gathered": 1.0}}
    assert sweep_gather.chosen_ms(row, 100) == 1.0 and sweep_gather.chosen_ms(row, 99) == 2.0
    assert sweep_gather.score([row], 99) == 0.5 and sweep_gather.score([row], 100) == 1.0


def test_another_gpus_rows_fit_from_their_own_file(tmp_path, capsys):
    rows = [
        {"key": f"k{i}", "split": "train", "replaces": "pad", "loads_per_sm": loads,
         "ms": {"staged": 2.0, "gathered": gathered, "staged_graph": 2.0,
                "gathered_graph": gathered}}
        for i, (loads, gathered) in enumerate([(10, 1.0), (20, 1.0), (30, 3.0)])
    ]  # fmt: skip
    path = tmp_path / "gather_sweep_other.json"
    path.write_text(json.dumps({"device": "another GPU", "rows": rows}))
    assert sweep_gather.measured_rows("pad", path) == rows
    assert sweep_gather.measured_rows("im2col", path) == []
    assert sweep_gather.fit_bound(rows) == 20  # gathered pays up to 20 loads per SM, not at 30
