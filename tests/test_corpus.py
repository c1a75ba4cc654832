"""The conv corpus (benchmarks/corpus.py, corpus.json) and its benchmark's CPU parts
(benchmarks/bench_corpus.py: selection, sections, the report). One GPU test runs the
benchmark's measurement on two small problems."""

from __future__ import annotations

import argparse
import json
import math

import bench_corpus
import corpus
import pytest

from cute_conv import Conv2dProblemShape
from tests.gpu import requires_sm90

COMMITTED = json.loads(corpus.CORPUS_PATH.read_text())
BY_KEY = {p["key"]: p for p in COMMITTED["problems"]}
RESNET50_STEM = "n1_h224_w224_c3_k64_r7_s7_pad3.3.3.3_str2.2_dil1.1"
RESNET50_1X1 = "n8_h56_w56_c64_k64_r1_s1_pad0.0.0.0_str1.1_dil1.1"  # layer1.0.conv1


def _shape(p: dict) -> Conv2dProblemShape:
    return bench_corpus.problem_shape(p)


# ---- the generator ----


def test_table_sources_are_deterministic():
    first = corpus.build_corpus(corpus.table_groups())
    second = corpus.build_corpus(corpus.table_groups())
    assert corpus.dumps(first) == corpus.dumps(second)
    assert len(corpus.random_sites()) == corpus.RANDOM_COUNT


def test_committed_corpus_holds_the_fresh_table_problems():
    """Without torchvision: every diffusion-table and random problem of a fresh generation is
    in corpus.json with the same split and tags (a model conv may share it: more sources)."""
    fresh = corpus.build_corpus(corpus.table_groups())
    for record in fresh["problems"]:
        committed = BY_KEY[record["key"]]
        assert committed["split"] == record["split"]
        assert committed["tags"] == record["tags"]
        assert set(record["sources"]) <= set(committed["sources"])
    rejected = {r["key"] for r in COMMITTED["rejected"]}
    assert {r["key"] for r in fresh["rejected"]} <= rejected


def test_committed_corpus_equals_a_fresh_generation():
    try:
        corpus._torchvision()
    except RuntimeError as e:
        pytest.skip(str(e))
    assert corpus.dumps(corpus.generate()) == corpus.CORPUS_PATH.read_text()


# ---- the committed corpus ----


def test_corpus_size_and_unique_keys():
    problems = COMMITTED["problems"]
    assert 400 <= len(problems) <= 800
    assert len(BY_KEY) == len(problems)
    families = {p["model"].split("@")[0] for p in problems}
    for model in ("resnet18", "resnet50", "resnext50_32x4d", "vgg16", "regnet_y_1_6gf",
                  "fasterrcnn_resnet50_fpn", "deeplabv3_resnet50", "sd_vae", "sd15_unet",
                  "sdxl_unet", "random"):  # fmt: skip
        assert model in families


def test_a_key_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not a problem key"):
        corpus.problem_of_key(RESNET50_STEM + "_x")


def test_problems_are_valid_and_match_their_keys():
    for p in COMMITTED["problems"]:
        problem = _shape(p)
        assert corpus.problem_key(problem) == p["key"]
        assert corpus.problem_of_key(p["key"]) == problem
        assert corpus.rejection(problem, groups=1) is None, p["key"]
        assert p["gflop"] == pytest.approx(problem.flops / 1e9, abs=1e-4)
        assert problem.flops <= corpus.MAX_FLOPS


def test_rejected_problems_say_why():
    reasons = [r["reason"] for r in COMMITTED["rejected"]]
    assert any("groups=32" in r for r in reasons)  # ResNeXt-50's grouped 3x3
    assert any("TFLOP is over the corpus cap" in r for r in reasons)
    for r in COMMITTED["rejected"]:
        assert r["key"] not in BY_KEY
        assert (r["groups"] > 1) == r["reason"].startswith("groups=")


def test_rejection_uses_the_package_validation():
    too_far = Conv2dProblemShape(1, 8, 8, 16, 16, 3, 3, padding=129)
    assert "rejected by the package" in corpus.rejection(too_far, groups=1)
    assert "groups=4" in corpus.rejection(Conv2dProblemShape(1, 8, 8, 16, 16, 3, 3), groups=4)


# ---- tags ----


