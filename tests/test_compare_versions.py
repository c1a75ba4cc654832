"""benchmarks/compare_versions.py on a CPU: the old version imported as ``cute_conv_base`` beside
the current ``cute_conv`` (distinct modules, each compiling its own kernels into its own disk
cache), its default configs, and the report and verdict on made-up timings.

The timing itself needs an H100/H200: ``python benchmarks/compare_versions.py --base 297a048``.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import cute_conv
from cute_conv import disk_cache
from cute_conv.testing import ErrorReport
from tests.gpu import requires_sm90

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
BASE_COMMIT = "297a048"  # issue 20's baseline


def _has_commit(commit: str) -> bool:
    if shutil.which("git") is None:
        return False
    found = subprocess.run(
        ["git", "-C", str(BENCHMARKS.parent), "rev-parse", "--verify", f"{commit}^{{commit}}"],
        capture_output=True,
    )
    return found.returncode == 0


HAS_BASE_COMMIT = _has_commit(BASE_COMMIT)
needs_base_commit = pytest.mark.skipif(
    not HAS_BASE_COMMIT, reason=f"needs git and this repository's history ({BASE_COMMIT})"
)


@pytest.fixture(scope="module")
def compare():
    """benchmarks/compare_versions.py as a module (``benchmarks/`` is on ``sys.path``: see
    ``conftest``)."""
    return importlib.import_module("compare_versions")


@contextlib.contextmanager
def imported(compare, package: Path):
    """``compare.import_base(package)``, with ``sys.modules``' ``cute_conv_base*`` entries (a
    process-wide name) set aside during and restored after."""

    def base_modules() -> dict:
        return {
            name: module
            for name, module in sys.modules.items()
            if name == "cute_conv_base" or name.startswith("cute_conv_base.")
        }

    saved = base_modules()
    for name in saved:
        del sys.modules[name]
    try:
        yield compare.import_base(package)
    finally:
        for name in base_modules():
            del sys.modules[name]
        sys.modules.update(saved)


@pytest.fixture(scope="module")
def base(compare, tmp_path_factory):
    """The package of commit 297a048, imported once for the module's tests."""
    if not HAS_BASE_COMMIT:
        pytest.skip(f"needs git and this repository's history ({BASE_COMMIT})")
    package = compare.materialize_base(tmp_path_factory.mktemp("base"), commit=BASE_COMMIT)
    with imported(compare, package) as module:
        yield module


def _files_under(directory: Path) -> set[Path]:
    return {p.resolve() for p in directory.rglob("*.py")}


def test_base_is_a_separate_package(compare, base):
    assert base is not cute_conv
    assert base.__name__ == "cute_conv_base"
    assert base.kernels.__name__ == "cute_conv_base.kernels"
    assert base.Conv2dConfig is not cute_conv.Conv2dConfig
    assert base.compile is not cute_conv.compile  # its own in-memory kernel cache
    base_dir = Path(base.__file__).resolve().parent
    assert (base_dir / "kernels" / "sm90" / "conv2d_fprop.py").is_file()
    # Only relative imports: every base module comes from the base tree, and no module of the
    # current package was loaded from there.
    base_files = _files_under(base_dir)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path is None:
            continue
        if name.startswith("cute_conv_base."):
            assert Path(path).resolve() in base_files, name
        elif name == "cute_conv" or name.startswith("cute_conv."):
            assert Path(path).resolve() not in base_files, name


def test_both_compile_sm90_into_separate_disk_caches(base, tmp_path, monkeypatch):
    # An empty cache directory, and nothing held in memory: both kernels are compiled and stored.
    monkeypatch.setenv("CUTE_CONV_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUTE_CONV_DISK_CACHE", "1")
    cute_conv.compile.clear_cache()
    base.compile.clear_cache()
    root = disk_cache.cache_root()
    assert base.disk_cache.cache_root() == root / "cute_conv_base"
    before = set(root.rglob("meta.json"))
    config = cute_conv.Conv2dConfig(tile_n=64)
    new_kernel = cute_conv.compile_kernel("sm_90a", act_dtype=torch.bfloat16, config=config)
    new_entries = set(root.rglob("meta.json")) - before
    old_kernel = base.compile_kernel(
        "sm_90a", act_dtype=torch.bfloat16, config=base.Conv2dConfig(tile_n=64)
    )
    old_entries = set(root.rglob("meta.json")) - before - new_entries
    assert "wgmma.mma_async" in new_kernel.ptx and "wgmma.mma_async" in old_kernel.ptx
    base_root = root / "cute_conv_base"
    assert new_entries and not any(base_root in p.parents for p in new_entries)
    assert old_entries and all(base_root in p.parents for p in old_entries)


