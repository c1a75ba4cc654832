"""A model's convs back to back under a CUDA graph: what launching them costs.

    python benchmarks/conv_chain.py [--models resnet50 resnet18 vgg16] [--batches 1 8]
                                    [--out benchmarks/CHAIN.md]            # on an H100/H200

Every conv a torchvision model runs (traced on the meta device, in call order, the stem
included) gets its own input, filter and output at the given batch, and the whole sequence is
captured in one CUDA graph three times: ours with the default heuristic's configs as the
package launches them (programmatic dependent launch: each kernel's setup overlaps the
previous kernel's tail), the same configs launched plainly (``programmatic_launch=False``),
and cuDNN (``F.conv2d`` on channels_last views, ``cudnn.benchmark=True``). The convs do not
feed each other, so the graph is the model's launch sequence without its data flow; a batch-1
model is mostly this. Every conv is checked against a float32 reference first; the graphs are
timed as ``bench.py`` times its rivals (interleaved ``do_bench`` rounds, medians).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from bench import ROUNDS, _version, time_interleaved
from corpus import ConvSite, _meta_image, _meta_model, _torchvision, trace_convs
from models import replay_of

import cute_conv
from cute_conv.reference import conv2d_reference
from cute_conv.testing import compare_to_reference, random_conv_inputs
from cute_conv.untuned import heuristic_config

HERE = Path(__file__).resolve().parent
METHODS = {
    "ours": "cute_conv (programmatic launch)",
    "ours_plain": "cute_conv (plain launch)",
    "cudnn": "cuDNN",
}


def model_sites(name: str, image_size: int = 224) -> tuple[list[ConvSite], int]:
    """The convs torchvision's ``name`` runs on one ``image_size`` image that the package runs,
    in call order, and how many grouped convs (which it does not run) were left out."""
    build = getattr(_torchvision().models, name)
    model = _meta_model(lambda: build(weights=None))
    sites = trace_convs(name, model, lambda: model(_meta_image(image_size, image_size)))
    kept = [site for site in sites if site.groups == 1]
    return kept, len(sites) - len(kept)


@dataclasses.dataclass
class ChainConv:
    """One conv of the chain: its tensors, geometry and the heuristic's config."""

    x: torch.Tensor
    flt: torch.Tensor
    out: torch.Tensor
    geometry: dict
    config: cute_conv.Conv2dConfig

    @classmethod
    def make(cls, site: ConvSite, batch: int, num_sms: int) -> "ChainConv":
        x, flt = random_conv_inputs(batch, site.H, site.W, site.C, site.K, site.R, site.S)
        # torchvision's convs pad symmetrically: one (h, w) pair serves both libraries
        padding = (site.padding[0][0], site.padding[1][0])
        geometry = dict(stride=site.stride, padding=padding, dilation=site.dilation)
        problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, flt.shape, **geometry)
        out = torch.full(problem.output_shape, float("nan"), dtype=x.dtype, device=x.device)
        config = heuristic_config(problem, num_sms)
        return cls(x, flt, out, geometry, config)

    @property
    def plain_config(self) -> cute_conv.Conv2dConfig:
        """The heuristic's config, launched without programmatic dependent launch (the
        CUDA-core kernel of few-row 1x1s has no such switch: its config as it is)."""
        if isinstance(self.config, cute_conv.PointwiseGemvConfig):
            return self.config
        return dataclasses.replace(self.config, programmatic_launch=False)

    def ours(self, config: cute_conv.Conv2dConfig) -> None:
        cute_conv.conv2d_fprop(self.x, self.flt, out=self.out, config=config, **self.geometry)

    def cudnn(self) -> None:
        F.conv2d(self.x.permute(0, 3, 1, 2), self.flt.permute(0, 3, 1, 2), **self.geometry)

    def check(self) -> None:
        self.ours(self.config)
        report = compare_to_reference(self.out, conv2d_reference(self.x, self.flt, **self.geometry))
        if not report.ok:
            raise RuntimeError(f"{self.x.shape} * {self.flt.shape}: {report}")


def graph_of(calls: list) -> Callable[[], None]:
    """The replay of ``calls`` captured in one CUDA graph (``models.replay_of``: warmed up on
    a side stream first, so compiles and cuDNN's search stay out of the capture)."""
    return replay_of(lambda: [call() for call in calls])


def measure(name: str, batch: int) -> dict:
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    sites, grouped = model_sites(name)
    convs = [ChainConv.make(site, batch, num_sms) for site in sites]
    for conv in convs:
        conv.check()
    replays = {
        "ours": graph_of([lambda c=c: c.ours(c.config) for c in convs]),
        "ours_plain": graph_of([lambda c=c: c.ours(c.plain_config) for c in convs]),
        "cudnn": graph_of([c.cudnn for c in convs]),
    }
    ms = time_interleaved(replays)
    us = {m: t * 1e3 for m, t in ms.items()}
    return dict(model=name, batch=batch, convs=len(convs), grouped=grouped, us=us)


def render(rows: list[dict], command: str, device: str) -> str:
    lines = [
        "# A model's convs back to back (CUDA graph)",
        "",
        f"- device: {device}",
        f"- command: `{command}`",
        "- each graph runs every conv of the model once, in call order, on its own tensors "
        "(no data flow between them); plain convs, the default heuristic's configs; "
        f"{ROUNDS} interleaved rounds of do_bench, medians. Grouped convs (RegNet, ResNeXt), "
        "which the package does not run, are left out of both libraries' graphs.",
        "",
        "| model | batch | convs | " + " | ".join(f"{m} us" for m in METHODS.values())
        + " | programmatic launch saves | ours vs cuDNN |",
        "|---|---|---|" + "---|" * (len(METHODS) + 2),
    ]
    for row in rows:
        us = row["us"]
        saved = us["ours_plain"] - us["ours"]
        convs = str(row["convs"])
        if row.get("grouped"):
            convs += f" ({row['grouped']} grouped left out)"
        lines.append(
            f"| {row['model']} | {row['batch']} | {convs} | "
            + " | ".join(f"{us[m]:.1f}" for m in METHODS)
            + f" | {saved:.1f} us ({saved / row['convs']:.2f} a conv) "
            f"| {us['cudnn'] / us['ours']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "resnet18", "vgg16"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--out", type=Path, default=HERE / "CHAIN.md")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("conv_chain.py needs a Hopper (compute capability 9.0) GPU", file=sys.stderr)
        return 1
    torch.backends.cudnn.benchmark = True
    rows = []
    for name in args.models:
        for batch in args.batches:
            rows.append(measure(name, batch))
            us = rows[-1]["us"]
            print(name, batch, {m: round(t, 1) for m, t in us.items()}, flush=True)
    command = "python benchmarks/conv_chain.py " + " ".join(sys.argv[1:] if argv is None else argv)
    device = (
        f"{torch.cuda.get_device_name()}; {datetime.date.today()}; torch {torch.__version__}, "
        f"cuDNN {torch.backends.cudnn.version()}, "
        f"nvidia-cutlass-dsl {_version('nvidia-cutlass-dsl')}"
    )
    args.out.write_text(render(rows, command, device))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
