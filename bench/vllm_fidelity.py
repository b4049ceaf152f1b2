"""Fidelity against vLLM: batchsim's prediction of vLLM held against vLLM itself, on several load
shapes.

For each load shape, ``python -m realrun compare --engine vllm`` (in-process): vLLM started
with the continuous policy's knobs, profiled on the workload's shapes (plan "fused", each
shape's spread and the machine's slow drift kept, as for our engine), predicted by batchsim's
``make_policy("continuous", scheduler="vllm-v1")`` as the median of ``--seeds`` simulations
with sampled step times, then measured ``--repeats`` times. One table of errors of the median
prediction against the median measurement, (predicted - measured) / measured, with vLLM's busy
share and the repeats' spread of p50 E2E; each shape's rate is set for ``--load`` busy (0.7), the
saturated shape's is past capacity (the goal holds at 50-85 % busy: p50 E2E within 10 %,
p99 E2E within 20 %, p50 TTFT within 15 %); then, per shape, how many metrics agree / disagree /
this machine cannot tell and how many runs fall inside their one-run 90 % interval. "drift" is how
much slower (+) or faster (-) a few decode shapes ran when timed again right after the measured run
than in the profile before it: on a shared machine, errors of that size are the machine's, not the
model's.

With ``--coverage H``: after each shape's compare, H more runs on the same vLLM server, held out
from the runs that set the level and the run-to-run spread, each held up to its one-run interval, as
``bench/fidelity.py --coverage`` does for our engine (``bench/held_out.py``): the prediction made
before the runs, and the one at the level the compare's own passes read (from vLLM's step log).
Printed: the share inside each (target 80-95 %), sharpness (the half-width against 1.645 x the
held-out runs' own sd with the seeds', median, target <= 1.5x: an interval cannot be made right by
being wide), and the same per shape (one policy per shape: there is no ranking to check).

Run it in the environment that has vLLM (``make test`` makes ``.venv-vllm/``):

    .venv-vllm/bin/python bench/vllm_fidelity.py [--model tiny-gpt2] [--shapes short,bursty,long]
    [--repeats 3] [--seeds 5] [--load 0.7]
                                                 [--coverage 3] [--run-spread SD:DF]
                                                 [--level-move SD:DF]

Each shape's compare reads the machine's run-to-run spread from its own three runs (2 degrees of
freedom) and pools it with what the shapes before it read; the last line prints the pooled reading,
to start the next run of the bench on this machine from (``--run-spread``), as a compare on a stored
calibration starts from the spread stored with it. The level's move from each shape's profile to its
runs (``realrun.judge.level_move``) is carried the same way (``--level-move``): from the second
shape on, the interval made before the runs holds how far a profile has lain from its runs here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from held_out import (  # bench/ is the script's own folder
    COVERED,
    coverage_lines,
    hold_out,
    shape_lines,
)

SHAPES = {
    # name: realrun flags. The rate is only the shape's unit: --load sets each shape's rate so that
    # the simulated server is busy that share of the time (realrun compare --busy), as this host's
    # speed moves (at these fixed rates, short and mixed ran 95 % busy on a slower day).
    "short": [
        "--arrival",
        "poisson",
        "--rate",
        "9",
        "--requests",
        "120",
        "--prompt-len",
        "uniform:16,128",
        "--output-len",
        "uniform:16,96",
    ],
    "bursty": [
        "--arrival",
        "gamma:3",
        "--rate",
        "11",
        "--requests",
        "100",
        "--prompt-len",
        "uniform:16,256",
        "--output-len",
        "lognormal:64,48",
    ],
    "long": [
        "--arrival",
        "poisson",
        "--rate",
        "5",
        "--requests",
        "80",
        "--prompt-len",
        "uniform:400,900",
        "--output-len",
        "uniform:8,48",
    ],
    "mixed": [
        "--arrival",
        "poisson",
        "--rate",
        "6",
        "--requests",
        "100",
        "--prompt-len",
        "lognormal:200,180",
        "--output-len",
        "lognormal:96,64",
    ],
    # Past capacity (about 13 requests/s for "short"): the queue grows for the whole run, so the
    # tail is waiting time, where a step-time error compounds. Outside the goal's 50-85 % busy band.
    "saturated": [
        "--arrival",
        "poisson",
        "--rate",
        "20",
        "--requests",
        "120",
        "--prompt-len",
        "uniform:16,128",
        "--output-len",
        "uniform:16,96",
    ],
}
GOALS = {"p50_e2e": 10, "p99_e2e": 20, "p50_ttft": 15}
COLUMNS = ("p50_ttft", "p99_ttft", "mean_tpot", "p50_e2e", "p99_e2e", "request_throughput")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny-gpt2")
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--max-seqs", default="32")
    p.add_argument("--max-batched-tokens", default="512")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="measurements per shape, each against the same prediction",
    )
    p.add_argument(
        "--seeds", type=int, default=5, help="simulations with sampled step times per prediction"
    )
    p.add_argument(
        "--load",
        type=float,
        default=0.7,
        help="busy fraction each shape's rate is set to (realrun compare --busy; not the saturated "
        "shape)",
    )
    p.add_argument(
        "--coverage",
        type=int,
        default=0,
        metavar="H",
        help="H held-out runs per shape after its compare, each held up to its one-run interval "
        "(default 0: none)",
    )
    p.add_argument(
        "--no-pool",
        action="store_true",
        help="each shape's compare reads the run-to-run spread from its own --repeats alone; by "
        "default it is pooled with the one the shapes before it read (realrun compare "
        "--run-spread), as a second compare on one machine pools with the spread an earlier one "
        "stored with its calibration",
    )
    p.add_argument(
        "--run-spread",
        metavar="SD:DF",
        help="a run-to-run spread read earlier on this machine (the last line of an earlier run of "
        "this bench prints it), pooled into the first shape's as the shapes after it pool theirs: "
        "three runs read a spread with 2 degrees of freedom, whose Student's t (2.92) widens every "
        "interval 1.8x",
    )
    p.add_argument(
        "--level-move",
        metavar="SD:DF",
        help="the level's move from a profile to its runs read earlier on this machine (the last "
        "line of an earlier run of this bench prints it), pooled into the first shape's as the "
        "shapes after it pool theirs (realrun compare --level-move)",
    )
    args = p.parse_args(argv)
    from batchsim.core.errors import ConfigError
    from realrun.cli.compare import given_move, given_spread

    for flag, check in ((args.run_spread, given_spread), (args.level_move, given_move)):
        if flag is not None:
            try:
                check(flag)
            except ConfigError as e:
                p.error(str(e))
    unknown = [n for n in args.shapes.split(",") if n not in SHAPES]
    if unknown:
        p.error(f"--shapes: unknown shape {unknown[0]!r}; choose from {', '.join(SHAPES)}")
    if not 0 <= args.coverage <= 50:
        p.error(f"--coverage must be a count of runs in [0, 50], got {args.coverage}")
    rows, held, held_notes = [], [], []
    earlier = args.run_spread  # the run-to-run spread the shapes so far read: "SD:DF"
    moved = args.level_move  # the level's move from profile to runs the shapes so far read
    moves = []  # per shape, ln(the mean level its runs' passes read against the profile's prices)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name in args.shapes.split(","):
        t = time.perf_counter()
        out = io.StringIO()

        def then(report, run_once, name=name) -> None:
            # The held-out runs, on the server the compare profiled and measured on (a new server
            # would be another level); after the compare's runs, so none of them set its level or
            # its spread.
            from batchsim import summarize

            held.extend(
                hold_out(
                    name,
                    report,
                    lambda label: summarize(run_once(label)),
                    args.coverage,
                    np.random.default_rng(0xC0FE),
                )
            )
            held_notes.append(
                f"{name}: held out {args.coverage} runs; this machine's run-to-run spread "
                f"{report.spread.text()}"
            )

        with contextlib.redirect_stdout(out):
            code = _compare(
                [
                    "compare",
                    "--engine",
                    "vllm",
                    "--model",
                    args.model,
                    *SHAPES[name],
                    "--max-seqs",
                    args.max_seqs,
                    "--max-batched-tokens",
                    args.max_batched_tokens,
                    "--repeats",
                    str(args.repeats),
                    "--seeds",
                    str(args.seeds),
                    *(["--busy", str(args.load)] if name != "saturated" else []),
                    *(["--run-spread", earlier] if earlier and not args.no_pool else []),
                    *(["--level-move", moved] if moved and not args.no_pool else []),
                    "--json",
                    "--no-plots",
                ],
                then if args.coverage else None,
            )
        if code != 0:
            print(f"{name}: compare failed (exit {code})")
            continue
        obj = json.loads(out.getvalue())
        spread = obj.get("run_spread") or {}
        if spread.get("df", 0) >= 1 and spread.get("sd", 0) > 0:
            earlier = f"{spread['sd']}:{spread['df']}"
        nxt = obj.get("level_move_next") or {}
        if nxt.get("df", 0) >= 1:
            moved = f"{nxt['sd']}:{nxt['df']}"
        (run,) = obj["runs"]
        busy = run["measured"].get("busy_fraction") or 0.0
        drift = next((n for n in obj["notes"] if n.startswith("drift")), "")
        m = re.search(r"take ([+-]\d+) %", drift)
        rows.append(
            (
                name,
                busy,
                run["error_pct"],
                run["decomposition"],
                m.group(1) + "%" if m else "-",
                run,
            )
        )
        levels = [x for x in run.get("run_levels") or [] if x and x > 0]
        if levels:
            moves.append(float(np.log(np.mean(levels))))
        print(
            f"{name}: done in {time.perf_counter() - t:.0f} s (busy {busy:.0%}); "
            + "; ".join(
                n for n in obj["notes"] if "schedule, predicted" in n or n.startswith("drift")
            )
            + (
                f"; the runs' passes took {', '.join(f'{x:.2f}x' for x in levels)} the profile's "
                f"prices"
                if levels
                else ""
            )
        )
    print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print(
        f"{'shape':8s} {'busy':>5s} "
        + " ".join(f"{c:>12s}" for c in COLUMNS)
        + f" {'p50E2E ±':>9s} {'drift':>6s}   step-time error (a)"
    )
    worst = {k: 0.0 for k in GOALS}
    for name, busy, err, dec, drift, run in rows:
        cells = " ".join(
            f"{err[c]:+11.1f}%" if err.get(c) is not None else f"{'-':>12s}" for c in COLUMNS
        )
        sp = (run.get("repeat_spread_pct") or {}).get("p50_e2e")
        steps = dec.get("steps", {}) if dec else {}
        a = (
            f"{steps['total_error_pct']:+.1f}% total, {steps['mean_abs_error_pct']:.1f}% mean|e|"
            if steps.get("n")
            else "-"
        )
        print(
            f"{name:8s} {busy:5.0%} {cells} {'-' if sp is None else f'{sp:.1f}%':>9s} {drift:>6s}  "
            f" {a}"
        )
        for k in GOALS:
            if err.get(k) is not None and 0.5 <= busy <= 0.85:
                worst[k] = max(worst[k], abs(err[k]))
    # The same errors with the prediction made again at the level the runs' own passes read (after
    # the runs: the machine's level out, the model's error left), where a moved machine hides how
    # the model does: a metric that stays off here is the model's.
    at = [(name, run.get("error_pct_at_passes")) for name, *_, run in rows]
    if any(e for _, e in at):
        print("\nat the level the runs' own passes read (made after the runs):")
        for name, err in at:
            if err:
                cells = " ".join(
                    f"{err[c]:+11.1f}%" if err.get(c) is not None else f"{'-':>12s}"
                    for c in COLUMNS
                )
                print(f"{name:8s} {'':5s} {cells}")
    print()
    print(_verdicts(rows))
    print()
    for k, goal in GOALS.items():
        print(
            f"worst |{k}| at 50-85 % busy: {worst[k]:.1f} %  (goal {goal} %: "
            f"{'met' if worst[k] <= goal else 'MISSED'})"
        )
    if args.coverage:
        print()
        print("\n".join(held_notes))
        print("\n".join(coverage_lines(held)))
        print("\n== per shape (one policy each: coverage and sharpness, no ranking)")
        print("\n".join(shape_lines(held)))
    if moves:
        # The interval made before the runs counts the profile as one more run-like reading of the
        # level (e^2 sigma^2 / n_ref); how far the runs' level lay from the profile's says whether
        # it is one.
        rms = float(np.sqrt(np.mean(np.square(moves))))
        print(
            f"\nthe level's move from the profile to the runs (their passes against its prices, "
            f"the model's own error in it): root mean square {rms:.1%} over {len(moves)} shapes "
            f"({', '.join(f'{np.expm1(m):+.0%}' for m in moves)}), against the run-to-run spread "
            f"above"
        )
    if earlier and not args.no_pool:
        # what the next run of this bench on this machine can start from (--run-spread), so that its
        # first shape's intervals do not stand on 2 degrees of freedom
        print(
            f"\nthe run-to-run spread these shapes read, to start the next run from: --run-spread "
            f"{earlier}" + (f" --level-move {moved}" if moved else "")
        )
    return 0


def _compare(argv: list[str], then) -> int:
    """``python -m realrun compare`` in-process, with ``then(report, run_once)`` called while its
    vLLM server still serves (``realrun.cli.compare.compare``); a refused flag is one line and exit
    2."""
    from batchsim.core.errors import ConfigError
    from realrun.cli import RunSetup, build_parser
    from realrun.cli.compare import compare

    args = build_parser().parse_args(argv)
    args.bare = None  # not the bare lesson-7 run; and no --calibration: vLLM is profiled now
    try:
        return compare(args, RunSetup(args), then=then)
    except ConfigError as e:
        print(f"realrun: error: {e}", file=sys.stderr)
        return 2


def _verdicts(rows) -> str:
    """Per shape: the verdicts by equivalence (``realrun.judge.equivalence``) and how many of the
    runs lie inside their one-run interval (``realrun.judge.interval``); then the share at 50-85 %
    busy (target 80-95 %). The runs are held out from the level (the prediction was made before
    them), not from the run-to-run spread, which their own passes measured: ``--coverage`` holds
    runs out of both."""
    lines, inside = [], []
    for name, busy, _, _, _, run in rows:
        v = {k: x for k, x in (run.get("verdicts") or {}).items() if x is not None}
        iv = {k: x for k, x in (run.get("interval_one_run") or {}).items() if x is not None}
        held = [
            lo <= rep[k] <= hi
            for k, (lo, hi) in iv.items()
            if k in COVERED
            for rep in run.get("repeats") or []
            if rep.get(k) is not None
        ]
        counts = ", ".join(
            f"{sum(x == kind for x in v.values())} {kind}"
            for kind in ("agrees", "disagrees", "cannot tell")
        )
        lines.append(
            f"{name:8s} {busy:5.0%}  {counts}; runs inside their one-run interval: {sum(held)} of "
            f"{len(held)}"
        )
        if 0.5 <= busy <= 0.85:
            inside += held
    if inside:
        lines.append(
            f"at 50-85 % busy: runs inside their one-run 90 % interval {sum(inside)} of "
            f"{len(inside)} ({sum(inside) / len(inside):.0%}, target 80-95 %)"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
