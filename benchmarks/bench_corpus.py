"""Benchmark cute_conv on the conv corpus (``benchmarks/corpus.json``), in sections.

    python benchmarks/bench_corpus.py --plan                       # sections and estimates, no GPU
    python benchmarks/bench_corpus.py --section 0 [--sections S]   # one section (H100/H200)
    python benchmarks/bench_corpus.py --split heldout --tag "1x1"  # or a class of the corpus
    python benchmarks/bench_corpus.py --keys KEY,KEY               # or named problems (a rerun)
    python benchmarks/bench_corpus.py --measured-before 20261125T05 --section 0  # stale rows
    python benchmarks/bench_corpus.py --config-changed --section 0  # rows a rule change moved
    python benchmarks/bench_corpus.py --measured-on "NVIDIA H100 80GB HBM3" --plan  # its rows
    python benchmarks/bench_corpus.py --render                     # CORPUS.md + corpus.png, no GPU
    python benchmarks/bench_corpus.py --fp8 --section 0            # the fp8 section (CORPUS_FP8.md)
    python benchmarks/bench_corpus.py --fused-only --measured-before 20261128 --section 0
    python benchmarks/bench_corpus.py --merge gpu0.json gpu1.json  # one process per GPU, joined

Per problem, in one process (bf16 in/out, fp32 accumulation):
- plain conv: ``cute_conv.conv2d_fprop`` vs cuDNN (``F.conv2d`` on channels_last views,
  ``cudnn.benchmark=True``), called eagerly and replayed from CUDA graphs (the latter
  without the host's time per call, as a captured model runs them);
- both fused orders, ``relu(conv + b) + r`` (``conv2d_fprop_with_residual(x, w, r, bias=b,
  activation="relu")``) and ``relu(conv + b + r)`` (the same with
  ``residual_order="before_activation"``), vs the cuDNN frontend's fused graph (conv_fprop ->
  bias -> relu -> add, or -> add -> relu; NHWC bf16; heuristics A + FALLBACK; the first
  ``FRONTEND_PLANS`` execution plans built, checked and timed, the fastest correct one kept),
  called eagerly and replayed from CUDA graphs, as the plain conv is (rows measured before
  the fused replays existed, 2026-11-28, have the eager columns alone).
  The frontend (``import cudnn``, the nvidia-cudnn-frontend package) is optional: without it
  those columns are skipped, and the output says so.
- ``--fp8`` instead of the fused orders: ours on e4m3 inputs (per-tensor scales, bf16 output,
  the heuristic's fp8 config) vs ours bf16, cuDNN bf16 and the frontend's fp8 graph (conv ->
  two scales -> bf16, best of its first plans), ours also replayed from CUDA graphs against
  the bf16 replays, checked against a float32 reference on the dequantized inputs
  (``bench_fp8.fp8_comparison``); results in ``corpus_fp8_results.json``, report
  ``CORPUS_FP8.md``.
- ``--fused-only``: the fused orders alone, for a change that moves only them (an epilogue's
  bias loads): the report keeps each problem's plain columns from its latest row that has
  them (``latest_rows``), so each ratio's two times still come from one run.
Every result is checked against the float32 reference first (``compare_to_reference``); a
failed check is recorded and that comparison is not timed. Timing is ``bench.py``'s: rounds of
``triton.testing.do_bench`` medians, the order reversed every other round. Each problem's row
is appended to ``benchmarks/corpus_results.json`` as soon as it is measured; ``--max-seconds``
stops before a problem whose estimate would overrun the budget, and the run records what it
skipped.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench.py and corpus.py sit beside this script

from bench import ROUNDS, gemm_ceiling_tflops, geomean, time_interleaved  # noqa: E402
from corpus import CORPUS_PATH, TAGS  # noqa: E402

if TYPE_CHECKING:
    import cute_conv

RESULTS_PATH = HERE / "corpus_results.json"
REPORT_PATH = HERE / "CORPUS.md"
CHART_PATH = HERE / "corpus.png"
ORDERS = ("after_activation", "before_activation")  # the two fused residual orders
FRONTEND_PLANS = 10
# Time model of one problem, for sections and the budget (seconds): a do_bench call costs its
# 25 ms warm-up and 100 ms of repetitions, plus ~10 calls; a problem adds inputs, references and
# checks; the frontend builds and screens up to FRONTEND_PLANS plans per fused order.
DO_BENCH_S = 0.14
PROBLEM_SETUP_S = 1.0
FRONTEND_SCREEN_S = 2 * FRONTEND_PLANS * 0.25
EST_RATE_FLOPS = 300e12  # a pessimistic bf16 rate: only long calls matter here
SECTION_SECONDS = 420  # a section's estimate; with start-up and compiles it stays under 8 min
LATENCY_BOUND_MS = 0.020  # cuDNN faster than this: the problem is latency-bound
# name -> (our time, the baseline's time or times (the least of them counts), title)
COMPARISONS: dict[str, tuple[str, str | tuple[str, ...], str]] = {
    "plain": ("ours_ms", "cudnn_ms", "plain conv vs cuDNN"),
    # The same calls captured in CUDA graphs and replayed: the GPU's time without the host's.
    "plain_graph": ("ours_graph_ms", "cudnn_graph_ms", "plain conv vs cuDNN, CUDA graphs"),
    "after": ("after_ms", "fe_after_ms", "relu(conv + b) + r vs cuDNN frontend"),
    "before": ("before_ms", "fe_before_ms", "relu(conv + b + r) vs cuDNN frontend"),
    # Our fused calls replayed from CUDA graphs against the frontend's faster of its eager call
    # and its replay: its replays take ~2 us more than its eager calls on small convs (one
    # kernel either way, the same kernel time; not explained), and its eager calls carry
    # its host time where that exceeds the GPU's. The least of the two is the fair anchor.
    "after_graph": (
        "after_graph_ms",
        ("fe_after_ms", "fe_after_graph_ms"),
        "relu(conv + b) + r, CUDA graphs, vs cuDNN frontend's faster of eager and graphs",
    ),
    "before_graph": (
        "before_graph_ms",
        ("fe_before_ms", "fe_before_graph_ms"),
        "relu(conv + b + r), CUDA graphs, vs cuDNN frontend's faster of eager and graphs",
    ),
    # --fp8 runs: e4m3 inputs, bf16 output (their own results file and report)
    "fp8": ("fp8_ms", "ours_ms", "ours fp8 vs ours bf16"),
    "fp8_cudnn": ("fp8_ms", "cudnn_ms", "ours fp8 vs cuDNN bf16"),
    "fp8_frontend": ("fp8_ms", "cudnn_fp8_ms", "ours fp8 vs cuDNN frontend fp8"),
    # ... replayed from CUDA graphs: the GPU's time without the host's, which can set a small
    # conv's eager time (rows measured before 2026-12-03 have the eager columns alone).
    "fp8_graph": ("fp8_graph_ms", "ours_graph_ms", "ours fp8 vs ours bf16, CUDA graphs"),
    "fp8_cudnn_graph": ("fp8_graph_ms", "cudnn_graph_ms", "ours fp8 vs cuDNN bf16, CUDA graphs"),
}
# The speed targets' floors (issue 22): no plain conv below 0.95x cuDNN, no fused one below
# 1.0x the cuDNN frontend; the report counts the problems under them.
FLOORS = {
    "plain": 0.95, "plain_graph": 0.95,
    "after": 1.0, "before": 1.0, "after_graph": 1.0, "before_graph": 1.0,
}  # fmt: skip
FP8_RESULTS_PATH = HERE / "corpus_fp8_results.json"
FP8_REPORT_PATH = HERE / "CORPUS_FP8.md"
FP8_CHART_PATH = HERE / "corpus_fp8.png"


# ---- selection and sections (no GPU) ----


def load_corpus(path: Path = CORPUS_PATH) -> list[dict]:
    return json.loads(path.read_text())["problems"]


def estimate_seconds(
    problem: dict, *, frontend: bool = True, fp8: bool = False, fused_only: bool = False
) -> float:
    """Estimated wall time of ``bench_problem`` on ``problem`` (see the constants above)."""
    call_s = problem["gflop"] * 1e9 / EST_RATE_FLOPS
    fused = 1 if fp8 else len(ORDERS)  # fp8: ours and the frontend's fp8 conv
    # The plain conv and cuDNN, eager and replayed from CUDA graphs, then the fused forms,
    # ours and the frontend's, eager and replayed (fp8: ours both ways, the frontend eager).
    ours_fused, frontend_fused = 2 * fused, (fused if fp8 else 2 * fused) if frontend else 0
    timed = (0 if fused_only else 4) + ours_fused + frontend_fused
    screen = FRONTEND_SCREEN_S * fused / len(ORDERS) if frontend else 0.0
    return PROBLEM_SETUP_S + screen + ROUNDS * timed * (DO_BENCH_S + 10 * call_s)


def select(problems: list[dict], *, split: str, tags: Iterable[str]) -> list[dict]:
    """The problems of ``split`` ("train", "heldout" or "all") carrying every tag of ``tags``."""
    tags = set(tags)
    unknown = tags - set(TAGS)
    if unknown:
        raise ValueError(f"--tag {sorted(unknown)} is not a corpus tag; tags: {', '.join(TAGS)}")
    return [p for p in problems if split in ("all", p["split"]) and tags <= set(p["tags"])]


def sections(
    problems: list[dict],
    count: int | None,
    *,
    frontend: bool = True,
    fp8: bool = False,
    fused_only: bool = False,
) -> list[list[dict]]:
    """Consecutive runs of ``problems`` of about equal estimated time: ``count`` of them, or
    (None) as few as keep each under ``SECTION_SECONDS``."""
    est = [estimate_seconds(p, frontend=frontend, fp8=fp8, fused_only=fused_only) for p in problems]
    total = sum(est)
    if count is None:
        count = max(1, math.ceil(total / SECTION_SECONDS))
    if count < 1:
        raise ValueError(f"--sections must be >= 1, got {count}")
    if not problems:
        return [[] for _ in range(count)]
    parts: list[list[dict]] = [[] for _ in range(count)]
    done = 0.0
    for p, s in zip(problems, est, strict=True):
        # a problem goes to the section its midpoint falls in
        parts[min(count - 1, int((done + s / 2) / total * count))].append(p)
        done += s
    return parts


def problem_shape(p: dict):
    import cute_conv

    return cute_conv.Conv2dProblemShape(
        p["N"], p["H"], p["W"], p["C"], p["K"], p["R"], p["S"],
        padding=tuple(map(tuple, p["padding"])), stride=tuple(p["stride"]),
        dilation=tuple(p["dilation"]),
    )  # fmt: skip


# ---- measuring (GPU) ----


def _frontend():
    """The cuDNN frontend module, or None when it is not installed."""
    try:
        import cudnn
    except ImportError:
        return None
    return cudnn


class FrontendHandle:
    """The process's cuDNN handle and the stream it is bound to. Eager calls use it as
    bound; a CUDA graph's capture binds it to its side stream and back (``FrontendGraph.replay``),
    so that no eager call pays for a stream lookup."""

    def __init__(self, cudnn) -> None:
        self.cudnn = cudnn
        self.handle = cudnn.create_handle()
        self.stream: int | None = None
        self.bind_current_stream()

    def bind_current_stream(self) -> None:
        stream = torch.cuda.current_stream().cuda_stream
        if stream != self.stream:
            self.cudnn.set_stream(handle=self.handle, stream=stream)
            self.stream = stream


@functools.cache
def _frontend_handle(cudnn) -> FrontendHandle:
    """One cuDNN handle per process."""
    return FrontendHandle(cudnn)


class FrontendGraph:
    """The cuDNN frontend's fused ``conv -> bias -> relu -> add`` (or ``-> add -> relu``)
    graph on the channels_last views of our tensors, run with one chosen execution plan."""

    def __init__(self, cudnn, problem, order: str, x, w, bias, res, out) -> None:
        bf16, f32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT
        self.handle = _frontend_handle(cudnn)
        g = cudnn.pygraph(
            io_data_type=bf16, intermediate_data_type=f32, compute_data_type=f32,
            handle=self.handle.handle,
        )  # fmt: skip
        k = bias.numel()
        tensors = {"X": x, "W": w, "B": bias.view(1, k, 1, 1), "R": res}
        strides = {name: list(t.stride()) for name, t in tensors.items()}
        strides["B"] = [k, 1, k, k]  # a channels_last [1, K, 1, 1] vector, as cuDNN lays it out
        nodes = {
            name: g.tensor(name=name, dim=list(t.shape), stride=strides[name], data_type=bf16)
            for name, t in tensors.items()
        }
        (top, bottom), (left, right) = problem.padding
        y = g.conv_fprop(
            image=nodes["X"], weight=nodes["W"], pre_padding=[top, left],
            post_padding=[bottom, right], stride=list(problem.stride),
            dilation=list(problem.dilation), compute_data_type=f32, name="conv",
        )  # fmt: skip
        y = g.bias(name="bias", input=y, bias=nodes["B"])
        if order == "after_activation":
            y = g.add(name="residual", a=g.relu(name="relu", input=y), b=nodes["R"])
        else:
            y = g.relu(name="relu", input=g.add(name="residual", a=y, b=nodes["R"]))
        y.set_output(True).set_data_type(bf16)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        self.graph = g
        self.pack = {nodes[name]: t for name, t in tensors.items()} | {y: out}
        self.plan, self.workspace = None, None

    def plan_count(self) -> int:
        return min(FRONTEND_PLANS, int(self.graph.get_execution_plan_count()))

    def use_plan(self, index: int) -> None:
        self.graph.build_plan_at_index(index)
        size = int(self.graph.get_workspace_size_plan_at_index(index))
        self.plan = index
        self.workspace = torch.empty(max(size, 1), device="cuda", dtype=torch.uint8)

    def __call__(self) -> None:
        self.graph.execute_plan_at_index(
            self.pack, self.workspace, index=self.plan, handle=self.handle.handle
        )

    def replay(self) -> Callable[[], None]:
        """The chosen plan captured in a CUDA graph (``replay_of``): its replay. The handle
        follows the capture onto its side stream and returns to this stream afterwards."""
        from models import replay_of

        eager_stream = torch.cuda.current_stream()

        def on_capture_stream() -> None:
            self.handle.bind_current_stream()
            self()

        try:
            return replay_of(on_capture_stream)
        finally:
            with torch.cuda.stream(eager_stream):
                self.handle.bind_current_stream()


def best_frontend_plan(graph: FrontendGraph, out: torch.Tensor, ref: torch.Tensor) -> dict:
    """Build, check and screen (one short do_bench each) the graph's first plans; leave the
    fastest correct one in use. Returns what was tried."""
    from triton.testing import do_bench as triton_do_bench

    from cute_conv.testing import compare_to_reference

    tried, best = [], None
    for index in range(graph.plan_count()):
        try:
            graph.use_plan(index)
            out.fill_(float("nan"))
            graph()
            check = compare_to_reference(out, ref)
            ms = (
                triton_do_bench(graph, warmup=5, rep=20, return_mode="median") if check.ok else None
            )
        except Exception as e:  # noqa: BLE001 - a plan that fails to build or run is skipped
            tried.append({"plan": index, "error": f"{type(e).__name__}: {e}"[:200]})
            continue
        tried.append({"plan": index, "ok": check.ok, "rel_err": check.rel_err, "screen_ms": ms})
        if ms is not None and (best is None or ms < best[1]):
            best = (index, ms)
    if best is not None:
        graph.use_plan(best[0])
    return {"plans": tried, "plan": None if best is None else best[0]}


def pads_symmetrically(problem: cute_conv.Conv2dProblemShape) -> bool:
    """Whether ``F.conv2d`` can take the problem's padding as it is (top = bottom and left =
    right)."""
    (top, bottom), (left, right) = problem.padding
    return top == bottom and left == right


def cudnn_conv2d(
    x_cl: torch.Tensor, w_cl: torch.Tensor, problem: cute_conv.Conv2dProblemShape
) -> Callable[[], torch.Tensor]:
    """The cuDNN anchor's call on channels_last NCHW views: ``F.conv2d``, after an explicit
    ``F.pad`` where the padding is asymmetric (``F.conv2d`` pads symmetrically)."""
    (top, bottom), (left, right) = problem.padding
    if pads_symmetrically(problem):
        return lambda: F.conv2d(x_cl, w_cl, None, problem.stride, (top, left), problem.dilation)
    return lambda: F.conv2d(
        F.pad(x_cl, (left, right, top, bottom)), w_cl, None, problem.stride, 0, problem.dilation
    )


def problem_operands(p: dict) -> tuple:
    """``(problem, geometry keywords, x, filter, config, fused config)`` of corpus problem
    ``p``: fresh random operands on the GPU and the heuristic's configs of its plain and
    fused calls (explicit, so that a stored autotuner choice cannot stand in for them)."""
    from cute_conv.testing import random_conv_inputs
    from cute_conv.untuned import heuristic_config

    problem = problem_shape(p)
    geom = dict(stride=problem.stride, padding=problem.padding, dilation=problem.dilation)
    x, flt = random_conv_inputs(*(p[d] for d in "NHWCKRS"))
    num_sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    config = heuristic_config(problem, num_sms)
    fused_config = heuristic_config(problem, num_sms, has_residual=True)
    return problem, geom, x, flt, config, fused_config


def bench_problem(p: dict, cudnn_frontend, *, fp8: bool = False, fused_only: bool = False) -> dict:
    """One corpus problem: checks, then interleaved timings of everything that checked
    (``fp8``: the plain conv and the fp8 comparison instead of the fused orders;
    ``fused_only``: the fused orders without the plain conv)."""
    from models import replay_of

    import cute_conv
    from cute_conv.reference import conv2d_reference

    problem, geom, x, flt, config, fused_config = problem_operands(p)
    num_sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    row: dict = {
        "key": p["key"], "split": p["split"], "tags": p["tags"], "model": p["model"],
        "gflop": p["gflop"], "config": _tile(config), "fused_config": _tile(fused_config),
        "plan": _plan(config, False), "fused_plan": _plan(fused_config, True),
        "checks": {}, "errors": {},
    }  # fmt: skip
    ref = conv2d_reference(x, flt, **geom)
    x_cl, w_cl = x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2)  # channels_last NCHW views
    cudnn_conv = cudnn_conv2d(x_cl, w_cl, problem)
    if not pads_symmetrically(problem):
        row["cudnn_note"] = "asymmetric padding: F.pad + F.conv2d"
    fns: dict[str, Callable[[], object]] = {}

    out = torch.full(problem.output_shape, float("nan"), dtype=x.dtype, device="cuda")
    plain = lambda: cute_conv.conv2d_fprop(x, flt, out=out, config=config, **geom)  # noqa: E731
    if not fused_only and _checked(row, "plain", plain, out, ref):
        fns |= {"ours_ms": plain, "cudnn_ms": cudnn_conv}
        fns |= {"ours_graph_ms": replay_of(plain), "cudnn_graph_ms": replay_of(cudnn_conv)}

    if fp8:
        from bench_fp8 import fp8_comparison

        fns |= fp8_comparison(row, problem, geom, x, flt, cudnn_frontend is not None, num_sms)
        if "fp8_ms" in fns:
            fns["fp8_graph_ms"] = replay_of(fns["fp8_ms"])
        del ref
        row.update(time_interleaved(fns))
        return row
    bias = torch.randn(p["K"], device="cuda", dtype=x.dtype)
    res = torch.randn(problem.output_shape, device="cuda").to(x.dtype)
    fused_refs = {
        "after_activation": torch.relu(ref + bias.float()) + res.float(),
        "before_activation": torch.relu(ref + bias.float() + res.float()),
    }
    for order, name in zip(ORDERS, ("after", "before"), strict=True):
        fused_out = torch.full_like(res, float("nan"))

        def fused(order=order, fused_out=fused_out):
            return cute_conv.conv2d_fprop_with_residual(
                x, flt, res, bias=bias, activation="relu", residual_order=order,
                out=fused_out, config=fused_config, **geom,
            )  # fmt: skip

        if _checked(row, name, fused, fused_out, fused_refs[order]):
            fns[f"{name}_ms"] = fused
            fns[f"{name}_graph_ms"] = replay_of(fused)
        if cudnn_frontend is not None:
            fe_out = torch.full_like(res, float("nan"))
            try:
                graph = FrontendGraph(
                    cudnn_frontend,
                    problem,
                    order,
                    x_cl,
                    w_cl,
                    bias,
                    res.permute(0, 3, 1, 2),
                    fe_out.permute(0, 3, 1, 2),
                )
                screen = best_frontend_plan(graph, fe_out, fused_refs[order])
            except Exception as e:  # noqa: BLE001 - an unsupported graph is a result, not a crash
                row["errors"][f"fe_{name}"] = f"{type(e).__name__}: {e}"[:300]
                continue
            row[f"fe_{name}_screen"] = screen
            if screen["plan"] is not None:
                fns[f"fe_{name}_ms"] = graph
                try:
                    fns[f"fe_{name}_graph_ms"] = graph.replay()
                except Exception as e:  # noqa: BLE001 - a plan that cannot be captured
                    row["errors"][f"fe_{name}_graph"] = f"{type(e).__name__}: {e}"[:300]
    del ref, fused_refs
    row.update(time_interleaved(fns))
    return row


def _checked(row: dict, name: str, fn: Callable[[], object], out, ref) -> bool:
    """Run ``fn`` once into the NaN-poisoned ``out`` and record its check against ``ref``."""
    from cute_conv.testing import compare_to_reference

    try:
        fn()
    except Exception as e:  # noqa: BLE001 - recorded, the other comparisons still run
        row["errors"][name] = f"{type(e).__name__}: {e}"[:300]
        return False
    check = compare_to_reference(out, ref)
    row["checks"][name] = {"ok": check.ok, "rel_err": check.rel_err}
    return check.ok


def _tile(config) -> str:
    """The config's tile, cluster and the choices that set it apart (gathered, `` gathered
    packed`` with packed taps, stream-K, a fixed A/B stage count, halo tiles: `` halo`` for
    whole rows, `` halo/72`` for a pitched halo 72 columns wide; rows measured before this
    label existed lack it); for the CUDA-core
    kernels, ``gemv`` and its shape (e.g. ``gemv 8-wide, 1 row x 2``) or ``direct`` and its
    output pixels per thread (e.g. ``direct 4 px``)."""
    import cute_conv

    if isinstance(config, cute_conv.PointwiseGemvConfig):
        return (
            f"gemv {config.vector}-wide, {config.rows} row"
            f"{'s' if config.rows > 1 else ''} x {config.channels_per_warp}"
        )
    if isinstance(config, cute_conv.GroupedDirectConfig):
        return f"direct {config.pixels} px"
    gathered = (" gathered packed" if config.pack_taps else " gathered") if config.gather else ""
    halo = ""
    if config.tile_w:
        halo = f" halo/{config.halo_w}" if config.halo_w else " halo"
    stream_k = ""
    if config.stream_k:
        stream_k = f" stream-K/{config.stream_k_split}" if config.stream_k_split else " stream-K"
    stages = f" {config.stages} stages" if config.stages else ""
    return (
        f"{config.tile_m}x{config.tile_n} {config.cluster_m}x{config.cluster_n}"
        f"{gathered}{halo}{stream_k}{stages}"
    )


def _plan(config, has_residual: bool) -> str:
    """The SM90 kernel plan a bf16 call of ``config`` compiles (``Conv2dConfig.plan``): its
    A/B ring's stages, output buffers and C buffers, e.g. ``ring 5, out 2x32``; ``CUDA
    cores`` for the CUDA-core kernels, which have none."""
    import cutlass

    import cute_conv

    if isinstance(config, (cute_conv.PointwiseGemvConfig, cute_conv.GroupedDirectConfig)):
        return "CUDA cores"

    plan = config.plan(cutlass.BFloat16, cutlass.BFloat16, has_residual)
    source = f", C {plan.source_stages}" if plan.source_stages else ""
    return f"ring {plan.ab_stages}, out {plan.epi_stages}x{plan.epi_n}{source}"


def _save_runs(runs: list[dict], path: Path) -> None:
    """Write ``runs`` into the results file at its end, replacing their earlier copies (by
    ``run_id``; a run given twice keeps its last copy)."""
    data = json.loads(path.read_text()) if path.exists() else {"runs": []}
    latest = {run["run_id"]: run for run in runs}
    data["runs"] = [r for r in data["runs"] if r["run_id"] not in latest] + list(latest.values())
    path.write_text(json.dumps(data, indent=1) + "\n")


def read_keys(spec: str) -> list[str]:
    """``--keys``: comma-separated keys, or ``@FILE``, a file of them one per line."""
    if spec.startswith("@"):
        return [k for k in Path(spec[1:]).read_text().split() if k]
    return [k for k in spec.split(",") if k]


def gpu_commands(problems: list[dict], args: argparse.Namespace, mode: dict, workdir: Path):
    """``--gpus``: the per-GPU parts of ``problems`` (sections of equal estimated time) as
    ``(results file, command)`` pairs, each command this script on its part's keys (a file
    in ``workdir``) with the measuring flags of ``args``."""
    flags = ["--max-seconds", str(args.max_seconds), "--corpus", str(args.corpus)]
    flags += [name for name, on in (("--fp8", args.fp8), ("--fused-only", args.fused_only),
                                    ("--no-frontend", args.no_frontend)) if on]  # fmt: skip
    jobs = []
    for i, part in enumerate(sections(problems, args.gpus, **mode)):
        keys, results = workdir / f"keys{i}.txt", workdir / f"results{i}.json"
        keys.write_text("\n".join(p["key"] for p in part) + "\n")
        command = [sys.executable, str(Path(__file__).resolve()), "--keys", f"@{keys}",
                   "--section", "0", "--sections", "1", "--results", str(results), *flags]  # fmt: skip
        jobs.append((results, command if part else None))
    return jobs


def run_on_gpus(problems: list[dict], args: argparse.Namespace, mode: dict) -> int:
    """Measure ``problems`` on ``args.gpus`` GPUs at once, a process each, and merge their
    runs into ``args.results``; returns the worst exit status."""
    import os
    import subprocess
    import tempfile

    if args.gpus > torch.cuda.device_count():
        raise ValueError(f"--gpus {args.gpus}: this machine has {torch.cuda.device_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        jobs = gpu_commands(problems, args, mode, Path(tmp))
        procs = [
            (results, subprocess.Popen(command, env={**os.environ, "CUDA_VISIBLE_DEVICES": str(i)}))
            for i, (results, command) in enumerate(jobs)
            if command is not None
        ]
        codes = [proc.wait() for _, proc in procs]
        merged = [results for results, _ in procs if results.exists()]
        if merged:
            merge_results(merged, args.results)
    print(f"bench_corpus: {len(procs)} GPU processes merged into {args.results}; exit {codes}")
    return max(codes, default=0)


def merge_results(sources: list[Path], path: Path) -> int:
    """Add the runs of the results files ``sources`` to ``path`` (runs already there, by
    ``run_id``, are replaced); returns how many runs were added or replaced."""
    missing = [str(source) for source in sources if not source.exists()]
    if missing:
        raise FileNotFoundError(f"--merge: {', '.join(missing)} does not exist")
    runs = [run for source in sources for run in json.loads(source.read_text())["runs"]]
    _save_runs(runs, path)  # the results file read and written once
    return len(runs)


def run_benchmark(problems: list[dict], args: argparse.Namespace, label: str) -> int:
    start = time.perf_counter()
    torch.backends.cudnn.benchmark = True
    cudnn_frontend = None if args.no_frontend else _frontend()
    if cudnn_frontend is None:
        why = "--no-frontend" if args.no_frontend else "`import cudnn` failed (not installed)"
        print(f"bench_corpus: cuDNN frontend columns skipped: {why}", flush=True)
    props = torch.cuda.get_device_properties(0)
    run = {
        "run_id": datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ"),
        "selection": label,
        "device": props.name,
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "cudnn_frontend": None if cudnn_frontend is None else _frontend_version(cudnn_frontend),
        "rounds": ROUNDS,
        "gemm_tflops": gemm_ceiling_tflops(),
        "max_seconds": args.max_seconds,
        "rows": [],
        "not_run": [],
    }
    done = _done_keys(args.results, run["device"]) if args.skip_done else set()
    for p in problems:
        if p["key"] in done:
            continue
        elapsed = time.perf_counter() - start
        estimate = estimate_seconds(
            p, frontend=cudnn_frontend is not None, fp8=args.fp8, fused_only=args.fused_only
        )
        if elapsed + estimate > args.max_seconds:
            run["not_run"].append(p["key"])
            continue
        t0 = time.perf_counter()
        try:
            row = bench_problem(p, cudnn_frontend, fp8=args.fp8, fused_only=args.fused_only)
        except Exception as e:  # noqa: BLE001 - recorded; out of memory is not the end
            row = {k: p[k] for k in ("key", "split", "tags", "model", "gflop")}
            row |= {"checks": {}, "errors": {"problem": f"{type(e).__name__}: {e}"[:300]}}
            if "CUDA error" not in str(e):
                torch.cuda.empty_cache()
        row["seconds"] = round(time.perf_counter() - t0, 2)
        run["rows"].append(row)
        run["seconds"] = round(time.perf_counter() - start, 1)
        _save_runs([run], args.results)
        print(_summary(row), flush=True)
        if "CUDA error" in row["errors"].get("problem", ""):
            run["not_run"] += [q["key"] for q in problems[problems.index(p) + 1 :]]
            print("bench_corpus: stopping after a CUDA error (the context is unusable)")
            break
    _save_runs([run], args.results)
    print(
        f"bench_corpus: {len(run['rows'])} problems measured in {time.perf_counter() - start:.0f} s"
        f"; {len(run['not_run'])} not run (--max-seconds {args.max_seconds:g}); "
        f"results in {args.results}"
    )
    ours = ("problem", *(c for c in COMPARISONS))  # the frontend's own failures are results
    failed = [
        r["key"]
        for r in run["rows"]
        if any(n in ours for n in r["errors"]) or not all(c["ok"] for c in r["checks"].values())
    ]
    return 2 if failed else 0


def _frontend_version(cudnn) -> str:
    backend = getattr(cudnn, "backend_version_string", lambda: "?")()
    return f"{getattr(cudnn, '__version__', '?')} (backend {backend})"


def stale_keys(results: dict, device: str, before: str) -> set[str]:
    """The problems whose latest row on ``device`` comes from a run before ``before`` (run
    ids are UTC stamps, ``20261125T053836.185610Z``: a prefix such as ``20261125T05``
    compares as a time): the rows a kernel or rule change since then left stale."""
    latest: dict[str, str] = {}
    for run in results["runs"]:
        if run["device"] == device:
            for row in run["rows"]:
                latest[row["key"]] = max(latest.get(row["key"], ""), run["run_id"])
    return {key for key, run_id in latest.items() if run_id < before}


def measured_keys(results: dict, device: str) -> set[str]:
    """The problems ``device`` has rows of in ``results``."""
    return {row["key"] for run in results["runs"] if run["device"] == device for row in run["rows"]}


def keys_measured_on(results: dict, other: str, device: str) -> set[str]:
    """The problems ``other`` (a device) has rows of and ``device`` has none of: what makes
    the two devices' reports cover the same problems."""
    return measured_keys(results, other) - measured_keys(results, device)


