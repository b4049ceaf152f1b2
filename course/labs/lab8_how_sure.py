"""Lab 8: how sure can you be? Judge a prediction as far as R runs on this machine can tell.

The same workload measured twice on a laptop gives two numbers. Lesson 9 turns runs into a verdict:
the error of the prediction gets a 90 % interval, and the interval is held up to the metric's
tolerance ±Δ (``TOLERANCE_PCT``, the course's targets):

- **agrees**: the whole interval lies inside ±Δ;
- **disagrees**: the whole interval lies outside ±Δ;
- **cannot tell**: the interval straddles an edge.

Everything is read on a log scale: a run's error is ``d = ln(predicted / measured)``, and a distance
``x`` on that scale is the per cent ``(exp(x) - 1) x 100`` (``_pct`` below). A spread is the
standard deviation of ``ln(value)``: 0.05 means "about 5 %".

The data, ``course/labs/data/lab8-repeated-runs.json`` (``RUNS`` below): four policies, each
predicted once and measured three times, on four metrics. ``RUNS["predicted"][policy][metric]`` is a
number, ``RUNS["measured"][policy][metric]`` a list of three.

Part A. On the given runs (the check is the same on every machine).

1. ``pooled_spread(groups)``: ``groups`` is a list of lists, one per policy, of positive numbers.
   Return ``(sd, df)``: the run-to-run spread of ``ln(value)``, pooled over the groups: the squared
   distances of each group's logs from *that group's own* mean, summed over every group, divided by
   ``df``, the sum over groups of (runs in the group - 1); then the square root. A group of fewer
   than two runs says nothing about the spread: skip it. With no group of two, return ``(None, 0)``.
   (Why pool: four policies of three runs give 8 degrees of freedom, not 2; why each group's own
   mean: the policies differ from each other by more than the machine's noise.)
2. ``error_interval(predicted, runs, sd, df)``: ``(error_pct, low_pct, high_pct)``. The centre is
   the mean of ``ln(predicted) - ln(run)`` over the runs; the half-width is
   ``t90(df) x sd / sqrt(R)``, R the number of runs; the interval is centre ± half-width. Return all
   three as per cent (``_pct``).
3. ``verdict(low_pct, high_pct, tolerance_pct)``: "agrees", "disagrees" or "cannot tell", as above
   (an edge counts as inside).
4. ``smallest_difference(sd, df, runs)``: the smallest difference ``runs`` runs can show, in per
   cent: the interval's half-width, ``t90(df) x sd / sqrt(runs)``, as per cent.
5. ``runs_needed(tolerance_pct, sd, df)``: the fewest runs (at least 1) whose smallest difference
   fits inside ±``tolerance_pct``: what an error of 0 would need to be called "agrees". Solve
   ``t90(df) x sd / sqrt(R) <= ln(1 + tolerance_pct / 100)`` for R, and round up.
6. ``one_run_interval(centre, seed_sd, elasticity, level_sd, ref_runs=1)``: ``(low, high)``, where
   one new run will land 90 % of the time. Its spread adds the run's own luck (the simulation's
   seeds, ``seed_sd``) and the machine's level from one run to the next (``level_sd``), which moves
   the metric by ``elasticity`` times as much, once for the new run and once more over ``ref_runs``
   for the level the prediction was made at:
   ``sd^2 = seed_sd^2 + elasticity^2 x level_sd^2 x (1 + 1 / ref_runs)``. The interval is
   ``centre x exp(-1.645 sd)`` to ``centre x exp(+1.645 sd)`` (``Z90``).

Part B. On your machine (the check asserts only that you measured something, never how fast).

7. ``time_runs(work, runs)``: call ``work()`` once, untimed (a warm-up: the first call pays for what
   later calls find ready), then ``runs`` times, timing each call with ``time.perf_counter()``;
   return the ``runs`` durations in seconds.
8. ``machine_spread(seconds)``: ``(sd, df)`` of your runs: one group, so ``pooled_spread`` of it
   (``0.0`` rather than None when there are fewer than two).

Then run this file, which uses your functions: ``python course/labs/lab8_how_sure.py 10`` prints
Part A's verdicts, times ``work()`` (the simulator serving the same 2,000 requests, every time) 10
times, and prints your machine's spread, the smallest difference 1, 3, 5 and 10 runs on it can show,
and the runs ±5, ±10 and ±20 % would need. Run it again later, with a browser busy, or on battery,
and compare.

Part C. ``ANSWER``: in your own words, at least three sentences. A classmate ran
``python -m realrun`` once; it predicted a p50 TTFT of 0.19 s and measured 0.21 s, 10 % low against
a target of ±15 %, and they wrote "agrees". What can one run show here, and what can it not? Take a
spread from your Part B (and say why a spread measured back to back may be too small), give the
interval and the verdict you would write, say why the interval for one run must hold the machine's
level from run to run and not only the simulation's seeds, and how many runs you would ask for. Your
teacher grades what it says.

Check your work:  pytest course/labs -k lab8
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from batchsim import Poisson, Uniform, make_policy, make_workload, simulate
from batchsim.cli.options import DEFAULT_STEP_TIME

DATA = Path(__file__).resolve().parent / "data"
RUNS = json.loads((DATA / "lab8-repeated-runs.json").read_text())
#: The course's targets: how far a prediction may be from the measurement and still be right (%).
TOLERANCE_PCT = {"p50_e2e": 10.0, "p99_e2e": 20.0, "p50_ttft": 15.0, "request_throughput": 5.0}

#: Student's t for a two-sided 90 % interval, by degrees of freedom (a standard table).
T90 = {
    1: 6.314,
    2: 2.920,
    3: 2.353,
    4: 2.132,
    5: 2.015,
    6: 1.943,
    7: 1.895,
    8: 1.860,
    9: 1.833,
    10: 1.812,
    12: 1.782,
    15: 1.753,
    20: 1.725,
    30: 1.697,
    60: 1.671,
    120: 1.658,
}
Z90 = 1.645


def t90(df: int | None) -> float:
    """Given. The multiplier of a 90 % interval: Student's t for ``df`` degrees of freedom (between
    the table's entries interpolated in 1/df), the normal's 1.645 for None (a spread taken as
    known)."""
    if df is None:
        return Z90
    if df < 1:
        raise ValueError(f"df must be >= 1 or None, got {df}")
    if df in T90:
        return T90[df]
    keys = sorted(T90)
    if df > keys[-1]:
        return Z90 + (T90[keys[-1]] - Z90) * keys[-1] / df
    lo, hi = max(k for k in keys if k < df), min(k for k in keys if k > df)
    w = (1 / df - 1 / hi) / (1 / lo - 1 / hi)
    return T90[hi] + w * (T90[lo] - T90[hi])


def _pct(x: float) -> float:
    """Given. A distance on the log scale as the per cent it means: ln(1.1) -> +10 %."""
    return (math.exp(x) - 1.0) * 100.0


# -- Part A: on the given runs ---------------------------------------------------------------------


def pooled_spread(groups: list[list[float]]) -> tuple[float | None, int]:
    # --- your code here ---
    raise NotImplementedError("your code here: pooled_spread")


def error_interval(
    predicted: float, runs: list[float], sd: float, df: int | None
) -> tuple[float, float, float]:
    # --- your code here ---
    raise NotImplementedError("your code here: error_interval")


def verdict(low_pct: float, high_pct: float, tolerance_pct: float) -> str:
    # --- your code here ---
    raise NotImplementedError("your code here: verdict")


def smallest_difference(sd: float, df: int | None, runs: int) -> float:
    # --- your code here ---
    raise NotImplementedError("your code here: smallest_difference")


def runs_needed(tolerance_pct: float, sd: float, df: int | None) -> int:
    # --- your code here ---
    raise NotImplementedError("your code here: runs_needed")


def one_run_interval(
    centre: float, seed_sd: float, elasticity: float, level_sd: float, ref_runs: int = 1
) -> tuple[float, float]:
    # --- your code here ---
    raise NotImplementedError("your code here: one_run_interval")


# -- Part B: on your machine -----------------------------------------------------------------------

_WORKLOAD = make_workload(Poisson(4.0), Uniform(16, 128), Uniform(16, 96), n=2000, seed=0)


def work() -> None:
    """Given. The fixed piece of work Part B times: the simulator serving the same 2,000 requests,
    every time."""
    simulate(_WORKLOAD, make_policy("continuous"), step_time=DEFAULT_STEP_TIME)


def time_runs(work, runs: int) -> list[float]:
    # --- your code here ---
    raise NotImplementedError("your code here: time_runs")


def machine_spread(seconds: list[float]) -> tuple[float, int]:
    # --- your code here ---
    raise NotImplementedError("your code here: machine_spread")


# -- Part C ----------------------------------------------------------------------------------------

ANSWER = """
your answer here
"""


def main(argv: list[str] | None = None) -> int:
    """Given. Part A's table on the given runs, then Part B on this machine:

    python course/labs/lab8_how_sure.py [RUNS]
    """
    args = sys.argv[1:] if argv is None else argv
    text = args[0] if args else "10"
    if not text.isdigit() or int(text) < 2:
        print(f"lab8: RUNS must be a whole number of at least 2, got {text!r}", file=sys.stderr)
        return 2
    repeats = int(text)
    print("Part A, on the given runs:")
    for metric, tol in TOLERANCE_PCT.items():
        groups = {p: RUNS["measured"][p][metric] for p in RUNS["measured"]}
        sd, df = pooled_spread(list(groups.values()))
        print(
            f"  {metric} (±{tol:g} %): spread {sd * 100:.1f} %, {df} degrees of freedom; "
            f"{runs_needed(tol, sd, df)} run(s) would show ±{tol:g} %"
        )
        for policy, runs in groups.items():
            err, lo, hi = error_interval(RUNS["predicted"][policy][metric], runs, sd, df)
            print(
                f"    {policy:<11} {err:+6.1f} %  [{lo:+6.1f}, {hi:+6.1f}]  {verdict(lo, hi, tol)}"
            )
    print(f"\nPart B, on this machine: the same work, {repeats} times")
    seconds = time_runs(work, repeats)
    sd, df = machine_spread(seconds)
    print(
        f"  {min(seconds):.3f} s to {max(seconds):.3f} s: a spread of {sd * 100:.1f} % ({df} "
        f"degrees of freedom)"
    )
    print(
        "  the smallest difference R runs can show: "
        + ", ".join(f"R = {r}: ±{smallest_difference(sd, df, r):.1f} %" for r in (1, 3, 5, 10))
    )
    print(
        "  runs that would show: "
        + ", ".join(f"±{t:g} %: {runs_needed(t, sd, df)}" for t in (5, 10, 20))
    )
    return 0


_ = (np, time)

if __name__ == "__main__":
    sys.exit(main())
