"""Step fidelity: does the profiled model price each kind of pass right, once the run's level is
out?

A measured run keeps every pass the engine ran with its planned shape (``meta['passes']``), and
the schedule is the simulator's own (the replay is exact), so each pass has a price in the
profiled model. This bench runs several workload families on one engine, against one profile
sized to all of them (``realrun.cli.calibration.sized_profile``), in interleaved rounds, and per
kind of pass prints measured / priced:

- **raw**: the ratio of totals (measured over priced), median over rounds, with its range;
- **level out**: the same divided by the round's level, the median over every family of its
  whole-run ratio in that round (the machine's speed at that moment, read from all the passes
  of the round), so what is left is the model's error in that kind of pass against the others;
- **two levels out**: the same with the round's prefill level (prefill and mixed passes) and decode
  level (decode passes) taken out apart, as ``realrun.timing.pass_level`` reads a run's level and
  ``LevelStepTime`` applies it: beside a busy neighbour, prefill (compute-bound) slows more than
  decode, so one level leaves a prefill-heavy family (padded) looking cheap and a decode-heavy one
  (taxi) dear. A family's "all" row prices each kind of pass at its own level.

Kinds of pass (a pass is in one kind; a mixed step's pass is "chunk + decode"):

    decode short    decode rows only, mean context under 256 tokens
    decode long     decode rows only, mean context of 256 tokens or more
    prefill short   one row or ragged rows, under 256 new tokens, no cached past
    prefill long    256 new tokens or more, no cached past, not padded
    chunk + past    a chunk that continues a prompt (attends to its cached past), no decode rows
    chunk + decode  prompt tokens and decode rows in one pass
    padded batch    two or more prompts padded to the longest (taxi's and the padded policies')

Families (each at ``--load`` of the simulated server's time, ``--seconds`` of arrivals):

    short          continuous; prompts 16..128, outputs 16..96
    long-prompt    continuous, chunked prefill of 256 tokens; prompts 400..900, outputs 8..48
    long-context   continuous; prompts 500..800, outputs 96..192
    padded         static, 8 rows; prompts 300..450, outputs 8..32 (padded prefills of ~3,500
                   tokens)
    taxi           taxi; prompts 16..512, outputs 16..64

Run it quiet and beside two CPU-bound processes (``scripts/busy.py``), on two models:

    python bench/step_fidelity.py [--model gpt2-6l] [--rounds 3] [--seconds 8] [--load 0.7]
    python scripts/busy.py -- python bench/step_fidelity.py --model tiny-gpt2

Per family it also holds a step's first and second decode passes to the later passes of the same
runs (``meta['pass_rep']``): the same moments, so no level needs taking out, and 1.0 says the
profile prices a step's first-pass extra (``first_decode_extra``) as the runs paid it. Measured so:
gpt2-6l quiet, priced +0.57 ms, first passes 0.99x; tiny-gpt2 quiet, priced +0.13 ms, 1.15x (taxi
1.22x, static's padded batches 1.03x): its bursts read less than serving runs pay
(``realrun.timing.cold``).

``--save A.json`` keeps the profile; ``--calibration A.json,B.json`` prices the very same passes
with two profiles of this machine (made minutes apart) and ends with how far apart they price each
kind once their common level is out. That is the floor under the tables: the model can be no nearer
the runs than a profile of this machine is to the next one. On gpt2-6l here, two profiles made ten
minutes apart priced the same nine runs' passes 6.8 % apart in common, and, that level out, a chunk
over its past 6.0 % apart, short prefills 9.0 %, every other kind within 3.2 %.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from host import yardstick  # noqa: E402  (bench/host.py)
from pass_kinds import (  # noqa: E402  (bench/pass_kinds.py)
    KINDS,
    place_ratios,
    profiles_apart,
    run_sums,
)

from batchsim import Poisson, Uniform, make_policy, make_workload  # noqa: E402
from batchsim.core.errors import ConfigError  # noqa: E402
from batchsim.core.workload import Workload  # noqa: E402
from batchsim.sim.busy import rate_factor_for_busy, scaled  # noqa: E402
from realrun.cli.calibration import sized_profile  # noqa: E402
from realrun.clock.runner import limits_for, run_real  # noqa: E402
from realrun.engine.engine import Engine  # noqa: E402
from realrun.engine.model import load_model  # noqa: E402

FAMILIES = {
    "short": (
        Uniform(16, 128),
        Uniform(16, 96),
        "continuous",
        {"max_seqs": 32, "max_batched_tokens": 1024, "chunked_prefill": False},
    ),
    "long-prompt": (
        Uniform(400, 900),
        Uniform(8, 48),
        "continuous",
        {"max_seqs": 32, "max_batched_tokens": 256, "chunked_prefill": True},
    ),
    "long-context": (
        Uniform(500, 800),
        Uniform(96, 192),
        "continuous",
        {"max_seqs": 32, "max_batched_tokens": 1024, "chunked_prefill": False},
    ),
    "padded": (Uniform(300, 450), Uniform(8, 32), "static", {"max_batch": 8}),
    "taxi": (Uniform(16, 512), Uniform(16, 64), "taxi", {}),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model", default="gpt2-6l", help="gpt2-6l (default), tiny-gpt2 or another offline model"
    )
    ap.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds of every family (default 3)"
    )
    ap.add_argument(
        "--seconds", type=float, default=8.0, help="seconds of arrivals per run (default 8)"
    )
    ap.add_argument("--load", type=float, default=0.7, help="simulated busy fraction (default 0.7)")
    ap.add_argument("--only", default=",".join(FAMILIES), help="comma-separated families")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--profile-budget",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="the profile's time budget (default 600): it buys interleaved rounds of every shape, "
        "so a slow moment of the machine spreads over all of them instead of landing on one. On "
        "gpt2-6l here, 240 s timed one round of two and the families' level-out ratios spread over "
        "0.86-1.14; both rounds (552 s) gave 0.93-1.07",
    )
    ap.add_argument(
        "--save", default=None, metavar="PATH", help="write the profile's calibration here"
    )
    ap.add_argument(
        "--calibration",
        default=None,
        metavar="PATH",
        help="price with this calibration instead of profiling (one made by --save on this "
        "machine); several, separated by commas, each price the very same passes (a side-by-side "
        "of two profiles that no run-to-run noise can blur): one table each",
    )
    a = ap.parse_args(argv)
    families = a.only.split(",")
    # argparse's error: one line naming the option and the value, exit code 2
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        ap.error(f"--only: no family {unknown[0]!r}; the families are {', '.join(FAMILIES)}")
    for name, value, ok, want in (
        ("--rounds", a.rounds, a.rounds >= 1, "a whole number >= 1"),
        ("--seconds", a.seconds, a.seconds > 0, "seconds > 0"),
        ("--load", a.load, 0 < a.load < 1, "a busy fraction between 0 and 1"),
        ("--threads", a.threads, a.threads >= 1, "a whole number >= 1"),
        ("--profile-budget", a.profile_budget, a.profile_budget > 0, "seconds > 0"),
    ):
        if not ok:
            ap.error(f"{name} must be {want}, got {value}")
    lm = load_model(a.model, device="cpu", threads=a.threads)
    engine = Engine(lm)
    limits = limits_for(lm)
    print(f"model: {lm.describe()}; engine KV: {engine.kv_note}")
    print(
        f"host yardstick (10M additions): {yardstick():.3f} s; load average "
        f"{os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)"
    )
    units, builders = {}, {}
    for name in families:
        prompt, output, pol, knobs = FAMILIES[name]
        units[name] = make_workload(Poisson(1.0), prompt, output, n=400, seed=a.seed)
        builders[name] = lambda pol=pol, knobs=knobs: make_policy(pol, **knobs)
    # One profile for every family: each family's workload stacked (the grid covers all of them).
    order = np.argsort(np.concatenate([u.arrivals for u in units.values()]), kind="stable")
    stacked = Workload.from_arrays(
        *(
            np.concatenate([getattr(u, f) for u in units.values()])[order]
            for f in ("arrivals", "prompt_tokens", "output_tokens")
        ),
        "every family",
    )
    notes: list[str] = []
    t0 = time.monotonic()
    if a.calibration:
        from realrun.timing.profile import load_calibration

        paths = a.calibration.split(",")
        models = []
        for path in paths:
            try:
                models.append(load_calibration(path))
            except (ConfigError, OSError, ValueError) as e:
                ap.error(f"--calibration {path}: {e}")
        model = models[0]
        print(f"priced with {', '.join(paths)} (not profiled now)")
    else:
        prof = sized_profile(
            engine,
            stacked,
            builders,
            [b() for b in builders.values()],
            limits,
            budget_s=a.profile_budget,
            say=lambda s: print(s, file=sys.stderr, flush=True),
            notes=notes,
            busy=a.load,
        )
        print("\n".join(notes))
        print(prof.text())
        print(
            f"profile: {prof.seconds:.0f} s (estimate {prof.info['estimate_s']:.0f} s); wall with "
            f"pilot {time.monotonic() - t0:.0f} s"
        )
        if a.save:
            prof.write(a.save)
        model = prof.model
        paths, models = ["profiled now"], [model]
    workloads = {}
    for name, unit in units.items():
        f = rate_factor_for_busy(unit, builders[name], model, a.load, limits)
        n = int(np.clip(f * a.seconds, 20, 400))
        workloads[name] = scaled(Workload(unit.requests[:n], unit.description), f)
    rng = np.random.default_rng(a.seed)
    # per calibration: (round, family, {kind: (measured, priced)})
    rows: list[list] = [[] for _ in models]
    places: list[list] = [[] for _ in models]
    for r in range(a.rounds):
        for name in rng.permutation(families):
            res = run_real(workloads[name], builders[name](), engine, limits=limits, trace=True)
            for m, into, at in zip(models, rows, places):
                kinds, places_of_run = run_sums(res, m, FAMILIES[name][2])
                into.append((r, name, kinds))
                at.append((r, name, places_of_run))
            print(
                f"round {r + 1}: {name} ran {len(workloads[name])} requests, all passes "
                f"{rows[0][-1][2]['all'][0] / rows[0][-1][2]['all'][1]:.3f}x their price",
                file=sys.stderr,
                flush=True,
            )
    for path, m, got, at in zip(paths, models, rows, places):
        if len(paths) > 1:
            print(f"\n=== priced with {path}")
        _print(got, families, a)
        _print_places(at, m, families)
    if len(paths) > 1:
        _print_apart(rows, paths)
    return 0


def _print_places(places: list, model, families) -> None:
    """Per family and over all: a step's first and second decode passes against its later ones."""
    ext = (getattr(model, "first_decode_extra", 0.0), getattr(model, "second_decode_extra", 0.0))
    print(
        f"\na step's first and second decode passes against its later ones, the same run's (the "
        f"profile prices them +{ext[0] * 1e3:.3f} and +{ext[1] * 1e3:.3f} ms; 1.0 = priced as "
        f"paid), median [range] "
        "over runs:"
    )
    for fam in [*families, "all"]:
        got = place_ratios([x for x in places if fam in ("all", x[1])])
        cells = [
            f"{k} {np.median(v):.3f} [{min(v):.3f}-{max(v):.3f}] ({len(v)} runs)"
            for k, v in got.items()
            if v
        ]
        print(f"  {fam:<13} {'; '.join(cells) or 'no run had both'}")