def config_changed_keys(results: dict, device: str, problems: list[dict], num_sms: int) -> set[str]:
    """The ``problems`` whose latest row on ``device`` was measured with another plain or
    fused config (``_tile``) than the heuristic now gives on ``num_sms`` SMs, or, for rows
    that record them, another kernel plan of it (``_plan``: the ring's stages, the output and
    C buffers): the rows a rule or plan change since moved. Problems without a row there are
    left out; rows measured before plans were recorded are compared by config alone."""
    from cute_conv.untuned import heuristic_config

    latest = {row["key"]: row for row in latest_rows(results, device)[1]} if results["runs"] else {}
    changed = set()
    for p in problems:
        row = latest.get(p["key"])
        if row is None:
            continue
        problem = problem_shape(p)
        config = heuristic_config(problem, num_sms)
        fused_config = heuristic_config(problem, num_sms, has_residual=True)
        now = {
            "config": _tile(config), "fused_config": _tile(fused_config),
            "plan": _plan(config, False), "fused_plan": _plan(fused_config, True),
        }  # fmt: skip
        if any(row[field] != label for field, label in now.items() if field in row):
            changed.add(p["key"])
    return changed


def _done_keys(path: Path, device: str) -> set[str]:
    if not path.exists():
        return set()
    return measured_keys(json.loads(path.read_text()), device)


