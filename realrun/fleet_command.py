"""``python -m realrun run --replicas N``: a fleet of real engines taking turns, printed like batchsim's fleet."""

from __future__ import annotations

import argparse

from batchsim.core.files import dumps
from batchsim.core.fleet import fleet_summaries
from batchsim.core.metrics import format_table
from batchsim.core.router import make_router

from . import command_parts
from .fleet import check_fleet_memory, run_real_fleet
from .plan import Plan, write_outputs
from .progress import Progress, progress_lines

__all__ = ["run_fleet"]


def run_fleet(args: argparse.Namespace, plan: Plan) -> int:
    """``python -m realrun run --replicas N``: N engines behind the router, one measured run."""
    lm = command_parts.load(args, plan.notes)
    n = plan.fleet.replicas
    if not args.no_size_check:
        check_fleet_memory(lm, n)
    engines = [command_parts.make_engine(plan.engine, lm, args, plan.seed) for _ in range(n)]
    policies = [plan.policies[0].build() for _ in range(n)]
    router = make_router(plan.fleet.router, plan.seed)
    span = float(plan.workload.arrivals[-1]) if len(plan.workload) else 0.0
    Progress(progress_lines(args, span)).line(f"measuring {plan.names[0]} on {n} engines taking turns")
    result = run_real_fleet(plan.workload, policies, engines, router, kv_budget_tokens=plan.kv,
                            progress=command_parts.wants_progress(args))
    whole, parts = fleet_summaries(result, plan.slo)
    label = f"{plan.names[0]} x{n}"
    notes = [*plan.notes, f"note: {result.meta['taking_turns']}", f"router: {plan.fleet.router}"]
    rows = {f"{label} / server {i}": s for i, s in enumerate(parts)}
    if args.json:
        print(dumps({"scenario": plan.name,
                     "config": {"workload": plan.workload.description, "requests": len(plan.workload),
                                "policy": result.policy, "engine": plan.engine, "replicas": n,
                                "router": plan.fleet.router, "model": lm.describe()},
                     "runs": [{"label": label, "policy": result.policy, "summary": whole, "servers": parts}],
                     "summary": whole, "notes": notes}))
    else:
        print(f"realrun run: {label} measured on {lm.describe()}\n")
        print(format_table({label: whole}, ["replicas", "completed", "rejected", "request_throughput", "mean_ttft",
                                            "p99_ttft", "mean_tpot", "p99_e2e", "busy_fraction", "mean_batch_size"]))
        print("\neach server:")
        print(format_table(rows, ["completed", "request_throughput", "mean_ttft", "p99_e2e", "busy_fraction",
                                  "mean_batch_size"]))
        print()
        print("\n".join(notes))
        print(command_parts.memory_line(result.meta))
    paths = write_outputs(plan, {f"{plan.names[0]}-x{n}-measured-": result}, args)
    if paths and not args.json:
        print(f"records: {', '.join(str(p) for p in paths)}")
    code = command_parts.stopped_code([result.meta.get("stopped") or ""])
    return code or command_parts.all_rejected({label: result})
