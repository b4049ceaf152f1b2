"""Capacity planning: the cheapest fleet that meets a latency objective, and why the others lose.

A candidate is a GPU kind, a policy and a batch limit (``continuous max_seqs=64``); a
configuration is a candidate times a number of servers. For each candidate the search
looks for the fewest servers that meet the objective (p99 end to end, p99 time to first
token and/or p99 time per token, every request served), by simulating the workload on
that fleet:

1. theory gives the first guess: one server of the candidate carries at most ``c``
   requests a second (back-to-back full batches of the workload's mean lengths,
   ``batch_capacity``), so the fleet needs about ``rate / c`` servers;
2. from there the number doubles until the objective is met, then bisects down: more
   servers never make a queue longer, so whether a fleet meets the objective is monotone
   in its size (up to the noise of one finite workload);
3. branch and bound: a candidate whose *cheapest still possible* fleet costs more than
   the cheapest answer found so far is dropped without another simulation.

Every configuration simulated is a point of cost ($/hour) against p99. The answer is the
cheapest point that meets the objective; the Pareto front is the points no other point
beats on both; every cheaper point misses the objective, by construction. The rounds'
simulations are independent of each other, so they run together on Dask (``run_tasks``).
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field
from functools import lru_cache

from ...core.errors import ConfigError, check_positive
from ...machine.server import Server
from ...sim.tasks import run_tasks
from ...traces import check_trace_file
from .base import Run, Scenario
from .execute import plan_runs, simulate_plan
from .steady import steady_misses, thirds

__all__ = [
    "Objective",
    "Candidate",
    "Point",
    "PlanResult",
    "candidates",
    "search",
    "evaluate",
    "PLAN_POLICIES",
    "server_capacity",
]

PLAN_POLICIES = ("taxi", "dynamic", "continuous")
_PLAN = Scenario("plan", "capacity plan", "")
#: Theory's count of servers (``rate / capacity``) rests on mean lengths; a fleet of fewer than this
#: share of it is taken to miss the objective when deciding what to simulate first and what to drop.
THEORY_MARGIN = 0.8
_KEEP = (
    "completed",
    "arrived",
    "rejected",
    "p99_e2e",
    "p99_ttft_delivered",
    "p99_tpot",
    "mean_e2e",
    "request_throughput",
    "cost_per_1m_tokens",
    "cost_total",
    "busy_fraction",
    "mean_batch_size",
    "duration",
    "kv_peak_tokens",
    "preemptions",
    "e2e_mid",
    "e2e_last",
)


@dataclass(frozen=True)
class Objective:
    """What every configuration must meet: p99 targets in seconds (None: no target), all requests
    served."""

    p99_e2e: float | None = None
    p99_ttft: float | None = None
    p99_tpot: float | None = None
    #: Requests no fleet can serve (longer than the model's context): turning these away is not a
    #: miss.
    unservable: int = 0

    def __post_init__(self) -> None:
        for name in ("p99_e2e", "p99_ttft", "p99_tpot"):
            v = getattr(self, name)
            if v is not None:
                check_positive(f"slo_{name}", v)
        if all(getattr(self, k) is None for k in ("p99_e2e", "p99_ttft", "p99_tpot")):
            raise ConfigError(
                "plan needs an objective: --slo-p99-e2e S and/or --slo-ttft S (p99 seconds)"
            )

    @property
    def metric(self) -> str:
        """The summary key the front is drawn against: the first objective given."""
        return (
            "p99_e2e"
            if self.p99_e2e is not None
            else "p99_ttft_delivered"
            if self.p99_ttft is not None
            else "p99_tpot"
        )

    def misses(self, s: dict) -> list[str]:
        """Why a summary fails the objective (empty: it meets it)."""
        out = []
        if s["rejected"] > self.unservable:
            out.append(
                f"turns away {s['rejected'] - self.unservable} of {s['arrived']} requests"
                + (
                    f" (besides the {self.unservable} longer than the model's context)"
                    if self.unservable
                    else ""
                )
            )
        for key, limit, name in (
            ("p99_e2e", self.p99_e2e, "p99 E2E"),
            ("p99_ttft_delivered", self.p99_ttft, "p99 TTFT"),
            ("p99_tpot", self.p99_tpot, "p99 TPOT"),
        ):
            v = s.get(key)
            if limit is not None and (v is None or v > limit):
                out.append(f"{name} {_secs(v)} > {_secs(limit)}")
        return out

    def describe(self) -> str:
        parts = [
            f"{name} <= {_secs(v)}"
            for name, v in (
                ("p99 E2E", self.p99_e2e),
                ("p99 TTFT", self.p99_ttft),
                ("p99 TPOT", self.p99_tpot),
            )
            if v is not None
        ]
        return " and ".join(parts)


def _secs(v: float | None) -> str:
    if v is None:
        return "-"
    # 3 figures: an objective of 0.1 ms is not "<= 0 ms"
    return f"{v * 1e3:.3g} ms" if v < 1 else f"{v:.2f} s"


@dataclass(frozen=True)
class Candidate:
    gpu: str
    policy: str
    batch: int = 1  # max_seqs (continuous) or max_batch (dynamic); 1 for the taxi
    tp: int = 1  # GPUs per server (tensor parallelism)

    def label(self) -> str:
        gpu = f"{self.gpu} TP{self.tp}" if self.tp > 1 else self.gpu
        if self.policy == "taxi":
            return f"{gpu} taxi"
        return (
            f"{gpu} {self.policy} "
            f"{'max_seqs' if self.policy == 'continuous' else 'max_batch'}={self.batch}"
        )

    def defaults(self, model: str, replicas: int, router: str, max_wait: float) -> dict:
        d = {"gpu": self.gpu, "model": model, "replicas": replicas, "router": router, "tp": self.tp}
        if self.policy == "continuous":
            d["max_seqs"] = self.batch
        elif self.policy == "dynamic":
            d.update(max_batch=self.batch, max_wait=max_wait)
        return d


@dataclass
class Point:
    """One configuration simulated: candidate x servers, what it costs, what it achieved."""

    candidate: Candidate
    replicas: int
    price: float  # $/hour of one server
    summary: dict
    misses: list[str]

    @property
    def cost(self) -> float:
        return self.replicas * self.price

    @property
    def meets(self) -> bool:
        return not self.misses

    def label(self) -> str:
        return f"{self.replicas} x {self.candidate.label()}"


@dataclass
class PlanResult:
    objective: Objective
    best: Point | None
    points: list[Point]
    front: list[Point]
    verdicts: list[str]  # one line per candidate: why it is not the answer
    closest: Point | None  # without an answer: the point nearest the objective
    simulations: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


def candidates(
    gpus: list[str],
    policies: list[str],
    batches: list[int],
    tps: dict[str, list[int]] | None = None,
) -> list[Candidate]:
    """Every GPU x split x policy x batch limit; ``tps`` gives each GPU's splits (default: 1)."""
    out = []
    for g in gpus:
        for tp in (tps or {}).get(g, [1]):
            for p in policies:
                for b in [1] if p == "taxi" else batches:
                    out.append(Candidate(g, p, b, tp))
    return out


