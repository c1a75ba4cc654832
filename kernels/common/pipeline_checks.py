"""Barrier arrive counts as data, checked against the DSL's pipeline objects at trace time.

Every mbarrier completes a phase when its pending arrive count reaches zero, so an init count
that disagrees with the arrivals the roles actually make hangs the kernel (too high) or lets a
consumer run ahead of the data (too low). Each kernel derives a ``BarrierSpec`` per barrier from
its warp roles (``kernels/sm90/pipeline_checks.py``, ``kernels/sm100/pipeline_checks.py``),
builds its pipelines from those counts, and ``check_pipeline`` compares them with what the DSL
objects were initialised with: a mismatch fails the compile with the arithmetic spelled out.
Plain Python, tested on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WARP_SIZE", "Arrival", "BarrierSpec", "check_arrive_count", "check_pipeline"]

WARP_SIZE = 32


@dataclass(frozen=True)
class Arrival:
    """One role's contribution to a barrier phase: ``count`` arrivals, made ``how``."""

    role: str
    count: int
    how: str

    def __str__(self) -> str:
        return f"{self.count} ({self.role}: {self.how})"


@dataclass(frozen=True)
class BarrierSpec:
    """The arrivals that complete one phase of one barrier (one stage of a ring)."""

    name: str
    arrivals: tuple[Arrival, ...]

    @property
    def count(self) -> int:
        return sum(a.count for a in self.arrivals)

    def arithmetic(self) -> str:
        return " + ".join(str(a) for a in self.arrivals) + f" = {self.count}"


def check_arrive_count(spec: BarrierSpec, actual: int) -> None:
    """Raise ``ValueError`` unless ``actual`` (what a barrier was initialised with) matches."""
    if actual != spec.count:
        raise ValueError(
            f"barrier {spec.name} is initialised with an arrive count of {actual}, but its "
            f"arrivals per phase are {spec.arithmetic()}"
        )


def check_pipeline(pipeline, specs: dict[str, BarrierSpec], name: str) -> None:
    """Check both rings of a DSL pipeline object (``sync_object_full/empty.arrive_count``)."""
    for side in ("full", "empty"):
        sync_object = getattr(pipeline, f"sync_object_{side}")
        actual = getattr(sync_object, "arrive_count", None)
        if isinstance(actual, int):
            check_arrive_count(specs[f"{name}.{side}"], actual)
