"""What a scenario is and how it runs: the machinery behind the named stories.

A scenario is a name, a one-line summary, a short story, and defaults for the
command-line knobs (any flag the user gives wins over the scenario's default).
Most scenarios run several policies on one identical workload and compare them;
a scenario may instead bring its own ``runner``.

    python -m batchsim scenarios           # list them
    python -m batchsim run taxi-vs-bus     # run one, print the table, write figures
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


from ...cli.options import (
    WORKLOAD_DEFAULTS, _get, kv_budget_from_args, policies_from_args, policy_from_args, price_from_args,
    server_from_args, slo_from_args, step_time_from_args, workload_from_args,
)
from ...machine.cost import cost_summary
from ...core.errors import ConfigError, check_positive
from ...core.metrics import SUMMARY_KEYS, format_table, summarize, table_notes
from ...sim.simulator import SimResult, simulate

__all__ = [
    "Scenario", "ScenarioReport", "SCENARIOS", "register", "get_scenario", "run_policies", "run_set", "Run",
]


@dataclass
class ScenarioReport:
    """What a scenario produced: summaries by label, the raw results, a table, figures, notes."""

    name: str
    title: str
    summaries: dict[str, dict] = field(default_factory=dict)
    results: dict[str, SimResult] = field(default_factory=dict)
    table: str = ""
    figures: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)

    def text(self) -> str:
        parts = [self.title, "", self.table]
        if self.notes:
            parts += [""] + self.notes
        if self.figures:
            parts += ["", "figures: " + ", ".join(str(p) for p in self.figures)]
        return "\n".join(parts)


Runner = Callable[[argparse.Namespace, "Scenario"], ScenarioReport]


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    story: str
    defaults: dict = field(default_factory=dict)
    runner: Runner | None = None

    def run(self, args: argparse.Namespace) -> ScenarioReport:
        if self.runner is not None:
            return self.runner(args, self)
        return run_policies(args, self)


SCENARIOS: dict[str, Scenario] = {}


def register(s: Scenario) -> Scenario:
    SCENARIOS[s.name] = s
    return s


def get_scenario(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise ConfigError(f"scenario must be one of {', '.join(SCENARIOS)}, got {name!r}")
    return SCENARIOS[name]


# --- running labelled runs ------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One line of a scenario's table: a label, a policy, and defaults layered over the scenario's.

    ``defaults`` may hold ``rate_scale``: the run's arrival rate is the rate in force (the
    flag's or the scenario's) times this, so a user's ``--rate`` moves every part together.
    ``part`` groups runs that share a workload (laundromat's low and high load).
    """

    label: str
    policy: str
    defaults: dict = field(default_factory=dict)
    part: str = ""


_WORKLOAD_KEYS = ("arrival", "trace", "rate", "requests", "duration", "prompt_len", "output_len", "speedup", "seed")


def _args_for(args: argparse.Namespace, d: dict) -> argparse.Namespace:
    """The flags as a run sees them: with ``rate_scale`` applied to the rate in force."""
    scale = d.get("rate_scale")
    if scale is None:
        return args
    check_positive("rate_scale", scale)
    a = argparse.Namespace(**vars(args))
    a.rate = _get(args, "rate", WORKLOAD_DEFAULTS, d) * scale
    return a


#: Requests from which a run shows a progress bar on a terminal.
LONG_RUN = 20_000


