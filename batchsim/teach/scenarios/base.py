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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...core import rejections, sizing
from ...core.config import WorkloadConfig
from ...core.errors import ConfigError
from ...core.flags import given
from ...core.metrics import SUMMARY_KEYS, TTFT_NOTE, format_table, table_notes
from ...sim.simulator import RunResult
from ...traces import check_trace_file, served_record_note
from .execute import RunPlan, extent_flag, plan_runs, server_limits, simulate_plan, size_of
from .knobs import policies_from_args

__all__ = [
    "Scenario",
    "ScenarioReport",
    "SCENARIOS",
    "register",
    "get_scenario",
    "run_policies",
    "run_set",
    "Run",
    "Interrupted",
    "plan_runs",
    "size_of",
    "RunPlan",
    "server_limits",
    "simulate_plan",
    "policy_label",
]


@dataclass
class ScenarioReport:
    """What a scenario produced: summaries by label, the raw results, a table, figures, notes."""

    name: str
    title: str
    summaries: dict[str, dict] = field(default_factory=dict)
    results: dict[str, RunResult] = field(default_factory=dict)
    table: str = ""
    figures: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    # a fleet's runs: each server's
    replica_summaries: dict[str, list[dict]] = field(default_factory=dict)
    replica_table: str = ""

    def rejection_lines(self) -> list[str]:
        """Under the table: for every run that turned requests away, how many and why."""
        return rejections.lines(self.results)

    def text(self) -> str:
        parts = [self.title, "", self.table, *self.rejection_lines()]
        if self.replica_table:
            parts += ["", "each server of a fleet:", self.replica_table]
        if self.notes:
            parts += [""] + self.notes
        if self.figures:
            parts += ["", "figures: " + ", ".join(str(p) for p in self.figures)]
        return "\n".join(parts)


Runner = Callable[[argparse.Namespace, "Scenario"], ScenarioReport]


class Interrupted(Exception):
    """Ctrl-C during a run: ``report`` holds the runs that finished, ``label`` the one cut short."""

    def __init__(self, report: ScenarioReport, label: str) -> None:
        super().__init__(f"interrupted during {label}")
        self.report, self.label = report, label


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


#: Requests from which a run shows a progress bar on a terminal.
LONG_RUN = 20_000


def run_set(
    args: argparse.Namespace,
    scenario: Scenario,
    runs: list[Run],
    keys: list[str] | None = None,
    progress: bool = False,
    title: str | None = None,
    workload_notes: bool = True,
) -> ScenarioReport:
    """Run each labelled run; identical workloads are built once; add dollars when a price is known.

    Every run's configuration is resolved and checked, and the whole set sized, before the
    first simulation starts: a bad knob in the last run must not cost the time of the first.
    Ctrl-C raises ``Interrupted`` carrying the runs that finished.
    """
    report = ScenarioReport(scenario.name, title or f"{scenario.name}: {scenario.summary}")
    flags = given(args)
    plans = plan_runs(args, scenario, runs)
    wconfigs: dict[WorkloadConfig, object] = {p.workload: None for p in plans}
    if not getattr(args, "no_size_check", False):
        sizing.check(size_of(plans, wconfigs), extent_flag=extent_flag(plans))
    for wcfg in wconfigs:
        # a missing trace says where traces come from, not only "not found"
        check_trace_file(wcfg.trace)
        wconfigs[wcfg] = wcfg.build()
        served = served_record_note(wcfg.trace)
        if served is not None and served not in report.notes:
            report.notes.append(served)
    # traces: sized again now that their rows are known
    if not getattr(args, "no_size_check", False):
        sizing.check(size_of(plans, wconfigs), extent_flag=extent_flag(plans))
    described: dict[str, str] = {}
    servers: dict[str, tuple] = {}
    slo = None
    any_price = False
    policies_repr = []
    show_bar = flags.get("progress")
    for plan in plans:
        run, slo, setup = plan.run, plan.slo, plan.setup
        workload = wconfigs[plan.workload]
        # Progress only where a run is long enough to wait for (about a second or more): a bar at a
        # terminal, a line every 30 s elsewhere (a log, a CI job: a silent ten-minute run looks
        # hung).
        if show_bar is not None or progress:
            show: bool | str = show_bar if show_bar is not None else progress
        else:
            show = (
                (True if sys.stderr.isatty() else "lines") if len(workload) >= LONG_RUN else False
            )
        try:
            res, summary, parts = simulate_plan(plan, workload, progress=show)
        except KeyboardInterrupt:
            _finish(report, keys, slo, any_price, policies_repr)
            raise Interrupted(report, run.label) from None
        any_price = any_price or setup.price is not None
        report.results[run.label] = res
        report.summaries[run.label] = summary
        if parts:
            report.replica_summaries[run.label] = parts
        policies_repr.append(repr(plan.policy.build()))
        described.setdefault(
            workload.description, f"{len(workload)} requests, {workload.description}"
        )
        skey = repr(setup.step_time) + f"|{setup.kv_budget_tokens}|{setup.price}"
        if skey not in servers:
            servers[skey] = (
                setup.step_time,
                setup.kv_budget_tokens,
                setup.server,
                setup.price,
                workload,
            )
        if plan.fleet.replicas > 1 or plan.fleet.summary_only:
            note = f"{run.label}: {plan.fleet.describe()}" + (
                "; summary only (percentiles from sketches within 0.5 %)"
                if plan.fleet.summary_only
                else ""
            )
            report.notes.append(note)
    _finish(report, keys, slo, any_price, policies_repr)
    for text in described.values() if workload_notes else ():
        report.notes.append(f"workload: {text}")
    for step_time, kv, server, price, workload in servers.values():
        report.notes.extend(_server_notes(step_time, kv, server, price, workload))
    return report


