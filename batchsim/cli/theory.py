"""``python -m batchsim theory``: the simulator against queueing theory, side by side.

Each row sets the simulated server up as a textbook queue (Poisson arrivals, a
step time that makes service deterministic or exponential, a batching rule that
is exactly the one the formula assumes), runs a long seeded workload, and prints
what the formula predicts, what the simulation measured, and the error in
percent. The quantity is the mean queue wait, arrival to start of service
(``start - arrival`` in the records), except for the last row, which is the
throughput of a continuous batch kept full by a backlog against the capacity
formula. Errors of a few percent are the noise of a finite run: more
``--requests`` shrink them (roughly as one over the square root).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from ..core import sizing
from ..core.arrivals import Poisson
from ..core.errors import check_at_most, check_int_at_least
from ..core.files import dumps
from ..core.lengths import Fixed, Uniform
from ..core.policies import Continuous, Dynamic, Policy, Static, Taxi
from ..core.workload import make_workload
from ..sim.simulator import RunResult, simulate
from ..sim.steptime import ConstantStepTime, ExponentialStepTime, LinearStepTime, StepTimeModel
from ..sim.theory import (
    MD1,
    MG1,
    MM1,
    BulkService,
    ContinuousCapacity,
    GeneralBulkPolicy,
    bus_fill_wait,
    relative_error,
)

__all__ = [
    "Case",
    "compare_cases",
    "add_arguments",
    "run",
    "mean_queue_wait",
    "saturated_throughput",
]


@dataclass(frozen=True)
class Case:
    name: str
    setting: str
    quantity: str
    theory: float
    simulated: float

    @property
    def error(self) -> float:
        return relative_error(self.simulated, self.theory)


def mean_queue_wait(result: RunResult) -> float:
    """Mean of start - arrival over the requests that were served: the textbooks' W_q."""
    r = result.records
    return float(np.mean((r.start - r.arrival)[r.completed_mask]))


