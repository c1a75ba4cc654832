"""Arrive counts of the SM100 conv kernel's barriers, derived from its warp roles.

Every mbarrier completes a phase when its pending arrive count reaches zero, so an init count
that disagrees with the arrivals the roles actually make hangs the kernel (too high) or lets a
consumer run ahead of the data (too low). ``conv2d_barrier_specs`` derives each count from the
role table: who arrives, how many times per phase, from how many CTAs. The kernel builds its
pipelines from these numbers and ``check_pipeline`` (``kernels/common/pipeline_checks.py``,
shared with the SM90 kernel) compares them, at trace time, with the counts
the DSL pipeline objects were initialised with; a mismatch fails the compile with the arithmetic
spelled out instead of hanging on the GPU. All of it is plain Python and is tested on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..common.pipeline_checks import (
    WARP_SIZE,
    Arrival,
    BarrierSpec,
    check_arrive_count,
    check_pipeline,
)

__all__ = [
    "Arrival",
    "BarrierSpec",
    "WarpRoles",
    "check_arrive_count",
    "check_pipeline",
    "conv2d_barrier_specs",
]


@dataclass(frozen=True)
class WarpRoles:
    """Warp ids of the SM100 conv kernel (the seed's layout: 8 warps, 256 threads)."""

    epilogue: tuple[int, ...] = (0, 1, 2, 3)
    scheduler: int = 4
    load: int = 5
    mma: int = 6
    epi_load: int = 7

    @property
    def num_warps(self) -> int:
        return len(self.epilogue) + 4

    @property
    def threads_per_cta(self) -> int:
        return WARP_SIZE * self.num_warps

    @property
    def epilogue_threads(self) -> int:
        return WARP_SIZE * len(self.epilogue)


def conv2d_barrier_specs(
    *,
    cta_group: int,
    cluster_size: int,
    has_residual: bool,
    roles: WarpRoles = WarpRoles(),
) -> dict[str, BarrierSpec]:
    """Arrive count of every barrier of the kernel, keyed ``"<pipeline>.<full|empty>"``.

    ``cta_group``: CTAs sharing one MMA (1 or 2); ``cluster_size``: CTAs per cluster;
    ``has_residual``: whether the epilogue-load warp runs (without a residual it exits at once
    and takes no part in any barrier).
    """
    epi_warps = len(roles.epilogue)
    pair = "the CTA pair" if cta_group == 2 else "the CTA"
    specs = [
        BarrierSpec(
            "input.full",
            (Arrival("load warp, leader CTA", 1, f"arrive.expect_tx of {pair}'s A+B bytes"),),
        ),
        BarrierSpec(
            "input.empty",
            (Arrival("MMA warp, leader CTA", 1, f"tcgen05.commit, multicast to {pair}"),),
        ),
        BarrierSpec(
            "accumulator.full",
            (Arrival("MMA warp, leader CTA", 1, f"tcgen05.commit, multicast to {pair}"),),
        ),
        BarrierSpec(
            "accumulator.empty",
            (
                Arrival(
                    "epilogue warps",
                    epi_warps * cta_group,
                    f"one elected lane per warp, {epi_warps} warps x {cta_group} CTA(s), "
                    "on the leader CTA's barrier",
                ),
            ),
        ),
        BarrierSpec(
            "clc.full",
            (Arrival("scheduler warp, CTA 0", 1, "arrive.expect_tx(16) into every CTA"),),
        ),
        BarrierSpec("clc.empty", _clc_consumers(roles, cluster_size, has_residual)),
        BarrierSpec(
            "clc_throttle.full",
            (Arrival("load warp, CTA 0", WARP_SIZE, "every lane, once per tile"),),
        ),
        BarrierSpec(
            "clc_throttle.empty",
            (Arrival("scheduler warp, CTA 0", WARP_SIZE, "every lane, once per query"),),
        ),
        BarrierSpec(
            "tmem_dealloc",
            (
                Arrival(
                    "epilogue warps",
                    epi_warps * cta_group,
                    f"one elected lane per warp, {epi_warps} warps x {cta_group} CTA(s), "
                    "after their last TMEM load",
                ),
            ),
        ),
    ]
    if has_residual:
        specs += [
            BarrierSpec(
                "epi_load.full",
                (Arrival("epilogue-load warp", 1, "arrive.expect_tx of one source subtile"),),
            ),
            BarrierSpec(
                "epi_load.empty",
                (Arrival("epilogue warps", epi_warps, "lane 0 of each warp"),),
            ),
            BarrierSpec(
                "load_order",
                (
                    Arrival(
                        "load warp",
                        1,
                        "elected lane, once: the first tile's prologue loads are issued",
                    ),
                ),
            ),
        ]
    specs += [
        BarrierSpec(
            "named.epilogue",
            (Arrival("epilogue warps", roles.epilogue_threads, "every thread (bar.sync)"),),
        ),
        BarrierSpec(
            "named.tmem_allocation",
            (
                Arrival("MMA warp", WARP_SIZE, "every thread, after tcgen05.alloc"),
                Arrival("epilogue warps", roles.epilogue_threads, "every thread"),
            ),
        ),
    ]
    return {s.name: s for s in specs}


def _clc_consumers(roles: WarpRoles, cluster_size: int, has_residual: bool) -> tuple:
    """Every thread that reads a CLC response arrives on CTA 0's empty barrier."""
    per_cta = [("load warp", 1), ("MMA warp", 1), ("epilogue warps", len(roles.epilogue))]
    if has_residual:
        per_cta.append(("epilogue-load warp", 1))
    arrivals = [Arrival("scheduler warp, CTA 0", WARP_SIZE, "every lane")]
    for role, warps in per_cta:
        arrivals.append(
            Arrival(
                role,
                WARP_SIZE * warps * cluster_size,
                f"every lane of {warps} warp(s) x {cluster_size} CTA(s), remote to CTA 0",
            )
        )
    return tuple(arrivals)