def test_a_version_decides_the_configs_its_calls_run(compare):
    """The configs a call without one runs, every rule included (as ``bench.py`` and the
    corpus benchmark time them): RegNet's 1x1 of C=120 takes 2x1 clusters by the pair rule,
    where ``default_config`` alone gives 1x2."""
    from cute_conv.untuned import heuristic_config

    x_shape, filter_shape = (128, 28, 28, 120), (336, 1, 1, 120)
    problem = cute_conv.Conv2dProblemShape.from_shapes(x_shape, filter_shape)
    plain, fused = compare.default_configs(cute_conv, x_shape, filter_shape, {}, 132)
    assert plain == heuristic_config(problem, 132)
    assert fused == heuristic_config(problem, 132, has_residual=True)
    assert plain.cluster_shape_mn == (2, 1)
    assert cute_conv.default_config(problem, 132).cluster_shape_mn == (1, 2)


def test_each_version_decides_its_own_default_configs(compare, base):
    geom = dict(stride=1, padding=1, dilation=1)
    for package in (base, cute_conv):
        plain, fused = compare.default_configs(package, (8, 56, 56, 64), (64, 3, 3, 64), geom, 132)
        assert isinstance(plain, package.Conv2dConfig) and isinstance(fused, package.Conv2dConfig)


@needs_base_commit
@requires_sm90
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_bench_shape_checks_and_times_both_versions(compare, base, monkeypatch, graphs):
    """One small shape of the suite end to end, one round (H100/H200), eagerly and replayed
    from CUDA graphs."""
    monkeypatch.setattr(compare.bench, "ROUNDS", 1)
    shape = next(s for s in compare.select_shapes(None) if s["name"] == "r50-c4-3x3")
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    result = compare.bench_shape(shape, {"old": base, "new": cute_conv}, num_sms, graphs)
    assert sorted(result.checks) == ["new fused", "new plain", "old fused", "old plain"]
    assert all(check.ok for check in result.checks.values()), result.checks
    assert all(ms > 0 for by_version in result.ms.values() for ms in by_version.values())


@needs_base_commit
def test_a_base_with_torch_library_ops_imports_beside_the_current(compare, tmp_path):
    """The current tree registers ``cute_conv::*`` ops; as a base it registers its own."""
    package = compare.materialize_base(tmp_path, commit="HEAD")
    assert "torch.ops.cute_conv." not in (package / "ops.py").read_text()
    with imported(compare, package) as head:
        assert head.ops.__name__ == "cute_conv_base.ops"
    assert torch.ops.cute_conv_base.conv2d_fprop is not torch.ops.cute_conv.conv2d_fprop


def test_base_dir_and_errors(compare, tmp_path):
    tree = tmp_path / "tree"
    for sub in ("cute_conv", "kernels"):
        (tree / sub / "__pycache__").mkdir(parents=True)
        (tree / sub / "__init__.py").write_text("")
    package = compare.materialize_base(tmp_path / "out", tree=tree)
    assert (package / "kernels" / "__init__.py").is_file()
    assert not (package / "__pycache__").exists()
    with pytest.raises(ValueError, match="no kernels/__init__.py"):
        (tree / "kernels" / "__init__.py").unlink()
        compare.materialize_base(tmp_path / "out2", tree=tree)
    if HAS_BASE_COMMIT:
        with pytest.raises(ValueError, match="--base 'no-such-commit': git archive failed"):
            compare.materialize_base(tmp_path / "out3", commit="no-such-commit")


def test_cli_errors_before_any_gpu_work(compare, capsys):
    with pytest.raises(SystemExit):
        compare.main(["--shapes", "gluon-bench,nope"])
    assert "unknown names ['nope']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main(["--base", "297a048", "--base-dir", "x"])
    with pytest.raises(SystemExit):
        compare.main(["--rounds", "0"])
    with pytest.raises(SystemExit):
        compare.main(["--corpus-keys", "no-such-key"])
    assert "not in the corpus: no-such-key" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main(["--corpus-keys", "a", "--shapes", "gluon-bench"])
    if not torch.cuda.is_available():
        assert compare.main(["--shapes", "gluon-bench"]) == 1
        assert "needs an H100/H200" in capsys.readouterr().out


def test_corpus_keys_become_shapes(compare, tmp_path):
    """``--corpus-keys``: corpus problems (asymmetric padding included) as ``bench_shape``'s
    shapes, whose geometry is the corpus problem's."""
    from bench_corpus import load_corpus, problem_shape

    corpus = load_corpus()
    asymmetric = next(p for p in corpus if "asymmetric" in p["tags"])
    keys = [corpus[0]["key"], asymmetric["key"]]
    listed = tmp_path / "keys.txt"
    listed.write_text("\n".join(keys) + "\n")
    for spec in (",".join(keys), f"@{listed}"):
        shapes = compare.corpus_shapes(spec)
        assert sorted(s["name"] for s in shapes) == sorted(keys)
        for shape in shapes:
            p = next(q for q in corpus if q["key"] == shape["name"])
            built = cute_conv.Conv2dProblemShape.from_shapes(
                tuple(shape[d] for d in "NHWC"), tuple(shape[d] for d in "KRSC"),
                stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"],
            )  # fmt: skip
            assert built == problem_shape(p)
    with pytest.raises(ValueError, match="not in the corpus: no-such-key"):
        compare.corpus_shapes(f"{keys[0]},no-such-key")


