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
    sites, grouped = chain.model_sites("resnet50")
    assert (len(sites), grouped) == (53, 0)  # the stem, 16 bottlenecks of three, 4 shortcuts
    assert (sites[0].C, sites[0].R, sites[0].stride) == (3, 7, (2, 2)) and sites[0].stem
    assert (sites[-1].H, sites[-1].C, sites[-1].K) == (7, 512, 2048)
    assert len(chain.model_sites("vgg16")[0]) == 13


def test_grouped_convs_are_left_out():
    """RegNet-Y's 3x3 convs are grouped, which the package does not run; its stem, 1x1s and
    squeeze-excite convs (1-pixel maps) stay, in call order."""
    sites, grouped = chain.model_sites("regnet_y_1_6gf")
    assert grouped == 27 and len(sites) == 140 - 27
    assert all(site.groups == 1 for site in sites)
    assert sites[0].stem and any(site.H == site.W == 1 for site in sites)


def test_report_states_the_saving_per_conv_and_the_ratio():
    us = dict(ours=300.0, ours_plain=350.0, cudnn=360.0)
    rows = [dict(model="resnet50", batch=1, convs=50, us=us)]
    report = chain.render(rows, "python benchmarks/conv_chain.py", "H100")
    line = next(x for x in report.splitlines() if x.startswith("| resnet50"))
    assert line == "| resnet50 | 1 | 50 | 300.0 | 350.0 | 360.0 | 50.0 us (1.00 a conv) | 1.20x |"
    rows = [dict(model="regnet_y_1_6gf", batch=1, convs=113, grouped=27, us=us)]
    report = chain.render(rows, "python benchmarks/conv_chain.py", "H100")
    assert "| regnet_y_1_6gf | 1 | 113 (27 grouped left out) | 300.0 |" in report


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_without_a_hopper_gpu(tmp_path):
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / "conv_chain.py"), "--out", str(tmp_path / "c.md")],
        capture_output=True, text=True, cwd=BENCHMARKS, check=False,
    )  # fmt: skip
    assert result.returncode == 1 and "needs a Hopper" in result.stderr
    assert not (tmp_path / "c.md").exists()
