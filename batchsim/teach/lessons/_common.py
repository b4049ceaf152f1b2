"""What every lesson shares: the lessons' server, the claim to check, and running a set of
policies."""

from __future__ import annotations

from ...core.metrics import SLO, summarize
from ...core.workload import Workload
from ...machine.cost import cost_summary
from ...machine.server import Server
from ...sim.simulator import simulate
from ..figures import POLICY_COLORS

__all__ = [
    "LESSON_GPU",
    "LESSON_MODEL",
    "CLAIM",
    "POLICY_COLORS",
    "lesson_server",
    "run_each",
    "tick_labels",
]


#: The lessons' server, the same as the named scenarios': Llama-3-8B in fp16 on one A100-80GB.
LESSON_GPU = "A100-80GB"
LESSON_MODEL = "llama-3-8b"

#: The claim the course teaches students to check (from the project's seed material):
#: "Without batching: 1 GPU serves 10 RPS = $0.10/request. With batching (size=32):
#: 1 GPU serves 100 RPS = $0.01/request. Savings: 10x."
CLAIM = {
    "taxi_rps": 10.0,
    "taxi_per_request": 0.10,
    "batch": 32,
    "batch_rps": 100.0,
    "batch_per_request": 0.01,
}


def lesson_server(gpu: str, model: str, price_per_hour: float | None = None, **kw) -> Server:
    """The lessons' server: a named GPU and model, at a price if given."""
    return Server.named(gpu, model, price_per_hour=price_per_hour, **kw)


def run_each(
    wl: Workload, policies: dict, server: Server, slo: SLO | None = None, price: float | None = None
):
    """Simulate each policy on the same workload; return ({label: RunResult}, {label: summary with
    dollars})."""
    results, rows = {}, {}
    price = server.price if price is None else price
    for label, policy in policies.items():
        res = simulate(wl, policy, server.step_time, kv_budget_tokens=server.kv.tokens)
        s = summarize(res, slo)
        s.update(cost_summary(s, price))
        results[label], rows[label] = res, s
    return results, rows


def tick_labels(ax) -> None:
    """Bar labels small enough that a lesson's policy names fit under their bars."""
    ax.tick_params(axis="x", labelsize=8)