def _summary(row: dict) -> str:
    parts = [f"{row['key']:>60}"]
    for name in COMPARISONS:
        value = ratio(row, name)
        if value is not None:
            parts.append(f"{name} {value:.2f}x")
    if row.get("errors"):
        parts.append(f"errors: {sorted(row['errors'])}")
    failed = [n for n, c in row.get("checks", {}).items() if not c["ok"]]
    if failed:
        parts.append(f"FAILED checks: {failed}")
    return " | ".join(parts)


# ---- the report (no GPU) ----


def latest_rows(
    results: dict, device: str | None = None
) -> tuple[str, list[dict], dict[str, float]]:
    """The device reported (``device``, else the latest run's), its rows (the latest row per
    problem, with the comparisons it did not time carried over from the problem's earlier
    rows: each ratio's two times still come from one run) and each row's run's GEMM ceiling
    (TFLOP/s) by key."""
    runs = results["runs"]
    if not runs:
        raise ValueError("the results file holds no runs")
    device = device or runs[-1]["device"]
    rows: dict[str, dict] = {}
    ceilings: dict[str, float] = {}
    for run in runs:
        if run["device"] != device:
            continue
        for row in run["rows"]:
            earlier = rows.get(row["key"])
            if earlier is not None:
                row = dict(row)
                for comparison in COMPARISONS:
                    if ratio(row, comparison) is None and ratio(earlier, comparison) is not None:
                        # kept apart from the rerun's own times, which other comparisons read
                        row["carried"] = row.get("carried", {}) | {
                            comparison: _times(earlier, comparison)
                        }
            rows[row["key"]] = row
            ceilings[row["key"]] = run.get("gemm_tflops")
    return device, list(rows.values()), ceilings


