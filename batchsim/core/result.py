"""A finished run, on either clock: its records and what a summary needs to know of the server.

A run simulated and a run measured give the same kind of result (``RunResult``), which is
the point: the metrics, plots and bills apply to both unchanged. ``meta`` says which it was
(a measured run names its engine, model and device).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .limits import ServerLimits
from .policies.base import Policy
from .records import Records
from .router import Router
from .workload import Workload

if TYPE_CHECKING:
    from .driver import Drive

__all__ = ["RunResult", "result_of"]


@dataclass
class RunResult:
    """A finished run, on either clock: the records plus what the summary needs to know about the
    server."""

    records: Records
    policy: str
    step_time: str
    kv_budget_tokens: int | None
    kv_peak_tokens: int
    preemptions: int
    workload: str = ""
    meta: dict = field(default_factory=dict)
    replicas: int = 1  # servers in the fleet that ran it (each with its own policy and KV cache)

    @property
    def makespan(self) -> float:
        """From time 0 (the first arrival) until the last request finished or was turned away.

        One server of a fleet is rented for the fleet's whole run: its result says so in
        ``meta["rented_until"]``."""
        if self.meta.get("rented_until") is not None:
            return float(self.meta["rented_until"])
        r = self.records
        ends = [t for t in (r.last_finish(), r.last_arrival, r.last_step_end()) if t is not None]
        return float(max(ends)) if ends else 0.0


def result_of(
    run: Drive,
    policy: Policy | Sequence[Policy],
    step_time: str,
    limits: ServerLimits,
    workload: Workload,
    meta: dict | None = None,
    router: Router | None = None,
) -> RunResult:
    """The ``RunResult`` of a finished ``drive`` (of one server, or a fleet's policies)."""
    policies = [policy] if isinstance(policy, Policy) else list(policy)
    extra: dict = {"stopped": run.stopped}
    if len(policies) > 1:
        extra.update(
            router=repr(router),
            replica_kv_peak=[p.kv_peak for p in policies],
            replica_preemptions=[p.preemptions for p in policies],
        )
    return RunResult(
        records=run.recorder.records(),
        policy=policies[0].describe(),
        step_time=step_time,
        kv_budget_tokens=limits.kv_budget_tokens,
        kv_peak_tokens=max(p.kv_peak for p in policies),
        preemptions=sum(p.preemptions for p in policies),
        workload=workload.description,
        meta={**extra, **(meta or {})},
        replicas=len(policies),
    )
