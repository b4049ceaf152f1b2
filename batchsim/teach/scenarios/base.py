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


from .knobs import WORKLOAD_DEFAULTS, _get, policies_from_args
from ...core import rejections, sizing
from ...core.config import PolicyConfig, WorkloadConfig, slo_config
from ...core.flags import given
from ...core.errors import ConfigError, check_positive
from ...core.limits import ServerLimits
from ...core.metrics import SUMMARY_KEYS, format_table, summarize, table_notes
from ...machine.cost import cost_summary
from ...machine.serverconfig import ServerConfig
from ...sim.simulator import SimResult, simulate

__all__ = [
    "Scenario", "ScenarioReport", "SCENARIOS", "register", "get_scenario", "run_policies", "run_set", "Run",
    "Interrupted", "plan_runs", "size_of",
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

    def rejection_lines(self) -> list[str]:
        """Under the table: for every run that turned requests away, how many and why."""
        return rejections.lines(self.results)

    def text(self) -> str:
        parts = [self.title, "", self.table, *self.rejection_lines()]
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
    """Run each labelled run; identical workloads are built once; add dollars when a price is known.

    Every run's configuration is resolved and checked, and the whole set sized, before the
    first simulation starts: a bad knob in the last run must not cost the time of the first.
    Ctrl-C raises ``Interrupted`` carrying the runs that finished.
    """
    report = ScenarioReport(scenario.name, title or f"{scenario.name}: {scenario.summary}")
    flags = given(args)
    plans = plan_runs(args, scenario, runs)
    wconfigs: dict[WorkloadConfig, object] = {p[1]: None for p in plans}
    if not getattr(args, "no_size_check", False):
        sizing.check(size_of(plans, wconfigs), extent_flag=_extent_flag(plans))
    for wcfg in wconfigs:
        wconfigs[wcfg] = wcfg.build()
    if not getattr(args, "no_size_check", False):  # traces: sized again now that their rows are known
        sizing.check(size_of(plans, wconfigs), extent_flag=_extent_flag(plans))
    described: dict[str, str] = {}
    servers: dict[str, tuple] = {}
    slo = None
    any_price = False
    policies_repr = []
    show_bar = flags.get("progress")
    for run, wcfg, pcfg, setup, slo in plans:
        workload = wconfigs[wcfg]
        policy = pcfg.build()
        step_time, kv, server, price = setup.step_time, setup.kv_budget_tokens, setup.server, setup.price
        # A bar only where a person watches a run long enough to wait for (about a second or more).
        show = show_bar if show_bar is not None else (progress or (len(workload) >= LONG_RUN and sys.stderr.isatty()))
        try:
            res = simulate(workload, policy, step_time, progress=show, limits=server_limits(kv, server, step_time))
        except KeyboardInterrupt:
            _finish(report, keys, slo, any_price, policies_repr)
            raise Interrupted(report, run.label) from None
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
    _finish(report, keys, slo, any_price, policies_repr)
    for text in described.values() if workload_notes else ():
        report.notes.append(f"workload: {text}")
    for step_time, kv, server, price, workload in servers.values():
        report.notes.extend(_server_notes(step_time, kv, server, price, workload))
    return report


def plan_runs(args: argparse.Namespace, scenario: Scenario, runs: list[Run]) -> list[tuple]:
    """Every run's configuration, resolved and checked: (run, workload, policy, server setup, SLO)."""
    plans = []
    for run in runs:
        d = {**scenario.defaults, **run.defaults}
        flags = given(_args_for(args, d))
        plans.append((run, WorkloadConfig.from_flags(flags, d), PolicyConfig.from_flags(run.policy, flags, d),
                      ServerConfig.from_flags(flags, d).build(), slo_config(flags, d)))
    return plans


def size_of(plans: list[tuple], workloads: dict | None = None) -> sizing.Size:
    """The estimated size of running ``plans`` (a trace not read yet counts once it is)."""
    workloads = workloads or {}
    requests = tokens = 0.0
    for _, wcfg, _, _, _ in plans:
        wl = workloads.get(wcfg)
        if wl is not None:
            n, out = float(len(wl)), float(wl.output_tokens.mean()) if len(wl) else 0.0
        elif wcfg.trace is not None:
            continue
        else:
            n, out = wcfg.expected_requests, wcfg.output_dist().mean
        requests, tokens = max(requests, n), tokens + n * out
    mean_out = tokens / len(plans) / requests if plans and requests else 0.0
    return sizing.estimate(requests, mean_out, runs=len(plans))


def _extent_flag(plans: list[tuple]) -> str:
    return "--duration" if any(p[1].duration is not None for p in plans) else "--requests"


def _finish(report: ScenarioReport, keys, slo, any_price: bool, policies_repr: list[str]) -> None:
    """The table and config of the runs done so far."""
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
    return out


def server_limits(kv, server, step_time) -> ServerLimits:
    """The simulated server's limits: its KV budget and its model's context (a catalog model's, or the
    one a calibration was measured on), which the policies enforce as a real server would."""
    context = server.model.max_context if server is not None else getattr(step_time, "context_len", None)
    return ServerLimits(kv_budget_tokens=kv, context_len=context)


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