def _times(row: dict, comparison: str) -> dict[str, float | None]:
    """The times ``comparison`` reads, ours first: the row's own, or those ``latest_rows``
    carried over from an earlier row of the problem."""
    if comparison in row.get("carried", {}):
        return row["carried"][comparison]
    ours, base, _ = COMPARISONS[comparison]
    return {key: row.get(key) for key in (ours, *((base,) if isinstance(base, str) else base))}


def ours_ms(row: dict, comparison: str) -> float | None:
    """Our time of ``comparison``, None where it is missing."""
    return next(iter(_times(row, comparison).values()))


def baseline_ms(row: dict, comparison: str) -> float | None:
    """The baseline's time of ``comparison`` (the least of its times), None where one is
    missing."""
    times = list(_times(row, comparison).values())[1:]
    return min(times) if all(times) else None


def ratio(row: dict, comparison: str) -> float | None:
    """Baseline time over ours (> 1: cute_conv is faster), None where either is missing."""
    ours, base = ours_ms(row, comparison), baseline_ms(row, comparison)
    if ours and base:
        return base / ours
    return None


def weighted_geomean(values: list[float], weights: list[float]) -> float:
    total = sum(weights)
    if not values or total <= 0:
        return float("nan")
    return math.exp(sum(w * math.log(v) for v, w in zip(values, weights, strict=True)) / total)