def _print_apart(rows: list[list], paths: list[str]) -> None:
    """How far two profiles of this machine price the same passes apart, kind by kind, once their
    common level is out: the floor under the tables above, since a model can be no nearer the runs
    than its own profile is reproducible."""
    print(
        f"\nthe same passes priced by each profile over {paths[0]}, the profiles' common level out "
        "(how reproducible a profile of this machine is, kind by kind):"
    )
    for path, apart in zip(paths[1:], profiles_apart(rows)):
        cells = ", ".join(
            f"{k} {(r - 1) * 100:+.1f} %" for k, r in sorted(apart.items()) if k != "all"
        )
        print(f"  {path}: common level {apart['all']:.3f}; {cells}")


def _is_decode(kind: str) -> bool:
    return kind.startswith("decode")


def _sums(v: dict, decode: bool) -> tuple[float, float]:
    """(measured, priced) over a run's kinds of pass that are decode-only (or not)."""
    ks = [k for k in v if k != "all" and _is_decode(k) == decode]
    return sum(v[k][0] for k in ks), sum(v[k][1] for k in ks)


def _levels(rows, rounds: int) -> tuple[dict, dict]:
    """Each round's level: one (the median over families of all passes' measured/priced), and two
    (the same for prefill and mixed passes, and for decode passes, apart: ``LevelStepTime``'s split,
    since a neighbour on the other core moves compute-bound prefill more than decode)."""
    one, two = {}, {}
    for r in range(rounds):
        runs = [v for rr, _, v in rows if rr == r]
        one[r] = float(np.median([v["all"][0] / v["all"][1] for v in runs]))
        two[r] = {}
        for dec in (False, True):
            got = [m / q for m, q in (_sums(v, dec) for v in runs) if q > 0]
            two[r][dec] = float(np.median(got)) if got else one[r]
    return one, two


