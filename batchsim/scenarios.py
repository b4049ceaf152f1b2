"""Named scenarios: the stories of the course, each runnable with one command.

A scenario is a name, a one-line summary, a short story, and defaults for the
command-line knobs (any flag the user gives wins over the scenario's default).
Most scenarios run several policies on one identical workload and compare them;
a scenario may instead bring its own ``runner``.

    python -m batchsim scenarios           # list them
    python -m batchsim run taxi-vs-bus     # run one, print the table, write figures
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .config import (
    kv_budget_from_args, policies_from_args, policy_from_args, slo_from_args, step_time_from_args,
    workload_from_args,
)
from .errors import ConfigError
from .metrics import format_table, summarize
from .simulator import SimResult, simulate

__all__ = ["Scenario", "ScenarioReport", "SCENARIOS", "register", "get_scenario", "run_policies", "FLAGSHIP"]


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


def run_policies(args: argparse.Namespace, scenario: Scenario, progress: bool = False) -> ScenarioReport:
    """Run each of the scenario's policies on one identical workload; summarise and tabulate."""
    d = scenario.defaults
    workload = workload_from_args(args, d)
    names = policies_from_args(args, d)
    policies = [policy_from_args(args, n, d) for n in names]
    step_time = step_time_from_args(args, d)
    kv = kv_budget_from_args(args, d)
    slo = slo_from_args(args, d)
    report = ScenarioReport(scenario.name, f"{scenario.name}: {scenario.summary}")
    report.config = {
        "workload": workload.description,
        "requests": len(workload),
        "step_time": repr(step_time),
        "kv_budget_tokens": kv,
        "policies": [repr(p) for p in policies],
    }
    for name, policy in zip(names, policies):
        res = simulate(workload, policy, step_time, kv_budget_tokens=kv, progress=progress)
        report.results[name] = res
        report.summaries[name] = summarize(res, slo)
    keys = list(_table_keys(slo))
    report.table = format_table(report.summaries, keys)
    report.notes.append(f"workload: {len(workload)} requests, {workload.description}")
    report.notes.append(f"server: {step_time!r}; KV budget: {kv if kv is not None else 'unlimited'} tokens")
    return report


def _table_keys(slo):
    from .metrics import SUMMARY_KEYS

    keys = [k for k in SUMMARY_KEYS if k not in ("kv_peak_tokens",)]
    if slo.any:
        keys.append("goodput")
    return keys


FLAGSHIP = "taxi-vs-bus"

register(Scenario(
    name="taxi-vs-bus",
    summary="the same traffic served by a taxi, a bus, a bus with a timetable and a bus that never stops",
    story=(
        "A taxi takes one passenger at a time: no waiting for company, but every ride costs a whole car. "
        "A bus waits for its seats to fill, then carries everyone for the price of one trip. Here the same "
        "stream of requests meets four servers: no batching (taxi), static batches of N (the bus that leaves "
        "only when full), dynamic batches (leave when full or when the first passenger has waited max_wait) "
        "and continuous batching (passengers board and alight at every stop). Watch throughput, latency and "
        "how big the batches really get."
    ),
    defaults={"rate": 20.0, "requests": 600, "max_batch": 16, "max_wait": 0.1},
))