def test_known_tags():
    stem = BY_KEY[RESNET50_STEM]
    assert {"stem", "strided", "big kernel", "few channels", "odd channels"} <= set(stem["tags"])
    assert "resnet50:conv1" in stem["sources"]
    one = BY_KEY[RESNET50_1X1]
    assert "1x1" in one["tags"] and "3x3 s1" not in one["tags"] and "stem" not in one["tags"]
    assert "resnet50:layer1.0.conv1" in one["sources"]


@pytest.mark.parametrize(
    "problem, expected",
    [
        (Conv2dProblemShape(1, 56, 56, 64, 64, 3, 3, padding=1), {"3x3 s1", "small batch"}),
        (Conv2dProblemShape(128, 7, 7, 512, 2048, 1, 1), {"1x1", "tiny map"}),  # M = 6272
        (Conv2dProblemShape(8, 56, 56, 128, 128, 3, 3, padding=1), {"3x3 s1"}),  # M = 25088
        (Conv2dProblemShape(16, 56, 56, 128, 128, 3, 3, padding=1), {"3x3 s1", "large"}),
        (
            Conv2dProblemShape(3, 20, 31, 13, 37, 1, 7, padding=((0, 0), (3, 2)), stride=(1, 2)),
            {
                "strided",
                "few channels",
                "odd channels",
                "big kernel",
                "asymmetric",
                "non-square map",
            },
        ),  # fmt: skip
        (
            Conv2dProblemShape(2, 65, 65, 2048, 256, 3, 3, padding=12, dilation=12),
            {"3x3 s1", "small batch", "dilated"},
        ),
    ],
)
def test_tags_of(problem, expected):
    assert set(corpus.tags_of(problem, stem=False)) == expected


# ---- the split ----


def test_split_is_stable_and_about_70_30():
    assert corpus.split_of(RESNET50_STEM) == "train"  # values fixed when the corpus was made
    assert corpus.split_of("abc") == "heldout"
    assert all(p["split"] == corpus.split_of(p["key"]) for p in COMMITTED["problems"])
    train = sum(p["split"] == "train" for p in COMMITTED["problems"])
    assert 0.65 <= train / len(COMMITTED["problems"]) <= 0.75


# ---- the benchmark's selection and sections ----


def test_select_by_split_and_tag():
    problems = COMMITTED["problems"]
    chosen = bench_corpus.select(problems, split="heldout", tags=["1x1"])
    assert chosen and all(p["split"] == "heldout" and "1x1" in p["tags"] for p in chosen)
    assert len(bench_corpus.select(problems, split="all", tags=[])) == len(problems)
    with pytest.raises(ValueError, match="not a corpus tag"):
        bench_corpus.select(problems, split="all", tags=["3x3"])


def test_sections_cover_the_selection_in_order():
    problems = COMMITTED["problems"]
    parts = bench_corpus.sections(problems, None)
    assert [p for part in parts for p in part] == problems
    for part in parts:
        est = sum(bench_corpus.estimate_seconds(p) for p in part)
        assert est <= bench_corpus.SECTION_SECONDS * 1.1
    assert len(bench_corpus.sections(problems[:5], 3)) == 3
    assert bench_corpus.sections([], None) == [[]]


def test_fused_only_leaves_the_plain_timings_out_of_the_estimate():
    p = COMMITTED["problems"][0]
    full, fused = (bench_corpus.estimate_seconds(p, fused_only=f) for f in (False, True))
    # Four of the eight timed calls: the plain conv and cuDNN, eager and replayed.
    assert full - fused == pytest.approx(4 * bench_corpus.ROUNDS * bench_corpus.DO_BENCH_S, 0.2)
    with pytest.raises(SystemExit):
        bench_corpus.main(["--fp8", "--fused-only", "--plan"])


def test_a_selection_of_one_section_needs_no_section_argument(monkeypatch):
    """Named problems that fit one section run without ``--section``; the whole corpus,
    several sections, still needs it. (The GPU check and the run itself stubbed.)"""
    ran = []
    monkeypatch.setattr(bench_corpus.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench_corpus.torch.cuda, "get_device_capability", lambda: (9, 0))
    monkeypatch.setattr(bench_corpus, "run_benchmark", lambda part, *_: ran.append(part) or 0)
    keys = [p["key"] for p in COMMITTED["problems"][:2]]
    assert bench_corpus.main(["--keys", ",".join(keys), "--no-frontend"]) == 0
    assert [[p["key"] for p in part] for part in ran] == [keys]
    with pytest.raises(SystemExit):
        bench_corpus.main([])
    assert len(ran) == 1


