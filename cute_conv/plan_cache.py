"""Launch plans memoized on a call's metadata: the direct paths' validation and kernel choice,
run once per call signature (``dispatch``, ``grouped``)."""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

__all__ = ["PlanCache"]

Plan = TypeVar("Plan")


class PlanCache(Generic[Plan]):
    """At most ``max_plans`` plans by key (all dropped when full: call signatures are few).

    ``memo(key_of, make, args)`` returns the plan of ``key_of(*args)``, made by ``make(*args)``
    the first time. A key that cannot be built or hashed (an argument validation will reject)
    makes a plan each time, so that ``make`` raises its error. Register ``clear`` with
    ``compile.forget_on_clear`` where plans hold compiled kernels.
    """

    def __init__(self, max_plans: int = 4096) -> None:
        self._plans: dict[Any, Plan] = {}
        self._max_plans = max_plans

    def memo(self, key_of: Callable[..., Any], make: Callable[..., Plan], args: tuple) -> Plan:
        try:
            key = key_of(*args)
            plan = self._plans.get(key)  # hashes the key, once
        except Exception:  # no key (unhashable, not a tensor, not a number): make says why
            return make(*args)
        if plan is None:
            plan = make(*args)
            if len(self._plans) >= self._max_plans:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def clear(self) -> None:
        self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)