@lru_cache(maxsize=4)
def _workload(wcfg):
    check_trace_file(wcfg.trace)
    return wcfg.build()


def evaluate(task: tuple):
    """A worker's job: simulate one configuration; return (task key, the summary's figures that
    matter)."""
    key, flags, defaults, policy = task
    args = argparse.Namespace(**flags)
    (plan,) = plan_runs(args, _PLAN, [Run(key, policy, defaults)])
    try:
        res, summary, _ = simulate_plan(plan, _workload(plan.workload))
    except KeyboardInterrupt:
        return None
    summary = dict(summary)
    summary.update(thirds(res.records))
    return key, {k: summary.get(k) for k in _KEEP}


def server_capacity(
    cand: Candidate, model: str, prompt: float, output: float, server_kw: dict | None = None
) -> float | None:
    """Requests/s one server of the candidate carries at most (None: the model does not fit its
    memory)."""
    from .library import batch_capacity

    try:
        srv = Server.named(cand.gpu, model, tp=cand.tp, **(server_kw or {}))
    except ConfigError:
        return None
    rows = max(1, min(cand.batch, srv.kv.max_batch(prompt + output)))
    return batch_capacity(srv.step_time, rows, prompt, output)


@dataclass
class _Search:
    cand: Candidate
    price: float
    first: int
    cap: float | None = None  # requests/s one server carries at most (theory)
    fail: int = 0  # the most servers known to miss (0: none tried)
    meet: int | None = None  # the fewest known to meet
    done: bool = False
    dropped: str = ""

    def floor(self) -> int:
        """The fewest servers that could still meet it: more than the most known to miss, and
        (before any fleet of this candidate has met it) at least 80 % of what theory says the
        traffic needs."""
        if self.meet is None:
            return max(self.fail + 1, math.ceil(THEORY_MARGIN * self.first))
        return self.fail + 1

    def next_size(self, most: int) -> int | None:
        if self.meet is None:
            n = self.first if not self.fail else self.fail * 2
            if self.fail >= most:
                return None
            return min(n, most)
        if self.meet - self.fail > 1:
            return (self.fail + self.meet) // 2
        return None