# ---- the report ----


def _row(key, split, tags, gflop, **times):
    return {"key": key, "split": split, "tags": tags, "model": "m", "gflop": gflop,
            "checks": {"plain": {"ok": True, "rel_err": 1e-3}}, "errors": {}, **times}  # fmt: skip


def _results() -> dict:
    rows = [
        _row("a", "train", ["1x1"], 1.0, ours_ms=1.0, cudnn_ms=2.0, after_ms=1.0, fe_after_ms=3.0),
        _row("b", "train", ["1x1", "large"], 3.0, ours_ms=0.01, cudnn_ms=0.005),
        _row("c", "heldout", ["3x3 s1"], 1.0, ours_ms=0.25, cudnn_ms=1.0),
    ]
    old = [_row("a", "train", ["1x1"], 1.0, ours_ms=1.0, cudnn_ms=100.0)]  # superseded
    other = [_row("d", "train", ["1x1"], 1.0, ours_ms=1.0, cudnn_ms=9.0)]  # another device
    run = {"device": "H100", "torch": "2.x", "cudnn": 1, "cudnn_frontend": "1.x"}
    return {
        "runs": [
            {**run, "run_id": "1", "gemm_tflops": 600.0, "rows": old},
            {**run, "run_id": "2", "device": "H200", "gemm_tflops": 800.0, "rows": other},
            {**run, "run_id": "3", "gemm_tflops": 600.0, "rows": rows},
        ]
    }


def test_render_tables_and_geomeans(tmp_path):
    report, chart = tmp_path / "CORPUS.md", tmp_path / "corpus.png"
    text = bench_corpus.render(_results(), report, chart, device="H100")
    assert report.read_text() == text and chart.stat().st_size > 0
    # plain ratios: a 2.0 (1 GFLOP), b 0.5 (3 GFLOP), c 4.0 (1 GFLOP)
    fw_train = math.exp((math.log(2.0) + 3 * math.log(0.5)) / 4)  # 2**-0.5
    assert f"| plain conv vs cuDNN | train | 1.000x / {fw_train:.3f}x (2) |" in text
    assert "| plain conv vs cuDNN | heldout | 4.000x / 4.000x (1) |" in text
    assert f"| plain conv vs cuDNN | all | {4 ** (1 / 3):.3f}x / 1.000x (3) |" in text
    assert "| relu(conv + b) + r vs cuDNN frontend | train | 3.000x / 3.000x (1) |" in text
    # the floors: b's 0.50x is the one plain ratio under 0.95x; the fused a is over 1.0x
    assert (
        f"| plain conv vs cuDNN | train | 1.000x / {fw_train:.3f}x (2) | 1 below 0.95x (least "
        "0.50x) |"
    ) in text
    assert "| heldout | 4.000x / 4.000x (1) | 0 below 0.95x (least 4.00x) |" in text
    assert "| train | 3.000x / 3.000x (1) | 0 below 1.00x (least 3.00x) |" in text
    assert "relu(conv + b + r)" not in text  # no row has that comparison
    # per class: 1x1 train = a and b; 3x3 s1 only held out
    assert f"| 1x1 | 1.000x / {fw_train:.3f}x (2) | - | 3.000x / 3.000x (1) | - |" in text
    assert "| 3x3 s1 | - | 4.000x / 4.000x (1) | - | - |" in text
    worst = text.split("## Worst ten: plain conv vs cuDNN")[1].splitlines()
    assert worst[4].startswith("| b | m | 1x1, large | 3 | 0.0100 | 0.0050 | 0.50x |")
    # b is latency-bound (cuDNN 5 us); b is large: 3 GFLOP / 0.01 ms = 300 TFLOP/s of 600
    assert "1 of 3 problems; plain conv vs cuDNN on them: 0.500x / 0.500x (1)" in text
    assert "at 50% of the bf16 GEMM rate (median of 1;" in text
    assert "All checks passed" in text


