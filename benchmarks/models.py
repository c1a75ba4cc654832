"""Whole-model benchmark: cute_conv.optimize against torch eager (cuDNN) and torch.compile.

    python benchmarks/models.py [--models resnet18 resnet50 vgg16 regnet_y_1_6gf
                                 mobilenet_v3_large resnet50_fpn resnext50_32x4d
                                 efficientnet_b0 convnext_tiny convnext_small]
                                [--batches 1 8 32 128]
                                [--json benchmarks/models.json] [--out benchmarks/MODELS.md]
                                [--chart benchmarks/models.png] [--render]
                                [--merge FILE [FILE ...]] [--compile-cute-conv]

torchvision's ResNet-18, ResNet-50, VGG-16, RegNetY-1.6GF, MobileNetV3-Large, ResNeXt-50
32x4d, EfficientNet-B0 and ConvNeXt-T (the last four with grouped or depthwise convs), and
Faster R-CNN's ResNet-50-FPN backbone with FrozenBatchNorm2d (``resnet50_fpn``: a detector's
convs at 800x800, its feature maps flattened into one output), with random weights (no
download) and randomized batch-norm statistics (``cute_conv.testing.randomize_batchnorm_``),
eval, bfloat16, channels_last, 224x224 images, at each batch size:
- images/s of (a) ``cute_conv.optimize(model)``, (b) the model in torch eager (cuDNN,
  ``cudnn.benchmark=True``) and (c) ``torch.compile(model)`` with
  ``torch._inductor.config.freezing = True`` (default mode), each captured in a CUDA graph
  after a warmup on a side stream; the graphs' replays are timed in ``bench.ROUNDS`` rounds of
  ``triton.testing.do_bench`` (medians), the order reversed every other round
  (``bench.time_interleaved``), all in one process;
- the relative error ||y - y_ref|| / ||y_ref|| of each one's logits against the float32 model
  on the same weights and inputs, computed without TF32;
- compile times: cute_conv's optimize + first call with an empty kernel cache (cold: every
  kernel compiled) and again with the in-memory cache cleared and the disk cache full (warm);
  torch.compile's first call with fresh inductor and triton caches.
- with ``--compile-cute-conv``, also (d) ``torch.compile(cute_conv.optimize(model))`` (same
  settings), where inductor fuses what is not a conv (ConvNeXt's LayerNorms and GELUs,
  EfficientNet's squeeze-excitation pools) around cute_conv's ops; its own report section.

``--models`` also takes any other torchvision classification model (random weights, 224x224):
a held-out check, reported after these.

Measuring needs an H100/H200. One invocation measures the models and batches it is given and
merges them into the JSON file (a row per model and batch; a row measured again replaces the
old one), so that each call stays within a few minutes; it then renders the Markdown report and
the chart from the whole JSON. ``--render`` only renders, with no GPU. cute_conv's caches (kernels
and autotuner choices) live in a scratch directory of the invocation: the user's cache is neither
read nor written, and every config is the default heuristic's.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import gc
import json
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from bench import ROUNDS, _version, time_interleaved
from torch import nn

import cute_conv
from cute_conv import compile as compile_mod
from cute_conv.testing import compare_to_reference, float32_logits, randomize_batchnorm_

HERE = Path(__file__).resolve().parent
# RegNetY-1.6GF: 54 squeeze-excitation 1x1s on 1-pixel maps per call (the CUDA-core kernel
# at batch <= 32), its grouped 3x3s on the grouped kernel or cuDNN (cute_conv.grouped_rule).
# resnet50_fpn: Faster R-CNN's ResNet-50-FPN backbone (``DETECTION_BACKBONE``), as a pretrained
# detector holds it (FrozenBatchNorm2d), at a detector's image size.
MODELS = (
    "resnet18", "resnet50", "vgg16", "regnet_y_1_6gf", "mobilenet_v3_large", "resnet50_fpn",
    "resnext50_32x4d", "efficientnet_b0", "convnext_tiny", "convnext_small", "efficientnet_b1",
    "densenet121", "googlenet", "mobilenet_v2", "shufflenet_v2_x1_0", "wide_resnet50_2",
    "inception_v3",
)  # fmt: skip
DETECTION_BACKBONE = "resnet50_fpn"
BATCHES = (1, 8, 32, 128)
IMAGE_SIZE = 224
DETECTION_IMAGE_SIZE = 800
# The models measured at another size than IMAGE_SIZE: the detector's, and Inception-v3's own.
IMAGE_SIZES = {DETECTION_BACKBONE: DETECTION_IMAGE_SIZE, "inception_v3": 299}
SEED = 0
# What is compared, in timing order: cute_conv.optimize, torch eager, torch.compile.
METHODS = ("cute_conv", "eager", "compile")
# Measured with --compile-cute-conv: torch.compile of the optimized model.
COMPILED_CUTE_CONV = "cute_conv_compile"
METHOD_NAMES = {
    "cute_conv": "cute_conv", "eager": "torch eager", "compile": "torch.compile",
    COMPILED_CUTE_CONV: "cute_conv + torch.compile",
}  # fmt: skip
# The targets: ResNet-50's speedup over torch.compile, per batch size.
SPEED_TARGETS = {("resnet50", 1): 1.1, ("resnet50", 32): 1.3, ("resnet50", 128): 1.3}
# Calls before a CUDA graph is captured: cuDNN's algorithm search, compiles and lazy setup run
# there, not in the capture.
WARMUP_CALLS = 3


# ---------------------------------------------------------------------------------------------
# Measuring (GPU)


def no_gpu_reason() -> str | None:
    """Why this machine cannot measure, or None."""
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine"
    if torch.cuda.get_device_capability() != (9, 0):
        return f"{torch.cuda.get_device_name()} is not a Hopper (compute capability 9.0) GPU"
    return None


def model_name(text: str) -> str:
    """``text`` where it names a model ``build_model`` builds: one of ``MODELS``, or any other
    torchvision classification model (a held-out check), else an argparse error."""
    import torchvision

    if text in MODELS or text in torchvision.models.list_models(module=torchvision.models):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is neither one of {', '.join(MODELS)} nor a torchvision classification model"
    )


def _model_order(name: str) -> tuple[int, str]:
    """Report order: ``MODELS``' own, then other models by name."""
    return (MODELS.index(name), "") if name in MODELS else (len(MODELS), name)


