"""How fast the simulator runs and how much memory it takes: every goal of the scale issue,
measured.

Workloads: Poisson arrivals, prompts uniform 32..512, outputs lognormal mean 128 /
median 96 (the package defaults), the default linear step time, max_seqs 64.

1. 10,000 requests, each policy (goal: at most 0.3 s each, so sliders stay live), at the
   loads of the issue (continuous 20/s, taxi 0.5/s, dynamic and static 1.7/s) and at a
   common 0.5/s; best of ``--repeat`` runs (the machine's noise only ever adds).
2. 1,000,000 requests, continuous at 20/s (goal: at most 30 s, peak RSS at most 1 GB),
   in a child process of its own so that its peak resident memory is its own.
3. Memory per request (goal: constant, at most 300 bytes plus a step log that can be
   streamed or summarised): the records' own arrays per request, and the slope of peak
   RSS between 100,000 and 1,000,000 requests.
4. 10,000,000 requests in summary-only mode (continuous at 20/s): wall time, peak RSS, and
   the p99 from the streaming sketch, whose stated error (0.5 %) is checked against the
   exact p99 of the 1,000,000-request run simulated both ways.
5. Where the time goes: a profile of the 10,000-request continuous run, by part.

    python bench/sim_speed.py [--repeat 3] [--quick]            # --quick skips 2-4
    python bench/sim_speed.py --against /tmp/base [--rounds 5]  # this checkout vs another

``--against PATH`` times the 10,000-request continuous runs (both flavours) in this checkout and in
the one at PATH (a ``git worktree`` of an older commit), each run in a fresh interpreter that
imports that checkout's ``batchsim``, the two interleaved round by round (the order alternating),
and a 10M-iteration pure-Python loop timed in every round as the host's yardstick: on a shared
machine only figures measured side by side in one run compare.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time

import numpy as np
from host import yardstick  # noqa: E402 - bench/ is the script's own folder

from batchsim import LogNormal, Poisson, Uniform, make_policy, make_workload, simulate, summarize
from batchsim.cli.options import DEFAULT_STEP_TIME

PROMPT, OUTPUT = Uniform(32, 512), LogNormal(128, 96)
SETTINGS = dict(max_batch=8, max_wait=0.05, max_seqs=64, max_batched_tokens=2048)
ISSUE_LOADS = {"taxi": 0.5, "static": 1.7, "dynamic": 1.7, "continuous": 20.0}
GOAL_10K_S = 0.3


def workload(rate: float, n: int, seed: int = 0):
    return make_workload(Poisson(rate), PROMPT, OUTPUT, n=n, seed=seed)


def best_of(name: str, rate: float, n: int, repeat: int) -> tuple[float, dict, int]:
    wl = workload(rate, n)
    best, res = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        res = simulate(wl, make_policy(name, **SETTINGS), DEFAULT_STEP_TIME)
        best = min(best, time.perf_counter() - t)
    return best, summarize(res), len(res.records.steps["start"])


def child(name: str, rate: float, n: int, records: str) -> None:
    """Run in a process of its own: one simulation, its figures on stdout as JSON."""
    t = time.perf_counter()
    wl = workload(rate, n)
    t_wl = time.perf_counter() - t
    t = time.perf_counter()
    res = simulate(wl, make_policy(name, **SETTINGS), DEFAULT_STEP_TIME, records=records)
    wall = time.perf_counter() - t
    s = summarize(res)
    out = {
        "wall": wall,
        "workload_s": t_wl,
        "p99_e2e": s["p99_e2e"],
        "p50_ttft": s["p50_ttft"],
        "steps": s["steps"],
    }
    if records == "full":
        r = res.records
        req = sum(
            getattr(r, k).nbytes
            for k in (
                "arrival",
                "prompt_tokens",
                "output_tokens",
                "start",
                "first_token",
                "finish",
                "last_token",
                "tokens",
                "preemptions",
                "itl_max",
            )
        )
        req += 8 * len(r.rejected)  # the list of reasons: one pointer per request
        out.update(
            request_bytes=req / n,
            step_bytes=sum(v.nbytes for v in r.steps.values()) / n,
            step_rows=len(r.steps["start"]),
        )
    print(json.dumps(out))


def in_child(name: str, rate: float, n: int, records: str) -> dict:
    """Run ``child`` in a fresh interpreter; add its own peak resident memory (MB)."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", name, str(rate), str(n), records],
        stdout=subprocess.PIPE,
        text=True,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    out = json.loads(proc.stdout.read())
    proc.stdout.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    out["rss_mb"] = usage.ru_maxrss / 1024  # Linux reports kilobytes
    return out


