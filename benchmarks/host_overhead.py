"""Host time per cached call: the public function, its torch.library op, and cuDNN's F.conv2d.

    python benchmarks/host_overhead.py      # on an H100/H200

A tiny conv (1x8x8x64, 64 3x3 filters, bf16), so that the host, not the GPU, sets the pace:
each row is the median over ``bench.HOST_LOOPS`` loops of ``bench.HOST_CALLS_PER_LOOP`` calls
(one synchronize per loop), as ``bench.py`` measures its host overhead. Prints a Markdown
table. The public function's eager path checks ``torch.compiler.is_compiling()`` and grad mode
first; the op goes through torch's dispatcher, which the eager path skips.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from bench import HOST_CALLS_PER_LOOP, HOST_LOOPS, _host_us_per_call

import cute_conv
from cute_conv.testing import random_conv_inputs


def main() -> None:
    x, flt = random_conv_inputs(1, 8, 8, 64, 64, 3, 3)
    out = torch.empty(1, 8, 8, 64, dtype=x.dtype, device="cuda")
    flt_grad = flt.detach().clone().requires_grad_()
    x_nchw, flt_nchw = x.permute(0, 3, 1, 2), flt.permute(0, 3, 1, 2)
    op = torch.ops.cute_conv.conv2d_fprop
    conv = cute_conv.conv2d_fprop

    def no_grad_call() -> None:
        with torch.no_grad():
            conv(x, flt, padding=1)

    calls = {
        "cute_conv.conv2d_fprop(x, w, padding=1)": lambda: conv(x, flt, padding=1),
        "... out=out": lambda: conv(x, flt, padding=1, out=out),
        "... under torch.no_grad()": no_grad_call,
        "torch.ops.cute_conv.conv2d_fprop(...)": lambda: op(
            x, flt, None, None, [1, 1], [1, 1, 1, 1], [1, 1], 1.0, None, None, None
        ),
        "... filter requires grad (forward, autograd)": lambda: conv(x, flt_grad, padding=1),
        "F.conv2d (cuDNN, channels_last)": lambda: F.conv2d(x_nchw, flt_nchw, padding=1),
    }
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"host us per cached call, median of {HOST_LOOPS} loops of {HOST_CALLS_PER_LOOP}:\n")
    print("| call | us |\n|---|---|")
    for name, call in calls.items():
        print(f"| {name} | {_host_us_per_call(call):.1f} |")


if __name__ == "__main__":
    main()