def test_render_of_a_corpus_held_out_whole_has_no_train_columns(tmp_path):
    results = _results()
    for run in results["runs"]:
        run["rows"] = [dict(r, split="heldout") for r in run["rows"]]
    text = bench_corpus.render(results, tmp_path / "r.md", tmp_path / "c.png", device="H100")
    assert f"| plain conv vs cuDNN | heldout | {4 ** (1 / 3):.3f}x / 1.000x (3) |" in text
    assert "| train |" not in text and "| all |" not in text
    assert "| 1x1 | 1.000x / 0.707x (2) | 3.000x / 3.000x (1) |" in text


def test_render_of_fp8_rows_compares_the_replays_where_rows_have_them(tmp_path):
    """fp8 rows: eager ratios against our bf16, cuDNN's and the frontend's fp8; replayed ones
    against the bf16 replays, over the rows that have them (older rows have none)."""
    times = dict(ours_ms=2.0, cudnn_ms=2.0, fp8_ms=4.0, cudnn_fp8_ms=4.0)
    replays = dict(ours_graph_ms=2.0, cudnn_graph_ms=3.0, fp8_graph_ms=1.0)
    rows = [
        _row("a", "heldout", ["1x1"], 1.0, **times, **replays),
        _row("b", "heldout", ["1x1"], 1.0, **times),  # measured before the replays
    ]
    run = {"device": "H200", "torch": "2.x", "cudnn": 1, "cudnn_frontend": "1.x"}
    results = {"runs": [{**run, "run_id": "1", "gemm_tflops": 800.0, "rows": rows}]}
    text = bench_corpus.render(results, tmp_path / "r.md", tmp_path / "c.png")
    assert text.startswith("# Corpus benchmark (fp8)")
    assert "| ours fp8 vs ours bf16 | heldout | 0.500x / 0.500x (2) | - |" in text
    assert "| ours fp8 vs cuDNN frontend fp8 | heldout | 1.000x / 1.000x (2) | - |" in text
    assert "| ours fp8 vs ours bf16, CUDA graphs | heldout | 2.000x / 2.000x (1) | - |" in text
    assert "| ours fp8 vs cuDNN bf16, CUDA graphs | heldout | 3.000x / 3.000x (1) | - |" in text


def test_the_fp8_estimate_counts_our_replays_and_the_frontends_eager_calls():
    p = BY_KEY[RESNET50_1X1]
    # per timed function: ROUNDS do_bench calls (the problem's own time is ~0 here)
    per_fn = bench_corpus.ROUNDS * (bench_corpus.DO_BENCH_S + 10 * p["gflop"] * 1e9
                                    / bench_corpus.EST_RATE_FLOPS)  # fmt: skip
    no_frontend = bench_corpus.estimate_seconds(p, frontend=False, fp8=True)
    with_frontend = bench_corpus.estimate_seconds(p, fp8=True)
    assert no_frontend == pytest.approx(bench_corpus.PROBLEM_SETUP_S + 6 * per_fn)
    screen = bench_corpus.FRONTEND_SCREEN_S / len(bench_corpus.ORDERS)
    assert with_frontend == pytest.approx(no_frontend + screen + per_fn)


def test_render_defaults_to_the_latest_device_and_lists_failures(tmp_path):
    results = _results()
    results["runs"][2]["rows"][2]["checks"]["plain"] = {"ok": False, "rel_err": 0.5}
    text = bench_corpus.render(results, tmp_path / "r.md", tmp_path / "c.png")
    assert "device: H100" in text  # the latest run's device, not H200
    assert "| c | plain | rel_err 5.0e-01 |" in text


def test_stale_keys_are_those_last_measured_before_a_run():
    results = _results()  # H100: run 1 (a), run 3 (a, b, c); H200: run 2 (d)
    assert bench_corpus.stale_keys(results, "H100", "3") == set()  # a's latest is run 3
    assert bench_corpus.stale_keys(results, "H100", "4") == {"a", "b", "c"}
    assert bench_corpus.stale_keys(results, "H200", "3") == {"d"}
    stamps = {"runs": [
        {"device": "H100", "run_id": "20261124T193000.1Z", "rows": [_row("a", "train", [], 1.0)]},
        {"device": "H100", "run_id": "20261125T053836.2Z", "rows": [_row("b", "train", [], 1.0)]},
    ]}  # fmt: skip
    assert bench_corpus.stale_keys(stamps, "H100", "20261125T05") == {"a"}


