"""CPU checks of ``benchmarks/experiments/direct_unstaged_problems.py``: its draws are what it
says (distinct, unstaged on the tensor cores, inside the direct rule's bounds for staged
convs), and the committed file is the one its seed makes."""

from __future__ import annotations

import json

import direct_unstaged_problems as draws

from cute_conv.direct_rule import direct_dense_config
from cute_conv.problem import Conv2dProblemShape
from cute_conv.staging import copies_activation


def _problem(p: dict) -> Conv2dProblemShape:
    return Conv2dProblemShape.from_shapes(
        (p["N"], p["H"], p["W"], p["C"]), (p["K"], p["R"], p["S"], p["C"]),
        padding=tuple(map(tuple, p["padding"])), stride=tuple(p["stride"]),
    )  # fmt: skip


def test_the_draws_are_unstaged_convs_inside_the_staged_bounds():
    problems = draws.generate(seed=5, count=12)["problems"]
    assert len({p["key"] for p in problems}) == 12
    for p in problems:
        problem = _problem(p)
        assert p["C"] in (8, 16) and not copies_activation(problem, 2)
        assert direct_dense_config(problem, 2, 2, staged=True) is not None


def test_the_committed_draws_are_the_seeds():
    committed = json.loads(draws.OUT.read_text())
    assert committed["problems"] == draws.generate()["problems"]