def test_corpus_keys_of_another_corpus(compare, capsys):
    """``--corpus``: the validation corpus's problems, which the corpus does not hold."""
    from bench_corpus import HERE, load_corpus

    validation = HERE / "validation_corpus.json"
    key = load_corpus(validation)[0]["key"]
    assert [s["name"] for s in compare.corpus_shapes(key, validation)] == [key]
    with pytest.raises(ValueError, match="not in the corpus"):
        compare.corpus_shapes(key)
    with pytest.raises(SystemExit):
        compare.main(["--corpus", str(validation)])
    assert "give --corpus-keys" in capsys.readouterr().err


def _result(compare, name, plain, fused, checks=None):
    """A shape's result: (old, new) milliseconds of the plain and fused conv."""
    return compare.ShapeResult(
        name,
        ms={"plain": dict(old=plain[0], new=plain[1]), "fused": dict(old=fused[0], new=fused[1])},
        checks=checks or {},
        configs={"plain": {"old": "C(a)", "new": "C(a)"}, "fused": {"old": "C(a)", "new": "C(a)"}},
    )


OK = ErrorReport(rel_err=3e-3, max_abs_err=0.01, max_abs_allowed=0.1, nan_count=0)


def test_pass_report(compare):
    results = [
        _result(compare, "a", (0.100, 0.101), (0.200, 0.204), {"old plain": OK, "new fused": OK}),
        _result(compare, "b", (2.000, 1.980), (1.000, 1.000)),
    ]
    verdict = compare.judge(results)
    # plain: sqrt(1.01 * 0.99) = sqrt(0.9999); fused: sqrt(1.02 * 1.0)
    assert verdict.geomeans["plain"] == pytest.approx(math.sqrt(0.9999))
    assert verdict.geomeans["fused"] == pytest.approx(math.sqrt(1.02))
    assert verdict.worst[:2] == ("a", "fused") and verdict.worst[2] == pytest.approx(1.02)
    assert verdict.passed
    text = compare.render(results, old="297a048", new="HEAD", rounds=5, device="test")
    assert "| a | 0.1000 | 0.1010 | 1.010 | 0.2000 | 0.2040 | 1.020 | same | ok |" in text
    assert "| b | 2.0000 | 1.9800 | 0.990 | 1.0000 | 1.0000 | 1.000 | same | ok |" in text
    assert "| **geomean** | | | **1.000** | | | **1.010** | | |" in text
    assert "- worst shape: a (fused), new/old 1.020 (PASS, limit 1.03)" in text
    assert "**verdict: PASS**" in text and "differ" not in text
    assert "the two versions are timed in 5 rounds" in text
    graphs = compare.render(results, old="297a048", new="HEAD", rounds=5, device="t", graphs=True)
    assert "their CUDA-graph replays are timed in 5 rounds" in graphs


def test_fail_reports(compare):
    # Every shape within 3% but the fused geomean 1.025 > 1.02.
    slow_geomean = [
        _result(compare, "a", (1.0, 1.0), (1.0, 1.025)),
        _result(compare, "b", (1.0, 1.0), (2.0, 2.05)),
    ]
    verdict = compare.judge(slow_geomean)
    assert verdict.geomeans["fused"] == pytest.approx(1.025) and not verdict.passed
    text = compare.render(slow_geomean, old="o", new="n", rounds=3, device="test")
    assert "- fused geomean new/old: 1.025 (FAIL, limit 1.02)" in text
    assert "**verdict: FAIL**" in text
    # The geomeans pass (plain sqrt(1.04 * 0.96) = sqrt(0.9984)) but one shape is 4% slower.
    slow_shape = [
        _result(compare, "a", (1.0, 1.04), (1.0, 1.0)),
        _result(compare, "b", (1.0, 0.96), (1.0, 1.0)),
    ]
    verdict = compare.judge(slow_shape)
    assert verdict.geomeans["plain"] == pytest.approx(math.sqrt(0.9984))
    assert verdict.worst[:2] == ("a", "plain") and not verdict.speed_ok
    # A wrong output fails whatever the times, and the table names it.
    nan = ErrorReport(rel_err=float("nan"), max_abs_err=math.inf, max_abs_allowed=0.1, nan_count=3)
    wrong = [_result(compare, "a", (1.0, 0.9), (1.0, 0.9), {"new fused": nan, "old plain": OK})]
    verdict = compare.judge(wrong)
    assert verdict.speed_ok and not verdict.checks_ok and not verdict.passed
    text = compare.render(wrong, old="o", new="n", rounds=3, device="test")
    assert "| FAIL: new fused |" in text
    assert "- outputs against the float32 reference: FAIL" in text


def test_differing_configs_listed(compare):
    result = _result(compare, "a", (1.0, 1.0), (1.0, 1.0))
    result.configs["fused"]["new"] = "C(b)"
    text = compare.render([result], old="o", new="n", rounds=3, device="test")
    assert "| a | 1.0000 | 1.0000 | 1.000 | 1.0000 | 1.0000 | 1.000 | differ | ok |" in text
    assert "- a (fused): old `C(a)`, new `C(b)`" in text
