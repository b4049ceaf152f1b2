"""Fidelity: does the calibrated simulator predict the real server, and does it know its own noise?

For each load shape: profile the real engine on a grid fitted to the shape (batchsim's
``ProfiledStepTime``, with each grid point's spread), then for each policy set the arrival rate
at which the simulated server is busy ``--load`` of the time (``batchsim.sim.busy``) and run
``realrun.judge.compare.compare_policies``: ``--repeats`` measurements per policy, interleaved in
seeded shuffled rounds with a canary (``realrun.timing.canary``) before and after each, against the
median of ``--seeds`` simulations whose passes are drawn from the profiled spread and the
machine's slow drift, at the machine's level over the runs (the canaries' median, prefill and
decode apart). Printed:

- per run: the errors of the median prediction against the median measurement (targets at
  50-85 % busy: p50 E2E 10 %, p99 E2E 20 %, p50 TTFT 15 %, TPOT 10 %), the repeats' spread of
  p50 E2E, how many metrics agree / disagree / this machine cannot tell
  (``realrun.judge.equivalence``), and how many measured medians fall in the interval for the median
  of the runs;
- the ablation, per shape and policy: p99 E2E and p99 TTFT error with every pass at its mean,
  sampled from the passes' spread alone, and with the slow drift too; how many measured medians
  fall in the band of each noise; and p50 E2E's error at the profile's level against the canaries';
- each run predicted again at the level its own passes read (made after the runs, so what is left
  is the model's error, not the machine's), against the same targets;
- the decision test: for every two policies whose measured gap (p99 E2E, and cost per request:
  server-seconds per request, 1 / throughput) is larger than their repeats' spread, whether
  the simulator ranks them the same way.

With ``--coverage H``: after the compare, H more runs per policy, held out from those that set the
level (interleaved, shuffled), each held up to its interval for one run
(``realrun.judge.interval``): the prediction made before the runs (at the profile's or the canaries'
level, the level one reading), and the prediction at the level the compare's own passes read (made
after them, the level R readings). Printed: the share of held-out runs inside each (target 80-95 %),
and sharpness: the interval's half-width against 1.645 x the held-out runs' own sd with the seeds'
(median, target <= 1.5x; an interval cannot be made right by being wide), with this machine's
run-to-run spread.

Shapes (on the CPU, one thread):

    short      Poisson; prompts uniform 16..128, outputs uniform 16..96
    mixed      Poisson; prompts uniform 32..512, outputs uniform 5..300
    bursty     gamma arrivals, CV 3; prompts uniform 16..256, outputs lognormal mean 64, median 48
    long       Poisson; prompts uniform 400..900, outputs uniform 8..48
    trace      the Azure LLM inference trace 2023 (conversation), its arrivals and lengths
               scaled by a quarter to fit 1,024 positions (skipped without the file)

Models: ``gpt2-6l`` (6 x 512, random weights, offline; a one-row decode pass takes well over
5 ms here, so the pass, not the clock, is what is timed) and ``tiny-gpt2``.

    python bench/fidelity.py [--model gpt2-6l] [--seconds 6] [--only short] [--repeats 3]
                             [--seeds 5] [--load 0.7] [--kv padded] [--coverage 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from batchsim import (
    Gamma,
    LogNormal,
    Poisson,
    Uniform,
    make_policy,
    make_workload,
    simulate,
    summarize,
)
from batchsim.core.workload import Workload
from batchsim.sim.busy import rate_factor_for_busy, scaled
from realrun.clock.runner import limits_for, run_real
from realrun.engine.engine import Engine
from realrun.engine.model import load_model
from realrun.judge.compare import COMPARE_METRICS, compare_policies, error_pct, predict_runs
from realrun.judge.verdict import band_of, median_summary
from realrun.timing.canary import Canary
from realrun.timing.drift import load_warning, recheck
from realrun.timing.grid import grid_for_workload
from realrun.timing.jitter import pass_jitter
from realrun.timing.profile import profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from held_out import HeldOut, coverage_lines, hold_out  # bench/ is the script's own folder

TRACE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "azure_llm_2023_conv.csv"
POLICIES = {
    "taxi": {},
    "static": {"max_batch": 8},
    "dynamic": {"max_batch": 8, "max_wait": 0.05},
    "continuous": {"max_seqs": 32, "max_batched_tokens": 1024},
}
SHAPES = {
    "short": (Poisson(1.0), Uniform(16, 128), Uniform(16, 96)),
    "mixed": (Poisson(1.0), Uniform(32, 512), Uniform(5, 300)),
    "bursty": (Gamma(1.0, 3.0), Uniform(16, 256), LogNormal(64, 48)),
    "long": (Poisson(1.0), Uniform(400, 900), Uniform(8, 48)),
    "trace": None,
}
#: (summary key, target %, label)
TARGETS = (
    ("p50_e2e", 10, "p50 E2E"),
    ("p99_e2e", 20, "p99 E2E"),
    ("p50_ttft", 15, "p50 TTFT"),
    ("mean_tpot", 10, "TPOT"),
)


def unit_workload(name: str, n: int, seed: int) -> Workload | None:
    """The shape at one arrival per second (scaled to a rate later); None if its data is missing."""
    if name != "trace":
        arrival, prompt, output = SHAPES[name]
        return make_workload(arrival, prompt, output, n=n, seed=seed)
    if not TRACE.is_file():
        return None
    from batchsim.core.traces import read_trace

    t = read_trace(str(TRACE))
    k = min(n, len(t.arrival_s))
    start = int(np.random.default_rng(seed).integers(0, len(t.arrival_s) - k))
    a = t.arrival_s[start : start + k] - t.arrival_s[start]
    a = a / max(a[-1], 1e-9) * (k - 1)  # one per second on average, the trace's own burstiness kept
    prompts = np.clip(t.prompt_tokens[start : start + k] // 4, 1, 900)
    outputs = np.clip(t.output_tokens[start : start + k] // 4, 1, 1024 - 1 - prompts)
    return Workload.from_arrays(
        a, prompts, outputs, f"Azure conv trace rows {start}..{start + k}, lengths / 4"
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt2-6l", help="gpt2-6l (default) or tiny-gpt2")
    p.add_argument(
        "--seconds",
        type=float,
        default=6.0,
        help="seconds of arrivals per measured run (default 6)",
    )
    p.add_argument(
        "--load", type=float, default=0.7, help="simulated busy fraction to run at (default 0.7)"
    )
    p.add_argument("--only", default="short", help="comma-separated shapes (default short)")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument(
        "--min-requests",
        type=int,
        default=40,
        help="fewest requests in a measured run (default 40)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--kv",
        default="auto",
        choices=("auto", "paged", "padded"),
        help="the engine's KV layout: the block pool (auto, where it can) or the padded rectangle",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--coverage",
        type=int,
        default=0,
        metavar="H",
        help="H held-out runs per policy after the compare, each held up to its one-run interval "
        "(default 0: none)",
    )
    p.add_argument(
        "--level-move",
        metavar="SD:DF",
        help="the level's move from a profile to its runs read earlier on this machine (the last "
        "line of an earlier run of this bench prints it): the first shape's intervals made before "
        "the runs start from it, as the shapes after it start from the ones before (realrun "
        "compare --level-move)",
    )
    return p


def main(argv=None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    first_move = None
    if args.level_move is not None:
        from batchsim.core.errors import ConfigError
        from realrun.cli.compare import given_move

        try:
            first_move = given_move(args.level_move)
        except ConfigError as e:
            p.error(str(e))
    lm = load_model(args.model, device="cpu", threads=args.threads)
    engine = Engine(lm, kv=args.kv)
    print(f"engine KV: {engine.kv_note} (pass plan {engine.plan!r})")
    limits = limits_for(lm)
    print(f"model: {lm.describe()}")
    j = pass_jitter(engine)
    print(
        f"one-row decode pass: {j['pass']['median_s'] * 1e3:.2f} ms median, p90/p10 "
        f"{1 + j['pass']['spread']:.2f}; loops of its length timed in turn: torch "
        f"{1 + j['torch loop']['spread']:.2f}, Python {1 + j['python loop']['spread']:.2f} (the "
        f"machine's own jitter)"
    )
    print(
        f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} "
        f"cores)"
    )
    t_all = time.perf_counter()
    table, ablation, decisions, coverage, at_passes = [], [], [], [], []
    # the level's move from each shape's profile to its runs, carried to the next shape's compare as
    # a later compare on one machine starts from an earlier one's (realrun.judge.level_move)
    moves: list = [first_move]
    for name in args.only.split(","):
        unit = unit_workload(name, 2000, args.seed)
        if unit is None:
            print(f"\n== {name}: skipped ({TRACE} not found)")
            continue
        _shape(
            name, unit, args, engine, limits, table, ablation, decisions, coverage, at_passes, moves
        )
        if w := load_warning(lm.threads):
            print(w)
    _print_all(table, ablation, decisions, args)
    _print_at_passes(at_passes)
    if args.coverage:
        print("\n".join(coverage_lines(coverage)))
    if moves[0] is not None:
        # what the next run of this bench on this machine can start from (--level-move)
        print(
            f"the level's move these shapes read, to start the next run from: --level-move "
            f"{moves[0].sd:.4f}:{moves[0].df}"
        )
    print(
        f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; total "
        f"{time.perf_counter() - t_all:.0f} s"
    )
    return 0


def _profile_for(unit, pols: dict, engine):
    """The engine profiled on a grid that covers what these policies will run on this workload."""
    chunk = min(
        (q.max_batched_tokens for q in pols.values() if getattr(q, "chunked_prefill", False)),
        default=None,
    )
    p_max = int(unit.prompt_tokens.max())
    max_prefill = max(
        [getattr(q, "max_batched_tokens", 0) for q in pols.values()]
        + [q.max_rows * p_max for q in pols.values() if not hasattr(q, "max_batched_tokens")]
    )
    grid = grid_for_workload(
        unit,
        max(q.max_rows for q in pols.values()),
        max_prefill,
        chunk,
        policies=tuple(pols),
        rounds=2,
        probe_s=6.0,
        whole_prompts=any(not getattr(q, "chunked_prefill", False) for q in pols.values()),
    )
    return profile(engine, grid, policies=pols)


def _shape(
    name: str,
    unit,
    args,
    engine,
    limits,
    table: list,
    ablation: list,
    decisions: list,
    coverage: list,
    at_passes: list,
    moves: list,
) -> None:
    """Profile, measure and predict every policy on one workload shape; its rows join the tables.
    ``moves[0]``: the level's move the shapes before read (a ``LevelMove``), replaced by this
    one's."""
    policies = args.policies.split(",")
    prof = _profile_for(unit, {k: make_policy(k, **POLICIES[k]) for k in policies}, engine)
    model = prof.model
    print(f"\n== {name}: {unit.description}")
    print(prof.text())
    workloads, rates = {}, {}
    for pol in policies:
        f = rate_factor_for_busy(
            unit, lambda pol=pol: make_policy(pol, **POLICIES[pol]), model, args.load, limits
        )
        n = int(np.clip(f * args.seconds, args.min_requests, 400))
        workloads[pol] = scaled(Workload(unit.requests[:n], unit.description), f)
        rates[pol] = f
    pairs = [(k, make_policy(k, **POLICIES[k]), make_policy(k, **POLICIES[k])) for k in policies]
    report = compare_policies(
        workloads,
        pairs,
        lambda label, pol: run_real(workloads[label], pol, engine, limits=limits, trace=True),
        model,
        limits=limits,
        seeds=args.seeds,
        repeats=args.repeats,
        order_seed=args.seed,
        canary=Canary(engine, model),
        stored_move=moves[0],
    )
    moves[0] = report.move_next
    if report.move_here is not None:
        print(
            f"the runs' passes read {np.exp(report.move_here):.3f}x the profile's prices (the "
            f"level's move); the intervals made before the runs hold "
            + (report.move.text() if report.move is not None else "the run spread's share alone")
        )
    lv = report.level
    print(lv.text() if lv is not None else "no canary readings")
    for row in report.rows:
        wl = workloads[row.label]
        table.append(
            (
                name,
                row.label,
                rates[row.label],
                len(wl),
                row.predicted["busy_fraction"],
                row.measured["busy_fraction"],
                row.errors,
                row.noise.get("p50_e2e"),
                row.verdicts,
                row.in_band,
            )
        )
        ablation.append((name, row.label, *_ablation(row, wl, model, lv, limits, args)))
        if row.pass_level is not None:
            at_passes.append((name, row.label, row.errors_at_passes, row.pass_level))
        print(_line(table[-1]), flush=True)
    decisions += _decisions(name, report.rows)
    if args.coverage:
        coverage += _held_out(name, report, workloads, engine, limits, args)
    print(recheck(engine, model).text())


