"""python -m batchsim plan: how many GPUs, of which kind, for this traffic and this promise?

    python -m batchsim plan --rate 20 --slo-p99-e2e 10
    python -m batchsim plan --trace batchsim/traces/azure_llm_2023_conv.csv --speedup 10 \\
        --slo-p99-e2e 20 \\
        --gpus A100-80GB,H100-SXM,L4 --model llama-3-8b

It searches GPU kind x servers x policy x batch limit (batchsim.teach.scenarios.capacity)
by simulating the traffic on each fleet it tries, and prints the cheapest configuration
that meets the objective (in $/hour and $ per 1M output tokens), the Pareto front of cost
against p99, and why each other candidate loses. The objectives are percentiles over requests:
--slo-p99-e2e (end to end), --slo-ttft (p99 time to the first token the user receives) and
--slo-tpot; a fleet that turns any request away never meets them (requests longer than the model's
context excepted: no fleet serves those, and the plan says how many). The simulations of each round
run on Dask (--scheduler). An objective that no configuration meets is an error (exit 2) that names
the closest one.
"""

from __future__ import annotations

import argparse
import sys

from ..core import sizing
from ..core.config import POLICY_NAMES, WorkloadConfig
from ..core.errors import (
    ConfigError,
    check_at_most,
    check_choice,
    check_int_at_least,
    check_nonneg,
    show,
)
from ..core.files import dumps
from ..core.flags import add_flags, check_conflicts, comma_list, given
from ..core.router import ROUTER_NAMES
from ..machine.catalog import DEFAULT_CATALOG
from ..machine.server import DEFAULT_MODEL
from ..machine.serverconfig import SERVER_FLAGS
from ..teach.scenarios.capacity import PLAN_POLICIES, Objective, PlanResult, candidates, search
from .options import add_workload_args
from .plan_machine import (
    MACHINE,
    PLAN_REQUESTS,
    check_reachable,
    machine_of,
    size_for_steady_state,
    splits,
)
from .tasks import add_scheduler_args, check_scheduler, run_tasks, worker_count

__all__ = ["add_arguments", "run", "plan"]

DEFAULT_GPUS = "A100-80GB,H100-SXM,L4"


