"""The whole-model benchmark's CPU parts: merging results, rendering the report and the chart
from a synthetic JSON, its argument checks, the model helpers of ``cute_conv.testing`` it uses,
and the failure of it and of ``examples/resnet50.py`` without a GPU. Measuring needs an
H100/H200: ``python benchmarks/models.py --models resnet50``."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from cute_conv.testing import float32_logits, randomize_batchnorm_

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def models():
    """benchmarks/models.py as a module (``benchmarks/`` is on ``sys.path``: see
    ``conftest``)."""
    return importlib.import_module("models")


def row(model: str, batch: int, ms: tuple, rel_err: tuple = (4e-3, 5e-3, 5e-3)) -> dict:
    """A result row as the benchmark writes it: times and errors of (cute_conv, eager,
    compile)."""
    return dict(
        model=model, batch=batch,
        ms=dict(zip(("cute_conv", "eager", "compile"), ms, strict=True)),
        rel_err=dict(zip(("cute_conv", "eager", "compile"), rel_err, strict=True)),
        compile_s={"cute_conv_cold": 21.5, "cute_conv_warm": 0.42, "torch_compile": 55.0},
        device="NVIDIA H100 80GB HBM3", torch="2.11.0", cudnn=91002, cutlass_dsl="4.8.1",
        date="2026-11-23", command=f"python benchmarks/models.py --models {model}",
    )  # fmt: skip


SYNTHETIC = {
    "rows": [
        row("resnet18", 8, (2.0, 4.0, 3.0)),
        row("resnet50", 1, (1.0, 2.0, 1.2)),  # 1.20x torch.compile: batch 1's 1.1x met
        row("resnet50", 32, (10.0, 20.0, 12.0), (6e-3, 5e-3, 5e-3)),  # 1.20x: 1.3x missed
        row("resnet50", 128, (40.0, 80.0, 60.0)),  # 1.50x: met
    ],
    "reports": {
        "resnet50": "cute_conv.optimize: 53 convs fused, 0 left to torch\n"
        "fused:\n  conv1: conv+bn+relu (conv1, bn1, relu)\n"
    },
}


def render(models, tmp_path: Path, data: dict) -> str:
    results = tmp_path / "models.json"
    results.write_text(json.dumps(data))
    out, chart = tmp_path / "MODELS.md", tmp_path / "models.png"
    args = ["--render", "--json", str(results), "--out", str(out), "--chart", str(chart)]
    assert models.main(args) == 0
    assert chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    return out.read_text()


def test_render_tables_and_chart(models, tmp_path):
    text = render(models, tmp_path, SYNTHETIC)
    lines = text.splitlines()
    # images/s = batch / ms * 1000; speedups of cute_conv over eager and torch.compile
    assert "| resnet18 | 8 | 4000 | 2000 | 2667 | 2.00x | 1.50x |" in lines
    assert "| resnet50 | 1 | 1000 | 500 | 833 | 2.00x | 1.20x |" in lines
    assert "| resnet50 | 128 | 3200 | 1600 | 2133 | 2.00x | 1.50x |" in lines
    assert "| resnet50 | 32 | 6.00e-03 | 5.00e-03 | 5.00e-03 | **no** |" in lines
    assert "| resnet50 | 1 | 4.00e-03 | 5.00e-03 | 5.00e-03 | yes |" in lines
    assert "| resnet50 | 1 | 21.5 | 0.42 | 55.0 |" in lines
    assert "- device: NVIDIA H100 80GB HBM3; dates 2026-11-23" in lines
    assert "`python benchmarks/models.py --models resnet50`" in text
    summary = "resnet50: cute_conv.optimize: 53 convs fused, 0 left to torch"
    assert f"<details><summary>{summary}</summary>" in lines
    assert "  conv1: conv+bn+relu (conv1, bn1, relu)" in lines
    assert "![speedups](models.png)" in lines


def test_render_targets(models, tmp_path):
    lines = render(models, tmp_path, SYNTHETIC).splitlines()
    assert "| resnet50 batch 1: >= 1.1x torch.compile | 1.20x | yes |" in lines
    assert "| resnet50 batch 32: >= 1.3x torch.compile | 1.20x | **no** |" in lines
    assert "| resnet50 batch 128: >= 1.3x torch.compile | 1.50x | yes |" in lines
    error_target = "| logits' error no worse than torch eager bf16's (every row) | 3 of 4 rows "
    assert error_target + "| **no** |" in lines


def test_render_unmeasured_targets(models, tmp_path):
    data = {"rows": [row("vgg16", 32, (5.0, 6.0, 5.5))], "reports": {}}
    lines = render(models, tmp_path, data).splitlines()
    assert "| resnet50 batch 32: >= 1.3x torch.compile | not measured | not measured |" in lines
    assert "| logits' error no worse than torch eager bf16's (every row) | 1 of 1 rows | yes |" in (
        lines
    )


def test_merge_replaces_the_rows_measured_again(models):
    old = {
        "rows": [row("resnet18", 8, (2.0, 4.0, 3.0)), row("resnet50", 32, (10.0, 20.0, 12.0))],
        "reports": {"resnet18": "old 18", "resnet50": "old 50"},
    }
    new_rows = [row("vgg16", 1, (1.0, 1.0, 1.0)), row("resnet50", 32, (9.0, 20.0, 12.0))]
    merged = models.merge_results(old, new_rows, {"resnet50": "new 50"})
    keys = [(r["model"], r["batch"], r["ms"]["cute_conv"]) for r in merged["rows"]]
    assert keys == [("resnet18", 8, 2.0), ("resnet50", 32, 9.0), ("vgg16", 1, 1.0)]
    assert merged["reports"] == {"resnet18": "old 18", "resnet50": "new 50"}


def test_any_torchvision_classifier_is_measured_after_the_models(models):
    """A model outside ``MODELS`` (a held-out check) parses and sorts after them, by name."""
    pytest.importorskip("torchvision")
    args = models.parse_args(["--models", "resnet101", "resnet18", "--render"])
    assert args.models == ["resnet101", "resnet18"]
    rows = [row(name, 8, (1.0, 1.0, 1.0)) for name in ("wide_resnet101_2", "resnet101", "vgg16")]
    merged = models.merge_results({"rows": [], "reports": {}}, rows, {})
    assert [r["model"] for r in merged["rows"]] == ["vgg16", "resnet101", "wide_resnet101_2"]


def test_progress_line(models):
    line = models._progress_line(row("resnet50", 32, (10.0, 20.0, 12.0)))
    assert line.startswith(" resnet50 batch  32: cute_conv 3200 img/s, torch eager 1600 img/s")
    assert "| 2.00x eager, 1.20x torch.compile | rel err 4.0e-03, 5.0e-03, 5.0e-03 |" in line
    assert line.endswith("compile 22 s cold, 0.4 s warm, torch.compile 55 s")


def test_compiled_cute_conv_rows_get_their_own_section(models, tmp_path):
    """--compile-cute-conv rows: torch.compile(cute_conv.optimize(model)) beside the rest;
    rows without it (older runs) render as before, and no section without any."""
    compiled = row("convnext_tiny", 1, (1.0, 1.2, 0.8))
    compiled["ms"]["cute_conv_compile"] = 0.64
    compiled["rel_err"]["cute_conv_compile"] = 6.5e-3
    compiled["compile_s"]["cute_conv_compile"] = 31.0
    data = {"rows": [compiled, row("resnet50", 1, (1.0, 2.0, 1.2))], "reports": {}}
    text = render(models, tmp_path, data)
    assert "## cute_conv.optimize under torch.compile (`--compile-cute-conv`)" in text
    # 1000 / 0.64 images/s; 0.8 / 0.64 over torch.compile, 1.0 / 0.64 over cute_conv alone
    assert "| convnext_tiny | 1 | 1562 | 1.25x | 1.56x | 6.50e-03 | 31.0 |" in text.splitlines()
    line = models._progress_line(compiled)
    assert line.endswith(
        "| cute_conv + torch.compile 1562 img/s (1.25x torch.compile), rel err 6.5e-03, "
        "compile 31 s"
    )
    assert "under torch.compile" not in render(models, tmp_path, SYNTHETIC)


def test_merge_adds_other_runs_rows(models, tmp_path, capsys):
    """--merge: each file's rows replace those of their model and batch size; no GPU."""
    results, other = tmp_path / "models.json", tmp_path / "other.json"
    results.write_text(json.dumps(SYNTHETIC))
    newer = row("resnet50", 1, (0.9, 2.0, 1.2))
    other.write_text(json.dumps({"rows": [newer, row("vgg16", 8, (3.0, 4.0, 3.5))],
                                 "reports": {"vgg16": "vgg16 report"}}))  # fmt: skip
    out, chart = tmp_path / "MODELS.md", tmp_path / "models.png"
    args = ["--json", str(results), "--out", str(out), "--chart", str(chart)]
    assert models.main([*args, "--merge", str(other)]) == 0
    merged = json.loads(results.read_text())
    keys = [(r["model"], r["batch"]) for r in merged["rows"]]
    assert keys == [("resnet18", 8), ("resnet50", 1), ("resnet50", 32), ("resnet50", 128),
                    ("vgg16", 8)]  # fmt: skip
    assert merged["rows"][1]["ms"]["cute_conv"] == 0.9
    assert set(merged["reports"]) == {"resnet50", "vgg16"} and out.is_file()
    (tmp_path / "empty.json").write_text(json.dumps({"rows": [], "reports": {}}))
    assert models.main([*args, "--merge", str(tmp_path / "empty.json")]) == 1
    assert "holds no results" in capsys.readouterr().err