def summarize(rows: list[dict], comparison: str) -> tuple[int, float, float]:
    """(problems with a ratio, geomean, flop-weighted geomean) of ``comparison``."""
    pairs = [(ratio(r, comparison), r["gflop"]) for r in rows]
    pairs = [(v, w) for v, w in pairs if v is not None]
    values = [v for v, _ in pairs]
    return len(values), geomean(values), weighted_geomean(values, [w for _, w in pairs])


def _cell(n: int, g: float, fw: float) -> str:
    return "-" if n == 0 else f"{g:.3f}x / {fw:.3f}x ({n})"


def below_floor(rows: list[dict], comparison: str) -> str:
    """How many of ``rows`` fall under ``comparison``'s floor (``FLOORS``), and the least
    ratio; "-" for a comparison without one or rows without its ratio."""
    values = [v for v in (ratio(r, comparison) for r in rows) if v is not None]
    if comparison not in FLOORS or not values:
        return "-"
    floor = FLOORS[comparison]
    return f"{sum(v < floor for v in values)} below {floor:.2f}x (least {min(values):.2f}x)"


def render(
    results: dict,
    report: Path,
    chart: Path,
    device: str | None = None,
    results_name: str = RESULTS_PATH.name,
    render_flags: str = "--render",
) -> str:
    """Write the Markdown report and the chart; returns the report's text."""
    device, rows, ceilings = latest_rows(results, device)
    comps = [c for c in COMPARISONS if any(ratio(r, c) is not None for r in rows)]
    runs = [r for r in results["runs"] if r["device"] == device]
    frontends = sorted({r["cudnn_frontend"] for r in runs if r.get("cudnn_frontend")}) or ["-"]
    lines = [
        "# Corpus benchmark" + (" (fp8)" if "fp8" in comps else ""),
        "",
        f"- device: {device}; {len(rows)} problems measured in {len(runs)} run(s); "
        f"torch {', '.join(sorted({r['torch'] for r in runs}))}, cuDNN "
        f"{', '.join(sorted({str(r['cudnn']) for r in runs}))}, cuDNN frontend "
        f"{', '.join(frontends)}",
        "- each ratio is the baseline's time over ours (> 1: cute_conv faster), both timed in one "
        "process; cells read `geomean / flop-weighted geomean (problems)`. Generated by "
        f"`python benchmarks/bench_corpus.py {render_flags}` from {results_name}.",
    ]
    if not {"after", "before", "fp8_frontend"} & set(comps):
        lines.append("- no cuDNN frontend results: its columns are empty")
    # The splits the rows hold (a corpus held out whole has no train part to report).
    splits = [s for s in ("train", "heldout") if any(r["split"] == s for r in rows)]
    lines += [
        "", "## Overall", "", "| comparison | split | result | under the target's floor |",
        "|---|---|---|---|",
    ]  # fmt: skip
    for c in comps:
        for split in splits + ["all"] if len(splits) > 1 else splits:
            part = [r for r in rows if split in ("all", r["split"])]
            lines.append(
                f"| {COMPARISONS[c][2]} | {split} | {_cell(*summarize(part, c))} "
                f"| {below_floor(part, c)} |"
            )
    header = " | ".join(f"{COMPARISONS[c][2]}, {s}" for c in comps for s in splits)
    lines += [
        "", "## Per class", "", f"| class | {header} |",
        "|---|" + "---|" * (len(splits) * len(comps)),
    ]  # fmt: skip
    for tag in TAGS:
        tagged = [r for r in rows if tag in r["tags"]]
        if not tagged:
            continue
        cells = [
            _cell(*summarize([r for r in tagged if r["split"] == s], c))
            for c in comps
            for s in splits
        ]
        lines.append(f"| {tag} | " + " | ".join(cells) + " |")
    for c in comps:
        worst = sorted((r for r in rows if ratio(r, c) is not None), key=lambda r: ratio(r, c))
        lines += [
            "", f"## Worst ten: {COMPARISONS[c][2]}", "",
            "| problem | model | tags | GFLOP | ours ms | baseline ms | ratio |",
            "|---|---|---|---|---|---|---|",
        ]  # fmt: skip
        for r in worst[:10]:
            lines.append(
                f"| {r['key']} | {r['model']} | {', '.join(r['tags'])} | {r['gflop']:g} "
                f"| {ours_ms(r, c):.4f} | {baseline_ms(r, c):.4f} | {ratio(r, c):.2f}x |"
            )
    lines += _latency_and_ceiling(rows, ceilings)
    lines += _failures(rows)
    text = "\n".join(lines) + f"\n\n![ratio vs GFLOP]({chart.name})\n"
    report.write_text(text)
    write_chart(rows, comps, chart, device)
    return text


