"""Few-channel dense convs (stems, C <= 16) on the grouped kernel's CUDA-core direct form
(``groups=1``: one group of all C input channels, ``group_out = K``) against the default path
(``cute_conv.conv2d_fprop``: staging or gathers, then the tensor cores) and cuDNN, per call
(H100/H200):

    python benchmarks/experiments/direct_dense_ab.py --max-gflop 2 --out direct_dense_ab.json

The corpus's problems with C <= 16, K a multiple of 8 (the grouped form's output vector) and
at most ``--max-gflop``, both splits (each row keeps its split, for a rule fitted on the train
part and judged on the rest). Per problem: the direct outputs checked against a float32
reference (``F.conv2d`` on the same bf16 inputs, relative error of the whole output), then
replayed from CUDA graphs in interleaved rounds (medians): ``conv`` (default path), ``direct``
at 1, 2 and 4 output pixels per thread and at ``pixels_per_thread``'s pick (``direct_rule``),
``cudnn`` (``F.conv2d``, channels_last), and the fused ``relu(conv + b)`` of the default path
and of the direct form at the rule's pixels (``conv_fused``, ``direct_fused``).

``--routed``: the problems ``direct_rule`` takes, after it was adopted: ``conv`` (the default
call, now the direct form reading the KRSC filter) and ``conv_fused`` checked against float32
and timed against ``tensor`` / ``tensor_fused`` (the tensor-core config,
``heuristic_config(..., cuda_cores=False)``), ``direct_rule`` (the staged filter) and cuDNN;
and ``relu(conv + b) + r`` on both (``direct_residual``: the rule's config passed explicitly;
``tensor_residual``).

``--corpus FILE``: the problems of another file in ``corpus.json``'s form (the validation
corpus, or ``direct_unstaged_problems.json`` / ``direct_staged_wide_k_problems.json``: fresh
draws inside the rule's bounds, ``direct_fresh_problems.py``).

``--routed --odd-k``: the same on problems of K not a multiple of 8 (4, 2 or 1 output
channels per thread), without the staged-filter columns (``grouped_conv2d`` takes 8-channel
output vectors only), and with the KRSC form at 1, 2, 4 and 8 pixels per thread
(``krsc_p1`` ..) beside the rule's.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

import cute_conv
from cute_conv.direct_rule import direct_dense_config
from cute_conv.dispatch import sm_count
from cute_conv.grouped import grouped_conv2d, grouped_limits, stage_filter
from cute_conv.grouped_rule import pixels_per_thread
from cute_conv.problem import Conv2dProblemShape
from cute_conv.staging import copies_activation
from cute_conv.untuned import heuristic_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_corpus import problem_shape  # noqa: E402
from models import replayed_us  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "corpus.json"
PIXELS = (1, 2, 4)


def selected(
    max_gflop: float, max_channels: int, odd_k: bool = False, corpus: Path = CORPUS
) -> list[dict]:
    """The problems of ``corpus`` of at most ``max_channels`` input channels and
    ``max_gflop``, K a multiple of 8 (``odd_k``: K not one)."""
    problems = json.loads(corpus.read_text())["problems"]
    return [p for p in problems
            if p["C"] <= max_channels and (p["K"] % 8 != 0) == odd_k
            and p["gflop"] <= max_gflop]  # fmt: skip


def rule_config(problem: Conv2dProblemShape):
    """The direct rule's config for ``problem`` as a call asks it, or None where it leaves it."""
    return direct_dense_config(problem, 2, 2, copies_activation(problem, 2))


def relative_error(y: torch.Tensor, reference: torch.Tensor) -> float:
    return float((y.float() - reference).norm() / reference.norm().clamp_min(1e-30))