def _print(rows, families, a) -> None:
    level, split = _levels(rows, a.rounds)
    print(
        "\nround levels (median over families of measured/priced, all passes): "
        + ", ".join(f"{level[r]:.3f}" for r in range(a.rounds))
        + "; prefill and decode apart: "
        + ", ".join(f"{split[r][False]:.3f}/{split[r][True]:.3f}" for r in range(a.rounds))
    )
    print(
        f"\n{'family':<13} {'kind of pass':<15} {'raw: median [range]':>22} "
        f"{'level out: median [range]':>28} {'two levels out':>15} {'s/run':>6}"
    )
    summary: dict[str, list[float]] = {}
    for fam in families:
        kinds = sorted(
            {k for _, f, v in rows if f == fam for k in v}, key=lambda k: (k == "all", k)
        )
        for k in kinds:
            runs = [(r, v) for r, f, v in rows if f == fam and k in v and v[k][1] > 0]
            raw = [v[k][0] / v[k][1] for r, v in runs]
            out = [v[k][0] / v[k][1] / level[r] for r, v in runs]
            if k == "all":  # every kind of pass at its own level
                two = [
                    v[k][0] / sum(v[j][1] * split[r][_is_decode(j)] for j in v if j != "all")
                    for r, v in runs
                ]
            else:
                two = [v[k][0] / v[k][1] / split[r][_is_decode(k)] for r, v in runs]
            secs = np.mean([v[k][0] for _, v in runs])
            if k != "all":
                summary.setdefault(k, []).extend(two)
            print(
                f"{fam:<13} {k:<15} {np.median(raw):>8.3f} [{min(raw):.3f}-{max(raw):.3f}] "
                f"{np.median(out):>14.3f} [{min(out):.3f}-{max(out):.3f}] {np.median(two):>15.3f} "
                f"{secs:6.1f}"
            )
    print("\nby kind of pass, prefill and decode levels out (median over every run that had it):")
    for k in KINDS:
        if k in summary:
            print(f"  {k:<15} {np.median(summary[k]):.3f}  ({len(summary[k])} runs)")


if __name__ == "__main__":
    raise SystemExit(main())
