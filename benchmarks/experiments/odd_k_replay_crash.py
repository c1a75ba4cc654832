"""An open crash (session 53): an illegal memory access while replaying, from a CUDA graph, a
plain 1x1 conv whose output rows are stored by threads (K=58), after other graphs were
captured and replayed in the same process. Each variant alone (eager, graphed, with and
without programmatic launch, 300 replays, do_bench with its L2 flush) runs clean, and its
output passes the float32 check with guard bands after it untouched.

    CUDA_LAUNCH_BLOCKING=1 python benchmarks/experiments/odd_k_replay_crash.py [--no-cudnn]

On an H200 (torch 2.11, session 53) a scratch probe doing this sequence stopped twice at
"replaying k58-128x64" with cudaErrorIllegalAddress (once under CUDA_LAUNCH_BLOCKING=1). This
script repeats the probe's sequence; it was written after the session's device time ran out
and has not itself run on a GPU. --no-cudnn would say whether cuDNN's graphs are needed for it.
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import do_bench  # noqa: E402
from models import replay_of  # noqa: E402

import cute_conv  # noqa: E402
from cute_conv import Conv2dConfig  # noqa: E402
from cute_conv.reference import conv2d_reference  # noqa: E402
from cute_conv.testing import compare_to_reference, random_conv_inputs  # noqa: E402

torch.backends.cudnn.benchmark = True
with_cudnn = "--no-cudnn" not in sys.argv
graphs = {}
K58_CONFIGS = {
    "heur": None,
    "128x64": Conv2dConfig(tile_n=64),
    "256x64": Conv2dConfig(tile_m=256, tile_n=64),
    "64x64": Conv2dConfig(tile_m=64, tile_n=64),
    "128x64-2x1": Conv2dConfig(tile_n=64, cluster_m=2),
}
# The sequence that crashed: every graph captured first, then each replayed by do_bench.
for k, configs in ((56, {"heur": None}), (58, K58_CONFIGS), (64, {"heur": None})):
    x, flt = random_conv_inputs(8, 56, 56, 24, k, 1, 1)
    ref = conv2d_reference(x, flt)
    for name, config in configs.items():
        out = torch.full(ref.shape, float("nan"), dtype=x.dtype, device="cuda")
        cute_conv.conv2d_fprop(x, flt, out=out, config=config)
        torch.cuda.synchronize()
        assert compare_to_reference(out, ref).ok

        def call(x=x, flt=flt, out=out, config=config):
            cute_conv.conv2d_fprop(x, flt, out=out, config=config)

        graphs[f"k{k}-{name}"] = replay_of(call)
    if with_cudnn:
        xc = x.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        wc = flt.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        graphs[f"k{k}-cudnn"] = replay_of(lambda xc=xc, wc=wc: F.conv2d(xc, wc))
for name, replay in graphs.items():
    print("replaying", name, flush=True)
    do_bench(replay)
    torch.cuda.synchronize()
print("all replays ran", flush=True)
