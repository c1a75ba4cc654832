"""A/B benchmark of this checkout's cute_conv against another checkout's, in one process.

    python benchmarks/ab_versions.py --base /path/to/other/checkout [--shapes NAME,...]
                                     [--output benchmarks/AB.md]

The other checkout (e.g. a ``git worktree`` of an older commit) is imported as the package
``cute_conv_base``: its ``cute_conv/`` directory as the package, its ``kernels/`` as
``cute_conv_base.kernels`` (the mapping its pyproject.toml declares), and its torch.library ops
under the ``cute_conv_base`` namespace, so both versions live in one process. The comparison
uses the public functions' eager path (no autograd, no torch.compile), which never reaches the
ops.

For every shape of ``benchmarks/shapes.json`` (NHWC bf16), with each version's heuristic config
(the two must agree): the plain conv and the fused ``relu(conv + bias) + residual`` of both
versions, timed by ``bench.time_interleaved`` (rounds of do_bench, order reversed every other
round). Both outputs are checked against the float32 reference first. Reports each shape's
new / old time ratio and the geomeans, as a Markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.abc
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import torch
from bench import geomean, time_interleaved

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.staging import kernel_problem_for
from cute_conv.testing import compare_to_reference, random_conv_inputs

HERE = Path(__file__).resolve().parent
BASE = "cute_conv_base"


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ``cute_conv_base[.x]`` in another checkout, as its pyproject maps the packages:
    ``cute_conv`` from ``cute_conv/``, ``cute_conv.kernels`` from ``kernels/``."""

    def __init__(self, root: Path):
        self.root = root

    def find_spec(self, name: str, path, target=None):
        if name != BASE and not name.startswith(BASE + "."):
            return None
        parts = name.split(".")[1:]
        if parts[:1] == ["kernels"]:
            location = self.root.joinpath("kernels", *parts[1:])
        else:
            location = self.root.joinpath("cute_conv", *parts)
        if location.is_dir():
            return importlib.util.spec_from_file_location(
                name, location / "__init__.py", submodule_search_locations=[str(location)]
            )
        if location.with_suffix(".py").is_file():
            return importlib.util.spec_from_file_location(name, location.with_suffix(".py"))
        return None


def import_base(root: Path) -> ModuleType:
    """The other checkout's package, its torch.library ops renamed into their own namespace."""
    sys.meta_path.insert(0, _CheckoutFinder(root))
    custom_op = torch.library.custom_op

    def renamed(name, *args, **kwargs):
        return custom_op(name.replace("cute_conv::", f"{BASE}::", 1), *args, **kwargs)

    torch.library.custom_op = renamed
    try:
        return importlib.import_module(BASE)
    finally:
        torch.library.custom_op = custom_op


def _same_config(new: object, old: object) -> bool:
    return dataclasses.asdict(new) == dataclasses.asdict(old)


def bench_shape(base: ModuleType, shape: dict) -> dict:
    n, h, w, c, k, r, s = (shape[x] for x in "NHWCKRS")
    geom = dict(stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"])
    x, flt = random_conv_inputs(n, h, w, c, k, r, s)
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    num_sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    kernel_problem = kernel_problem_for(problem)
    base_problem = base.Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    base_kernel_problem = base.staging.kernel_problem_for(base_problem)
    configs = {}
    for fused in (False, True):
        new = cute_conv.default_config(kernel_problem, num_sms, has_residual=fused)
        old = base.default_config(base_kernel_problem, num_sms, has_residual=fused)
        if not _same_config(new, old):
            raise RuntimeError(f"{shape['name']}: the heuristics disagree: {new} vs {old}")
        configs[fused] = (new, old)

    ref = conv2d_reference(x, flt, **geom)
    bias = torch.randn(k, device="cuda", dtype=x.dtype)
    res = torch.randn(problem.output_shape, device="cuda").to(x.dtype)
    fused_ref = torch.relu(ref + bias.float()) + res.float()
    outs = {name: torch.full_like(res, float("nan")) for name in ("new", "old", "new_f", "old_f")}

    def plain(package, config, out):
        return lambda: package.conv2d_fprop(x, flt, out=out, config=config, **geom)

    def fused(package, config, out):
        return lambda: package.conv2d_fprop_with_residual(
            x, flt, res, bias=bias, activation="relu", out=out, config=config, **geom
        )

    fns = {
        "new_ms": plain(cute_conv, configs[False][0], outs["new"]),
        "old_ms": plain(base, configs[False][1], outs["old"]),
        "new_fused_ms": fused(cute_conv, configs[True][0], outs["new_f"]),
        "old_fused_ms": fused(base, configs[True][1], outs["old_f"]),
    }
    for fn in fns.values():
        fn()
    row = dict(name=shape["name"], config=configs[False][0], fused_config=configs[True][0])
    row["checks"] = [
        compare_to_reference(outs["new"], ref),
        compare_to_reference(outs["old"], ref),
        compare_to_reference(outs["new_f"], fused_ref),
        compare_to_reference(outs["old_f"], fused_ref),
    ]
    row.update(time_interleaved({"new_ms": fns["new_ms"], "old_ms": fns["old_ms"]}))
    row.update(
        time_interleaved({"new_fused_ms": fns["new_fused_ms"], "old_fused_ms": fns["old_fused_ms"]})
    )
    return row


def report(rows: list[dict], base_root: Path) -> str:
    lines = [
        f"# cute_conv A/B: this checkout vs {base_root}",
        "",
        f"Device: {torch.cuda.get_device_name()}. Ratios are new time / old time (< 1: new is "
        "faster); times in ms, interleaved rounds of do_bench in one process.",
        "",
        "| shape | plain new | plain old | ratio | fused new | fused old | ratio | checks |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        plain_ratio = row["new_ms"] / row["old_ms"]
        fused_ratio = row["new_fused_ms"] / row["old_fused_ms"]
        checks = "ok" if all(check.ok for check in row["checks"]) else "FAILED"
        lines.append(
            f"| {row['name']} | {row['new_ms']:.4f} | {row['old_ms']:.4f} | {plain_ratio:.3f} "
            f"| {row['new_fused_ms']:.4f} | {row['old_fused_ms']:.4f} | {fused_ratio:.3f} "
            f"| {checks} |"
        )
    plain = geomean([row["new_ms"] / row["old_ms"] for row in rows])
    fused = geomean([row["new_fused_ms"] / row["old_fused_ms"] for row in rows])
    lines += ["", f"Geomean ratio: plain {plain:.4f}, fused {fused:.4f}."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--shapes", help="comma-separated shape names (default: all)")
    parser.add_argument("--output", type=Path, default=HERE / "AB.md")
    args = parser.parse_args()
    base = import_base(args.base.resolve())
    shapes = json.loads((HERE / "shapes.json").read_text())["shapes"]
    if args.shapes:
        wanted = set(args.shapes.split(","))
        shapes = [shape for shape in shapes if shape["name"] in wanted]
    rows = [bench_shape(base, shape) for shape in shapes]
    text = report(rows, args.base)
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
