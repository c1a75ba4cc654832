"""Fused 256x128 tiles with the residual read by the epilogue threads (H100/H200).

    python benchmarks/experiments/fused_thread_source.py --out fused_thread_source.json

Why: on the large K=128 3x3 convs the fused calls run 0.93-0.97x the cuDNN frontend, and
256x128 tiles, which make the plain calls 4-8% faster there, lost with a residual (0.99-1.33x
the 128x128 time, ``sweep_tall_wide_tiles.py --form fused``): a tile of C buffered in SMEM
leaves 2-3 A/B stages beside it. The thread-stored epilogue (``EpilogueSpec.store_by_threads``,
built for outputs TMA cannot address) reads C straight into registers and needs no C
buffers. This times, per conv of that sweep's selection (fused ``relu(conv + b) + r``, CUDA
graph replays, every output checked against float32 first): the default fused call
(``default``), its config with the thread epilogue (``m128_threads``), 256 rows with C through
SMEM (``m256_tma``) and with the thread epilogue (``m256_threads``), and the plain call
(``plain``). The thread epilogue is forced by making ``dispatch`` see unaligned output rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import sweep_tall_wide_tiles  # noqa: E402
from bench import time_interleaved  # noqa: E402
from models import replay_of  # noqa: E402
from sweep_rows import problem_inputs  # noqa: E402

import cute_conv  # noqa: E402
from cute_conv import dispatch  # noqa: E402
from cute_conv.reference import conv2d_reference  # noqa: E402
from cute_conv.testing import compare_to_reference  # noqa: E402

_ROWS_UNALIGNED = dispatch.output_rows_unaligned


def fused_row(p: dict) -> dict:
    problem, geom, x, flt = problem_inputs(p)
    default = cute_conv.default_config(problem, has_residual=True)
    bias = torch.randn(problem.K, device="cuda", dtype=x.dtype)
    residual = torch.randn(problem.output_shape, device="cuda").to(x.dtype)
    conv = conv2d_reference(x, flt, **geom)
    fused_ref = torch.relu(conv + bias.float()) + residual.float()
    variants = {
        "default": (default, False, True),
        "m128_threads": (default, True, True),
        "m256_tma": (dataclasses.replace(default, tile_m=256), False, True),
        "m256_threads": (dataclasses.replace(default, tile_m=256), True, True),
        "plain": (None, False, False),
    }
    checks, replays = {}, {}
    for name, (config, threads, fused) in variants.items():
        out = torch.full(conv.shape, float("nan"), dtype=x.dtype, device="cuda")

        def run(config=config, out=out, fused=fused):
            if fused:
                return cute_conv.conv2d_fprop_with_residual(
                    x, flt, residual, bias=bias, activation="relu", out=out, config=config,
                    **geom,
                )  # fmt: skip
            return cute_conv.conv2d_fprop(x, flt, out=out, **geom)

        # The plan cache keys on the call, not on the epilogue dispatch derives: cleared so
        # that each variant plans (and its graph captures) its own kernel.
        dispatch._plans.clear()
        dispatch.output_rows_unaligned = (lambda k, bits: True) if threads else _ROWS_UNALIGNED
        try:
            run()
            report = compare_to_reference(out, fused_ref if fused else conv)
            checks[name] = {"ok": report.ok, "rel_err": report.rel_err}
            if report.ok:
                replays[name] = replay_of(run)
        except Exception as error:  # noqa: BLE001 - recorded, the other variants still run
            checks[name] = {"ok": False, "error": f"{type(error).__name__}: {error}"[:300]}
        finally:
            dispatch.output_rows_unaligned = _ROWS_UNALIGNED
            dispatch._plans.clear()
    ms = time_interleaved(replays)
    return {"key": p["key"], "split": p["split"], "default": repr(default), "checks": checks,
            "ms": ms}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    sweep = sweep_tall_wide_tiles.SWEEP
    rows = []
    for p in sweep.problems(sweep.all_problems(), "fused"):
        row = fused_row(p)
        rows.append(row)
        base = row["ms"].get("default")
        ratios = {k: f"{v / base:.3f}" for k, v in row["ms"].items()} if base else row["checks"]
        print(row["key"], ratios, flush=True)
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows},
                                       indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