def test_render_without_results_fails(models, tmp_path, capsys):
    args = ["--render", "--json", str(tmp_path / "none.json"), "--out", str(tmp_path / "o.md")]
    assert models.main(args) == 1
    assert "holds no results" in capsys.readouterr().err
    assert not (tmp_path / "o.md").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the failure without a GPU")
def test_measuring_without_gpu_fails_clearly(models, tmp_path, capsys):
    results = tmp_path / "models.json"
    assert models.main(["--models", "resnet18", "--batches", "1", "--json", str(results)]) == 1
    err = capsys.readouterr().err
    assert "no CUDA GPU on this machine" in err and "nothing was measured" in err
    assert not results.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the failure without a GPU")
def test_resnet50_example_without_gpu_exits_nonzero():
    example = BENCHMARKS.parent / "examples" / "resnet50.py"
    done = subprocess.run([sys.executable, str(example)], capture_output=True, text=True)
    assert done.returncode == 1
    assert "no CUDA GPU on this machine; cute_conv's kernels need an H100/H200" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batches", "0"], "batch sizes must be >= 1, got 0"),
        (["--models", "resnet1O1"], "'resnet1O1' is neither one of resnet18, resnet50"),
    ],
)
def test_bad_arguments(models, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        models.main(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def tiny_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16, affine=False), nn.ReLU(),
        nn.Flatten(), nn.Linear(16 * 8 * 8, 10),
    ).eval()  # fmt: skip