def image_size(name: str) -> int:
    """The square images ``name`` is measured on."""
    return IMAGE_SIZES.get(name, IMAGE_SIZE)


class FlatFeatures(nn.Module):
    """A detection backbone whose feature maps come out as one ``[N, features]`` tensor (the
    "logits" the error and the CUDA graphs take)."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([f.flatten(1) for f in self.backbone(x).values()], dim=1)


def build_model(name: str) -> nn.Module:
    """torchvision's ``name`` (or ``DETECTION_BACKBONE``) with seeded random weights and
    batch-norm statistics, float32, eval, on the CPU."""
    import torchvision
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

    torch.manual_seed(SEED)
    if name == DETECTION_BACKBONE:
        backbone = resnet_fpn_backbone(
            backbone_name="resnet50", weights=None, norm_layer=torchvision.ops.FrozenBatchNorm2d
        )
        model = FlatFeatures(backbone)
    else:
        model = torchvision.models.get_model(name, weights=None)
    randomize_batchnorm_(model, generator=torch.Generator().manual_seed(SEED))
    return model.eval()


def distinct_calls(
    model: nn.Module,
    batch: int,
    takes: Callable[[nn.Module], bool],
    label: Callable[[nn.Module], object] = lambda _module: None,
) -> list[tuple[nn.Module, tuple[int, ...], int]]:
    """``(module, input shape, calls per forward)`` of each distinct call of the modules of
    ``model`` that ``takes`` picks, on a batch of 224x224 images (forward hooks, on the CPU):
    calls are the same where the input shape, the module's repr and its ``label`` are."""
    seen: dict[tuple, list] = {}

    def record(module: nn.Module, args, _output) -> None:
        shape = tuple(args[0].shape)
        seen.setdefault((shape, repr(module), label(module)), [module, shape, 0])[2] += 1

    hooks = [m.register_forward_hook(record) for m in model.modules() if takes(m)]
    with torch.no_grad():
        model(torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE))  # the classifiers' size
    for hook in hooks:
        hook.remove()
    return [tuple(entry) for entry in seen.values()]


