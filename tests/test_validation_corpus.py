"""The validation corpus (benchmarks/validation_corpus.py, validation_corpus.json): problems
of models the main corpus does not trace, none of them in it, all held out."""

from __future__ import annotations

import json

import corpus
import pytest
import validation_corpus

COMMITTED = json.loads(validation_corpus.VALIDATION_PATH.read_text())
MAIN_KEYS = {p["key"] for p in json.loads(corpus.CORPUS_PATH.read_text())["problems"]}


@pytest.fixture(scope="module")
def fresh_pool() -> list[dict]:
    """A fresh trace's problems (``validation_corpus.pool``), traced once for the module."""
    try:
        corpus._torchvision()
    except RuntimeError as e:
        pytest.skip(str(e))
    return validation_corpus.pool(MAIN_KEYS)[1]


def test_committed_problems_trace_afresh(fresh_pool):
    assert validation_corpus.stale_problems(COMMITTED, fresh_pool) == []


def test_no_problem_is_in_the_main_corpus_and_every_one_is_held_out():
    keys = [p["key"] for p in COMMITTED["problems"]]
    assert len(keys) == len(set(keys)) == validation_corpus.SAMPLE
    assert not set(keys) & MAIN_KEYS
    assert {p["split"] for p in COMMITTED["problems"]} == {"heldout"}
    models = {name for name, _, _ in validation_corpus.MODELS}
    assert {p["model"] for p in COMMITTED["problems"]} <= models


def test_stale_problems_names_a_changed_record(fresh_pool):
    first = dict(COMMITTED["problems"][0], tags=["changed"])
    changed = dict(COMMITTED, problems=[first, *COMMITTED["problems"][1:]])
    assert validation_corpus.stale_problems(changed, fresh_pool) == [first["key"]]