def run_set(args: argparse.Namespace, scenario: Scenario, runs: list[Run], keys: list[str] | None = None,
            progress: bool = False, title: str | None = None, workload_notes: bool = True) -> ScenarioReport:
    """Run each labelled run; identical workloads are built once; add dollars when a price is known."""
    report = ScenarioReport(scenario.name, title or f"{scenario.name}: {scenario.summary}")
    workloads: dict[tuple, object] = {}
    described: dict[str, str] = {}
    servers: dict[str, tuple] = {}
    slo = None
    any_price = False
    policies_repr = []
    for run in runs:
        d = {**scenario.defaults, **run.defaults}
        a = _args_for(args, d)
        wkey = tuple(repr(getattr(a, k, None) if getattr(a, k, None) is not None else d.get(k)) for k in _WORKLOAD_KEYS)
        if wkey not in workloads:
            workloads[wkey] = workload_from_args(a, d)
        workload = workloads[wkey]
        policy = policy_from_args(a, run.policy, d)
        step_time = step_time_from_args(a, d)
        kv = kv_budget_from_args(a, d)
        server = server_from_args(a, d)
        price = price_from_args(a, d, server)
        slo = slo_from_args(a, d)
        # A bar only where a person watches a run long enough to wait for (about a second or more).
        show = progress or (len(workload) >= LONG_RUN and sys.stderr.isatty())
        res = simulate(workload, policy, step_time, kv_budget_tokens=kv, progress=show)
        summary = summarize(res, slo)
        if price is not None:
            any_price = True
            summary.update(cost_summary(summary, price))
        if server is not None:
            summary["kv_peak_gb"] = round(summary["kv_peak_tokens"] * server.kv.bytes_per_token / 1e9, 2)
        res.meta.update(label=run.label, part=run.part, server=server, price=price, slo=slo, step_time=step_time,
                        kv_budget_tokens=kv)
        report.results[run.label] = res
        report.summaries[run.label] = summary
        policies_repr.append(repr(policy))
        described.setdefault(workload.description, f"{len(workload)} requests, {workload.description}")
        skey = repr(step_time) + f"|{kv}|{price}"
        if skey not in servers:
            servers[skey] = (step_time, kv, server, price, workload)
    if keys is None:
        keys = _table_keys(slo)
    if any_price and "cost_per_request" not in keys:
        keys = list(keys) + ["cost_per_request", "cost_per_1m_tokens"]
    report.table = format_table(report.summaries, keys)
    report.notes.extend(table_notes(keys))  # which TTFT the table shows: produced, or delivered
    first = next(iter(report.results.values()), None)
    report.config = {
        "workload": first.workload if first else "",
        "requests": len(first.records) if first else 0,
        "step_time": repr(first.meta["step_time"]) if first else "",
        "kv_budget_tokens": first.meta["kv_budget_tokens"] if first else None,
        "policies": policies_repr,
        "labels": list(report.summaries),
        "server": first.meta["server"].config() if first and first.meta["server"] is not None else None,
        "price_per_hour": first.meta["price"] if first else None,
    }
    for text in described.values() if workload_notes else ():
        report.notes.append(f"workload: {text}")
    for step_time, kv, server, price, workload in servers.values():
        report.notes.extend(_server_notes(step_time, kv, server, price, workload))
    return report


def _server_notes(step_time, kv, server, price, workload) -> list[str]:
    if server is None:
        out = [f"server: {step_time!r}; KV budget: {kv if kv is not None else 'unlimited'} tokens"]
        if price is not None:
            out.append(f"price: ${price:.2f} per hour (--gpu-price)")
        return out
    out = [f"server: {server.describe()}; step time {step_time!r}"]
    ctx = float((workload.prompt_tokens + workload.output_tokens).mean()) if len(workload) else 0.0
    line = f"KV budget: {server.kv.describe()}"
    if ctx > 0:
        line += f"; at the mean context of {ctx:.0f} tokens memory allows a batch of {server.kv.max_batch(ctx)}"
    out.append(line)
    longest = int((workload.prompt_tokens + workload.output_tokens).max()) if len(workload) else 0
    if longest > server.model.max_context:
        n = int(((workload.prompt_tokens + workload.output_tokens) > server.model.max_context).sum())
        out.append(f"note: {n} requests exceed {server.model.name}'s context of {server.model.max_context} tokens "
                   "(simulated anyway; a real server would refuse them)")
    return out


def run_policies(args: argparse.Namespace, scenario: Scenario, progress: bool = False) -> ScenarioReport:
    """Run each of the scenario's policies on one identical workload; summarise and tabulate."""
    names = policies_from_args(args, scenario.defaults)
    keys = scenario.defaults.get("table_keys")
    return run_set(args, scenario, [Run(n, n) for n in names], keys=keys, progress=progress)


def _table_keys(slo):
    keys = [k for k in SUMMARY_KEYS if k not in ("kv_peak_tokens",)]
    if slo is not None and slo.any:
        keys.append("goodput")
    return keys


def _policy_label(name: str, d: dict) -> str:
    if name in ("static", "dynamic"):
        return f"{name}-{d.get('max_batch')}"
    if name == "continuous":
        return f"{name}-{d.get('max_seqs')}"
    return name