def graphed(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor):
    """``fn(x)`` captured in a CUDA graph after ``WARMUP_CALLS`` calls on a side stream:
    ``(replay, output)``, the output being the graph's static tensor that each replay
    rewrites. ``replay`` holds ``fn`` and ``x``: the graph reads and writes the tensors they
    hold, and a freed one may be unmapped (``torch.cuda.graph`` empties the allocator's cache
    before each capture), so a replay over it faults with an illegal address."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(WARMUP_CALLS):
            fn(x)
    torch.cuda.current_stream().wait_stream(stream)  # replays follow the warm-up's kernels
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = fn(x)

    def replay(captured=(fn, x)) -> None:
        graph.replay()

    return replay, out


def replay_of(fn: Callable[[], object]) -> Callable[[], None]:
    """``fn`` (of no arguments) captured in a CUDA graph by ``graphed``: its replay."""
    replay, _ = graphed(lambda _: fn(), None)
    return replay


def replayed_us(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Microseconds of each of ``fns`` (of no arguments) replayed from a CUDA graph
    (``replay_of``), timed in ``rounds`` interleaved rounds (``time_interleaved``, medians)."""
    ms = time_interleaved({name: replay_of(fn) for name, fn in fns.items()}, rounds)
    return {name: t * 1e3 for name, t in ms.items()}


def _first_call_seconds(make: Callable[[], Callable], x: torch.Tensor):
    """``(module, seconds)``: the time to make the module and run its first call."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    module = make()
    module(x)
    torch.cuda.synchronize()
    return module, time.perf_counter() - start


def optimize_timed(model: nn.Module, x: torch.Tensor, cache_dir: Path):
    """``(optimized, cold_s, warm_s)``: cute_conv.optimize + first call with ``cache_dir``
    (empty) as the kernel cache, then again with the in-memory cache cleared (the kernels
    loaded from ``cache_dir``). The process keeps using ``cache_dir`` afterwards."""
    os.environ["CUTE_CONV_CACHE_DIR"] = str(cache_dir)
    compile_mod.clear_cache()
    _, cold_s = _first_call_seconds(lambda: cute_conv.optimize(model), x)
    compile_mod.clear_cache()
    optimized, warm_s = _first_call_seconds(lambda: cute_conv.optimize(model), x)
    return optimized, cold_s, warm_s


def compile_timed(model: nn.Module, x: torch.Tensor):
    """``(compiled, seconds)``: torch.compile (freezing, default mode) and its first call, with
    dynamo's state reset and fresh inductor and triton caches."""
    from torch._inductor.utils import fresh_inductor_cache

    torch._dynamo.reset()
    with fresh_inductor_cache():
        return _first_call_seconds(lambda: torch.compile(model, dynamic=False), x)


def measure_batch(
    name: str,
    model32: nn.Module,
    model16: nn.Module,
    batch: int,
    scratch: Path,
    compile_cute_conv: bool = False,
) -> tuple[dict, str]:
    """One row of results for ``name`` at ``batch``, and the optimize report's text;
    ``compile_cute_conv``: also time ``torch.compile`` of the optimized model."""
    generator = torch.Generator().manual_seed(SEED + batch)
    size = image_size(name)
    x32 = torch.randn(batch, 3, size, size, generator=generator).cuda()
    x = x32.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)
    ref = float32_logits(model32, x32)
    optimized, cold_s, warm_s = optimize_timed(model16, x, scratch / f"cute-{name}-{batch}")
    compiled, torch_compile_s = compile_timed(model16, x)
    graphs = {"cute_conv": graphed(optimized, x), "eager": graphed(model16, x)}
    graphs["compile"] = graphed(compiled, x)
    compile_s = {
        "cute_conv_cold": cold_s,
        "cute_conv_warm": warm_s,
        "torch_compile": torch_compile_s,
    }
    if compile_cute_conv:
        compiled_optimized, compile_s[COMPILED_CUTE_CONV] = compile_timed(optimized, x)
        graphs[COMPILED_CUTE_CONV] = graphed(compiled_optimized, x)
    rel_err = {}
    for method, (replay, out) in graphs.items():
        replay()
        rel_err[method] = compare_to_reference(out, ref).rel_err
    ms = time_interleaved({method: replay for method, (replay, _) in graphs.items()})
    row = dict(model=name, batch=batch, ms=ms, rel_err=rel_err, compile_s=compile_s)
    return row, str(optimized.cute_conv_report)


