"""One labelled run, from flags to figures: resolved, sized, simulated, summarised.

``plan_runs`` resolves every run of a set (workload, policy, server, SLO, fleet) and
checks it before any work; ``simulate_plan`` runs one plan and returns its result with
the summary of the whole fleet and of each server, dollars included (a fleet's bill is
replicas x $/hour over the makespan; each server's is its share). The scenarios, the
``sweep`` and the capacity ``plan`` all go through here, so a run means the same thing
whichever of them asks for it, in this process or on a Dask worker.
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

from ...core import sizing
from ...core.config import FleetConfig, PolicyConfig, WorkloadConfig, slo_config
from ...core.errors import check_positive
from ...core.flags import given, resolve_arg
from ...core.fleet import fleet_summaries
from ...core.limits import ServerLimits
from ...core.metrics import SLO
from ...machine.cost import cost_summary
from ...machine.serverconfig import ServerConfig, ServerSetup
from ...sim.simulator import simulate
from .knobs import WORKLOAD_DEFAULTS

__all__ = [
    "RunPlan",
    "plan_runs",
    "size_of",
    "extent_flag",
    "simulate_plan",
    "server_limits",
    "args_for",
]


class RunPlan(NamedTuple):
    """One run's configuration, resolved and checked."""

    run: object  # the scenario's Run: label, policy name, defaults, part
    workload: WorkloadConfig
    policy: PolicyConfig
    setup: ServerSetup
    slo: SLO
    fleet: FleetConfig


def args_for(args: argparse.Namespace, d: dict) -> argparse.Namespace:
    """The flags as a run sees them: with ``rate_scale`` applied to the rate in force."""
    scale = d.get("rate_scale")
    if scale is None:
        return args
    check_positive("rate_scale", scale)
    a = argparse.Namespace(**vars(args))
    a.rate = resolve_arg(args, "rate", d or {}, WORKLOAD_DEFAULTS) * scale
    return a


def plan_runs(args: argparse.Namespace, scenario, runs: list) -> list[RunPlan]:
    """Every run's configuration, resolved and checked."""
    plans = []
    for run in runs:
        d = {**scenario.defaults, **run.defaults}
        flags = given(args_for(args, d))
        plans.append(
            RunPlan(
                run,
                WorkloadConfig.from_flags(flags, d),
                PolicyConfig.from_flags(run.policy, flags, d),
                ServerConfig.from_flags(flags, d).build(),
                slo_config(flags, d),
                FleetConfig.from_flags(flags, d),
            )
        )
    return plans


def size_of(plans: list[RunPlan], workloads: dict | None = None) -> sizing.Size:
    """The estimated size of running ``plans`` (a trace not read yet counts once it is)."""
    workloads = workloads or {}
    requests = tokens = 0.0
    summary_only = all(p.fleet.summary_only for p in plans)
    for p in plans:
        wl = workloads.get(p.workload)
        if wl is not None:
            n, out = float(len(wl)), float(wl.output_tokens.mean()) if len(wl) else 0.0
        elif p.workload.trace is not None:
            continue
        else:
            n, out = p.workload.expected_requests, p.workload.output_dist().mean
        requests, tokens = max(requests, n), tokens + n * out
    mean_out = tokens / len(plans) / requests if plans and requests else 0.0
    return sizing.estimate(requests, mean_out, runs=len(plans), summary_only=summary_only)


def extent_flag(plans: list[RunPlan]) -> str:
    return "--duration" if any(p.workload.duration is not None for p in plans) else "--requests"


def server_limits(kv, server, step_time) -> ServerLimits:
    """The simulated server's limits: its KV budget and its model's context (a catalog model's, or
    the one a calibration was measured on), which the policies enforce as a real server would."""
    context = (
        server.model.max_context if server is not None else getattr(step_time, "context_len", None)
    )
    return ServerLimits(kv_budget_tokens=kv, context_len=context)


def simulate_plan(plan: RunPlan, workload, progress: bool | str = False):
    """(result, the fleet's summary, each server's summary) of one plan on its workload."""
    setup, fleet = plan.setup, plan.fleet
    policy = plan.policy.build()
    res = simulate(
        workload,
        policy,
        setup.step_time,
        progress=progress,
        limits=server_limits(setup.kv_budget_tokens, setup.server, setup.step_time),
        replicas=fleet.replicas,
        router=fleet.router,
        router_seed=plan.workload.seed,
        records="summary" if fleet.summary_only else "full",
        slo=plan.slo,
    )
    whole, parts = fleet_summaries(res, plan.slo)
    for i, s in enumerate([whole] + (parts if fleet.replicas > 1 else [])):
        servers = fleet.replicas if i == 0 else 1
        if setup.price is not None:
            s.update(cost_summary(s, setup.price * servers))
        if setup.server is not None:
            s["kv_peak_gb"] = round(s["kv_peak_tokens"] * setup.server.kv.bytes_per_token / 1e9, 2)
    res.meta.update(
        label=plan.run.label,
        part=plan.run.part,
        server=setup.server,
        price=setup.price,
        slo=plan.slo,
        step_time=setup.step_time,
        kv_budget_tokens=setup.kv_budget_tokens,
        fleet=fleet,
    )
    return res, whole, (parts if fleet.replicas > 1 else [])
