"""fp8 models: ``cute_conv.optimize(model, dtype="fp8")`` against the bf16 ``optimize(model)``.

    python benchmarks/models_fp8.py [--models resnet50] [--batches 32 128]
                                    [--out benchmarks/FP8_MODELS.md]

torchvision models as in ``models.py`` (random weights, randomized batch norms, eval, bf16,
channels_last, 224x224), at each batch size, all as CUDA graphs in one process (interleaved
rounds, medians): the bf16 ``optimize(model)``, ``optimize(model, dtype="fp8",
calibration=...)`` (static scales from one calibration batch drawn apart from the measured
one), ``optimize(model, dtype="fp8", scaling="dynamic")`` (scales measured on every call)
and the default ``optimize(model, dtype="fp8")``, delayed scaling (scales from the amax of
earlier calls; its first call, on the calibration batch, measures, and its logits are those
of the call after it, so its scales come from other data).
Reported: images/s, the speedup over bf16, the logits' relative error against the float32
model, and the top-1 agreement of each fp8 model with the bf16 one on the measured batch.
"""

from __future__ import annotations

import argparse
import copy
import datetime
from pathlib import Path

import torch
from bench import time_interleaved
from models import IMAGE_SIZE, SEED, build_model, graphed

import cute_conv
from cute_conv.testing import float32_logits

HERE = Path(__file__).resolve().parent
METHODS = ("bf16", "fp8_static", "fp8_dynamic", "fp8_delayed")


def measure(name: str, batch: int) -> dict:
    model32 = build_model(name).cuda()
    model16 = copy.deepcopy(model32).to(torch.bfloat16, memory_format=torch.channels_last)
    gen = torch.Generator().manual_seed(SEED + batch)
    x32 = torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, generator=gen).cuda()
    calib = torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, generator=gen).cuda()
    as_input = lambda t: t.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)  # noqa: E731
    x = as_input(x32)
    ref = float32_logits(model32, x32)
    models = {
        "bf16": cute_conv.optimize(model16),
        "fp8_static": cute_conv.optimize(model16, dtype="fp8", calibration=as_input(calib)),
        "fp8_dynamic": cute_conv.optimize(model16, dtype="fp8", scaling="dynamic"),
        "fp8_delayed": cute_conv.optimize(model16, dtype="fp8"),  # the default: delayed
    }
    report = models["fp8_static"].cute_conv_report
    assert models["fp8_delayed"].cute_conv_report.fp8_scaling == "delayed"
    # Delayed: the first call measures the calibration batch, the second runs x with scales
    # from it alone (the graph's warm-up calls below add x's own amax to the history).
    models["fp8_delayed"](as_input(calib))
    delayed_first = models["fp8_delayed"](x).float()
    graphs = {method: graphed(model, x) for method, model in models.items()}
    logits = {}
    for method, (replay, out) in graphs.items():
        replay()
        logits[method] = out.float().clone()
    logits["fp8_delayed"] = delayed_first
    ms = time_interleaved({method: replay for method, (replay, _) in graphs.items()})
    rel = {m: ((logits[m] - ref).norm() / ref.norm()).item() for m in METHODS}
    top1 = {m: (logits[m].argmax(1) == logits["bf16"].argmax(1)).float().mean().item()
            for m in METHODS[1:]}  # fmt: skip
    delayed = models["fp8_delayed"].cute_conv_report
    return dict(model=name, batch=batch, ms=ms, rel_err=rel, top1_vs_bf16=top1,
                fp8=len(report.fp8), fp8_outputs=len(report.fp8_outputs),
                fp8_outputs_delayed=len(delayed.fp8_outputs),
                kept_16bit=[c.name for c in report.kept_16bit],
                fp8_stems=report.fp8_stems)  # fmt: skip


def render(rows: list[dict]) -> str:
    lines = [
        "# fp8 models: optimize(model, dtype=\"fp8\") vs the bf16 optimize(model)",
        "",
        f"Device: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
        f"{datetime.date.today()}. `python benchmarks/models_fp8.py`; CUDA graphs, one process, "
        "interleaved rounds, medians. Error: ||logits - fp32|| / ||fp32||; top-1: agreement with "
        "the bf16 model's argmax on the measured batch (random inputs and weights).",
        "",
        "| model | batch | bf16 img/s | fp8 static img/s | fp8 dynamic img/s | fp8 delayed (default) img/s "
        "| static / bf16 | dynamic / bf16 | delayed / bf16 | error bf16 / static / dynamic / "
        "delayed | top-1 static / dynamic / delayed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ips = " | ".join(f"{r['batch'] / r['ms'][m] * 1000:.0f}" for m in METHODS)
        speedups = " | ".join(f"{r['ms']['bf16'] / r['ms'][m]:.2f}x" for m in METHODS[1:])
        errors = " / ".join(f"{r['rel_err'][m]:.3f}" for m in METHODS)
        top1 = " / ".join(f"{r['top1_vs_bf16'][m]:.3f}" for m in METHODS[1:])
        lines.append(f"| {r['model']} | {r['batch']} | {ips} | {speedups} | {errors} | {top1} |")
    r = rows[-1]
    lines += [
        "",
        f"- {r['model']}: {r['fp8']} convs on fp8, {r['fp8_outputs']} of them writing fp8 for "
        f"the next conv with static scales, {r['fp8_outputs_delayed']} with delayed ones; "
        f"kept 16-bit: {', '.join(r['kept_16bit']) or 'none'}"
        f"{' (writing fp8: ' + ', '.join(r['fp8_stems']) + ')' if r['fp8_stems'] else ''}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50"])
    parser.add_argument("--batches", nargs="+", type=int, default=[32, 128])
    parser.add_argument("--out", type=Path, default=HERE / "FP8_MODELS.md")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    rows = []
    with torch.no_grad():
        for name in args.models:
            for batch in args.batches:
                rows.append(measure(name, batch))
                print(rows[-1], flush=True)
    text = render(rows)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