def where_the_time_goes(n: int) -> list[tuple[str, float]]:
    """Shares of a profiled continuous run, by part (profiling slows Python calls; the shares
    hold)."""
    wl = workload(20.0, n)
    prof = cProfile.Profile()
    prof.enable()
    simulate(wl, make_policy("continuous", **SETTINGS), DEFAULT_STEP_TIME)
    prof.disable()
    st = pstats.Stats(prof).stats
    cum = {}
    for (file, _, fn), (_, _, _, ct, _) in st.items():
        cum[(os.path.basename(file), fn)] = cum.get((os.path.basename(file), fn), 0.0) + ct
    # The whole profiled run: every function's own time. (Not simulate's cumulative time: cProfile
    # loses track of a generator that returns without yielding, as a server's step does when the
    # clock jumps.)
    total = sum(tt for (_, _, tt, _, _) in st.values()) or 1.0
    policy = sum(
        cum.get(("continuous.py", f), 0.0) for f in ("next_action", "on_step_end", "on_arrival")
    )
    # A short step is priced by short_durations (in Python floats), a longer one by durations.
    pricing = cum.get(("steptime.py", "durations"), 0.0) + cum.get(
        ("steptime.py", "short_durations"), 0.0
    )
    executor = cum.get(("executors.py", "run"), 0.0) - pricing
    fold = cum.get(("recorder.py", "fold_events"), 0.0)
    records = cum.get(("recorder.py", "step"), 0.0) + cum.get(("recorder.py", "records"), 0.0)
    # What is left is SimPy's: its event queue, the processes' resumptions, the arrivals and
    # servers' own lines.
    simpy_share = total - policy - pricing - executor - records
    parts = [
        ("policy decisions (next_action, on_step_end, on_arrival)", policy),
        ("pricing steps (the step-time model's durations)", pricing),
        ("the simulated clock's executor, less pricing", executor),
        ("recording (Recorder.step, records(); of which folding token events)", records),
        ("  folding token events", fold),
        ("SimPy: events, processes (arrivals, servers), interrupts", simpy_share),
    ]
    return [(k, v / total) for k, v in parts]


AGAINST_RUNS = {
    "continuous": ("continuous", {}),
    "vllm-v1": ("continuous", {"scheduler": "vllm-v1"}),
}


def timed(run: str) -> None:
    """In a child: one 10,000-request run of ``AGAINST_RUNS[run]`` at 20/s, its wall time as
    JSON."""
    name, extra = AGAINST_RUNS[run]
    # warm caches
    simulate(workload(20.0, 300, seed=1), make_policy(name, **SETTINGS, **extra), DEFAULT_STEP_TIME)
    wl = workload(20.0, 10_000)
    t = time.perf_counter()
    res = simulate(wl, make_policy(name, **SETTINGS, **extra), DEFAULT_STEP_TIME)
    wall = time.perf_counter() - t
    print(
        json.dumps(
            {
                "wall": wall,
                "steps": len(res.records.steps["start"]),
                "batchsim": os.path.dirname(sys.modules["batchsim"].__file__),
            }
        )
    )


