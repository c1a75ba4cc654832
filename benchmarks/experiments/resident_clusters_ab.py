"""Persistent grids of clusters bounded by the SMs alone against the clusters the device holds
at once (``cute_conv.occupancy``), by kernel duration (H100/H200):

    python benchmarks/experiments/resident_clusters_ab.py \
        n8_h56_w56_c64_k256_r1_s1_pad0.0.0.0_str1.1_dil1.1:tile_n=64:cluster_m=2:cluster_n=2 \
        --out resident_clusters.json

For each corpus key or suite shape (``:field=value`` overrides of the heuristic's bf16
config, as in ``kernel_durations.py``): the plain call's kernel durations (CUPTI, each call
waited for) with ``max_clusters`` = SMs / cluster size (the bound before
``occupancy.resident_clusters``) and with the resident bound, in alternating order, and the
output of both compared; beside them, the driver's resident count for clusters of 2, 4 and 8.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import torch
from kernel_durations import kernel_durations  # beside this script
from tile_timeline import parse_field, shape_of

import cute_conv
from cute_conv import dispatch, occupancy
from cute_conv.testing import random_conv_inputs
from cute_conv.untuned import heuristic_config

ROUNDS = 3


def sm_bound(device_index: int, cluster_size: int) -> None:
    """``dispatch.resident_clusters`` as before the occupancy query: no bound past the SMs."""
    return None


def durations(spec: str, num_sms: int) -> dict:
    name, *fields = spec.split(":")
    shape = shape_of(name)
    geom = dict(stride=shape["stride"], padding=shape["pad"], dilation=shape["dilation"])
    x, flt = random_conv_inputs(*(shape[c] for c in "NHWCKRS"))
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geom)
    overrides = {key: parse_field(value) for key, value in (f.split("=") for f in fields)}
    config = dataclasses.replace(heuristic_config(problem, num_sms), **overrides)
    outs = {v: torch.empty(problem.output_shape, device="cuda", dtype=x.dtype) for v in "sr"}
    bounds = {"s": sm_bound, "r": occupancy.resident_clusters}
    runs: dict[str, list[float]] = {"sm_bound": [], "resident": []}
    for round_ in range(ROUNDS):
        for v in "sr" if round_ % 2 == 0 else "rs":
            dispatch._plans.clear()  # the bound is taken when a call's plan is made
            dispatch.resident_clusters = bounds[v]
            out = outs[v]
            call = lambda: cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom)  # noqa: B023, E731
            runs["sm_bound" if v == "s" else "resident"].append(sum(kernel_durations(call)["us"]))
    dispatch.resident_clusters = occupancy.resident_clusters
    dispatch._plans.clear()
    size = config.cluster_m * config.cluster_n
    return {
        "config": repr(config),
        "clusters": {"sm_bound": num_sms // size, "resident": occupancy.resident_clusters(0, size)},
        "us": runs,
        "same_output": bool(torch.equal(outs["s"], outs["r"])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="+", help="NAME[:field=value...]: suite name or corpus key")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    results = {
        "device": torch.cuda.get_device_name(),
        "resident": {s: occupancy.resident_clusters(0, s) for s in (1, 2, 4, 8)},
        "convs": {},
    }
    print("resident clusters by size:", results["resident"], flush=True)
    for spec in args.specs:
        row = results["convs"][spec] = durations(spec, num_sms)
        sm, res = (min(row["us"][k]) for k in ("sm_bound", "resident"))
        print(
            f"{spec[:72]:72s} clusters {row['clusters']['sm_bound']} -> "
            f"{row['clusters']['resident']}: {sm:8.2f} -> {res:8.2f} us "
            f"same output {row['same_output']}",
            flush=True,
        )
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
