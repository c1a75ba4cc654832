"""The halo sweep's CPU parts (benchmarks/sweep_pitched_halo.py): which problems and configs
it measures, that each form's committed rows are a prefix of them with every config passed
its check, and that the joint fit over the forms gives ``halo_rule``'s bounds."""

from __future__ import annotations

import json

import pytest
import sweep_pitched_halo as sweep
from bench_corpus import load_corpus, problem_shape

from cute_conv import halo_rule


def test_the_selection_is_stride_1_convs_with_several_taps_and_halo_variants():
    chosen = sweep.pitched_problems(load_corpus(), "plain")
    assert len(chosen) > 100
    pitched = 0
    for p in chosen:
        configs = sweep.form_configs(problem_shape(p), "plain")
        assert configs[sweep.DEFAULT].tile_w == 0 or sweep.RULE not in configs
        halos = [c for name, c in configs.items() if name != sweep.DEFAULT]
        assert halos and all(c.tile_w and c.tile_k == 64 and c.cluster_m == 1 for c in halos)
        pitched += any(c.halo_w for c in halos)
    assert pitched > len(chosen) // 2  # most rows are wider than one tile


@pytest.mark.parametrize("form", sweep.FORMS)
def test_committed_rows_are_a_prefix_of_the_selection_and_every_config_passed(form):
    rows = json.loads(sweep.RESULTS_PATHS[form].read_text())["rows"]
    selected = sweep.pitched_problems(load_corpus(), form)
    assert [r["key"] for r in rows] == [p["key"] for p in selected[: len(rows)]]
    for r, p in zip(rows, selected, strict=False):
        configs = sweep.form_configs(problem_shape(p), form)
        assert r["configs"] == {name: repr(c) for name, c in configs.items()}
        assert all(check["ok"] for check in r["checks"].values())
        assert set(r["ms"]) == set(configs) | {"cudnn"}


def test_the_joint_fit_gives_the_rules_bounds():
    bounds = (halo_rule.HALO_MIN_COLUMN_FILL, halo_rule.HALO_MIN_WAVES)
    assert sweep.joint_fit() == bounds
