"""Which few-channel dense convs run on the grouped kernel's CUDA-core direct form
(``GroupedDirectConv`` with one group, reading the KRSC filter as it is) instead of a
tensor-core kernel, and the checks of such a config against a call.

A stem of a few input channels and a few dozen output channels does little work per output
pixel (a 3x3 stride-2 of C=3 into K=32: 864 multiply-adds), yet the tensor-core path first
stages its activation (channel padding or an im2col unfold: a second launch) and then runs a
GEMM whose K is one or two k-blocks. The direct form reads the activation in place, a thread
per 8 output channels of a few adjacent output pixels. Per call on an H200
(``benchmarks/experiments/direct_dense_ab.py``, CUDA-graph replays, the filter staged
``[R, S, C, K]``; ``experiments/direct_dense_ab_H200.json``), on the corpus's 35 problems of
C <= 16, K a multiple of 8 and at most 2 GFLOP: the bounds below take the two train problems
where it won (a 3x3 stride-2 stem of C=3, K=32 at batch 8: 18.0 against 20.6 us; a 1x1 of
C=K=8 on 64x64 maps at batch 8: 6.9 against 7.4) and none of the 17 where it lost or tied.
Where it loses: many multiply-adds per pixel (a 7x7 of C=3 into K=64, 9,408: 26 against
15 us at batch 1), many in all (the 3x3 stride-2 stem at batch 32, 347 M: 47.9 against
47.5), and few output pixels, where one tensor-core tile is quicker (128 pixels of a 1x1,
C=12, K=48: 7.9 against 6.4). Any bounds in the train gaps (864 .. 3,456 multiply-adds per
pixel, 87 M .. 347 M in all, 128 .. 32,768 pixels) split the train part alike; these sit
near its wins. Judged on the 16 held-out problems: see ``benchmarks/NOTES.md``.

With the KRSC filter (a thread's 8 filter values 8 scalar loads instead of one 16-byte load)
the train stem at batch 8 ran 19.9 against 20.7 us. Calls with a residual (the corpus's
``relu(conv + b) + r``) take the same bounds since the kernel loads the source before its sums:
on the train rows 21.7 against the tensor cores' 23.2 us (the stem at batch 8) and 7.6 against
8.3 (the 1x1 of C=K=8 at batch 8); held out, 25.1 against 28.2 us summed over three rows
(``experiments/direct_dense_routed_residual_H200.json``).

K not a multiple of 8 (a VAE's 1x1 into 4 latent channels) takes the same bounds at 4, 2 or 1
output channels per thread (``output_vector``): the tensor-core path gathers such calls with
a tile of at least 32 output channels. On the corpus's two train rows (the 1x1 of C=K=4 on
64x64 and 128x128 maps at batch 8) it ran 6.7 and 7.2 us against the tensor cores' 7.7 and
12.0 (residual: 7.3 and 8.2 against 8.0 and 14.5); on the five held-out rows plain 6.3-12.7
against 6.5-12.7 (the 1x1 of C=13, K=5: 7.0 against 9.8), but three of the five residual
calls slower by 0.2-0.9 us (``experiments/direct_dense_odd_k_H200.json``).

Where the tensor-core path stages nothing (C of 8 or 16: whole 16-byte TMA rows) the launch
the rule saves is not there, and the direct form pays for its KRSC filter's scalar loads
more with every 8 output channels. On 24 fresh draws inside the bounds above that the tensor
cores run unstaged (``experiments/direct_fresh_problems.py``; H200, CUDA-graph replays,
``experiments/direct_unstaged_ab_H200.json``), the 19 train draws and the corpus's train
1x1 of C=K=8 at batch 8 put the direct form ahead only at K = 8 on 32,768+ output pixels
(11.9 against 15.7 us, 18.5 against 29.9, and 6.9 against 7.4); it lost every K >= 16
(up to 31.8 against 22.5 us at K=48) and K = 8 on 4,608-16,384 pixels. So unstaged convs
take the direct form only at ``DIRECT_UNSTAGED_MAX_K`` output channels on
``DIRECT_UNSTAGED_MIN_PIXELS`` output pixels or more. Judged on the 5 held-out draws, the
corpus's three held-out unstaged rows and two validation-corpus rows (whose loss, 11.0
against 6.7 us on a 1x1 of C=16, K=64, prompted the measurement): see
``benchmarks/NOTES.md``.

Where the tensor cores stage the conv, the train rows above stop at K=32, yet a 1x1 of C=4
may have K up to 256 within the bounds. On 24 fresh draws there (1x1s of C 3-7 or 9-15, K
48-272, ``direct_fresh_problems.py --staged``; H200, CUDA-graph replays,
``experiments/direct_staged_wide_k_ab_H200.json``) the bound on K fitted on the 10 train
draws (``experiments/direct_rule_fit.py``) is ``DIRECT_STAGED_MAX_K``: past it the direct
form lost plain on all 8 train draws (the 1x1 of C=4, K=80 at batch 32 on 64x64 maps: 18.6
against 14.8 us), at it won on both (C=5 at batch 4 on 224x224 maps: 18.8 against 32.1;
with a residual one of the two). On the train draws the time under the bound over the time
with none: plain 0.913x, ``relu(conv + b)`` 0.908x, with a residual 0.928x. Judged on the
13 held-out draws and the corpus: see ``benchmarks/NOTES.md``.
"""

from __future__ import annotations

from dataclasses import replace

