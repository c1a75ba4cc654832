"""A ``BoundSweep`` measured on several GPUs at once: ``--shard I/N`` splits its problems,
``--merge`` puts the shards' rows back into one results file in sample order."""

from __future__ import annotations

import argparse
import json

import pytest
import sweep_pingpong_k_tiles as sweep
from bench_corpus import load_corpus
from sweep_rows import load_results, merge_results, parse_shard


def test_the_shards_split_the_problems_in_sample_order():
    corpus = load_corpus()
    problems = sweep.SWEEP.problems(corpus, "fused")
    shards = [sweep.SWEEP.shard(corpus, "fused", (i, 3)) for i in range(3)]
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    keys = [p["key"] for s in shards for p in s]
    assert sorted(keys) == sorted(p["key"] for p in problems) and len(set(keys)) == len(keys)
    assert sweep.SWEEP.shard(corpus, "fused", (0, 1)) == problems


def test_shards_are_parsed_and_checked():
    assert parse_shard("2/4") == (2, 4)
    for bad in ("4/4", "1", "-1/4", "a/b", "1/0"):
        with pytest.raises(argparse.ArgumentTypeError, match="I/N with 0 <= I < N"):
            parse_shard(bad)


def _write(path, device, keys):
    rows = [{"key": k, "split": "train", "ms": {"x": 1.0}} for k in keys]
    path.write_text(json.dumps({"device": device, "rows": rows}))
    return path


def test_merged_shards_are_one_file_in_sample_order(tmp_path):
    problems = sweep.SWEEP.problems(load_corpus(), "fused")[:6]
    keys = [p["key"] for p in problems]
    into = tmp_path / "results.json"
    a = _write(tmp_path / "a.json", "NVIDIA H200", keys[0::2])
    b = _write(tmp_path / "b.json", "NVIDIA H200", keys[1::2] + keys[:1])  # one key twice
    merge_results(into, [a, b])
    merged = load_results(into)
    assert merged["device"] == "NVIDIA H200"
    assert [r["key"] for r in merged["rows"]] == keys


def test_shards_of_another_gpu_are_refused(tmp_path):
    into = _write(tmp_path / "results.json", "NVIDIA H200", ["k1"])
    other = _write(tmp_path / "other.json", "NVIDIA H100 80GB HBM3", ["k2"])
    with pytest.raises(SystemExit, match="measured on NVIDIA H100"):
        merge_results(into, [other])
    assert [r["key"] for r in load_results(into)["rows"]] == ["k1"]
