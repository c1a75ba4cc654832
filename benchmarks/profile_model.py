"""Where a model's time goes: device time per kernel of ``cute_conv.optimize(model)`` and of
``torch.compile`` (freezing), each replayed as a CUDA graph under ``torch.profiler``.

    python benchmarks/profile_model.py --model resnet50 --batch 1   # on an H100/H200

The model is built as ``models.py`` builds it (torchvision, random weights and batch-norm
statistics, eval, bf16, channels_last, 224x224). Prints, for each, the kernels grouped by name
with their count per forward pass and their device time, largest first, and the sum; the gap
between the sum and the graph's wall time is launch spacing. This says which layers a batch-1
model loses on; it times nothing that ``models.py`` reports. Our kernels launch with
programmatic dependent launch: a kernel's span then includes its wait for the one before, so
their sum can exceed the forward's wall time and a PDL kernel's row is an upper bound. Names
lose torch's ``void``, ``at::native::`` and anonymous-namespace qualifiers (so that a torch
elementwise kernel's functor, e.g. ``direct_copy_kernel_cuda``, fits the name column).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from models import build_model, compile_timed, graphed, image_size, model_name, no_gpu_reason
from torch.profiler import ProfilerActivity, profile

import cute_conv

REPLAYS = 20


def kernel_times(replay) -> tuple[dict[str, tuple[int, float]], float]:
    """``{kernel name: (launches per replay, us per replay)}`` and the wall us per replay."""
    replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start.record()
        for _ in range(REPLAYS):
            replay()
        end.record()
        torch.cuda.synchronize()
    per_name: dict[str, list[float]] = defaultdict(list)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            per_name[event.name].append(event.device_time)
    table = {name: (len(t) // REPLAYS, sum(t) / REPLAYS) for name, t in per_name.items()}
    return table, start.elapsed_time(end) * 1e3 / REPLAYS


def short_name(name: str, width: int) -> str:
    """A kernel's name without the qualifiers every torch kernel repeats, cut to ``width``."""
    for qualifier in ("void ", "at::native::", "(anonymous namespace)::"):
        name = name.replace(qualifier, "")
    return name[:width]


def print_table(title: str, table: dict[str, tuple[int, float]], wall_us: float, top: int,
                width: int) -> None:  # fmt: skip
    total = sum(us for _, us in table.values())
    print(f"\n{title}: {wall_us:.1f} us per forward (graph replay), kernels {total:.1f} us")
    print("| kernel | launches | us | share |\n|---|---|---|---|")
    for name, (count, us) in sorted(table.items(), key=lambda item: -item[1][1])[:top]:
        print(f"| {short_name(name, width)} | {count} | {us:.1f} | {us / total:.0%} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", type=model_name)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--top", type=int, default=15, help="kernel names listed per method")
    parser.add_argument("--name-width", type=int, default=120, help="characters of a name")
    args = parser.parse_args()
    reason = no_gpu_reason()
    if reason is not None:
        print(f"profile_model: {reason}; nothing measured")
        return 1
    model16 = build_model(args.model).to("cuda", torch.bfloat16, memory_format=torch.channels_last)
    size = image_size(args.model)
    x = torch.randn(args.batch, 3, size, size, device="cuda").to(torch.bfloat16)
    x = x.contiguous(memory_format=torch.channels_last)
    compiled, _ = compile_timed(model16, x)
    methods = {"cute_conv.optimize": cute_conv.optimize(model16), "torch.compile": compiled}
    for title, module in methods.items():
        with torch.no_grad():  # as models.py runs them: no autograd records, inference paths
            replay, _ = graphed(module, x)
        print_table(f"{args.model} batch {args.batch}, {title}", *kernel_times(replay), args.top,
                    args.name_width)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
