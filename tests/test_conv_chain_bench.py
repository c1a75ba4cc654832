"""The conv-chain benchmark's CPU parts: the traced conv sequences, the report, and its refusal
without a Hopper GPU. Measuring needs an H100/H200: ``python benchmarks/conv_chain.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import conv_chain as chain
import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_model_sites_are_every_conv_in_call_order():
    sites = chain.model_sites("resnet50")
    assert len(sites) == 53  # the stem, 16 bottlenecks of three, 4 downsample shortcuts
    assert (sites[0].C, sites[0].R, sites[0].stride) == (3, 7, (2, 2)) and sites[0].stem
    assert (sites[-1].H, sites[-1].C, sites[-1].K) == (7, 512, 2048)
    assert len(chain.model_sites("vgg16")) == 13


def test_report_states_the_saving_per_conv_and_the_ratio():
    us = dict(ours=300.0, ours_plain=350.0, cudnn=360.0)
    rows = [dict(model="resnet50", batch=1, convs=50, us=us)]
    report = chain.render(rows, "python benchmarks/conv_chain.py", "H100")
    line = next(x for x in report.splitlines() if x.startswith("| resnet50"))
    assert line == "| resnet50 | 1 | 50 | 300.0 | 350.0 | 360.0 | 50.0 us (1.00 a conv) | 1.20x |"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_without_a_hopper_gpu(tmp_path):
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "conv_chain.py"), "--out", str(tmp_path / "c.md")],
        capture_output=True, text=True, cwd=BENCHMARKS, check=False,
    )  # fmt: skip
    assert result.returncode == 1 and "needs a Hopper" in result.stderr
    assert not (tmp_path / "c.md").exists()