def against(other: str, rounds: int) -> int:
    """This checkout vs the one at ``other``, interleaved; medians, spreads and their ratio."""
    trees = {
        "this": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        "other": os.path.abspath(other),
    }
    if not os.path.isdir(os.path.join(trees["other"], "batchsim")):
        print(f"--against: no batchsim package in {trees['other']}", file=sys.stderr)
        return 2
    walls = {(run, tree): [] for run in AGAINST_RUNS for tree in trees}
    sticks: list[float] = []
    skipped: set[str] = set()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average at start "
        f"{os.getloadavg()[0]:.2f}; this = {trees['this']}, other = {trees['other']}; {rounds} "
        f"rounds, 10,000 requests at 20/s each run"
    )
    for r in range(rounds):
        sticks.append(yardstick())
        order = list(trees) if r % 2 == 0 else list(trees)[::-1]  # who goes first alternates
        for run in AGAINST_RUNS:
            for tree in order:
                # PYTHONPATH first: the child imports that checkout's batchsim, not the installed
                # one.
                env = dict(os.environ, PYTHONPATH=trees[tree])
                done = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "--timed", run],
                    env=env,
                    cwd=trees[tree],
                    capture_output=True,
                    text=True,
                )
                if done.returncode != 0:
                    # An older checkout may lack a flavour (vllm-v1 came later): that run is left
                    # out, said below.
                    if tree == "other":
                        skipped.add(run)
                        continue
                    raise RuntimeError(f"--timed {run} failed in this checkout:\n{done.stderr}")
                got = json.loads(done.stdout)
                if os.path.realpath(got["batchsim"]) != os.path.realpath(
                    os.path.join(trees[tree], "batchsim")
                ):
                    raise RuntimeError(
                        f"the child imported {got['batchsim']}, not {trees[tree]}'s batchsim"
                    )
                walls[run, tree].append(got["wall"])
    med = lambda v: float(np.median(v))  # noqa: E731
    print(
        f"yardstick (10M-iteration Python loop): median {med(sticks):.3f} s, spread "
        f"{min(sticks):.3f}-{max(sticks):.3f} s\n"
    )
    head = f"{'run':<12}{'tree':<7}{'median s':>9}{'min-max s':>15}{'ratio to other (median)':>25}"
    print(head + "\n" + "-" * len(head))
    for run in AGAINST_RUNS:
        if run in skipped:
            print(f"{run:<12}not run: the other checkout cannot run it")
            continue
        this, that = walls[run, "this"], walls[run, "other"]
        per_round = [a / b for a, b in zip(this, that)]
        for tree, v in (("other", that), ("this", this)):
            ratio = (
                f"{med(this) / med(that):.2f} (rounds {min(per_round):.2f}-{max(per_round):.2f})"
                if tree == "this"
                else ""
            )
            print(f"{run:<12}{tree:<7}{med(v):>9.3f}{f'{min(v):.3f}-{max(v):.3f}':>15}{ratio:>25}")
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    return 0


def small_runs(repeat: int) -> None:
    """Goal 1: 10,000 requests of each policy, at the issue's load and at a common one."""
    print(f"1. 10,000 requests, each policy (goal <= {GOAL_10K_S} s)")
    head = (
        f"{'policy':<11}{'rate/s':>7}{'busy':>6}{'batch':>7}{'events':>8}{'wall s':>8}"
        f"{'sim req/s':>11}  goal"
    )
    print(head + "\n" + "-" * len(head))
    for label, loads in (
        ("issue's load", ISSUE_LOADS),
        ("common 0.5/s", {p: 0.5 for p in ISSUE_LOADS}),
    ):
        for name, rate in loads.items():
            wall, s, events = best_of(name, rate, 10_000, repeat)
            ok = "met" if wall <= GOAL_10K_S else "MISSED"
            print(
                f"{name:<11}{rate:>7.2f}{s['busy_fraction']:>6.0%}{s['mean_batch_size']:>7.1f}"
                f"{events:>8}{wall:>8.3f}{10_000 / wall:>11,.0f} "
                f" {ok}  ({label})"
            )


