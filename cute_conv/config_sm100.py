"""The Blackwell (SM100, ``sm_100a``) kernel: its configuration and the problems it can run.

**Compile-verified only.** The SM100 kernel is compiled for ``sm_100a`` on the CPU and its PTX
is checked (tcgen05.mma, TMEM, cluster launch control, im2col TMA); it has never run on a
Blackwell GPU, and no number here was measured on one.

``Conv2dConfigSm100`` (the seed's ``Conv2dConfig``, renamed so it does not collide with the
Hopper ``cute_conv.Conv2dConfig``) is defined next to the kernel, in
``kernels/sm100/config.py``; this module re-exports it and adds the host-side checks:

* ``check_sm100(problem, config, ...)`` raises ``ValueError`` (argument, value, limit) for
  anything the SM100 kernel cannot run: the im2col descriptor limits (the same 4-D
  ``(C, W, H, N)`` descriptor as SM90, so corners in [-128, 127] and filter span <= 255, not
  the [-16, 15] / 31 of the 5-D ``make_im2col_tma_atom_A`` form, which this kernel does not
  use), 16-byte channel rows, the launch grid, and the config's SMEM and TMEM budgets.
* ``can_implement_sm100(...)`` is the same as a bool.
* ``default_config_sm100(problem)`` picks a config; it is a plain rule, not tuned on hardware.
"""

from __future__ import annotations

from typing import Any

from .config import check_element_bytes, check_heuristic_args
from .dtypes import CUTLASS_DTYPES, INPUT_DTYPES, dtype_name
from .kernels.sm100.config import (
    SMEM_CAPACITY_SM100,
    TMEM_COLUMNS_SM100,
    Conv2dConfigSm100,
    Sm100Plan,
)
from .problem import Conv2dProblemShape
from .validation import ROW_ALIGNMENT_BYTES, check_problem_limits, output_rows_unaligned

__all__ = [
    "Conv2dConfigSm100",
    "SMEM_CAPACITY_SM100",
    "Sm100Plan",
    "TMEM_COLUMNS_SM100",
    "can_implement_sm100",
    "check_sm100",
    "default_config_sm100",
]

MAX_GRID_X = 2**31 - 1  # the grid is (cta_group * work items, 1, 1)


def check_sm100(
    problem: Conv2dProblemShape,
    config: Conv2dConfigSm100 | None = None,
    *,
    act_dtype: Any = "bfloat16",
    out_dtype: Any = None,
    has_residual: bool = False,
) -> Sm100Plan:
    """Raise ``ValueError`` unless the SM100 kernel can run ``problem`` with ``config``.

    ``act_dtype``/``out_dtype``: torch dtypes, cutlass types or names (``out_dtype`` defaults
    to ``act_dtype``); ``has_residual``: whether the kernel loads a source tensor. Returns
    the resolved plan (stage counts, SMEM bytes, TMEM columns).
    """
    check_heuristic_args(problem, 1, has_residual)
    if config is None:
        config = Conv2dConfigSm100.default_bf16()
    if not isinstance(config, Conv2dConfigSm100):
        raise TypeError(f"config must be a Conv2dConfigSm100, got {type(config).__name__}")
    act_name = dtype_name(act_dtype, "act_dtype", INPUT_DTYPES)
    act = CUTLASS_DTYPES[act_name]
    out_name = dtype_name(out_dtype if out_dtype is not None else act_name, "out_dtype")
    out = CUTLASS_DTYPES[out_name]
    check_problem_limits(problem)
    # The activation's and the filter's TMA rows hold C channels: whole 16-byte units (the
    # public API pads them). K is the filter's outer extent; output rows that are not
    # 16-byte units are stored by the epilogue threads (``EpilogueSpec.store_by_threads``),
    # which read the source themselves: no C ring then.
    row_bytes = problem.C * act.width // 8
    if row_bytes % ROW_ALIGNMENT_BYTES:
        raise ValueError(
            f"C={problem.C} channels of {act.__name__} make {row_bytes}-byte rows; the "
            f"SM100 kernel's TMA rows must be multiples of {ROW_ALIGNMENT_BYTES} bytes "
            f"({ROW_ALIGNMENT_BYTES * 8 // act.width} channels): pad C"
        )
    tiles_m = -(-problem.gemm_m // config.mma_m)
    tiles_n = -(-problem.K // config.mma_n)
    ctas = tiles_m * tiles_n * config.cta_group
    if ctas > MAX_GRID_X:
        raise ValueError(
            f"the problem needs {tiles_m} x {tiles_n} tiles of {config.mma_m}x{config.mma_n}, "
            f"{ctas} CTAs; the launch grid is limited to {MAX_GRID_X}: split the batch"
        )
    return config.plan(act, out, has_residual and not output_rows_unaligned(problem.K, out.width))


def can_implement_sm100(
    problem: Conv2dProblemShape, config: Conv2dConfigSm100 | None = None, **kwargs: Any
) -> bool:
    """``check_sm100`` as a bool: whether the SM100 kernel can run ``problem``."""
    try:
        check_sm100(problem, config, **kwargs)
    except ValueError:
        return False
    return True


def default_config_sm100(
    problem: Conv2dProblemShape, num_sms: int = 148, *, element_bytes: int = 2
) -> Conv2dConfigSm100:
    """A starting point for a B200 (148 SMs). Untuned: no Blackwell GPU has run it.

    2-SM (the seed's ``default_bf16``) unless the problem fits one 128-row M tile, where half
    the CTA pair would compute padding. MMA N minimizes ``tiles_n * (mma_n + 64)``: padded
    output channels against a fixed per-tile cost (the SM90 heuristic's model, without its
    wave term); ties go to the wider tile. tile_k 32 where a tap holds at most 32 channels
    (a k-tile never spans two taps, so a 64-wide one would be half zero-fill there, e.g. the
    stem's super-pixel view). fp8 inputs (``element_bytes=1``) take k-tiles of the same
    bytes: twice the channels.
    """
    check_heuristic_args(problem, num_sms)
    check_element_bytes(element_bytes)
    cost = {n: -(-problem.K // n) * (n + 64) for n in (256, 192, 128, 64)}
    mma_n = min(cost, key=lambda n: (cost[n], -n))
    per_byte = 2 // element_bytes
    tile_k = (32 if problem.C <= 32 * per_byte else 64) * per_byte
    if problem.gemm_m <= 128 or num_sms < 2:
        return Conv2dConfigSm100(cta_group=1, mma_m=128, mma_n=mma_n, tile_k=tile_k)
    return Conv2dConfigSm100(cta_group=2, mma_m=256, mma_n=mma_n, tile_k=tile_k)
