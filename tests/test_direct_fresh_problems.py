"""CPU checks of ``benchmarks/experiments/direct_fresh_problems.py``: its draws are what it
says (distinct, inside the direct rule's bounds for staged convs, unstaged on the tensor
cores or staged at wide K), and the committed files are the ones its seeds make."""

from __future__ import annotations

import json
import math

import direct_fresh_problems as draws
import pytest
from bench_corpus import problem_shape

from cute_conv.direct_rule import direct_dense_config
from cute_conv.staging import copies_activation


@pytest.mark.parametrize("staged", [False, True], ids=["unstaged", "staged"])
def test_the_draws_are_what_their_family_says(staged):
    problems = draws.generate(staged, seed=5, count=12)["problems"]
    assert len({p["key"] for p in problems}) == 12
    for p in problems:
        problem = problem_shape(p)
        assert p["C"] in draws.CHANNELS[staged]
        assert copies_activation(problem, 2) == staged
        assert direct_dense_config(problem, 2, 2, staged=True, staged_max_k=math.inf) is not None
        if staged:
            assert p["K"] >= draws.STAGED_MIN_K


@pytest.mark.parametrize("staged", [False, True], ids=["unstaged", "staged"])
def test_the_committed_draws_are_the_seeds(staged):
    committed = json.loads(draws.OUT[staged].read_text())
    assert committed["problems"] == draws.generate(staged)["problems"]