def _latency_and_ceiling(rows: list[dict], ceilings: dict[str, float]) -> list[str]:
    cudnn_ms = {r["key"]: baseline_ms(r, "plain") for r in rows}
    bound = [r for r in rows if cudnn_ms[r["key"]] and cudnn_ms[r["key"]] < LATENCY_BOUND_MS]
    n, g, fw = summarize(bound, "plain")
    lines = [
        "",
        "## Latency-bound and large problems",
        "",
        f"- latency-bound (cuDNN plain conv under {LATENCY_BOUND_MS * 1000:g} us): "
        f"{len(bound)} of {len(rows)} problems; plain conv vs cuDNN on them: {_cell(n, g, fw)}",
    ]
    n, g, fw = summarize(bound, "plain_graph")
    if n:
        lines.append(f"- the same problems replayed from CUDA graphs: {_cell(n, g, fw)}")
    shares = [
        r["gflop"] / ours_ms(r, "plain") / ceilings[r["key"]]  # GFLOP/ms = TFLOP/s
        for r in rows
        if "large" in r["tags"] and ours_ms(r, "plain") and ceilings.get(r["key"])
    ]
    if shares:
        lines.append(
            f"- large problems (GEMM M >= 32k, K >= 1152): our plain conv at "
            f"{100 * statistics.median(shares):.0f}% of the bf16 GEMM rate (median of "
            f"{len(shares)}; min {100 * min(shares):.0f}%, max {100 * max(shares):.0f}%; "
            "torch.matmul 8192^3 measured in each run)"
        )
    return lines