def measure(
    models: Iterable[str], batches: Iterable[int], command: str, compile_cute_conv: bool = False
) -> tuple[list[dict], dict[str, str]]:
    """Rows of every model at every batch size, and each model's optimize report."""
    torch.backends.cudnn.benchmark = True
    torch._inductor.config.freezing = True
    os.environ.pop("CUTE_CONV_AUTOTUNE", None)  # the heuristic's configs, nothing tuned
    env = dict(
        device=torch.cuda.get_device_name(), torch=torch.__version__,
        cudnn=torch.backends.cudnn.version(), cutlass_dsl=_version("nvidia-cutlass-dsl"),
        date=datetime.date.today().isoformat(), command=command,
    )  # fmt: skip
    rows, reports = [], {}
    with tempfile.TemporaryDirectory(prefix="cute_conv_models_") as scratch, torch.no_grad():
        for name in models:
            model32 = build_model(name).cuda()
            model16 = copy.deepcopy(model32).to(torch.bfloat16, memory_format=torch.channels_last)
            for batch in batches:
                row, reports[name] = measure_batch(
                    name, model32, model16, batch, Path(scratch), compile_cute_conv
                )
                rows.append({**row, **env})
                print(_progress_line(rows[-1]), flush=True)
                gc.collect()  # the graphs and their memory pools
                torch.cuda.empty_cache()
    return rows, reports


def _progress_line(row: dict) -> str:
    err, comp = row["rel_err"], row["compile_s"]
    line = (
        f"{row['model']:>9} batch {row['batch']:>3}: "
        + ", ".join(f"{METHOD_NAMES[m]} {images_per_s(row, m):.0f} img/s" for m in METHODS)
        + f" | {speedup(row, 'eager'):.2f}x eager, {speedup(row, 'compile'):.2f}x torch.compile | rel err {', '.join(f'{err[m]:.1e}' for m in METHODS)} | compile "
        f"{comp['cute_conv_cold']:.0f} s cold, {comp['cute_conv_warm']:.1f} s warm, torch.compile "
        f"{comp['torch_compile']:.0f} s"
    )
    if COMPILED_CUTE_CONV in row["ms"]:
        line += (
            f" | {METHOD_NAMES[COMPILED_CUTE_CONV]} {images_per_s(row, COMPILED_CUTE_CONV):.0f} "
            f"img/s ({compiled_speedup(row):.2f}x torch.compile), rel err "
            f"{err[COMPILED_CUTE_CONV]:.1e}, compile {comp[COMPILED_CUTE_CONV]:.0f} s"
        )
    return line


# ---------------------------------------------------------------------------------------------
# Results file (no GPU)


def load_results(path: Path) -> dict:
    """The JSON results, or an empty set of results if there is no file."""
    if not path.is_file():
        return {"rows": [], "reports": {}}
    return json.loads(path.read_text())


def merge_results(data: dict, rows: list[dict], reports: dict[str, str]) -> dict:
    """``data`` with ``rows`` added, each replacing an old row of its model and batch size, and
    ``reports`` replacing the old reports of their models."""
    fresh = {(r["model"], r["batch"]) for r in rows}
    kept = [r for r in data["rows"] if (r["model"], r["batch"]) not in fresh]
    merged = sorted(kept + rows, key=lambda r: (_model_order(r["model"]), r["batch"]))
    return {"rows": merged, "reports": {**data["reports"], **reports}}


def images_per_s(row: dict, method: str) -> float:
    return row["batch"] / row["ms"][method] * 1000


def speedup(row: dict, method: str) -> float:
    """How many times faster cute_conv ran than ``method`` on ``row``."""
    return row["ms"][method] / row["ms"]["cute_conv"]


def compiled_speedup(row: dict) -> float:
    """How many times faster ``torch.compile(cute_conv.optimize(model))`` ran than
    ``torch.compile(model)`` on ``row``."""
    return row["ms"]["compile"] / row["ms"][COMPILED_CUTE_CONV]


def error_ok(row: dict) -> bool:
    """cute_conv's logits are no further from the float32 model's than torch eager bf16's."""
    return row["rel_err"]["cute_conv"] <= row["rel_err"]["eager"]


def target_lines(rows: list[dict]) -> list[tuple[str, str, bool | None]]:
    """``(target, measured, met)`` for each target; ``met`` None where it was not measured."""
    by_key = {(r["model"], r["batch"]): r for r in rows}
    lines = []
    for (model, batch), wanted in SPEED_TARGETS.items():
        row = by_key.get((model, batch))
        target = f"{model} batch {batch}: >= {wanted:.1f}x torch.compile"
        if row is None:
            lines.append((target, "not measured", None))
        else:
            lines.append(
                (target, f"{speedup(row, 'compile'):.2f}x", speedup(row, "compile") >= wanted)
            )
    ok = sum(error_ok(r) for r in rows)
    lines.append(
        (
            "logits' error no worse than torch eager bf16's (every row)",
            f"{ok} of {len(rows)} rows",
            (ok == len(rows)) if rows else None,
        )
    )
    return lines