def test_keys_measured_on_another_device_only():
    results = {"runs": [
        {"device": "H100", "rows": [{"key": "a"}, {"key": "b"}, {"key": "c"}]},
        {"device": "H200", "rows": [{"key": "b"}, {"key": "d"}]},
        {"device": "H100", "rows": [{"key": "e"}]},
    ]}  # fmt: skip
    assert bench_corpus.keys_measured_on(results, "H100", "H200") == {"a", "c", "e"}
    assert bench_corpus.keys_measured_on(results, "H200", "H100") == {"d"}
    assert bench_corpus.keys_measured_on(results, "H100", "B200") == {"a", "b", "c", "e"}


def test_config_changed_keys_are_rows_measured_with_another_config():
    from cute_conv.untuned import heuristic_config

    first, second = bench_corpus.load_corpus()[:2]
    now = {
        p["key"]: (
            bench_corpus._tile(heuristic_config(bench_corpus.problem_shape(p), 132)),
            bench_corpus._tile(
                heuristic_config(bench_corpus.problem_shape(p), 132, has_residual=True)
            ),
        )
        for p in (first, second)
    }

    def row(p, plain, fused):
        return {"key": p["key"], "config": plain, "fused_config": fused}

    results = {"runs": [
        {"device": "H100", "run_id": "1", "rows": [row(first, "0x0 1x1", "0x0 1x1")]},
        {"device": "H100", "run_id": "2", "rows": [row(first, *now[first["key"]]),
                                                   row(second, now[second["key"]][0], "old")]},
        {"device": "H200", "run_id": "3", "rows": [row(first, "old", now[first["key"]][1])]},
    ]}  # fmt: skip
    problems = [first, second]
    # first's latest H100 row (run 2) has today's configs; second's fused config moved.
    assert bench_corpus.config_changed_keys(results, "H100", problems, 132) == {second["key"]}
    assert bench_corpus.config_changed_keys(results, "H200", problems, 132) == {first["key"]}
    assert bench_corpus.config_changed_keys(results, "B200", problems, 132) == set()


def test_config_changed_keys_compare_the_plans_rows_record():
    from cute_conv.untuned import heuristic_config

    p = bench_corpus.load_corpus()[0]
    problem = bench_corpus.problem_shape(p)
    plain, fused = heuristic_config(problem, 132), heuristic_config(problem, 132, has_residual=True)
    row = {
        "key": p["key"], "config": bench_corpus._tile(plain),
        "fused_config": bench_corpus._tile(fused),
        "plan": bench_corpus._plan(plain, False), "fused_plan": bench_corpus._plan(fused, True),
    }  # fmt: skip

    def changed(**fields):
        results = {"runs": [{"device": "H200", "run_id": "1", "rows": [row | fields]}]}
        return bench_corpus.config_changed_keys(results, "H200", [p], 132)

    assert changed() == set()
    assert changed(plan="ring 3, out 4x32") == {p["key"]}  # the same tile, another plan
    assert changed(fused_plan="ring 2, out 2x32, C 2") == {p["key"]}
    # A row without plans (measured before they were recorded) is compared by config alone.
    bare = {k: v for k, v in row.items() if not k.endswith("plan")}
    results = {"runs": [{"device": "H200", "run_id": "1", "rows": [bare]}]}
    assert bench_corpus.config_changed_keys(results, "H200", [p], 132) == set()


def test_plan_names_the_ring_and_the_buffers():
    from cute_conv import Conv2dConfig

    assert bench_corpus._plan(Conv2dConfig(tile_m=192), False) == "ring 5, out 2x32"
    assert bench_corpus._plan(Conv2dConfig(), True) == "ring 5, out 2x64, C 2"


def test_tile_names_a_fixed_stage_count():
    from cute_conv import Conv2dConfig

    assert bench_corpus._tile(Conv2dConfig(tile_n=256, cluster_m=2)) == "128x256 2x1"
    assert bench_corpus._tile(Conv2dConfig(tile_n=256, stages=3)) == "128x256 1x1 3 stages"