def test_randomize_batchnorm_draws_sane_statistics():
    torch.manual_seed(0)
    model = tiny_model()
    x = torch.randn(4, 3, 8, 8)
    with torch.no_grad():
        before = model(x)
    assert randomize_batchnorm_(model, generator=torch.Generator().manual_seed(1)) is model
    bn, bn_plain = model[1], model[4]
    for norm in (bn, bn_plain):
        assert 0.5 <= norm.running_var.min() and norm.running_var.max() <= 1.5
        assert norm.running_mean.abs().max() > 0
    assert 0.5 <= bn.weight.min() and bn.weight.max() <= 1.0
    assert bn.bias.abs().max() > 0
    assert bn_plain.weight is None  # affine=False: nothing to draw
    with torch.no_grad():
        after = model(x)
    assert not torch.allclose(after, before)  # the folds now change something
    assert after.isfinite().all() and 0.01 < after.std() < 10


def test_detection_backbone_holds_randomized_frozen_batch_norms(models):
    """resnet50_fpn: Faster R-CNN's backbone as a pretrained detector holds it, its
    FrozenBatchNorm2d statistics drawn as BatchNorm2d's are, at a detector's image size."""
    frozen_type = pytest.importorskip("torchvision.ops").FrozenBatchNorm2d
    model = models.build_model("resnet50_fpn")
    frozen = [m for m in model.modules() if type(m) is frozen_type]
    assert len(frozen) == 53 and not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    assert all(0.5 <= m.running_var.min() and m.running_var.max() <= 1.5 for m in frozen)
    assert models.image_size("resnet50_fpn") == 800 and models.image_size("resnet50") == 224
    assert models.image_size("inception_v3") == 299
    with torch.no_grad():
        out = model(torch.randn(1, 3, 64, 64))
    assert out.dim() == 2 and out.shape[0] == 1 and out.isfinite().all()


def test_randomize_batchnorm_is_seeded():
    first, second = tiny_model(), tiny_model()
    randomize_batchnorm_(first, generator=torch.Generator().manual_seed(3))
    randomize_batchnorm_(second, generator=torch.Generator().manual_seed(3))
    for a, b in zip(first[1].state_dict().values(), second[1].state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_float32_logits_restores_tf32_flags():
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = matmul.allow_tf32, cudnn.allow_tf32
    try:
        matmul.allow_tf32 = cudnn.allow_tf32 = True
        model, x = tiny_model(), torch.randn(2, 3, 8, 8, dtype=torch.float64)
        logits = float32_logits(model, x)
        assert (matmul.allow_tf32, cudnn.allow_tf32) == (True, True)
        assert logits.dtype == torch.float32 and not logits.requires_grad
        torch.testing.assert_close(logits, model(x.float()).detach())
    finally:
        matmul.allow_tf32, cudnn.allow_tf32 = saved


def test_profile_names_keep_the_torch_kernels_functor():
    """``profile_model``'s kernel column drops the qualifiers every torch kernel repeats, so
    that an elementwise kernel's functor (a copy, a fill) shows within the column."""
    profile_model = importlib.import_module("profile_model")
    name = (
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
        "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}> >(int)"
    )
    short = profile_model.short_name(name, 80)
    assert short.startswith("elementwise_kernel<128, 4, gpu_kernel_impl_nocast<direct_copy")
    assert len(short) == 80
    fill = "void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<float>>"
    assert profile_model.short_name(fill, 120) == "vectorized_elementwise_kernel<8, FillFunctor<float>>"
