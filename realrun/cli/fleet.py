"""``python -m realrun run --replicas N``: a fleet of real engines taking turns, printed like
batchsim's fleet."""

from __future__ import annotations

import argparse

from batchsim.core.files import dumps
from batchsim.core.fleet import fleet_summaries
from batchsim.core.metrics import format_table
from batchsim.core.router import make_router

from ..clock.fleet import check_fleet_memory, run_real_fleet
from ..clock.progress import Progress, progress_lines
from .engines import all_rejected, load, make_engine, memory_line, stopped_code, wants_progress
from .run_setup import RunSetup, write_outputs

__all__ = ["run_fleet"]


def run_fleet(args: argparse.Namespace, setup: RunSetup) -> int:
    """``python -m realrun run --replicas N``: N engines behind the router, one measured run."""
    lm = load(args, setup.notes)
    n = setup.fleet.replicas
    if not args.no_size_check:
        check_fleet_memory(lm, n)
    engines = [make_engine(setup.engine, lm, args, setup.seed) for _ in range(n)]
    policies = [setup.policies[0].build() for _ in range(n)]
    router = make_router(setup.fleet.router, setup.seed)
    span = float(setup.workload.arrivals[-1]) if len(setup.workload) else 0.0
    Progress(progress_lines(args, span)).line(
        f"measuring {setup.names[0]} on {n} engines taking turns"
    )
    result = run_real_fleet(
        setup.workload,
        policies,
        engines,
        router,
        kv_budget_tokens=setup.kv,
        progress=wants_progress(args),
    )
    whole, parts = fleet_summaries(result, setup.slo)
    label = f"{setup.names[0]} x{n}"
    notes = [*setup.notes, f"note: {result.meta['taking_turns']}", f"router: {setup.fleet.router}"]
    rows = {f"{label} / server {i}": s for i, s in enumerate(parts)}
    if args.json:
        print(
            dumps(
                {
                    "scenario": setup.name,
                    "config": {
                        "workload": setup.workload.description,
                        "requests": len(setup.workload),
                        "policy": result.policy,
                        "engine": setup.engine,
                        "replicas": n,
                        "router": setup.fleet.router,
                        "model": lm.describe(),
                    },
                    "runs": [
                        {
                            "label": label,
                            "policy": result.policy,
                            "summary": whole,
                            "servers": parts,
                        }
                    ],
                    "summary": whole,
                    "notes": notes,
                }
            )
        )
    else:
        print(f"realrun run: {label} measured on {lm.describe()}\n")
        print(
            format_table(
                {label: whole},
                [
                    "replicas",
                    "completed",
                    "rejected",
                    "request_throughput",
                    "mean_ttft",
                    "p99_ttft",
                    "mean_tpot",
                    "p99_e2e",
                    "busy_fraction",
                    "mean_batch_size",
                ],
            )
        )
        print("\neach server:")
        print(
            format_table(
                rows,
                [
                    "completed",
                    "request_throughput",
                    "mean_ttft",
                    "p99_e2e",
                    "busy_fraction",
                    "mean_batch_size",
                ],
            )
        )
        print()
        print("\n".join(notes))
        print(memory_line(result.meta))
    paths = write_outputs(setup, {f"{setup.names[0]}-x{n}-measured-": result}, args)
    if paths and not args.json:
        print(f"records: {', '.join(str(p) for p in paths)}")
    code = stopped_code([result.meta.get("stopped") or ""])
    return code or all_rejected({label: result})