def measure(p: dict, rounds: int, routed: bool) -> dict:
    geom = {"stride": tuple(p["stride"]), "dilation": tuple(p["dilation"])}
    padding = tuple(tuple(pair) for pair in p["padding"])
    x = torch.randn(p["N"], p["H"], p["W"], p["C"], device="cuda", dtype=torch.bfloat16)
    w = torch.randn(p["K"], p["R"], p["S"], p["C"], device="cuda", dtype=torch.bfloat16)
    w = w / (p["R"] * p["S"] * p["C"]) ** 0.5
    bias = torch.randn(p["K"], device="cuda", dtype=torch.bfloat16)
    staged = stage_filter(w)
    problem = problem_shape(p)
    routed_config = rule_config(problem)  # None: the rule leaves it
    # grouped_conv2d takes 8-channel output vectors only: K not a multiple of 8 runs only
    # through conv2d_fprop (the routed calls).
    staged_form = p["K"] % 8 == 0
    if staged_form:
        rule = pixels_per_thread(problem, grouped_limits(p["C"], p["K"], 1))
    else:
        rule = routed_config.pixels
    nchw, w_nchw = x.permute(0, 3, 1, 2), w.permute(0, 3, 1, 2)
    (top, bottom), (left, right) = padding
    padded = F.pad(nchw.float(), (left, right, top, bottom))
    reference = F.conv2d(padded, w_nchw.float(), **geom).permute(0, 2, 3, 1)
    fused_reference = torch.relu(reference + bias.float())

    def direct(pixels, **kw):
        return lambda: grouped_conv2d(x, staged, groups=1, filter_layout="rsck",
                                      padding=padding, pixels=pixels, **geom, **kw)  # fmt: skip

    fns = {} if routed else {f"direct_p{n}": direct(n) for n in PIXELS}
    if staged_form:
        fns["direct_rule"] = direct(rule)
    else:
        for n in (*PIXELS, 8):
            config = replace(routed_config, pixels=n)
            fns[f"krsc_p{n}"] = lambda config=config: cute_conv.conv2d_fprop(
                x, w, padding=padding, config=config, **geom
            )
    fns["conv"] = lambda: cute_conv.conv2d_fprop(x, w, padding=padding, **geom)
    if routed:
        tensor = heuristic_config(problem, sm_count(0), cuda_cores=False)
        fns["tensor"] = lambda: cute_conv.conv2d_fprop(x, w, padding=padding, config=tensor,
                                                       **geom)  # fmt: skip
    errors = {name: relative_error(fn(), reference) for name, fn in fns.items()}
    fused = {"bias": bias, "activation": "relu"}
    fused_fns = {
        "conv_fused": lambda: cute_conv.conv2d_fprop(x, w, padding=padding, **fused, **geom),
    }
    if staged_form:
        fused_fns["direct_fused"] = direct(rule, **fused)
    if routed:
        fused_fns["tensor_fused"] = lambda: cute_conv.conv2d_fprop(
            x, w, padding=padding, config=tensor, **fused, **geom
        )
    errors.update({name: relative_error(fn(), fused_reference) for name, fn in fused_fns.items()})
    fns.update(fused_fns)
    if routed:  # relu(conv + b) + r
        source = torch.randn_like(reference).to(torch.bfloat16)
        residual_fns = {
            f"{name}_residual": lambda config=config: cute_conv.conv2d_fprop_with_residual(
                x, w, source, padding=padding, config=config, **fused, **geom
            )
            for name, config in (("direct", routed_config), ("tensor", tensor))
        }
        residual_reference = fused_reference + source.float()
        errors.update(
            {name: relative_error(fn(), residual_reference) for name, fn in residual_fns.items()}
        )
        fns.update(residual_fns)
    w_cl = w_nchw.contiguous(memory_format=torch.channels_last)
    if (top, left) == (bottom, right):
        fns["cudnn"] = lambda: F.conv2d(nchw, w_cl, padding=(top, left), **geom)
    else:  # asymmetric: the pad is part of cuDNN's call
        fns["cudnn"] = lambda: F.conv2d(F.pad(nchw, (left, right, top, bottom)), w_cl, **geom)
    return {"key": p["key"], "split": p["split"], "tags": p["tags"], "gflop": p["gflop"],
            "rule_pixels": rule, "routed": routed_config is not None,
            "rel_err": errors, "graph_us": replayed_us(fns, rounds)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-gflop", type=float, default=2.0)
    parser.add_argument("--max-channels", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--routed", action="store_true", help="the problems the rule takes")
    parser.add_argument("--odd-k", action="store_true", help="K not a multiple of 8 (--routed)")
    parser.add_argument(
        "--corpus", type=Path, default=CORPUS,
        help="a problems file in corpus.json's form (e.g. the validation corpus)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    rows = []
    if args.odd_k and not args.routed:
        parser.error("--odd-k times the routed calls only: pass --routed")
    for p in selected(args.max_gflop, args.max_channels, args.odd_k, args.corpus):
        if args.routed and rule_config(problem_shape(p)) is None:
            continue
        row = measure(p, args.rounds, args.routed)
        rows.append(row)
        times = {k: round(v, 1) for k, v in row["graph_us"].items()}
        worst = max(row["rel_err"].values())
        print(row["key"], row["split"][0], f"err {worst:.1e}", times, flush=True)
        args.out.write_text(json.dumps(rows, indent=1))  # a timeout keeps them


if __name__ == "__main__":
    main()
