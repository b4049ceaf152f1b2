"""The ``fleet`` scenario: more buses, or bigger buses?

One stream of requests, three ways to serve it: one GPU running batches of up to 64,
four GPUs running batches of up to 8 each (behind a least-loaded router), and four GPUs
each running one request at a time (four taxis). The bill is servers x $/hour for the
whole run, so four GPUs cost four times one, whatever they do with their time.
"""

from __future__ import annotations

import argparse

from ...core.errors import ConfigError, show
from ...core.flags import flag_name
from .base import Run, Scenario, ScenarioReport, register, run_set
from .library import SERVER

__all__ = ["FLEET_RUNS"]

#: (label, policy, knobs): the three fleets of the story.
FLEET_RUNS = (
    ("1 GPU x batch 64", "continuous", {"replicas": 1, "max_seqs": 64}),
    ("4 GPUs x batch 8", "continuous", {"replicas": 4, "max_seqs": 8}),
    ("4 taxis", "taxi", {"replicas": 4}),
)


def _check_flags(args: argparse.Namespace) -> None:
    """The three fleets are the story: a flag that sets what their labels name would relabel
    nothing."""
    fixed = {
        k: [str(knobs[k]) for _, _, knobs in FLEET_RUNS if k in knobs]
        for k in ("replicas", "max_seqs")
    }
    for k, each in fixed.items():
        v = getattr(args, k, None)
        if v is not None:
            raise ConfigError(
                f"{flag_name(k)} {show(v)} means nothing in scenario fleet, whose three runs set "
                f"their own {k} ({', '.join(each[:-1])} and {each[-1]}: their labels name them); "
                f"drop it, or run your own fleet with run --policy continuous {flag_name(k)} "
                f"{show(v)}"
            )


def _fleet(args: argparse.Namespace, scenario: Scenario) -> ScenarioReport:
    _check_flags(args)
    runs = [Run(label, policy, knobs) for label, policy, knobs in FLEET_RUNS]
    report = run_set(
        args,
        scenario,
        runs,
        keys=[
            "replicas",
            "completed",
            "request_throughput",
            "p99_ttft",
            "mean_tpot",
            "p50_e2e",
            "p99_e2e",
            "busy_fraction",
            "mean_batch_size",
            "cost_total",
            "cost_per_request",
            "cost_per_1m_tokens",
        ],
    )
    s = report.summaries
    big, many, taxis = (s[label] for label, _, _ in FLEET_RUNS)
    lines = [
        f"same traffic for all three: {report.config.get('requests')} requests; four GPUs are "
        f"routed {report.results[FLEET_RUNS[1][0]].meta.get('router', 'least-loaded')}"
    ]
    if big.get("cost_total") is not None:
        lines.append(
            f"bill: one big bus ${big['cost_total']:.2f}, four small buses "
            f"${many['cost_total']:.2f}, four taxis ${taxis['cost_total']:.2f} "
            f"(${big['cost_per_1m_tokens']:.2f} vs ${many['cost_per_1m_tokens']:.2f} vs "
            f"${taxis['cost_per_1m_tokens']:.2f} per 1M tokens)"
        )
    lines.append(
        f"p99 E2E: {big['p99_e2e']:.2f} s vs {many['p99_e2e']:.2f} s vs {taxis['p99_e2e']:.2f} s. "
        + (
            "The bigger bus is the cheapest and about as fast: a batch shares each weight read, so "
            "one GPU running 64 rows serves what four running 8 serve, at a quarter of the bill"
            if big["p99_e2e"] <= 1.5 * many["p99_e2e"]
            else "Here the bigger bus is slower: one GPU is near its limit, and four share the load"
        )
        + f"; the taxis keep each GPU {taxis['busy_fraction']:.0%} busy for one row at a time."
    )
    report.notes[0:0] = lines
    report.config["figures"] = ["latency_cdf", "cost"]
    return report


register(
    Scenario(
        name="fleet",
        summary="more buses or bigger buses: 1 GPU with batch 64 vs 4 GPUs with batch 8 vs 4 "
        "taxis, same traffic",
        story=(
            "When traffic grows the first instinct is more servers. A second is bigger batches. "
            "Here one stream of requests (2 a second) meets three fleets: one GPU running "
            "continuous batches of up to 64, four GPUs running batches of up to 8 behind a "
            "least-loaded router, and four GPUs each serving one request at a time. Four GPUs cost "
            "four times one for every hour they are rented, busy or not. Compare the bill and the "
            "p99: a GPU reads all its weights for every step whether it carries one row or "
            "sixty-four, so a bigger bus buys capacity for almost nothing, and more buses buy it "
            "at full price. --router changes how the four GPUs share the traffic; --rate moves it."
        ),
        defaults={**SERVER, "rate": 2.0, "requests": 1200, "router": "least-loaded"},
        runner=_fleet,
    )
)