def _ablation(row, wl, model, lv, limits, args) -> tuple:
    """One row's errors with step times at the mean, sampled from the passes' spread, and with the
    slow drift too; how many measured medians each noise's band holds; p50 E2E at the profile's
    level."""
    fresh = [make_policy(row.label, **POLICIES[row.label]) for _ in range(args.seeds)]
    mean_only = summarize(simulate(wl, fresh[0], lv.model(model) if lv else model, limits=limits))
    passes = [
        summarize(x)
        for x in predict_runs(wl, fresh, model, limits, args.seeds, "passes", lv, args.seed)
    ]
    p_pred, p_band = median_summary(passes), band_of(passes, [k for k, *_ in COMPARE_METRICS])
    m, errs = row.measured, row.errors
    # the metrics both bands cover
    held = [k for k in row.band if k in p_band and m.get(k) is not None]
    in_passes = [p_band[k][0] <= m[k] <= p_band[k][1] for k in held]
    in_slow = [row.band[k][0] <= m[k] <= row.band[k][1] for k in held]
    return (
        *(error_pct(mean_only[k], m[k]) for k in ("p99_e2e", "p99_ttft")),
        *(error_pct(p_pred[k], m[k]) for k in ("p99_e2e", "p99_ttft")),
        *(errs[k] for k in ("p99_e2e", "p99_ttft")),
        (sum(in_passes), len(in_passes)),
        (sum(in_slow), len(in_slow)),
        row.errors_at_profile["p50_e2e"],
        errs["p50_e2e"],
    )