def search(
    flags: dict,
    cands: list[Candidate],
    objective: Objective,
    model: str,
    router: str,
    rate: float,
    prompt: float,
    output: float,
    max_replicas: int = 64,
    max_wait: float = 0.1,
    run=None,
    per_round: int = 8,
    server_kw: dict | None = None,
    max_load: float = 1.0,
) -> PlanResult:
    """Search every candidate (see the module's docstring). ``run(fn, tasks) -> results`` runs a
    round of at most ``per_round`` simulations (default: one by one), the most promising first
    (the cheapest fleets that could still meet the objective); ``flags`` describe the workload and
    the machine (``server_kw``: the same machine knobs as ``Server`` arguments, for theory and
    prices). A fleet meets the objective only in steady state (``steady_misses``)."""
    run = run or (lambda fn, tasks: run_tasks(fn, tasks, scheduler="none", progress=False))
    t0 = time.perf_counter()
    states, verdicts, points = [], [], []
    for c in cands:
        cap = server_capacity(c, model, prompt, output, server_kw)
        if cap is None:
            verdicts.append(f"{c.label()}: {model} does not fit in its memory")
            continue
        price = Server.named(c.gpu, model, tp=c.tp, **(server_kw or {})).price
        states.append(_Search(c, price, max(1, math.ceil(min(rate / cap, 1e9))), cap))
    best: Point | None = None
    sims = 0
    while True:
        tasks, owners = [], {}
        for st in sorted((s for s in states if not s.done), key=lambda s: s.floor() * s.price):
            lowest = st.floor() * st.price
            if best is not None and lowest > best.cost:
                why = "" if st.fail + 1 == st.floor() else " by theory"
                st.done, st.dropped = (
                    True,
                    (
                        f"{_servers(st.floor())} or more{why}, ${lowest:,.2f}/h or more: dearer "
                        "than the answer"
                    ),
                )
                continue
            n = st.next_size(max_replicas)
            if n is None:
                st.done = True
                continue
            if len(tasks) >= per_round:
                break
            key = f"{n} x {st.cand.label()}"
            owners[key] = (st, n)
            tasks.append((key, flags, st.cand.defaults(model, n, router, max_wait), st.cand.policy))
        if not tasks:
            break
        results = run(evaluate, tasks)
        if len(results) < len(tasks):
            raise KeyboardInterrupt
        sims += len(results)
        for key, summary in results:
            st, n = owners[key]
            # turned away what it could have served
            summary["refused"] = summary["rejected"] > objective.unservable
            p = Point(
                st.cand,
                n,
                st.price,
                summary,
                objective.misses(summary)
                + steady_misses(summary, n, st.cap, rate, objective, max_load),
            )
            points.append(p)
            if p.meets:
                st.meet = n if st.meet is None else min(st.meet, n)
                if best is None or (p.cost, summary[objective.metric]) < (
                    best.cost,
                    best.summary[objective.metric],
                ):
                    best = p
            else:
                st.fail = max(st.fail, n)
    front = pareto(points, objective.metric)
    for st in states:
        verdicts.append(_verdict(st, points, best, objective, max_replicas))
    closest = None
    if best is None and points:
        closest = min(points, key=lambda p: (p.summary["refused"], _excess(p, objective), p.cost))
    return PlanResult(
        objective, best, points, front, verdicts, closest, sims, time.perf_counter() - t0
    )


def _excess(p: Point, o: Objective) -> float:
    """How far a point is from the objective: its worst ratio of achieved to target."""
    r = 0.0
    for key, limit in (
        ("p99_e2e", o.p99_e2e),
        ("p99_ttft_delivered", o.p99_ttft),
        ("p99_tpot", o.p99_tpot),
    ):
        v = p.summary.get(key)
        if limit is not None:
            r = max(r, math.inf if v is None else v / limit)
    return r


def pareto(points: list[Point], metric: str) -> list[Point]:
    """The points that serve every request and that no other such point beats on both cost and
    ``metric``."""
    ok = sorted(
        (p for p in points if not p.summary.get("refused") and p.summary.get(metric) is not None),
        key=lambda p: (p.cost, p.summary[metric]),
    )
    front, low = [], math.inf
    for p in ok:
        if p.summary[metric] < low:
            front.append(p)
            low = p.summary[metric]
    return front


def _servers(n: int) -> str:
    return f"{n} server" + ("" if n == 1 else "s")


def _verdict(st: _Search, points: list[Point], best: Point | None, o: Objective, most: int) -> str:
    mine = [p for p in points if p.candidate == st.cand]
    name = st.cand.label()
    failed = [p for p in mine if not p.meets]
    worst_fail = max(failed, key=lambda p: p.replicas) if failed else None
    missed = (
        f"with {_servers(worst_fail.replicas)}: {', '.join(worst_fail.misses)}"
        if worst_fail
        else ""
    )
    if best is not None and st.cand == best.candidate:
        return f"{name}: the answer, at {_servers(best.replicas)}" + (
            f" (misses it {missed})" if missed else ""
        )
    if st.meet is not None:
        p = min((p for p in mine if p.meets), key=lambda p: p.replicas)
        if best is not None and p.cost == best.cost:
            metric = o.metric.replace("_delivered", "").replace("_", " ")
            return (
                f"{name}: meets it with {_servers(p.replicas)} at the answer's ${p.cost:,.2f}/h, "
                f"with a {metric} no lower ({_secs(p.summary[o.metric])} against "
                f"{_secs(best.summary[o.metric])})"
            )
        extra = f", ${p.cost - best.cost:,.2f}/h more than the answer" if best is not None else ""
        return f"{name}: meets it with {_servers(p.replicas)} at ${p.cost:,.2f}/h{extra}"
    if st.dropped:
        return (
            f"{name}: misses it {missed}; {st.dropped} (not simulated further)"
            if missed
            else f"{name}: {st.dropped}"
        )
    if worst_fail is not None:
        cap = f" (--max-replicas {most})" if worst_fail.replicas >= most else ""
        return f"{name}: misses it even {missed}{cap}"
    return f"{name}: not simulated"