def saturated_throughput(result: RunResult) -> float:
    """Completions per second over the middle 60 % of completions, away from the ramp-up
    at the start and the drain at the end, when a backlog keeps the batch full."""
    fin = np.sort(result.records.finish[result.records.completed_mask])
    lo, hi = fin[len(fin) // 5], fin[(4 * len(fin)) // 5]
    return float(np.count_nonzero((fin > lo) & (fin <= hi)) / (hi - lo))


def _exp(mean: float, seed: int) -> ExponentialStepTime:
    # Service times get their own stream, apart from the workload's.
    return ExponentialStepTime(mean, np.random.default_rng([seed, 99]))


def compare_cases(requests: int = 20_000, seed: int = 0) -> list[Case]:
    """Run every case and return theory against simulation."""
    check_int_at_least("requests", requests, 100)
    check_int_at_least("seed", seed, 0)

    def wait(policy: Policy, rate: float, step: StepTimeModel, output=Fixed(1)) -> float:
        wl = make_workload(Poisson(rate), Fixed(16), output, n=requests, seed=seed)
        return mean_queue_wait(simulate(wl, policy, step))

    rows: list[tuple[str, str, Callable[[], float], float]] = [
        (
            "M/D/1",
            "taxi, 1 token, step 0.12 s, 5 req/s",
            lambda: wait(Taxi(), 5.0, ConstantStepTime(0.12)),
            MD1(5.0, 0.12).mean_wait,
        ),
        (
            "M/M/1",
            "taxi, 1 token, exponential step of mean 0.1 s, 5 req/s",
            lambda: wait(Taxi(), 5.0, _exp(0.1, seed)),
            MM1(5.0, 10.0).mean_wait,
        ),
        (
            "M/G/1",
            "taxi, uniform 1..9 tokens, step 0.02 s, 5 req/s",
            lambda: wait(Taxi(), 5.0, ConstantStepTime(0.02), Uniform(1, 9)),
            MG1.steps_of(5.0, 0.02, range(1, 10)).mean_wait,
        ),
        (
            "bus fill",
            "static N=8, step 1 ms, 10 req/s",
            lambda: wait(Static(8), 10.0, ConstantStepTime(0.001)),
            bus_fill_wait(8, 10.0),
        ),
        (
            "M/M^(4,4)/1",
            "static N=4, exponential batch time of mean 1 s, 2 req/s",
            lambda: wait(Static(4), 2.0, _exp(1.0, seed)),
            BulkService(2.0, 1.0, 4, 4).mean_wait,
        ),
        (
            "M/M^(1,4)/1",
            "dynamic max_batch=4 max_wait=0, exp. batch time 1 s, 2 req/s",
            lambda: wait(Dynamic(4, 0.0), 2.0, _exp(1.0, seed)),
            BulkService(2.0, 1.0, 1, 4).mean_wait,
        ),
        (
            "M/M^(2,5)/1",
            "go with 2..5 (Neuts' rule), exp. batch time 1 s, 2 req/s",
            lambda: wait(GeneralBulkPolicy(2, 5), 2.0, _exp(1.0, seed)),
            BulkService(2.0, 1.0, 2, 5).mean_wait,
        ),
    ]
    cases = [
        Case(name, setting, "mean queue wait (s)", theory, sim())
        for name, setting, sim, theory in rows
    ]
    cases.append(_continuous_case(max(1000, requests // 5), seed))
    return cases


def _continuous_case(requests: int, seed: int) -> Case:
    step = LinearStepTime(0.01, 2e-5, 5e-5, 1e-7)
    prompt, output = Uniform(16, 128), Uniform(5, 100)
    probe = make_workload(Poisson(1.0), prompt, output, n=requests, seed=seed)
    cap = ContinuousCapacity.from_samples(step, 16, probe.prompt_tokens, probe.output_tokens)
    # Twice the capacity: a backlog forms at once and keeps every step full.
    wl = make_workload(Poisson(2 * cap.max_rate), prompt, output, n=requests, seed=seed)
    thr = saturated_throughput(simulate(wl, Continuous(max_seqs=16, max_batched_tokens=2048), step))
    return Case(
        "continuous capacity",
        "max_seqs=16, linear step, prompts 16..128, outputs 5..100, overloaded",
        "throughput (req/s)",
        cap.max_rate,
        thr,
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--requests",
        type=int,
        default=20_000,
        help="requests per case (default 20000; more: smaller errors, slower)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed for arrivals, lengths and random step times (default 0)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object {config, runs, notes} instead of a table",
    )
    p.add_argument(
        sizing.OVERRIDE_FLAG,
        dest="no_size_check",
        action="store_true",
        help="run even when the estimated time is far beyond this machine",
    )


def format_cases(cases: list[Case]) -> str:
    heads = ("case", "setting", "quantity", "theory", "simulated", "error")
    body = [
        (
            c.name,
            c.setting,
            c.quantity,
            f"{c.theory:.4f}",
            f"{c.simulated:.4f}",
            f"{100 * c.error:+.1f} %",
        )
        for c in cases
    ]
    widths = [max(len(r[i]) for r in (heads, *body)) for i in range(len(heads))]

    def line(r):
        return "  ".join(
            c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))
        )

    return "\n".join([line(heads), "  ".join("-" * w for w in widths), *map(line, body)])


_NOTE = (
    "error = (simulated - theory) / theory; a few percent is the noise of a finite run (more "
    "--requests shrink it)"
)


def run(args: argparse.Namespace) -> int:
    check_int_at_least("requests", args.requests, 100)
    check_at_most("requests", args.requests, 10**8, "more than any machine holds")
    check_int_at_least("seed", args.seed, 0)
    if not args.no_size_check:
        # Eight cases, one- to nine-token requests: the requests dominate.
        sizing.check(sizing.estimate(args.requests, 5.0, runs=8))
    cases = compare_cases(args.requests, args.seed)
    if args.json:
        print(
            dumps(
                {
                    "config": {"requests": args.requests, "seed": args.seed},
                    "runs": [{**asdict(c), "error": c.error} for c in cases],
                    "notes": [_NOTE],
                }
            )
        )
    else:
        print(
            f"Simulation against queueing theory ({args.requests} requests per case, seed "
            f"{args.seed})\n"
        )
        print(format_cases(cases))
        print(f"\n{_NOTE}")
    return 0