def _failures(rows: list[dict]) -> list[str]:
    failed = [
        (r["key"], n, f"rel_err {c['rel_err']:.1e}")
        for r in rows
        for n, c in r.get("checks", {}).items()
        if not c["ok"]
    ] + [(r["key"], n, e) for r in rows for n, e in r.get("errors", {}).items()]
    if not failed:
        return ["", "All checks passed; no errors."]
    lines = ["", "## Failed checks and errors", "", "| problem | what | detail |", "|---|---|---|"]
    lines += [f"| {k} | {n} | {d.replace('|', '/')} |" for k, n, d in failed]
    return lines


# The class a point is coloured by: its first tag in this order.
_CHART_CLASSES = ("stem", "1x1", "3x3 s1", "strided", "big kernel", "dilated")


def write_chart(rows: list[dict], comps: list[str], path: Path, device: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig, axes = plt.subplots(1, max(1, len(comps)), figsize=(6 * max(1, len(comps)), 4.5),
                             squeeze=False)  # fmt: skip
    for ax, c in zip(axes[0], comps, strict=False):
        by_class: dict[str, list[tuple[float, float]]] = {}
        for r in rows:
            value = ratio(r, c)
            if value is not None:
                cls = next((t for t in _CHART_CLASSES if t in r["tags"]), "other")
                by_class.setdefault(cls, []).append((r["gflop"], value))
        for cls in (*_CHART_CLASSES, "other"):
            if cls in by_class:
                xs, ys = zip(*by_class[cls], strict=True)
                ax.scatter(xs, ys, s=12, label=cls, alpha=0.7)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("GFLOP")
        ax.set_ylabel("speedup of cute_conv (x)")
        ax.set_title(COMPARISONS[c][2], fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle(f"cute_conv on the corpus ({device})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- command line ----


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--section", type=int,
        help="run this section (0-based); needed where the selection has several",
    )  # fmt: skip
    parser.add_argument(
        "--sections", type=int,
        help=f"split the selection into this many sections (default: each under "
        f"~{SECTION_SECONDS} s estimated)",
    )  # fmt: skip
    parser.add_argument("--split", choices=("train", "heldout", "all"), default="all")
    parser.add_argument("--tag", action="append", default=[], help="only problems with this tag")
    parser.add_argument("--keys", help="only these problems (comma-separated corpus keys, or "
                        "@FILE: a file of them, one per line)")  # fmt: skip
    parser.add_argument("--max-seconds", type=float, default=450.0, help="stop before overrunning")
    parser.add_argument("--no-frontend", action="store_true", help="skip the cuDNN frontend")
    parser.add_argument("--fp8", action="store_true",
                        help="fp8: ours fp8 vs ours bf16, cuDNN bf16 and the frontend's fp8 "
                        "graph (results, report and chart in their own *fp8* files)")  # fmt: skip
    parser.add_argument("--fused-only", action="store_true",
                        help="the fused orders alone; the report keeps each problem's plain "
                        "columns from its latest row that has them")  # fmt: skip
    parser.add_argument("--skip-done", action="store_true",
                        help="skip problems this device already has results for")  # fmt: skip
    parser.add_argument("--measured-before", metavar="RUN_ID",
                        help="only problems whose latest results on this device (or --device) "
                        "come from a run before RUN_ID, a UTC stamp or its prefix "
                        "(20261125T05): re-measure the stale rows")  # fmt: skip
    parser.add_argument("--config-changed", action="store_true",
                        help="only problems whose latest results on this device (or --device) "
                        "were measured with another plain or fused config (or, where rows "
                        "record it, kernel plan) than the heuristic gives now")  # fmt: skip
    parser.add_argument("--measured-on", metavar="DEVICE",
                        help="only problems that DEVICE has results for and this device (or "
                        "--device) has none")  # fmt: skip
    parser.add_argument("--gpus", type=int, default=1,
                        help="split the section between this many GPUs, a process each "
                        "(CUDA_VISIBLE_DEVICES), each with its own results file, merged "
                        "into --results at the end")  # fmt: skip
    parser.add_argument("--plan", action="store_true", help="print the sections, measure nothing")
    parser.add_argument("--render", action="store_true", help="write the report from the results")
    parser.add_argument("--device", help="with --render: the device to report (default: latest); "
                        "with --measured-before / --config-changed: whose rows (default: this "
                        "GPU)")  # fmt: skip
    parser.add_argument("--merge", type=Path, nargs="+", metavar="FILE",
                        help="add the runs of these results files (one process per GPU, each "
                        "with its own --results) to --results, then exit")  # fmt: skip
    parser.add_argument("--corpus", type=Path, default=CORPUS_PATH)
    parser.add_argument("--results", type=Path)
    parser.add_argument("--report", type=Path)
    parser.add_argument("--chart", type=Path)
    args = parser.parse_args(argv)
    if args.fp8 and args.fused_only:
        parser.error("--fused-only measures the bf16 fused orders, which --fp8 runs have none of")
    defaults = (
        (FP8_RESULTS_PATH, FP8_REPORT_PATH, FP8_CHART_PATH)
        if args.fp8
        else (RESULTS_PATH, REPORT_PATH, CHART_PATH)
    )
    if args.render and args.results not in (None, defaults[0]) and not (args.report and args.chart):
        # The default report and chart belong to the default results: another file's render
        # would overwrite them.
        parser.error("--render of another --results needs its own --report and --chart")
    args.results = args.results or defaults[0]
    args.report = args.report or defaults[1]
    args.chart = args.chart or defaults[2]

    if args.merge:
        added = merge_results(args.merge, args.results)
        print(f"bench_corpus: {added} run(s) added to {args.results}")
        return 0
    if args.render:
        if not args.results.exists():
            print(f"bench_corpus: no results to render: {args.results} does not exist")
            return 1
        results = json.loads(args.results.read_text())
        flags = "--fp8 --render" if args.fp8 else "--render"
        print(render(results, args.report, args.chart, args.device, args.results.name, flags))
        return 0
    chosen = select(load_corpus(args.corpus), split=args.split, tags=args.tag)
    if args.keys:
        keys = set(read_keys(args.keys))
        unknown = keys - {p["key"] for p in chosen}
        if unknown:
            parser.error(f"--keys: not in the selection: {', '.join(sorted(unknown))}")
        chosen = [p for p in chosen if p["key"] in keys]
    if args.measured_before or args.config_changed or args.measured_on:
        if args.fp8 and args.config_changed:
            parser.error("--config-changed compares the bf16 plain and fused configs: not --fp8")
        device = args.device or (
            torch.cuda.get_device_name() if torch.cuda.is_available() else None
        )
        if device is None:
            parser.error("--measured-before / --config-changed / --measured-on: which device's "
                         "rows? pass --device (no GPU here)")  # fmt: skip
        results = json.loads(args.results.read_text()) if args.results.exists() else {"runs": []}
        if args.measured_on:
            missing = keys_measured_on(results, args.measured_on, device)
            chosen = [p for p in chosen if p["key"] in missing]
        if args.measured_before:
            stale = stale_keys(results, device, args.measured_before)
            chosen = [p for p in chosen if p["key"] in stale]
        if args.config_changed:
            # Without a GPU: the SM count of an H100 SXM and an H200.
            gpu = torch.cuda.is_available()
            sms = torch.cuda.get_device_properties(0).multi_processor_count if gpu else 132
            changed = config_changed_keys(results, device, chosen, sms)
            chosen = [p for p in chosen if p["key"] in changed]
    frontend = not args.no_frontend
    mode = dict(frontend=frontend, fp8=args.fp8, fused_only=args.fused_only)
    parts = sections(chosen, args.sections, **mode)
    if args.plan:
        for i, part in enumerate(parts):
            est = sum(estimate_seconds(p, **mode) for p in part)
            print(f"section {i}: {len(part)} problems, ~{est:.0f} s estimated")
            print("  --keys " + ",".join(p["key"] for p in part))
        return 0
    if args.section is None and len(parts) == 1:
        args.section = 0  # one section (a few named problems, say): nothing to choose
    if args.section is None:
        parser.error(f"--section K is required (0..{len(parts) - 1}; --plan lists them)")
    if not 0 <= args.section < len(parts):
        parser.error(f"--section {args.section} is out of range 0..{len(parts) - 1}")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("bench_corpus: needs an H100/H200 (compute capability 9.0); nothing was measured.")
        return 1
    if args.gpus > 1:
        return run_on_gpus(parts[args.section], args, mode)
    label = f"split={args.split} tags={args.tag} section {args.section}/{len(parts)}"
    label += " fp8" if args.fp8 else ""
    label += " fused-only" if args.fused_only else ""
    return run_benchmark(parts[args.section], args, label)


if __name__ == "__main__":
    raise SystemExit(main())