def test_a_rerun_keeps_the_comparisons_it_did_not_time():
    results = _results()
    rerun = _row("c", "heldout", ["3x3 s1"], 1.0, ours_ms=0.5, cudnn_ms=1.0)  # no fused times
    results["runs"][0]["rows"].append(
        _row("c", "heldout", ["3x3 s1"], 1.0, ours_ms=9.0, cudnn_ms=1.0, after_ms=1.0,
             fe_after_ms=2.0)
    )  # fmt: skip
    results["runs"].append({**results["runs"][2], "run_id": "4", "rows": [rerun]})
    _, rows, _ = bench_corpus.latest_rows(results)
    c = next(r for r in rows if r["key"] == "c")
    assert bench_corpus.ratio(c, "plain") == 2.0  # the rerun's, not run 1's
    assert bench_corpus.ratio(c, "after") == 2.0  # run 1's pair, kept together
    assert rerun.get("after_ms") is None  # the results themselves are left as they are


def test_merge_adds_each_process_runs(tmp_path):
    results = _results()
    target, gpu0, gpu1 = (tmp_path / n for n in ("all.json", "gpu0.json", "gpu1.json"))
    target.write_text(json.dumps({"runs": results["runs"][:2]}))
    gpu0.write_text(json.dumps({"runs": [results["runs"][2]]}))
    rerun = {**results["runs"][1], "rows": []}  # run 2 again: replaced, not duplicated
    gpu1.write_text(json.dumps({"runs": [rerun]}))
    assert bench_corpus.main(["--merge", str(gpu0), str(gpu1), "--results", str(target)]) == 0
    runs = json.loads(target.read_text())["runs"]
    assert [r["run_id"] for r in runs] == ["1", "3", "2"] and runs[2]["rows"] == []
    with pytest.raises(FileNotFoundError, match="missing.json"):
        bench_corpus.merge_results([tmp_path / "missing.json"], target)


def test_gpu_commands_split_the_section_by_keys(tmp_path):
    problems = COMMITTED["problems"][:7]
    args = argparse.Namespace(gpus=3, max_seconds=300.0, corpus=bench_corpus.CORPUS_PATH,
                              fp8=False, fused_only=True, no_frontend=False)  # fmt: skip
    mode = dict(frontend=True, fp8=False, fused_only=True)
    jobs = bench_corpus.gpu_commands(problems, args, mode, tmp_path)
    assert len(jobs) == 3 and len({results for results, _ in jobs}) == 3
    keys = []
    for _, command in jobs:
        spec = command[command.index("--keys") + 1]
        keys += bench_corpus.read_keys(spec)
        assert "--fused-only" in command and "--fp8" not in command
        assert command[command.index("--max-seconds") + 1] == "300.0"
    assert keys == [p["key"] for p in problems]  # every problem once, in order
    assert bench_corpus.read_keys("a,b,") == ["a", "b"]


def test_fused_replays_are_judged_against_the_frontends_faster_timing():
    row = _row("a", "train", [], 1.0, after_ms=2.0, fe_after_ms=1.2, after_graph_ms=1.0,
               fe_after_graph_ms=1.5)  # fmt: skip
    assert bench_corpus.ratio(row, "after") == 0.6
    assert bench_corpus.ratio(row, "after_graph") == 1.2  # its eager call, the faster
    row["fe_after_ms"] = 3.0
    assert bench_corpus.ratio(row, "after_graph") == 1.5  # now its replay
    del row["fe_after_graph_ms"]  # a frontend plan that could not be captured
    assert bench_corpus.ratio(row, "after_graph") is None
    assert bench_corpus.ratio(row, "before_graph") is None


def test_a_rerun_carries_every_time_of_a_comparison_it_did_not_time():
    results = _results()
    earlier = _row("c", "heldout", ["3x3 s1"], 1.0, ours_ms=0.5, cudnn_ms=1.0,
                   after_graph_ms=1.0, fe_after_ms=2.0, fe_after_graph_ms=3.0)  # fmt: skip
    results["runs"][2]["rows"][2] = earlier
    rerun = _row("c", "heldout", ["3x3 s1"], 1.0, ours_ms=0.5, cudnn_ms=1.0, after_ms=1.0,
                 fe_after_ms=4.0)  # fmt: skip
    results["runs"].append({**results["runs"][2], "run_id": "4", "rows": [rerun]})
    _, rows, _ = bench_corpus.latest_rows(results)
    c = next(r for r in rows if r["key"] == "c")
    assert bench_corpus.ratio(c, "after") == 4.0  # run 4's pair
    assert bench_corpus.ratio(c, "after_graph") == 2.0  # run 3's three times, together
    assert c["fe_after_ms"] == 4.0 and bench_corpus.ours_ms(c, "plain") == 0.5