def _held_out(name: str, report, workloads: dict, engine, limits, args) -> list[HeldOut]:
    """``args.coverage`` fresh runs per policy, none of which set the level, held up to their
    one-run intervals (``bench/held_out.py``)."""

    def run_once(label: str) -> dict:
        return summarize(
            run_real(workloads[label], make_policy(label, **POLICIES[label]), engine, limits=limits)
        )

    out = hold_out(
        name, report, run_once, args.coverage, np.random.default_rng([args.seed, 0xC0FE])
    )
    print(
        f"held out: {args.coverage} runs per policy; this machine's run-to-run spread "
        f"{report.spread.text()}"
    )
    return out


def _decisions(shape: str, rows) -> list[tuple]:
    """(shape, a, b, figure, measured gap %, noise %, same ranking?) for every pair whose measured
    gap beats the noise."""
    out = []
    figures = {
        "p99 E2E": lambda s: s["p99_e2e"],
        "cost/request": lambda s: 1.0 / s["request_throughput"],
    }
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            for fig, f in figures.items():
                ma, mb = f(a.measured), f(b.measured)
                ra = [f(x) for x in a.repeats]
                rb = [f(x) for x in b.repeats]
                noise = max(abs(x - ma) for x in ra) + max(abs(x - mb) for x in rb)
                gap = ma - mb
                if abs(gap) > noise:
                    pa, pb = f(a.predicted), f(b.predicted)
                    out.append(
                        (
                            shape,
                            a.label,
                            b.label,
                            fig,
                            gap / min(ma, mb) * 100,
                            noise / min(ma, mb) * 100,
                            (pa - pb) * gap > 0,
                        )
                    )
    return out


