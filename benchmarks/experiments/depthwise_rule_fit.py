"""A depthwise bound that grows with the filter's taps, judged and fitted on the depthwise rows
of ``grouped_pixels_sweep.py`` (no GPU):

    python benchmarks/experiments/depthwise_rule_fit.py FILES...           # judge both bounds
    python benchmarks/experiments/depthwise_rule_fit.py FILES... --search  # fit the form

``cute_conv.grouped_rule`` once ran a depthwise call on the kernel up to 2**27 multiply-adds
whatever its filter (``PREVIOUS``); the sweeps showed ConvNeXt's 7x7s losing to cuDNN below it
(0.84-0.90x at batch 8 and 32) and EfficientNet-B3's 3x3s winning above it (1.43-1.50x at
batch 32). The form here: ``macs <= max_macs_at_9 * (9 / taps) ** taps_power``
(``cute_conv.grouped_rule.DepthwiseBound``). Each (model, batch) forward sums its depthwise
calls (each weighed by its count): the kernel (at the package's pixels) where the bound takes
the call, cuDNN's conv + activation elsewhere, against cuDNN everywhere.

``WITHOUT_WINDOW`` was searched on every row measured in session 72 (``FIT_MODELS`` and
``HELD_OUT_MODELS`` of the sweep) and judged on ``HELD_OUT_NEXT``, named before they were
measured (``grouped_pixels_sweep_depthwise_heldout_H200.json``). The kernel's row window then
made the 7x7s faster than cuDNN: the package's bound (``FITTED_DEPTHWISE``) was searched on
``WINDOW_FIT`` (``grouped_pixels_sweep_window_H200.json``) and is judged on
``WINDOW_HELD_OUT``, named before they were measured with the window.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from forward_sums import Sums, cudnn_and_ruled  # noqa: E402
from grouped_pixels_fit import fit_args, sweep_rows  # noqa: E402

from cute_conv.grouped_rule import FITTED_DEPTHWISE, DepthwiseBound, pixels_per_thread  # noqa: E402

HELD_OUT_NEXT = ("convnext_base", "efficientnet_b5", "mobilenet_v3_small", "efficientnet_v2_s")
WINDOW_FIT = ("convnext_tiny", "mobilenet_v3_large", "efficientnet_b3", "mobilenet_v2", "mnasnet1_0")
# ConvNeXt-B's and MobileNetV3-Small's rows were read before, without the window (ConvNeXt-B's
# 7x7s at batch 8 and 32 are calls the two bounds send different ways).
WINDOW_HELD_OUT = ("convnext_base", "efficientnet_b2", "mnasnet0_75", "mobilenet_v3_small")


PREVIOUS = DepthwiseBound(2**27, 0)
WITHOUT_WINDOW = DepthwiseBound(2**29, 1)  # fitted and adopted before the kernel's row window


def depthwise_rows(paths: list[Path]) -> list[dict]:
    """The sweeps' depthwise rows with ``taps`` and ``kernel_us`` (at the package's pixels)."""
    rows = []
    for row in sweep_rows(paths):
        if row["config"].depthwise:
            problem = row["problem"]
            pixels = pixels_per_thread(problem, row["config"])
            rows.append({**row, "taps": problem.R * problem.S,
                         "kernel_us": row["graph_us"][f"p{pixels}"]})  # fmt: skip
    return rows


def forward_sums(rows: list[dict], bound: DepthwiseBound) -> Sums:
    """Per (model, batch): ``(cuDNN everywhere, as the bound runs them)`` in microseconds."""
    return cudnn_and_ruled(
        rows, lambda row: row["kernel_us"] if bound.takes(row["macs"], row["taps"]) else None
    )


def summary(rows: list[dict], bound: DepthwiseBound) -> tuple[float, float]:
    """``(cuDNN everywhere over the bound summed, the worst forward's ratio)``."""
    sums = forward_sums(rows, bound).values()
    return sum(c for c, _ in sums) / sum(o for _, o in sums), min(c / o for c, o in sums)


def search(rows: list[dict]) -> DepthwiseBound:
    """The grid's bound of the least summed time (the flattest and smallest of ties: the
    grid runs from power 0 and the least bound up)."""
    grid = [DepthwiseBound(2 ** (e / 2), p / 2) for p in range(7) for e in range(48, 63)]
    return max(grid, key=lambda bound: (summary(rows, bound)[0], -grid.index(bound)))


def main() -> None:
    args = fit_args(__doc__.splitlines()[0])
    rows = depthwise_rows(args.files)
    bounds = {"previous": PREVIOUS, "without window": WITHOUT_WINDOW, "package": FITTED_DEPTHWISE}
    if args.search:
        bounds["searched"] = search(rows)
    for (model, batch), (cudnn, _) in sorted(forward_sums(rows, PREVIOUS).items()):
        ratios = ", ".join(f"{name} {cudnn / forward_sums(rows, b)[model, batch][1]:.3f}x"
                           for name, b in bounds.items())  # fmt: skip
        print(f"{model:20} batch {batch:3}: cuDNN {cudnn:8.1f} us; {ratios}")
    for name, bound in bounds.items():
        total, worst = summary(rows, bound)
        print(f"{name} {bound}: {total:.3f}x cuDNN summed, worst forward {worst:.3f}x")


if __name__ == "__main__":
    main()