# ---- the measurement (GPU) ----


@requires_sm90
def test_bench_problem_on_small_problems():
    """Both checks and all timings on two small problems, one with asymmetric padding (cuDNN
    through F.pad) and odd channels; the frontend's columns where it is installed."""
    import torch

    torch.backends.cudnn.benchmark = True
    frontend = bench_corpus._frontend()
    problems = [
        {"key": "k1", "split": "train", "tags": [], "model": "m", "gflop": 0.0,
         "N": 2, "H": 16, "W": 16, "C": 64, "K": 64, "R": 3, "S": 3,
         "padding": [[1, 1], [1, 1]], "stride": [1, 1], "dilation": [1, 1]},
        {"key": "k2", "split": "train", "tags": [], "model": "m", "gflop": 0.0,
         "N": 1, "H": 13, "W": 20, "C": 13, "K": 37, "R": 3, "S": 5,
         "padding": [[0, 1], [2, 1]], "stride": [2, 1], "dilation": [1, 1]},
    ]  # fmt: skip
    for p in problems:
        row = bench_corpus.bench_problem(p, frontend)
        assert all(c["ok"] for c in row["checks"].values()), row
        assert set(row["checks"]) == {"plain", "after", "before"}
        for name in (
            "ours_ms",
            "cudnn_ms",
            "ours_graph_ms",
            "cudnn_graph_ms",
            "after_ms",
            "before_ms",
        ):
            assert row[name] > 0
        assert row["after_graph_ms"] > 0 and row["before_graph_ms"] > 0
        if frontend is not None and "fe_after" not in row["errors"]:
            assert row["fe_after_ms"] > 0
            # the frontend's graph replays from a CUDA graph too (captured on a side stream)
            assert row["fe_after_graph_ms"] > 0, row["errors"]
    row = bench_corpus.bench_problem(problems[0], frontend, fused_only=True)
    assert set(row["checks"]) == {"after", "before"} and "ours_ms" not in row
    assert row["after_ms"] > 0 and row["before_ms"] > 0
    row = bench_corpus.bench_problem(problems[0], frontend, fp8=True)
    assert row["checks"]["fp8"]["ok"] and "after_ms" not in row
    assert row["fp8_ms"] > 0 and row["fp8_graph_ms"] > 0 and row["ours_graph_ms"] > 0


@pytest.mark.parametrize("padding", [((1, 1), (2, 2)), ((0, 1), (0, 1)), ((2, 0), (1, 3))], ids=str)
def test_the_cudnn_anchor_pads_asymmetric_problems_explicitly(padding):
    """``cudnn_conv2d`` (the corpus benchmark's and the duration probe's cuDNN call): the
    problem's own padding either way, on channels_last views, against the reference."""
    import torch

    from cute_conv.reference import conv2d_reference

    x = torch.randn(2, 9, 11, 5)
    flt = torch.randn(7, 3, 3, 5)
    problem = Conv2dProblemShape.from_shapes(
        x.shape, flt.shape, stride=(2, 1), padding=padding, dilation=(1, 2)
    )
    symmetric = padding[0][0] == padding[0][1] and padding[1][0] == padding[1][1]
    assert bench_corpus.pads_symmetrically(problem) == symmetric
    call = bench_corpus.cudnn_conv2d(x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2), problem)
    got = call().permute(0, 2, 3, 1)
    want = conv2d_reference(x, flt, stride=(2, 1), padding=padding, dilation=(1, 2))
    assert got.shape == tuple(problem.output_shape)
    assert torch.allclose(got, want.float(), rtol=1e-4, atol=1e-4)


def test_render_of_other_results_needs_its_own_report_and_chart(tmp_path):
    # The default report and chart are the corpus's: a validation render must not overwrite them.
    results = tmp_path / "validation_results.json"
    with pytest.raises(SystemExit):
        bench_corpus.main(["--render", "--results", str(results)])
    with pytest.raises(SystemExit):
        bench_corpus.main(["--render", "--results", str(results), "--report", str(tmp_path / "r.md")])
    assert not (tmp_path / "r.md").exists()