from .config import check_bound
from .grouped_rule import pixels_per_thread
from .kernels.common.epilogue import EpilogueSpec
from .kernels.common.grouped_direct import (
    MAX_GROUP_IN,
    GroupedDirectConfig,
    output_vector,
    runs_epilogue,
)
from .problem import Conv2dProblemShape
from .validation import check_cuda_core_io, cuda_core_io

__all__ = [
    "DIRECT_MAX_CHANNELS",
    "DIRECT_MAX_MACS",
    "DIRECT_MAX_PIXEL_MACS",
    "DIRECT_MIN_PIXELS",
    "DIRECT_STAGED_MAX_K",
    "DIRECT_UNSTAGED_MAX_K",
    "DIRECT_UNSTAGED_MIN_PIXELS",
    "check_direct_dense_fits",
    "direct_dense_config",
]

DIRECT_MAX_CHANNELS = 16  # C: the range measured
DIRECT_MAX_PIXEL_MACS = 1024  # R * S * C * K: multiply-adds per output pixel
DIRECT_MAX_MACS = 2**27  # N * P * Q * R * S * C * K
DIRECT_MIN_PIXELS = 2048  # GEMM M: output pixels
# Where the tensor cores would run the conv unstaged: K and the output pixels it must have.
DIRECT_UNSTAGED_MAX_K = 8
DIRECT_UNSTAGED_MIN_PIXELS = 32768
# Where they would stage it: K at most this (fitted on fresh draws past the train rows' K).
DIRECT_STAGED_MAX_K = 48


def direct_dense_config(
    problem: Conv2dProblemShape,
    element_bytes: int,
    out_bytes: int,
    staged: bool,
    *,
    staged_max_k: float | None = None,
) -> GroupedDirectConfig | None:
    """The ``GroupedDirectConfig`` a call without a config runs ``problem`` with (one group,
    the KRSC filter, ``output_vector``'s channels and ``grouped_rule``'s pixels per thread),
    or None for the tensor-core kernels: 16-bit inputs and a 16- or 32-bit output, C at most
    ``DIRECT_MAX_CHANNELS`` (not C = K = 1, the depthwise form's shape), at most
    ``DIRECT_MAX_PIXEL_MACS`` multiply-adds per output pixel and ``DIRECT_MAX_MACS`` in all,
    and at least ``DIRECT_MIN_PIXELS`` output pixels; unless the tensor cores would copy its
    activation first (``staged``, as ``staging.copies_activation`` tells), K at most
    ``DIRECT_UNSTAGED_MAX_K`` and at least ``DIRECT_UNSTAGED_MIN_PIXELS`` output pixels; if
    they would, K at most ``staged_max_k`` (None: ``DIRECT_STAGED_MAX_K``; ``math.inf``:
    none, the bounds ``experiments/direct_fresh_problems.py`` draws in)."""
    if staged_max_k is None:
        staged_max_k = DIRECT_STAGED_MAX_K
    check_bound("staged_max_k", staged_max_k, "output channels")
    if not cuda_core_io(element_bytes, out_bytes):
        return None
    if problem.C > DIRECT_MAX_CHANNELS:
        return None
    if problem.C == problem.K == 1:
        return None  # one channel in and out is the depthwise form, of 2+ channels a thread
    pixel_macs = problem.R * problem.S * problem.C * problem.K
    if pixel_macs > DIRECT_MAX_PIXEL_MACS or problem.gemm_m < DIRECT_MIN_PIXELS:
        return None
    if problem.gemm_m * pixel_macs > DIRECT_MAX_MACS:
        return None
    if not staged and (
        problem.K > DIRECT_UNSTAGED_MAX_K or problem.gemm_m < DIRECT_UNSTAGED_MIN_PIXELS
    ):
        return None
    if staged and problem.K > staged_max_k:
        return None
    config = GroupedDirectConfig(
        problem.C, problem.K, filter_krsc=True, vector=output_vector(problem.K)
    )
    return replace(config, pixels=pixels_per_thread(problem, config))


def check_direct_dense_fits(
    config: GroupedDirectConfig,
    problem: Conv2dProblemShape,
    element_bytes: int,
    out_bytes: int,
    epilogue: EpilogueSpec,
) -> None:
    """Raise ``ValueError`` unless ``config`` runs ``problem`` as a dense conv (a call of
    ``conv2d_fprop``, its filter KRSC): one group of all C input and K output channels, the
    KRSC filter, no row window or channel norm, 16-bit inputs, a 16- or 32-bit output and an
    epilogue the kernel runs (``grouped_direct.runs_epilogue``)."""
    check_cuda_core_io("GroupedDirectConfig", element_bytes, out_bytes)
    if (config.group_in, config.group_out) != (problem.C, problem.K):
        raise ValueError(
            f"a GroupedDirectConfig for conv2d_fprop is one group of all channels: "
            f"group_in={problem.C}, group_out={problem.K} (C <= {MAX_GROUP_IN}); got "
            f"group_in={config.group_in}, group_out={config.group_out}"
        )
    if not config.filter_krsc or config.window or config.channel_norm_eps is not None:
        raise ValueError(
            "a GroupedDirectConfig for conv2d_fprop reads the KRSC filter (filter_krsc=True), "
            f"with no row window or channel norm; got {config}"
        )
    if not runs_epilogue(epilogue):
        raise ValueError(
            "a GroupedDirectConfig runs scale, bias, an activation and a residual; this call "
            "has an epilogue_fn, an out_amax or a source_scale"
        )