def large_runs() -> None:
    """Goals 2-4: 100k to 10M continuous requests, each in a child process (its peak RSS is the
    run's)."""
    print("\n2-4. large runs, each in a child process of its own (peak RSS is that process's)")
    head = f"{'run':<38}{'wall s':>8}{'sim req/s':>11}{'peak RSS MB':>13}{'p99 E2E s':>11}"
    print(head + "\n" + "-" * len(head))
    rows = {}
    for key, (name, rate, n, records) in {
        "100k continuous, full records": ("continuous", 20.0, 100_000, "full"),
        "1M continuous, full records": ("continuous", 20.0, 1_000_000, "full"),
        "1M continuous, summary only": ("continuous", 20.0, 1_000_000, "summary"),
        "10M continuous, summary only": ("continuous", 20.0, 10_000_000, "summary"),
    }.items():
        r = rows[key] = in_child(name, rate, n, records)
        print(
            f"{key:<38}{r['wall']:>8.1f}{n / r['wall']:>11,.0f}{r['rss_mb']:>13,.0f}"
            f"{r['p99_e2e']:>11.3f}"
        )
    big, small = rows["1M continuous, full records"], rows["100k continuous, full records"]
    slope = (big["rss_mb"] - small["rss_mb"]) * 2**20 / 900_000
    print(
        f"\n1M requests, continuous: {big['wall']:.1f} s (goal <= 30 s: "
        f"{'met' if big['wall'] <= 30 else 'MISSED'}), peak RSS {big['rss_mb']:,.0f} MB (goal <= 1 "
        f"GB: {'met' if big['rss_mb'] <= 1024 else 'MISSED'}); workload generation "
        f"{big['workload_s']:.2f} s"
    )
    print(
        f"memory per request: the records' arrays {big['request_bytes']:.0f} B + the step log "
        f"{big['step_bytes']:.0f} B ({big['step_rows'] / 1_000_000:.2f} steps per request x 72 B; "
        f"--summary-only keeps only its totals, or streams it to CSV); peak RSS grows {slope:.0f} "
        f"B per request from 100k to 1M (goal: constant, <= 300 B plus the step log: "
        f"{'met' if big['request_bytes'] <= 300 else 'MISSED'})"
    )
    summ = rows["1M continuous, summary only"]
    err = abs(summ["p99_e2e"] - big["p99_e2e"]) / big["p99_e2e"]
    print(
        f"streaming sketch: p99 E2E of 1M requests {summ['p99_e2e']:.4f} s vs exact "
        f"{big['p99_e2e']:.4f} s, error {err:.3%} (stated bound 0.5 %); 10M requests summary-only "
        f"in {rows['10M continuous, summary only']['wall']:.0f} s, peak RSS "
        f"{rows['10M continuous, summary only']['rss_mb']:,.0f} MB"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--quick", action="store_true", help="only the 10,000-request runs and the profile"
    )
    ap.add_argument(
        "--against", metavar="PATH", help="time this checkout against the one at PATH, side by side"
    )
    ap.add_argument("--rounds", type=int, default=5, help="rounds of --against (default 5)")
    ap.add_argument(
        "--child", nargs=4, metavar=("POLICY", "RATE", "N", "RECORDS"), help=argparse.SUPPRESS
    )
    ap.add_argument("--timed", choices=sorted(AGAINST_RUNS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.timed:
        timed(args.timed)
        return 0
    if args.against:
        return against(args.against, args.rounds)
    if args.child:
        name, rate, n, records = args.child
        child(name, float(rate), int(n), records)
        return 0
    print(
        f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} CPUs; load "
        f"average at start {os.getloadavg()[0]:.2f}. This machine is shared with other work: every "
        f"figure below is measured in this one run, side by side; wall = best of {args.repeat} "
        f"where repeated."
    )
    print(
        f"workload: Poisson, prompts {PROMPT!r}, outputs {OUTPUT!r}; {DEFAULT_STEP_TIME!r}; "
        f"{SETTINGS}\n"
    )

    small_runs(args.repeat)
    if not args.quick:
        large_runs()

    print(
        "\n5. where the time goes (profiled 10,000-request continuous run at 20/s, share of "
        "simulate):"
    )
    for k, share in where_the_time_goes(10_000):
        print(f"  {share:>6.1%}  {k}")
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
