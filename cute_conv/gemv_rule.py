"""Which convs run on CUDA cores (``PointwiseGemv``) instead of a tensor-core kernel, and the
checks of a ``PointwiseGemvConfig`` against a call.

A 1x1 conv of a few output pixels is a matrix-vector product whose time is fixed costs. On
the 32 train 1x1s of the corpus the rule takes (H200, ``benchmarks/experiments/
pointwise_gemv_ab.py``: CUPTI durations, CUDA-graph replays in interleaved rounds), the
tensor-core kernel took 1.5-5.0 us, cuDNN's kernels 1.7-17 us, ``PointwiseGemv`` 1.2-3.1 us;
replayed, the calls ran 1.137x faster plain (0.99-1.47x each) and 1.104x fused
(``relu(conv + b) + r``, 0.99-1.31x), and against cuDNN they went from 1.150x (least 0.79x)
to 1.308x (least 1.07x). Its dot products re-read the filter for every ``rows`` output
pixels and take a CTA per 8 output channels, so past a few million multiply-adds it loses:
2.4 M (M=32, C=84, K=888) 7.6 against 7.2 us replayed, 6.3 M (M=32, C=222, K=888) 10.7
against 8.4, 103 M (M=49, C=2048, K=1024) 35 against 10.
"""

from __future__ import annotations

from .kernels.common.pointwise_gemv import VECTOR_WIDTHS, WARPS, PointwiseGemvConfig
from .problem import Conv2dProblemShape
from .validation import check_cuda_core_io, cuda_core_io

__all__ = [
    "GEMV_MAX_CTAS",
    "GEMV_MAX_MACS",
    "GEMV_MAX_ROWS",
    "check_pointwise_gemv_fits",
    "cta_count",
    "pointwise_gemv_config",
    "widest_vector",
]

# Fitted on the corpus's train 1x1s of GEMM M <= 64 without padding (H200, 38 convs): every
# one of M <= 32 and at most 1.6 M multiply-adds ran 0.99-1.47x the tensor-core call's
# speed, the two of 2.4 M split (1.13x, 0.95x), 6.3 M and beyond lost (0.25-0.79x).
GEMV_MAX_ROWS = 32  # GEMM M: output pixels
GEMV_MAX_MACS = 2**21  # M * K * C
# A guard on the grid more than a fit: the timed shapes of at most 1.6 M multiply-adds ran
# on up to 888 CTAs, but for one of 1,344 (M=32, C=30, K=336 at one row per CTA), which
# tied the tensor cores (1.02x) where the same conv on 336 CTAs of four rows ran 1.09x.
# Larger grids were not timed.
GEMV_MAX_CTAS = 1024
# Rows per CTA: one, so that the grid is wide, except for 2-channel vectors, whose short
# loads gained from sharing each filter vector among 4 rows (0.1-0.6 us at M >= 8).
_ROWS_SHORT_VECTORS = 4
MAX_GRID_Y = 65535  # CUDA's bound on a grid's y extent: the kernel's CTA rows


def pointwise_gemv_config(
    problem: Conv2dProblemShape, element_bytes: int, out_bytes: int
) -> PointwiseGemvConfig | None:
    """The ``PointwiseGemvConfig`` a call without a config runs ``problem`` with, or None for
    the tensor-core kernels: 16-bit inputs and a 16- or 32-bit output, a 1x1 filter without
    padding (any stride), an even C (odd ones were not measured), GEMM M at most
    ``GEMV_MAX_ROWS``, at most ``GEMV_MAX_MACS`` multiply-adds and a grid of at most
    ``GEMV_MAX_CTAS`` CTAs."""
    if not cuda_core_io(element_bytes, out_bytes) or not _pointwise_unpadded(problem):
        return None
    if problem.C % 2 or problem.gemm_m > GEMV_MAX_ROWS:
        return None
    if problem.gemm_m * problem.K * problem.C > GEMV_MAX_MACS:
        return None
    vector = widest_vector(problem.C)
    rows = _ROWS_SHORT_VECTORS if vector == 2 and problem.gemm_m >= _ROWS_SHORT_VECTORS else 1
    config = PointwiseGemvConfig(vector=vector, rows=rows)
    return config if cta_count(config, problem) <= GEMV_MAX_CTAS else None


def cta_count(config: PointwiseGemvConfig, problem: Conv2dProblemShape) -> int:
    """The CTAs of ``PointwiseGemv``'s grid for ``problem``: a CTA per ``config.rows`` output
    pixels and ``4 * config.channels_per_warp`` output channels."""
    channels_per_cta = WARPS * config.channels_per_warp
    return _cta_rows(config, problem) * -(-problem.K // channels_per_cta)


def check_pointwise_gemv_fits(
    config: PointwiseGemvConfig, problem: Conv2dProblemShape, element_bytes: int, out_bytes: int
) -> None:
    """Raise ``ValueError`` unless ``config`` runs ``problem`` (a call's, with inputs of
    ``element_bytes`` and an output of ``out_bytes``): 16-bit inputs, a 16- or 32-bit output,
    a 1x1 filter without padding, C a multiple of ``config.vector``, at most ``MAX_GRID_Y``
    CTA rows of ``config.rows`` output pixels."""
    check_cuda_core_io("PointwiseGemvConfig", element_bytes, out_bytes)
    if not _pointwise_unpadded(problem):
        raise ValueError(
            "a PointwiseGemvConfig runs 1x1 convs without padding; this call has a "
            f"{problem.R}x{problem.S} filter and padding {problem.padding}"
        )
    cta_rows = _cta_rows(config, problem)
    if cta_rows > MAX_GRID_Y:
        raise ValueError(
            f"PointwiseGemvConfig(rows={config.rows}) takes a CTA row per {config.rows} output "
            f"pixels: GEMM M={problem.gemm_m} needs {cta_rows}, past the grid's "
            f"{MAX_GRID_Y} (the tensor-core kernels take any M)"
        )
    if problem.C % config.vector:
        raise ValueError(
            f"PointwiseGemvConfig(vector={config.vector}) loads {config.vector} channels at a "
            f"time: C={problem.C} must be a multiple of it (vector={widest_vector(problem.C)} "
            "fits)"
        )


def _cta_rows(config: PointwiseGemvConfig, problem: Conv2dProblemShape) -> int:
    """The grid's y extent: a CTA row per ``config.rows`` output pixels."""
    return -(-problem.gemm_m // config.rows)


def _pointwise_unpadded(problem: Conv2dProblemShape) -> bool:
    return problem.R == problem.S == 1 and problem.padding == ((0, 0), (0, 0))


def widest_vector(channels: int) -> int:
    """The widest load (``PointwiseGemvConfig.vector``) that ``channels`` is a multiple of."""
    return next(v for v in VECTOR_WIDTHS if channels % v == 0)