def _distinct(rows: list[dict], key: str) -> str:
    return ", ".join(dict.fromkeys(str(r[key]) for r in rows))


def render_markdown(data: dict, chart_name: str) -> str:
    """The report of ``data`` (``load_results``'s form) as Markdown."""
    rows = data["rows"]
    met_words = {True: "yes", False: "**no**", None: "not measured"}
    lines = [
        "# Whole-model benchmark: cute_conv.optimize vs torch",
        "",
        f"- device: {_distinct(rows, 'device')}; dates {_distinct(rows, 'date')}",
        f"- torch {_distinct(rows, 'torch')}, cuDNN {_distinct(rows, 'cudnn')}, "
        f"nvidia-cutlass-dsl {_distinct(rows, 'cutlass_dsl')}",
        "- commands: " + "; ".join(f"`{c}`" for c in dict.fromkeys(r["command"] for r in rows)),
        f"- torchvision models, random weights and randomized batch-norm statistics, eval, "
        f"bfloat16, channels_last, {IMAGE_SIZE}x{IMAGE_SIZE} ({DETECTION_BACKBONE}: Faster "
        f"R-CNN's ResNet-50-FPN backbone with FrozenBatchNorm2d, as a pretrained detector holds "
        f"it, its five feature maps flattened into one output, {DETECTION_IMAGE_SIZE}x"
        f"{DETECTION_IMAGE_SIZE}; inception_v3: {IMAGE_SIZES['inception_v3']}x"
        f"{IMAGE_SIZES['inception_v3']}). Each of cute_conv.optimize(model), "
        f"torch eager (cuDNN, cudnn.benchmark=True) and torch.compile (freezing, default mode) "
        f"runs as a CUDA graph captured after {WARMUP_CALLS} warmup calls on a side stream; "
        f"graph replays are timed in one process, {ROUNDS} rounds of triton.testing.do_bench "
        f"(medians), the order reversed every other round, the median round reported. cute_conv "
        f"runs the default heuristic's configs.",
        "- error: ||y - y_ref|| / ||y_ref|| of the logits against the float32 model (same "
        "weights and inputs, TF32 off in cuDNN and cuBLAS).",
        "- compile times: cute_conv cold = optimize + first call with an empty kernel cache "
        "(every kernel compiled); warm = the same with the in-memory cache cleared and the disk "
        "cache full; torch.compile = its first call with fresh inductor and triton caches. The "
        "first row of an invocation also pays each library's one-time start.",
        "",
        "## Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]
    lines += [f"| {t} | {m} | {met_words[ok]} |" for t, m, ok in target_lines(rows)]
    lines += [
        "",
        "## Throughput (images/s)",
        "",
        "| model | batch | cute_conv | torch eager | torch.compile | vs eager | vs torch.compile |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ips = " | ".join(f"{images_per_s(r, m):.0f}" for m in METHODS)
        lines.append(
            f"| {r['model']} | {r['batch']} | {ips} | {speedup(r, 'eager'):.2f}x "
            f"| {speedup(r, 'compile'):.2f}x |"
        )
    lines += [
        "",
        "## Logits' relative error against float32",
        "",
        "| model | batch | cute_conv | torch eager bf16 | torch.compile bf16 | cute_conv no worse "
        "than eager |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        errs = " | ".join(f"{r['rel_err'][m]:.2e}" for m in METHODS)
        lines.append(f"| {r['model']} | {r['batch']} | {errs} | {met_words[error_ok(r)]} |")
    lines += [
        "",
        "## Compile time of the first call (s)",
        "",
        "| model | batch | cute_conv cold | cute_conv warm | torch.compile |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        c = r["compile_s"]
        lines.append(
            f"| {r['model']} | {r['batch']} | {c['cute_conv_cold']:.1f} "
            f"| {c['cute_conv_warm']:.2f} | {c['torch_compile']:.1f} |"
        )
    compiled_rows = [r for r in rows if COMPILED_CUTE_CONV in r["ms"]]
    if compiled_rows:
        lines += [
            "",
            "## cute_conv.optimize under torch.compile (`--compile-cute-conv`)",
            "",
            "`torch.compile(cute_conv.optimize(model))`, same settings and graphs: inductor "
            "fuses the ops around cute_conv's.",
            "",
            "| model | batch | images/s | vs torch.compile | vs cute_conv alone | error | "
            "compile (s) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in compiled_rows:
            alone = r["ms"]["cute_conv"] / r["ms"][COMPILED_CUTE_CONV]
            lines.append(
                f"| {r['model']} | {r['batch']} | {images_per_s(r, COMPILED_CUTE_CONV):.0f} "
                f"| {compiled_speedup(r):.2f}x | {alone:.2f}x "
                f"| {r['rel_err'][COMPILED_CUTE_CONV]:.2e} "
                f"| {r['compile_s'][COMPILED_CUTE_CONV]:.1f} |"
            )
    lines += ["", f"![speedups]({chart_name})", "", "## What cute_conv.optimize did", ""]
    for model, report in data["reports"].items():
        summary = report.splitlines()[0] if report else "(no report)"
        lines += [f"<details><summary>{model}: {summary}</summary>", "", "```", report.rstrip()]
        lines += ["```", "", "</details>", ""]
    return "\n".join(lines)


def write_chart(rows: list[dict], path: Path) -> None:
    """Bars of cute_conv's speedup over torch eager and torch.compile, one panel per model,
    with the targets marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4.5), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        model_rows = [r for r in rows if r["model"] == model]
        xs = range(len(model_rows))
        for i, method in enumerate(("eager", "compile")):
            values = [speedup(r, method) for r in model_rows]
            label = f"vs {METHOD_NAMES[method]}"
            ax.bar([x + (i - 0.5) * 0.4 for x in xs], values, 0.4, label=label)
        for x, r in zip(xs, model_rows, strict=True):
            wanted = SPEED_TARGETS.get((model, r["batch"]))
            if wanted is not None:
                ax.hlines(wanted, x - 0.1, x + 0.5, colors="red", linestyles="dashed")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([f"batch {r['batch']}" for r in model_rows])
        ax.set_title(model)
        ax.set_ylabel("speedup of cute_conv (x)")
        ax.legend(loc="lower right")
    fig.suptitle(
        f"cute_conv.optimize on {_distinct(rows, 'device')} (CUDA graphs; red dashes: targets)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render(data: dict, out: Path, chart: Path) -> None:
    write_chart(data["rows"], chart)
    out.write_text(render_markdown(data, os.path.relpath(chart, out.parent)) + "\n")


# ---------------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be >= 1, got {value}")
    return value


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", nargs="+", type=model_name, default=list(MODELS),
        help="MODELS (the default), or any torchvision classification model",
    )  # fmt: skip
    parser.add_argument("--batches", nargs="+", type=_positive_int, default=list(BATCHES))
    parser.add_argument("--json", type=Path, default=HERE / "models.json", help="results file")
    parser.add_argument("--out", type=Path, default=HERE / "MODELS.md", help="Markdown report")
    parser.add_argument("--chart", type=Path, default=HERE / "models.png", help="PNG chart")
    parser.add_argument(
        "--render", action="store_true", help="only render --out and --chart from --json (no GPU)"
    )
    parser.add_argument(
        "--merge", nargs="+", type=Path, metavar="FILE",
        help="add the rows of these results files (runs with their own --json) to --json, "
        "each replacing the row of its model and batch size, then render (no GPU)",
    )  # fmt: skip
    parser.add_argument(
        "--compile-cute-conv", action="store_true",
        help="also time torch.compile(cute_conv.optimize(model)) (freezing, default mode)",
    )  # fmt: skip
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    data = load_results(args.json)
    if args.merge:
        for path in args.merge:
            other = load_results(path)
            if not other["rows"]:
                print(f"models: --merge {path} holds no results.", file=sys.stderr)
                return 1
            data = merge_results(data, other["rows"], other["reports"])
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    elif not args.render:
        reason = no_gpu_reason()
        if reason is not None:
            print(
                f"models: {reason}; measuring needs an H100/H200, nothing was measured "
                f"(--render renders {args.json} without a GPU).",
                file=sys.stderr,
            )
            return 1
        command = shlex.join(["python", "benchmarks/models.py", *argv])
        rows, reports = measure(args.models, args.batches, command, args.compile_cute_conv)
        data = merge_results(data, rows, reports)
        args.json.write_text(json.dumps(data, indent=1) + "\n")
    if not data["rows"]:
        print(f"models: {args.json} holds no results to render.", file=sys.stderr)
        return 1
    render(data, args.out, args.chart)
    print(f"wrote {args.out} and {args.chart} from {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
