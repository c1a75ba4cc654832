"""Host time per cached call: the public function, its torch.library op, and cuDNN's F.conv2d.

    python benchmarks/host_overhead.py                          # on an H100/H200
    python benchmarks/host_overhead.py --base-dir OLD_CHECKOUT  # also an older version's calls

A tiny conv (1x8x8x64, 64 3x3 filters, bf16; two fp8 rows on its e4m3 quantization), so
that the host, not the GPU, sets the pace: each row is the median over ``bench.HOST_LOOPS``
loops of ``bench.HOST_CALLS_PER_LOOP`` calls (one synchronize per loop), as ``bench.py``
measures its host overhead; the rows are measured in ``--rounds`` rounds, the order reversed
every other round, and the median round reported.
With ``--base-dir`` (a tree holding an older checkout's ``cute_conv/`` and ``kernels/``) the
old version is imported beside this one (``compare_versions.import_base``) and its public calls
are rows too. The public function's eager path checks ``torch.compiler.is_compiling()`` and
grad mode first; the op goes through torch's dispatcher, which the eager path skips.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from bench import _host_us_per_call
from compare_versions import import_base, materialize_base

import cute_conv
from cute_conv.testing import random_conv_inputs
from cute_conv.untuned import heuristic_config

# stride, padding and dilation as nn.Conv2d's modules hold and pass them.
TUPLES = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1))


def calls(base_dir: Path | None, workdir: Path) -> dict[str, Callable[[], object]]:
    x, flt = random_conv_inputs(1, 8, 8, 64, 64, 3, 3)
    out = torch.empty(1, 8, 8, 64, dtype=x.dtype, device="cuda")
    flt_grad = flt.detach().clone().requires_grad_()
    x_nchw, flt_nchw = x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2)
    op = torch.ops.cute_conv.conv2d_fprop
    conv = cute_conv.conv2d_fprop

    (qx, x_scale), (qf, w_scale) = cute_conv.quantize_fp8(x), cute_conv.quantize_fp8(flt)
    problem = cute_conv.Conv2dProblemShape.from_shapes(x.shape, flt.shape, padding=1)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    fp8_config = heuristic_config(problem, sms, element_bytes=1)

    def fp8_call(**kwargs) -> None:
        conv(qx, qf, padding=1, out=out, x_scale=x_scale, w_scale=w_scale, **kwargs)

    def no_grad_call() -> None:
        with torch.no_grad():
            conv(x, flt, padding=1)

    rows = {
        "cute_conv.conv2d_fprop(x, w, padding=1)": lambda: conv(x, flt, padding=1),
        "... out=out": lambda: conv(x, flt, padding=1, out=out),
        "... under torch.no_grad()": no_grad_call,
        "... geometry as tuples (as nn.Conv2d passes it)": lambda: conv(x, flt, **TUPLES, out=out),
        "torch.ops.cute_conv.conv2d_fprop(...)": lambda: op(
            x, flt, None, None, None, None, None, [1, 1], [1, 1, 1, 1], [1, 1], 1.0, None, None,
            None,
        ),
        "... filter requires grad (forward, autograd)": lambda: conv(x, flt_grad, padding=1),
        "fp8: e4m3 x and w, per-tensor scales, out=out": fp8_call,
        "... config=heuristic_config(...) (as the fp8 corpus calls)": lambda: fp8_call(
            config=fp8_config
        ),
        "F.conv2d (cuDNN, channels_last)": lambda: F.conv2d(x_nchw, flt_nchw, padding=1),
    }
    if base_dir is not None:
        base_conv = import_base(materialize_base(workdir, tree=base_dir)).conv2d_fprop
        rows["base version: conv2d_fprop(x, w, padding=1)"] = lambda: base_conv(x, flt, padding=1)
        rows["base version: ... out=out"] = lambda: base_conv(x, flt, padding=1, out=out)
        rows["base version: ... geometry as tuples"] = lambda: base_conv(x, flt, **TUPLES, out=out)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-dir", type=Path, help="an older checkout's tree to compare")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        rows = calls(args.base_dir, Path(workdir))
        times: dict[str, list[float]] = {name: [] for name in rows}
        for round_index in range(args.rounds):
            order = list(rows) if round_index % 2 == 0 else list(reversed(rows))
            for name in order:
                times[name].append(_host_us_per_call(rows[name]))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"host us per cached call, median of {args.rounds} interleaved rounds:\n")
    print("| call | us |\n|---|---|")
    for name, samples in times.items():
        print(f"| {name} | {statistics.median(samples):.1f} |")


if __name__ == "__main__":
    main()