def _print_all(table, ablation, decisions, args) -> None:
    print(
        f"\n== all runs at {args.load:.0%} simulated busy: error = (median prediction over "
        f"{args.seeds} seeds - median of {args.repeats} measurements) / measured, % (targets: "
        + ", ".join(f"{lab} {t} %" for _, t, lab in TARGETS)
        + ")"
    )
    print(_head())
    for row in table:
        print(_line(row))
    met = sum(all(abs(r[6][k]) <= t for k, t, _ in TARGETS) for r in table)
    verdicts = [v for r in table for k, v in r[8].items() if v is not None]
    inband = [x for r in table for x in r[9].values() if x is not None]
    spreads = [r[7] for r in table if r[7] is not None]
    print(
        f"\n{met} of {len(table)} runs within every target; over every metric: "
        f"{sum(v == 'agrees' for v in verdicts)} agree, {sum(v == 'disagrees' for v in verdicts)} "
        f"disagree, {sum(v == 'cannot tell' for v in verdicts)} this machine cannot tell, of "
        f"{len(verdicts)}; measured median in the interval for the median of the runs: "
        f"{sum(inband)} of {len(inband)} ({sum(inband) / max(1, len(inband)):.0%})"
    )
    if spreads:
        print(
            f"repeat spread of p50 E2E (farthest repeat from the median): median "
            f"{np.median(spreads):.1f} %, worst {max(spreads):.1f} %"
        )
    print(
        "\n== ablation: step times at the mean, sampled from the passes' spread, and with the "
        "machine's slow drift too (errors %, at the canaries' level); measured medians inside each "
        "noise's 90 % band; p50 E2E error at the profile's level and at the canaries'"
    )
    print(
        f"{'shape':7s} {'policy':11s} | {'p99 E2E: mean':>13s} {'passes':>7s} {'+slow':>7s} | "
        f"{'p99 TTFT: mean':>14s} {'passes':>7s} {'+slow':>7s} | {'in band: passes':>15s} "
        f"{'+slow':>6s} | {'p50 E2E: profile':>16s} {'canary':>7s}"
    )
    for shape, pol, e_m, t_m, e_p, t_p, e_s, t_s, b_p, b_s, l_p, l_c in ablation:
        print(
            f"{shape:7s} {pol:11s} | {_pct(e_m):>13s} {_pct(e_p):>7s} {_pct(e_s):>7s} | "
            f"{_pct(t_m):>14s} {_pct(t_p):>7s} {_pct(t_s):>7s} | {f'{b_p[0]}/{b_p[1]}':>15s} "
            f"{f'{b_s[0]}/{b_s[1]}':>6s} | {_pct(l_p):>16s} {_pct(l_c):>7s}"
        )
    if ablation:
        for j, lab in ((2, "p99 E2E"), (3, "p99 TTFT")):
            cols = [
                [abs(r[j + 2 * c]) for r in ablation if r[j + 2 * c] is not None] for c in range(3)
            ]
            print(
                f"  mean |error| of {lab}: mean-only {np.mean(cols[0]):.1f} %, passes' spread "
                f"{np.mean(cols[1]):.1f} %, with the slow drift {np.mean(cols[2]):.1f} %"
            )
        for j, lab in ((8, "passes' spread"), (9, "with the slow drift")):
            got, of = sum(r[j][0] for r in ablation), sum(r[j][1] for r in ablation)
            print(
                f"  measured median in the 90 % band, {lab}: {got} of {of} ({got / max(1, of):.0%})"
            )
        lp = [abs(r[10]) for r in ablation if r[10] is not None]
        lc = [abs(r[11]) for r in ablation if r[11] is not None]
        print(
            f"  mean |error| of p50 E2E: at the profile's level {np.mean(lp):.1f} %, at the "
            f"canaries' {np.mean(lc):.1f} %"
        )
    print(
        "\n== decision test: pairs whose measured gap exceeds their repeats' spread (the sum of "
        "each one's farthest repeat)"
    )
    for shape, a, b, fig, gap, noise, same in decisions:
        print(
            f"{shape:7s} {a:>10s} vs {b:<10s} {fig:13s} measured gap {gap:+7.1f}% (noise "
            f"{noise:5.1f}%): "
            f"{'simulator ranks them the same' if same else 'SIMULATOR RANKS THEM THE OTHER WAY'}"
        )
    if decisions:
        print(f"  same ranking in {sum(d[-1] for d in decisions)} of {len(decisions)}")
    else:
        print("  none: no measured gap beat the noise")


