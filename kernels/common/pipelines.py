"""A kernel's pipelines built from its role table: each barrier pair's arrive counts come from
the ``BarrierSpec``s the kernel derived from its warp roles, and the DSL object is checked
against them as soon as it exists (``pipeline_checks.check_pipeline``)."""

from typing import Any, Dict

import cutlass.pipeline as pipeline

from .pipeline_checks import BarrierSpec, check_pipeline


def make_checked_pipeline(
    kind: type,
    specs: Dict[str, BarrierSpec],
    name: str,
    barrier_storage: Any,
    num_stages: int,
    **options: Any,
) -> Any:
    """``kind.create`` for the barrier pair ``name`` (``name.full`` / ``name.empty`` in
    ``specs``): its producer and consumer groups of those arrive counts, its init deferred to
    the kernel's one cluster sync, ``options`` (``tx_count``, ``cta_layout_vmnk``) passed on.
    Raises at trace time if the object's counts disagree with ``specs``."""

    def group(side: str) -> pipeline.CooperativeGroup:
        return pipeline.CooperativeGroup(pipeline.Agent.Thread, specs[f"{name}.{side}"].count)

    made = kind.create(
        barrier_storage=barrier_storage,
        num_stages=num_stages,
        producer_group=group("full"),
        consumer_group=group("empty"),
        defer_sync=True,
        **options,
    )
    check_pipeline(made, specs, name)
    return made
