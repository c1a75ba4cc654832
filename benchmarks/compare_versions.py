"""Time the current checkout's cute_conv against an older version's, in one process.

    python benchmarks/compare_versions.py [--base 297a048 | --base-dir DIR]
                                          [--shapes NAME,... | --corpus-keys KEY,...|@FILE]
                                          [--rounds 5] [--graphs]
                                          [--out benchmarks/COMPARE.md]

The old version (``--base``: any commit-ish of this repository, read with ``git archive``;
``--base-dir``: a directory holding an old tree's ``cute_conv/`` and ``kernels/``, for a machine
without git) is assembled into a package named ``cute_conv_base`` (its ``kernels/`` placed
inside, as the install maps it to ``cute_conv.kernels``) and imported beside the current
``cute_conv``: the package imports itself only relatively, so every module of the old tree is
``cute_conv_base.*``. Its compiled kernels go to their own disk-cache directory,
``$CUTE_CONV_CACHE_DIR/cute_conv_base``, so neither version can load the other's binaries.

For every shape of ``benchmarks/shapes.json`` (or, with ``--corpus-keys``, every named problem
of the corpus, ``benchmarks/corpus.json``, its geometry padded asymmetrically where it is) both
versions run the plain conv (``conv2d_fprop``) and the fused form of ``bench.py``
(``conv2d_fprop_with_residual(..., bias=b, activation="relu")``), each with its own default
heuristic config passed explicitly (no autotuning, no stored autotuner choice). Every output is
checked against the float32 reference before anything is timed; then the two versions are timed
as ``bench.py`` times its rivals: rounds of ``triton.testing.do_bench`` (medians), their order
reversed every other round, a time being the median round; with ``--graphs`` each call is
captured in a CUDA graph and its replays are timed (the GPU's time without the host's: what a
small conv's kernel change moves). Writes a Markdown table (old ms, new ms, new/old), the
geomeans, the worst shape and the verdict against the release criteria: geomean new/old at most
1.02 for the plain and for the fused conv, and no shape's new/old above 1.03 (a faster new
version passes).

Exit status: 0 PASS, 1 no Hopper GPU (nothing measured), 2 bad arguments or an output failed
its check, 3 slower than the criteria allow.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import importlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import bench
import torch

import cute_conv
from cute_conv import disk_cache
from cute_conv.reference import conv2d_reference
from cute_conv.testing import ErrorReport, compare_to_reference, random_conv_inputs

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BASE_NAME = "cute_conv_base"
KINDS = ("plain", "fused")
VERSIONS = ("old", "new")
# The release criteria: new/old of the geomean per kind, and of every shape.
GEOMEAN_LIMIT, SHAPE_LIMIT = 1.02, 1.03
# More rounds than bench.py's 3: the gaps judged here are 2-3%, single do_bench runs of one
# kernel differ by 5-10% on a power-capped GPU.
DEFAULT_ROUNDS = 5
DEFAULT_BASE = "297a048"  # issue 20's baseline


# ---- the old version as a second package ----


def materialize_base(dest: Path, *, commit: str | None = None, tree: Path | None = None) -> Path:
    """Assemble the old version as the package ``dest/cute_conv_base`` and return its directory.

    ``commit``: a commit-ish of this repository (its ``cute_conv/`` and ``kernels/`` are read
    with ``git archive``); ``tree``: a directory that holds them already. Exactly one is given.
    """
    if (commit is None) == (tree is None):
        raise ValueError("give exactly one of commit= and tree=")
    if commit is not None:
        tree = dest / "tree"
        tree.mkdir(parents=True)
        _extract_commit(commit, tree)
    for sub in ("cute_conv", "kernels"):
        if not (tree / sub / "__init__.py").is_file():
            raise ValueError(
                f"base tree {str(tree)!r} has no {sub}/__init__.py: it must hold an old "
                "checkout's cute_conv/ and kernels/"
            )
    package = dest / BASE_NAME
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(tree / "cute_conv", package, ignore=skip)
    shutil.copytree(tree / "kernels", package / "kernels", ignore=skip)
    _rename_op_namespace(package)
    return package


def _extract_commit(commit: str, dest: Path) -> None:
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", commit, "--", "cute_conv", "kernels"],
            check=True, capture_output=True,
        )  # fmt: skip
    except FileNotFoundError as exc:
        raise RuntimeError("--base needs git; pass --base-dir with an extracted tree") from exc
    except subprocess.CalledProcessError as exc:
        raise ValueError(
            f"--base {commit!r}: git archive failed: {exc.stderr.decode().strip()}"
        ) from exc
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        # The "data" filter (Python >= 3.11.4) refuses paths outside dest.
        tar.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


def _rename_op_namespace(package: Path) -> None:
    """Versions that register torch.library ops register them as ``cute_conv::*``: a second
    registration under that name fails, so the copy registers ``cute_conv_base::*``."""
    for path in package.rglob("*.py"):
        text = path.read_text()
        renamed = re.sub(r"([\"'])cute_conv::", rf"\1{BASE_NAME}::", text)
        renamed = re.sub(r"\btorch\.ops\.cute_conv\b", f"torch.ops.{BASE_NAME}", renamed)
        if renamed != text:
            path.write_text(renamed)


def import_base(package: Path) -> ModuleType:
    """Import the package assembled by ``materialize_base`` as ``cute_conv_base``, its compiled
    kernels cached apart from the current version's."""
    if BASE_NAME in sys.modules:
        raise RuntimeError(
            f"{BASE_NAME} is imported already, from {sys.modules[BASE_NAME].__file__}"
        )
    spec = importlib.util.spec_from_file_location(
        BASE_NAME, package / "__init__.py", submodule_search_locations=[str(package)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[BASE_NAME] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[BASE_NAME]
        raise
    # The disk cache keys its directory by a hash of some sources (kernels/, compile.py), not
    # all that shape a kernel: a base differing elsewhere could load the current kernels.
    base_cache = importlib.import_module(f"{BASE_NAME}.disk_cache")
    if not callable(getattr(base_cache, "cache_root", None)):
        raise RuntimeError(f"the base's disk_cache has no cache_root() to separate: {package}")
    base_cache.cache_root = lambda: disk_cache.cache_root() / BASE_NAME
    return module


def default_configs(package: ModuleType, x_shape, filter_shape, geom: dict, num_sms: int):
    """``package``'s configs (plain, fused) for a call of the conv without one, decided as
    ``bench.py`` decides them: ``untuned.heuristic_config`` (the heuristic and every rule after
    it), or, in a version older than that function, ``default_config`` on the problem the
    kernel runs, after any staging."""
    problem = package.Conv2dProblemShape.from_shapes(x_shape, filter_shape, **geom)
    if importlib.util.find_spec(f"{package.__name__}.untuned") is not None:
        untuned = importlib.import_module(f"{package.__name__}.untuned")
        if hasattr(untuned, "heuristic_config"):
            return (
                untuned.heuristic_config(problem, num_sms),
                untuned.heuristic_config(problem, num_sms, has_residual=True),
            )
    staging = importlib.import_module(f"{package.__name__}.staging")
    kernel_problem = staging.kernel_problem_for(problem)
    return (
        package.default_config(kernel_problem, num_sms),
        package.default_config(kernel_problem, num_sms, has_residual=True),
    )


# ---- measuring ----


@dataclasses.dataclass
class ShapeResult:
    name: str
    ms: dict[str, dict[str, float]]  # kind -> version -> median milliseconds
    checks: dict[str, ErrorReport] = dataclasses.field(default_factory=dict)  # "old plain", ...
    configs: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # kind -> version

    def ratio(self, kind: str) -> float:
        return self.ms[kind]["new"] / self.ms[kind]["old"]

    def configs_differ(self) -> bool:
        return any(len(set(by_version.values())) > 1 for by_version in self.configs.values())


def bench_shape(
    shape: dict, packages: dict[str, ModuleType], num_sms: int, graphs: bool = False
) -> ShapeResult:
    n, h, w, c, k, r, s = (shape[x] for x in "NHWCKRS")
    geom = dict(stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"])
    x, flt = random_conv_inputs(n, h, w, c, k, r, s)
    ref = conv2d_reference(x, flt, **geom)
    bias = torch.randn(k, device="cuda", dtype=x.dtype)
    res = torch.randn(ref.shape, device="cuda").to(x.dtype)
    fused_ref = torch.relu(ref + bias.float()) + res.float()
    result = ShapeResult(shape["name"], ms={}, configs={kind: {} for kind in KINDS})
    calls: dict[str, dict] = {kind: {} for kind in KINDS}
    for version, package in packages.items():
        config, fused_config = default_configs(package, x.shape, flt.shape, geom, num_sms)
        out = torch.full(ref.shape, float("nan"), dtype=x.dtype, device="cuda")
        fused_out = torch.full_like(out, float("nan"))
        calls["plain"][version] = functools.partial(
            package.conv2d_fprop, x, flt, out=out, config=config, **geom
        )
        calls["fused"][version] = functools.partial(
            package.conv2d_fprop_with_residual,
            x, flt, res, bias=bias, activation="relu", out=fused_out, config=fused_config, **geom,
        )  # fmt: skip
        for kind, kind_config, kind_out, kind_ref in (
            ("plain", config, out, ref),
            ("fused", fused_config, fused_out, fused_ref),
        ):
            calls[kind][version]()
            result.checks[f"{version} {kind}"] = compare_to_reference(kind_out, kind_ref)
            result.configs[kind][version] = repr(kind_config)
    for kind in KINDS:
        timed = calls[kind]
        if graphs:
            from models import replay_of

            timed = {version: replay_of(call) for version, call in timed.items()}
        result.ms[kind] = bench.time_interleaved(timed)
    return result


# ---- judging and reporting ----


@dataclasses.dataclass(frozen=True)
class Verdict:
    geomeans: dict[str, float]  # kind -> geomean over shapes of new/old
    worst: tuple[str, str, float]  # (shape, kind, new/old) of the largest ratio
    checks_ok: bool

    @property
    def speed_ok(self) -> bool:
        return max(self.geomeans.values()) <= GEOMEAN_LIMIT and self.worst[2] <= SHAPE_LIMIT

    @property
    def passed(self) -> bool:
        return self.speed_ok and self.checks_ok


def judge(results: Sequence[ShapeResult]) -> Verdict:
    if not results:
        raise ValueError("no results to judge")
    geomeans = {kind: bench.geomean(r.ratio(kind) for r in results) for kind in KINDS}
    worst = max(
        ((r.name, kind, r.ratio(kind)) for r in results for kind in KINDS), key=lambda t: t[2]
    )
    checks_ok = all(check.ok for r in results for check in r.checks.values())
    return Verdict(geomeans, worst, checks_ok)


def render(
    results: Sequence[ShapeResult],
    *,
    old: str,
    new: str,
    rounds: int,
    device: str,
    graphs: bool = False,
) -> str:
    """The Markdown report: the table per shape, the geomeans, the worst shape, the verdict;
    ``graphs``: the times are CUDA-graph replays."""
    calls = "their CUDA-graph replays" if graphs else "the two versions"
    verdict = judge(results)
    mark = lambda ok: "PASS" if ok else "FAIL"  # noqa: E731
    lines = [
        "# cute_conv: this checkout against an older version",
        "",
        f"- old: {old}",
        f"- new: {new}",
        f"- device: {device}; date {datetime.date.today().isoformat()}",
        f"- bf16 in/out, fp32 accumulation; both versions in one process, each with its own "
        f"default heuristic config (no autotuning). Every output checked against the float32 "
        f"reference before timing. Per shape and kind, {calls} are timed in {rounds} "
        f"rounds of triton.testing.do_bench (medians), their order reversed every other round; "
        f"a time is the median round. Fused: relu(conv + bias) + residual, one call of "
        f"conv2d_fprop_with_residual.",
        f"- criteria: geomean new/old <= {GEOMEAN_LIMIT} for plain and for fused, every shape's "
        f"new/old <= {SHAPE_LIMIT} (lower is faster; a faster new version passes)",
        "",
        "| shape | old ms | new ms | new/old | old fused ms | new fused ms | fused new/old "
        "| configs | check |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        failed = [name for name, check in r.checks.items() if not check.ok]
        lines.append(
            f"| {r.name} | {r.ms['plain']['old']:.4f} | {r.ms['plain']['new']:.4f} "
            f"| {r.ratio('plain'):.3f} | {r.ms['fused']['old']:.4f} | {r.ms['fused']['new']:.4f} "
            f"| {r.ratio('fused'):.3f} | {'differ' if r.configs_differ() else 'same'} "
            f"| {'FAIL: ' + ', '.join(failed) if failed else 'ok'} |"
        )
    plain, fused = (verdict.geomeans[kind] for kind in KINDS)
    shape, kind, ratio = verdict.worst
    lines += [
        f"| **geomean** | | | **{plain:.3f}** | | | **{fused:.3f}** | | |",
        "",
        f"- plain geomean new/old: {plain:.3f} ({mark(plain <= GEOMEAN_LIMIT)}, limit "
        f"{GEOMEAN_LIMIT})",
        f"- fused geomean new/old: {fused:.3f} ({mark(fused <= GEOMEAN_LIMIT)}, limit "
        f"{GEOMEAN_LIMIT})",
        f"- worst shape: {shape} ({kind}), new/old {ratio:.3f} ({mark(ratio <= SHAPE_LIMIT)}, "
        f"limit {SHAPE_LIMIT})",
        f"- outputs against the float32 reference: {mark(verdict.checks_ok)}",
        f"- **verdict: {mark(verdict.passed)}**",
    ]
    differing = [r for r in results if r.configs_differ()]
    if differing:
        lines += ["", "## Default configs that differ between the versions", ""]
        for r in differing:
            for kind in KINDS:
                old_config, new_config = (r.configs[kind][v] for v in VERSIONS)
                if old_config != new_config:
                    lines.append(f"- {r.name} ({kind}): old `{old_config}`, new `{new_config}`")
    return "\n".join(lines) + "\n"


def _git(*args: str) -> str | None:
    """Output of a git command in this repository; None without git or a repository."""
    try:
        done = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)
    except FileNotFoundError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _describe(commit: str | None, tree: Path | None) -> str:
    if tree is not None:
        return f"the tree at {tree}"
    if commit is None:  # the current checkout
        described = _git("describe", "--always", "--dirty")
        return f"this checkout ({described})" if described else "this checkout"
    return _git("log", "-1", "--format=%h %s", commit) or commit


def select_shapes(names: str | None) -> list[dict]:
    shapes = json.loads((HERE / "shapes.json").read_text())["shapes"]
    if not names:
        return shapes
    wanted = names.split(",")
    unknown = sorted(set(wanted) - {s["name"] for s in shapes})
    if unknown:
        raise ValueError(
            f"--shapes: unknown names {unknown}; shapes.json has {[s['name'] for s in shapes]}"
        )
    return [s for s in shapes if s["name"] in wanted]


def corpus_shapes(spec: str, corpus: Path | None = None) -> list[dict]:
    """The problems of ``corpus`` (by default the corpus) that ``spec`` names
    (``bench_corpus.read_keys``: comma-separated keys or ``@FILE``) as shapes of
    ``bench_shape``, in the corpus's order, each named by its key."""
    from bench_corpus import CORPUS_PATH, load_corpus, read_keys

    wanted = set(read_keys(spec))
    problems = [p for p in load_corpus(corpus or CORPUS_PATH) if p["key"] in wanted]
    unknown = sorted(wanted - {p["key"] for p in problems})
    if unknown:
        raise ValueError(f"--corpus-keys: not in the corpus: {', '.join(unknown)}")
    return [
        {"name": p["key"], **{name: p[name] for name in "NHWCKRS"},
         "stride": tuple(p["stride"]), "pad": tuple(map(tuple, p["padding"])),
         "dilation": tuple(p["dilation"])}
        for p in problems
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    base = parser.add_mutually_exclusive_group()
    base.add_argument("--base", help=f"commit-ish of the old version (default {DEFAULT_BASE})")
    base.add_argument(
        "--base-dir", type=Path, help="a directory holding the old version's cute_conv/ and "
        "kernels/ (e.g. from `git archive 297a048 cute_conv kernels | tar -x -C DIR`)",
    )  # fmt: skip
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--shapes", help="comma-separated shape names (default: all)")
    which.add_argument(
        "--corpus-keys", help="corpus problems instead: comma-separated keys, or @FILE of them"
    )
    parser.add_argument(
        "--corpus", type=Path, help="the corpus file --corpus-keys reads (default: the corpus; "
        "e.g. benchmarks/validation_corpus.json)",
    )  # fmt: skip
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument(
        "--graphs", action="store_true", help="time CUDA-graph replays of each call"
    )
    parser.add_argument("--out", type=Path, default=HERE / "COMPARE.md")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    try:
        if args.corpus and not args.corpus_keys:
            raise ValueError("--corpus names the file --corpus-keys reads; give --corpus-keys")
        shapes = (
            corpus_shapes(args.corpus_keys, args.corpus)
            if args.corpus_keys
            else select_shapes(args.shapes)
        )
    except (ValueError, FileNotFoundError) as exc:
        parser.error(str(exc))
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("compare_versions: needs an H100/H200 (compute capability 9.0); nothing measured.")
        return 1
    os.environ.pop("CUTE_CONV_AUTOTUNE", None)  # configs are explicit; nothing tunes on the side
    bench.ROUNDS = args.rounds  # bench.time_interleaved's round count
    commit = None if args.base_dir else args.base or DEFAULT_BASE
    with tempfile.TemporaryDirectory(prefix="cute_conv_base_") as workdir:
        package = materialize_base(Path(workdir), commit=commit, tree=args.base_dir)
        packages = {"old": import_base(package), "new": cute_conv}
        num_sms = torch.cuda.get_device_properties(0).multi_processor_count
        results = []
        for shape in shapes:
            result = bench_shape(shape, packages, num_sms, graphs=args.graphs)
            failed = [name for name, check in result.checks.items() if not check.ok]
            print(
                f"{result.name:>16}: new/old plain {result.ratio('plain'):.3f}, fused "
                f"{result.ratio('fused'):.3f}" + (f" | CHECK FAILED: {failed}" if failed else ""),
                flush=True,
            )
            results.append(result)
    props = torch.cuda.get_device_properties(0)
    text = render(
        results,
        old=_describe(commit, args.base_dir),
        new=_describe(None, None),
        rounds=args.rounds,
        device=f"{props.name} ({props.multi_processor_count} SMs), torch {torch.__version__}",
        graphs=args.graphs,
    )
    args.out.write_text(text)
    print(text)
    verdict = judge(results)
    return 0 if verdict.passed else 2 if not verdict.checks_ok else 3


if __name__ == "__main__":
    raise SystemExit(main())