def _print_at_passes(at_passes: list) -> None:
    """The model's own error: each run predicted again at the level its passes read (made after the
    runs, so the machine's level is out), against the same targets. A miss here is the model's, not
    the machine's (issue 44's target for continuous with long prompts: p50 E2E 10 %, p99 E2E 20 %,
    p50 TTFT 15 %)."""
    if not at_passes:
        return
    print(
        "\n== predicted again at the level each run's own passes read (made after the runs: the "
        "machine's level out, the model's error left); errors %, targets as above"
    )
    print(
        f"{'shape':7s} {'policy':11s} | "
        + " ".join(f"{lab:>9s}" for _, _, lab in TARGETS)
        + " | the passes' level"
    )
    for shape, pol, errs, pl in at_passes:
        cells = _cells(errs)
        print(f"{shape:7s} {pol:11s} | {cells} | {pl.text()}")
    met = sum(
        all(errs.get(k) is not None and abs(errs[k]) <= t for k, t, _ in TARGETS)
        for _, _, errs, _ in at_passes
    )
    print(f"  {met} of {len(at_passes)} runs within every target at their passes' level")


def _pct(e) -> str:
    return "-" if e is None else f"{e:+.1f}%"


def _head() -> str:
    return (
        f"{'shape':7s} {'policy':11s} {'rate x':>7s} {'n':>4s} {'busy sim':>8s} {'real':>5s} | "
        + " ".join(f"{lab:>9s}" for _, _, lab in TARGETS)
        + f" {'rep ±':>6s} | {'agree/dis/unsure':>15s} {'in int.':>7s}"
    )


def _cells(errs: dict) -> str:
    """The errors of ``TARGETS``, one column each ("-" where a metric has none)."""
    return " ".join(
        f"{errs[k]:+8.1f}%" if errs.get(k) is not None else f"{'-':>9s}" for k, *_ in TARGETS
    )


def _line(row) -> str:
    name, pol, rate, n, bs, bm, errs, spread, verdicts, inband = row
    cells = _cells(errs)
    v = [x for x in verdicts.values() if x]
    counts = f"{v.count('agrees')}/{v.count('disagrees')}/{v.count('cannot tell')}"
    b = [x for x in inband.values() if x is not None]
    sp = f"{spread:5.1f}%" if spread is not None else f"{'-':>6s}"
    return (
        f"{name:7s} {pol:11s} {rate:7.2f} {n:4d} {bs:8.0%} {bm:5.0%} | {cells} {sp} | "
        f"{counts:>15s} {f'{sum(b)}/{len(b)}':>7s}"
    )


if __name__ == "__main__":
    sys.exit(main())