class _Once(argparse.Action):
    """One objective, two spellings (--slo-ttft, --slo-p99-ttft): given twice, argparse would keep
    the last without a word; which one the user meant is theirs to say."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        before = getattr(namespace, self.dest, None)
        if before is not None:
            parser.error(
                f"{option_string} {show(values)} sets the objective "
                f"{'/'.join(self.option_strings)} already given as {show(before)}: give it once"
            )
        setattr(namespace, self.dest, values)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_workload_args(p)
    g = p.add_argument_group(
        "objective (p99 over requests, in seconds; every request must be served)"
    )
    g.add_argument(
        "--slo-p99-e2e",
        dest="slo_p99_e2e",
        type=float,
        default=None,
        metavar="S",
        help="p99 end-to-end latency",
    )
    g.add_argument(
        "--slo-ttft",
        "--slo-p99-ttft",
        dest="slo_p99_ttft",
        type=float,
        default=None,
        metavar="S",
        action=_Once,
        help="p99 time to the first token the user receives",
    )
    g.add_argument(
        "--slo-tpot",
        "--slo-p99-tpot",
        dest="slo_p99_tpot",
        type=float,
        default=None,
        metavar="S",
        action=_Once,
        help="p99 time per output token",
    )
    s = p.add_argument_group("search space")
    s.add_argument(
        "--gpus",
        default=DEFAULT_GPUS,
        help=f"GPU kinds to consider (default {DEFAULT_GPUS}; the catalog has "
        f"{', '.join(g for g in DEFAULT_CATALOG.gpus if g != 'cpu')})",
    )
    s.add_argument(
        "--model",
        dest="sim_model",
        default=DEFAULT_MODEL,
        help=f"the model served (default {DEFAULT_MODEL})",
    )
    s.add_argument(
        "--policies",
        default=",".join(PLAN_POLICIES),
        help="policies to consider (default taxi,dynamic,continuous)",
    )
    s.add_argument(
        "--batch-sizes",
        default="8,32,128",
        help="batch limits to try: max_seqs of continuous, max_batch of static and dynamic "
        "(default 8,32,128)",
    )
    s.add_argument(
        "--max-wait", type=float, default=0.1, help="dynamic batching's max_wait (default 0.1 s)"
    )
    s.add_argument(
        "--router",
        default="least-loaded",
        help=f"the fleet's router: {', '.join(ROUTER_NAMES)} (default least-loaded)",
    )
    s.add_argument(
        "--max-replicas",
        type=int,
        default=64,
        help="the most servers of one kind to consider (default 64)",
    )
    m = p.add_argument_group(
        "machine (as in run; --tp N fixes the split, otherwise plan tries the splits that fit)"
    )
    add_flags(m, [f for f in SERVER_FLAGS if f.dest in MACHINE])
    add_scheduler_args(p)
    o = p.add_argument_group("output")
    o.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object {config, answer, front, verdicts, notes}",
    )
    o.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar per round",
    )
    o.add_argument(
        sizing.OVERRIDE_FLAG,
        dest="no_size_check",
        action="store_true",
        help="run even when one simulation is estimated far beyond this machine",
    )


def _batches(text: str) -> list[int]:
    out = []
    for t in str(text).split(","):
        try:
            b = int(t.strip())
        except ValueError:
            raise ConfigError(
                f"batch-sizes must be whole numbers, got {t.strip()[:40]!r}"
            ) from None
        check_int_at_least("batch-sizes", b, 1)
        out.append(b)
    return sorted(set(out))


def _workload_flags(args: argparse.Namespace) -> dict:
    keys = (
        "arrival",
        "trace",
        "rate",
        "requests",
        "duration",
        "prompt_len",
        "output_len",
        "speedup",
        "seed",
    )
    flags = {k: getattr(args, k, None) for k in keys}
    check_conflicts(given(flags))
    flags["sized"] = (
        flags["requests"] is None
        and flags["duration"] is None
        and not (flags["trace"] or str(flags["arrival"] or "").startswith("trace:"))
    )
    if flags["requests"] is None and flags["duration"] is None:
        if flags["trace"] or str(flags["arrival"] or "").startswith("trace:"):
            from ..core.flags import trace_of
            from ..core.traces import read_trace
            from ..traces import check_trace_file

            # not there: where traces come from, not a bare "not found"
            check_trace_file(trace_of(flags))
            flags["requests"] = len(read_trace(trace_of(flags)).arrival_s)  # the whole trace
        else:
            flags["requests"] = PLAN_REQUESTS
    return flags


def plan(args: argparse.Namespace) -> tuple[PlanResult, dict, list[str]]:
    """Check every flag, size the work, search; returns (result, config, notes)."""
    # an objective is checked before anything else
    Objective(args.slo_p99_e2e, args.slo_p99_ttft, args.slo_p99_tpot)
    gpus = comma_list(args.gpus, "gpus", [g for g in DEFAULT_CATALOG.gpus], among="among")
    DEFAULT_CATALOG.model(args.sim_model)
    policies = comma_list(args.policies, "policies", POLICY_NAMES, among="among")
    batches = _batches(args.batch_sizes)
    check_nonneg("max-wait", args.max_wait)
    check_choice("router", args.router, ROUTER_NAMES)
    check_int_at_least("max-replicas", args.max_replicas, 1)
    from ..core.fleet import MAX_REPLICAS

    check_at_most("max-replicas", args.max_replicas, MAX_REPLICAS, "servers of one kind")
    scheduler = check_scheduler(args.scheduler)
    machine, server_kw = machine_of(args)
    objective0 = Objective(args.slo_p99_e2e, args.slo_p99_ttft, args.slo_p99_tpot)
    flags = _workload_flags(args)
    sized = flags.pop("sized")
    wl = WorkloadConfig.from_flags(given(flags)).build()
    wl, steady, max_load = size_for_steady_state(flags, wl, objective0, resize=sized)
    if not getattr(args, "no_size_check", False):
        sizing.check(sizing.estimate(len(wl), float(wl.output_tokens.mean())))
    span = float(wl.arrivals[-1]) if len(wl) > 1 else 1.0
    rate = len(wl) / span if span > 0 else float(len(wl))
    prompt, output = float(wl.prompt_tokens.mean()), float(wl.output_tokens.mean())
    notes: list[str] = [steady]
    tps = splits(args, gpus, args.sim_model, server_kw)
    notes += [
        f"{g} left out: --tp {args.tp} is not a split it allows (its catalogue entry: link, GPUs "
        f"per node)"
        for g, t in tps.items()
        if not t
    ]
    check_reachable(
        candidates(gpus, policies, batches, tps), args.sim_model, rate, prompt, output, server_kw
    )
    flags.update(machine)
    context = DEFAULT_CATALOG.model(args.sim_model).max_context
    unservable = int((wl.prompt_tokens + wl.output_tokens - 1 > context).sum()) if context else 0
    if unservable == len(wl):  # nothing to search for: every fleet turns every request away
        raise ConfigError(
            f"no request fits {args.sim_model}'s context of {context:,} positions (prompt + "
            f"output; {_lengths(flags)}): no fleet serves any; shorten --prompt-len or --output-len"
        )
    if unservable:
        notes.append(
            f"{unservable} of {len(wl)} requests are longer than {args.sim_model}'s context of "
            f"{context:,} "
            "positions: no fleet serves them, so the objective is for the others"
        )
    objective = Objective(args.slo_p99_e2e, args.slo_p99_ttft, args.slo_p99_tpot, unservable)
    rounds = [0]

    def run_round(fn, tasks):
        rounds[0] += 1
        return run_tasks(
            fn,
            tasks,
            scheduler,
            args.jobs,
            progress=args.progress,
            desc=f"plan round {rounds[0]}",
            notes=notes if rounds[0] == 1 else None,
        )

    result = search(
        flags,
        candidates(gpus, policies, batches, tps),
        objective,
        args.sim_model,
        args.router,
        rate,
        prompt,
        output,
        max_replicas=args.max_replicas,
        max_wait=args.max_wait,
        run=run_round,
        per_round=2 * (1 if scheduler == "none" else worker_count(args.jobs, 64)),
        server_kw=server_kw,
        max_load=max_load,
    )
    notes.append(
        f"searched {result.simulations} fleets in {rounds[0]} rounds, {result.seconds:.1f} s"
    )
    config = {
        "workload": wl.description,
        "requests": len(wl),
        "rate": rate,
        "objective": objective.describe(),
        "gpus": gpus,
        "model": args.sim_model,
        "policies": policies,
        "batch_sizes": batches,
        "router": args.router,
        "max_replicas": args.max_replicas,
        "tp": tps,
        "mean_prompt": prompt,
        "mean_output": output,
        "machine": {k: v for k, v in {**machine, **server_kw}.items() if v is not None},
        "steady_state": steady,
        "max_load": max_load,
    }
    return result, config, notes


def _lengths(flags: dict) -> str:
    """The length flags in force, as the user wrote them (the trace's when there is one)."""
    from ..core.flags import trace_of

    if trace_of(flags):
        return f"trace {trace_of(flags)}"
    return (
        ", ".join(
            f"--{k.replace('_', '-')} {flags[k]}"
            for k in ("prompt_len", "output_len")
            if flags.get(k)
        )
        or "the default lengths"
    )


def _row(p) -> dict:
    s = p.summary
    return {
        "config": p.label(),
        "gpu": p.candidate.gpu,
        "policy": p.candidate.policy,
        "batch": p.candidate.batch,
        "servers": p.replicas,
        "cost_per_hour": p.cost,
        "cost_per_1m_tokens": s.get("cost_per_1m_tokens"),
        "p99_e2e": s.get("p99_e2e"),
        "p99_ttft": s.get("p99_ttft_delivered"),
        "p99_tpot": s.get("p99_tpot"),
        "meets": p.meets,
        "misses": p.misses,
    }


def _table(points) -> str:
    head = (
        f"{'$/hour':>8}  {'$/1M tok':>8}  {'p99 E2E':>8}  {'p99 TTFT':>8}  {'meets':>5}  "
        f"configuration"
    )
    lines = [head, "-" * len(head)]
    for p in points:
        s = p.summary
        lines.append(
            f"{p.cost:>8,.2f}  {s.get('cost_per_1m_tokens') or 0:>8.2f}  {_f(s.get('p99_e2e')):>8} "
            f" {_f(s.get('p99_ttft_delivered')):>8}  {'yes' if p.meets else 'no':>5}  {p.label()}"
        )
    return "\n".join(lines)


def _f(v) -> str:
    # 0.1 ms is not "0 ms"
    return "-" if v is None else f"{v:.2f} s" if v >= 1 else f"{v * 1e3:.3g} ms"


def run(args: argparse.Namespace) -> int:
    result, config, notes = plan(args)
    best = result.best
    if args.json:
        print(
            dumps(
                {
                    "config": config,
                    "answer": _row(best) if best else None,
                    "front": [_row(p) for p in result.front],
                    "closest": _row(result.closest) if result.closest else None,
                    "verdicts": result.verdicts,
                    "notes": notes,
                }
            )
        )
    else:
        print(
            f"capacity plan: {config['requests']:,} requests at {config['rate']:.2f}/s "
            f"({config['workload']}); objective {result.objective.describe()}, every request "
            f"served\n"
        )
        if best is not None:
            s = best.summary
            print(
                f"cheapest: {best.replicas} x {best.candidate.gpu}, "
                f"{best.candidate.label().split(' ', 1)[1]}, {config['router']} router: "
                f"${best.cost:,.2f}/hour, ${s.get('cost_per_1m_tokens') or 0:.2f} per 1M output "
                f"tokens (p99 E2E {_f(s.get('p99_e2e'))}, p99 TTFT "
                f"{_f(s.get('p99_ttft_delivered'))})\n"
            )
        print(
            f"Pareto front, cost against "
            f"{result.objective.metric.replace('_delivered', '').replace('_', ' ')}:"
        )
        print(_table(result.front))
        print("\nwhy the others lose:")
        print("\n".join(f"  - {v}" for v in result.verdicts))
        print("\n" + "\n".join(notes))
    if best is None:
        c = result.closest
        near = f"; the closest is {c.label()}: {', '.join(c.misses)}" if c is not None else ""
        print(
            f"batchsim: error: no configuration meets {result.objective.describe()} with up to "
            f"{config['max_replicas']} servers{near}",
            file=sys.stderr,
        )
        return 2
    return 0