def column_notes(keys) -> list[str]:
    """What a table's TTFT columns mean, for the kinds of TTFT it shows (``table_notes`` names both
    kinds under any table with either, so a table without a "TTFT dlv" column explained one)."""
    produced, _, delivered = TTFT_NOTE.partition("; ")
    kinds = {"delivered" in k for k in keys if "ttft" in k}
    if not delivered or len(kinds) != 1:
        return table_notes(keys)
    if kinds == {True}:
        return [delivered]
    return [
        produced
        + " (a padded batch, like generate(), hands it to the user only when the whole batch ends)"
    ]


def _finish(report: ScenarioReport, keys, slo, any_price: bool, policies_repr: list[str]) -> None:
    """The table and config of the runs done so far."""
    if keys is None:
        keys = _table_keys(slo)
    if any_price and "cost_per_request" not in keys:
        keys = list(keys) + ["cost_per_request", "cost_per_1m_tokens"]
    if any(s.get("replicas", 1) > 1 for s in report.summaries.values()) and "replicas" not in keys:
        keys = ["replicas", *keys]
    report.table = format_table(report.summaries, keys)
    if report.replica_summaries:
        rows = {
            f"{label} / server {i}": s
            for label, parts in report.replica_summaries.items()
            for i, s in enumerate(parts)
        }
        report.replica_table = format_table(rows, [k for k in keys if k != "replicas"])
    report.notes.extend(column_notes(keys))  # which TTFT the table shows: produced, or delivered
    first = next(iter(report.results.values()), None)
    report.config = {
        "workload": first.workload if first else "",
        "requests": len(first.records) if first else 0,
        "step_time": repr(first.meta["step_time"]) if first else "",
        "kv_budget_tokens": first.meta["kv_budget_tokens"] if first else None,
        "policies": policies_repr,
        "labels": list(report.summaries),
        "server": first.meta["server"].config()
        if first and first.meta["server"] is not None
        else None,
        "price_per_hour": first.meta["price"] if first else None,
    }


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
        line += (
            f"; at the mean context of {ctx:.0f} tokens memory allows a batch of "
            f"{server.kv.max_batch(ctx)}"
        )
    out.append(line)
    return out


def run_policies(
    args: argparse.Namespace, scenario: Scenario, progress: bool = False
) -> ScenarioReport:
    """Run each of the scenario's policies on one identical workload; summarise and tabulate."""
    names = policies_from_args(args, scenario.defaults)
    keys = scenario.defaults.get("table_keys")
    return run_set(args, scenario, [Run(n, n) for n in names], keys=keys, progress=progress)


def _table_keys(slo):
    keys = [k for k in SUMMARY_KEYS if k not in ("kv_peak_tokens",)]
    if slo is not None and slo.any:
        keys.append("goodput")
    return keys


def policy_label(name: str, d: dict) -> str:
    """A run's label: the policy and the knob that sizes its batch (static-8, continuous-64)."""
    if name in ("static", "dynamic"):
        return f"{name}-{d.get('max_batch')}"
    if name == "continuous":
        return f"{name}-{d.get('max_seqs')}"
    return name
