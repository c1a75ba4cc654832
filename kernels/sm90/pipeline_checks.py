"""Warp roles of the SM90 conv kernel and the arrive counts of its barriers, derived from them.

The kernel builds its pipelines from these counts and checks the DSL objects against them at
trace time (``kernels/common/pipeline_checks.py``). Plain Python, tested on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..common.pipeline_checks import WARP_SIZE, Arrival, BarrierSpec
from .config import Conv2dConfig
from .schedule_checks import GATHER_RUN_CHANNELS

__all__ = ["Sm90Roles", "gather_warps_for", "sm90_barrier_specs"]

WARPGROUP_THREADS = 128
WARPGROUP_WARPS = WARPGROUP_THREADS // WARP_SIZE


def gather_warps_for(config: Conv2dConfig) -> int:
    """Warps that gather the operands (``gather``; 2 otherwise, unused): the whole producer
    warpgroup, since the gather is latency-bound and more warps keep more loads in flight
    (with a residual loaded by TMA, warp 1 loads C between its gathers:
    ``Sm90Roles.source_loader_gathers``), unless the filter tile (the smaller one: tile_m is
    at least 128) has fewer 16-byte runs than 128 threads, or the loads are scalar
    (``gather_vector=1``: with half the units per thread ptxas reused registers between
    some of a group's loads and serialized them, which ``tests/sass.py`` catches)."""
    filter_runs = config.tile_n * config.tile_k // GATHER_RUN_CHANNELS
    if filter_runs % WARPGROUP_THREADS or config.gather_vector == 1:
        return 2
    return WARPGROUP_WARPS


@dataclass(frozen=True)
class Sm90Roles:
    """Warp ids and thread counts of the SM90 kernel for one config.

    Warpgroup 0 is the producer (warp 0 loads A/B, warp 1 loads the residual C, warps 2-3
    idle; with ``gather`` its warps gather A/B in warp 0's place: all four (warp 1 loading
    C between its gathers), or warps 2-3 where an operand tile has too few 16-byte runs for
    four warps or the loads are scalar, ``gather_warps_for``);
    warpgroups 1.. are the consumers (WGMMA and their epilogue), two, one with 64-row tiles,
    or three with 192-row ones. Cooperative: all consumer threads share every tile; ping-pong: each consumer
    warpgroup owns every other tile (its ``tile_threads`` are one warpgroup)."""

    num_consumer_warpgroups: int
    pingpong: bool
    load: int = 0
    source_load: int = 1
    first_gather_warp: int = 2
    gather_warps: int = 2
    first_consumer_warp: int = 4
    # A residual loaded by TMA where warp 1 gathers too: it issues C's loads between its
    # gathers (``gather_operands``), with no source-load role of its own.
    source_loader_gathers: bool = False

    @classmethod
    def of(cls, config: Conv2dConfig, loads_source_by_tma: bool = False) -> "Sm90Roles":
        gather_warps = gather_warps_for(config)
        first_gather_warp = WARPGROUP_WARPS - gather_warps
        return cls(
            config.num_consumer_warpgroups, config.pingpong,
            first_gather_warp=first_gather_warp, gather_warps=gather_warps,
            source_loader_gathers=(
                config.gather and loads_source_by_tma and first_gather_warp <= cls.source_load
            ),
        )  # fmt: skip

    @property
    def gather_threads(self) -> int:
        return self.gather_warps * WARP_SIZE

    @property
    def consumer_threads(self) -> int:
        return self.num_consumer_warpgroups * WARPGROUP_THREADS

    @property
    def threads_per_cta(self) -> int:
        return WARPGROUP_THREADS + self.consumer_threads

    @property
    def tile_threads(self) -> int:
        """The consumer threads that compute and store one output tile."""
        return WARPGROUP_THREADS if self.pingpong else self.consumer_threads

    @property
    def tile_warps(self) -> int:
        return self.tile_threads // WARP_SIZE


def sm90_barrier_specs(config: Conv2dConfig, has_residual: bool) -> dict[str, BarrierSpec]:
    """Arrive count of every barrier of the kernel, keyed ``"<pipeline>.<full|empty>"`` and
    ``"named.<barrier>"``; pipelines the config does not use are left out."""
    roles = Sm90Roles.of(config, has_residual)
    tile_warps = roles.tile_warps
    owner = "the tile's consumer warpgroup" if config.pingpong else "the consumer warpgroups"
    # The A tile is multicast along cluster N, the filter tile along cluster M: a stage is
    # written by the TMA of every CTA of the two multicast groups, one of them this CTA.
    mcast = config.cluster_m + config.cluster_n - 1
    per_warp = f"lane 0 of each of {tile_warps} warps of {owner}"
    if config.gather:
        gatherers = Arrival(
            "gather warps", roles.gather_threads,
            "every thread, after its SMEM stores and a proxy fence",
        )  # fmt: skip
        specs = [
            BarrierSpec("ab.full", (gatherers,)),
            BarrierSpec("ab.empty", (Arrival(owner, roles.tile_threads, "every thread"),)),
        ]
    else:
        specs = [
            BarrierSpec("ab.full", (Arrival("load warp", 1, "arrive.expect_tx of one stage"),)),
            BarrierSpec(
                "ab.empty",
                (Arrival("consumer warps", mcast * tile_warps, f"{per_warp}, x {mcast} CTA(s)"),),
            ),
        ]
    first_loader = "first gather warp" if config.gather else "load warp"
    source_loader = "warp 1 (a gather warp)" if roles.source_loader_gathers else "source-load warp"
    if config.tile_w:
        specs += [
            BarrierSpec("halo.full", (Arrival("load warp", 1, "arrive.expect_tx of a halo"),)),
            BarrierSpec("halo.empty", (Arrival("consumer warps", tile_warps, per_warp),)),
        ]
    if has_residual:
        specs += [
            BarrierSpec(
                "source.full",
                (Arrival(source_loader, 1, "arrive.expect_tx of one C subtile"),),
            ),
            BarrierSpec("source.empty", (Arrival("consumer warps", tile_warps, per_warp),)),
        ]
        if not roles.source_loader_gathers:  # else one warp orders its own loads
            specs.append(
                BarrierSpec(
                    "named.epilogue_load",
                    (
                        Arrival(
                            first_loader, WARP_SIZE, "every thread, after the first tile's loads"
                        ),
                        Arrival("source-load warp", WARP_SIZE, "every thread, before its loads"),
                    ),
                )
            )
    if config.dynamic_schedule:
        readers = [Arrival("consumer warpgroups", roles.consumer_threads, "every thread")]
        if has_residual:
            readers.append(Arrival("source-load warp", WARP_SIZE, "every thread"))
        specs += [
            BarrierSpec("work.full", (Arrival("load warp", 1, "lane 0, once per work item"),)),
            BarrierSpec("work.empty", tuple(readers)),
        ]
    specs.append(
        BarrierSpec(
            "named.epilogue",
            (Arrival(owner, roles.tile_threads, "every thread (bar.sync), per subtile"),),
        )
    )
    return {s.name: s for s in specs}
