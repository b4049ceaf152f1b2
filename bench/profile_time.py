"""How long a profile sized to a workload takes, against its own estimate, and how often it says so.

``realrun compare`` profiles the engine over the shapes its workload reaches (``sized_profile``):
a pilot prices a pass, the grid is sized and thinned to the budget, the estimate is printed, and a
progress line follows every few seconds. This bench runs exactly that, ``--repeats`` times, and
prints per profile: the estimate, the seconds it took, their ratio, the longest silence between two
progress lines, and the held-out error it reports. The default workload is the one the profile's
time target is set on: at most 4 rows, prompts up to 1,024 tokens, sparse arrivals.

    python bench/profile_time.py [--model tiny-gpt2] [--rows 4] [--prompt-len uniform:64,1024]
        [--requests 40] [--rate 0.5] [--budget 90] [--repeats 2]
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

from batchsim.core.arrivals import Poisson  # noqa: E402
from batchsim.core.errors import ConfigError  # noqa: E402
from batchsim.core.lengths import parse_length  # noqa: E402
from batchsim.core.policies import make_policy  # noqa: E402
from batchsim.core.workload import make_workload  # noqa: E402
from realrun.cli.calibration import sized_profile  # noqa: E402
from realrun.clock.runner import limits_for  # noqa: E402
from realrun.engine.engine import Engine  # noqa: E402
from realrun.engine.model import load_model  # noqa: E402


def policies(rows: int) -> dict:
    """The four policies, each allowed ``rows`` rows: label -> a function making a fresh one."""
    return {
        "taxi": lambda: make_policy("taxi"),
        "static": lambda: make_policy("static", max_batch=rows),
        "dynamic": lambda: make_policy("dynamic", max_batch=rows),
        "continuous": lambda: make_policy("continuous", max_seqs=rows),
    }


def one_profile(engine, workload, builders, limits, budget_s: float) -> dict:
    """One sized profile: its estimate, seconds, the longest gap between progress lines, held-out
    error."""
    said: list[float] = []
    t0 = time.monotonic()
    notes: list[str] = []
    prof = sized_profile(
        engine,
        workload,
        builders,
        [b() for b in builders.values()],
        limits=limits,
        budget_s=budget_s,
        say=lambda text: said.append(time.monotonic()),
        notes=notes,
    )
    end = time.monotonic()
    # the silences: from the start, between lines, and from the last line to the end
    marks = [t0, *said, end]
    return {
        "estimate_s": float(prof.info["estimate_s"]),
        "seconds": float(prof.seconds),
        "wall_s": end - t0,
        "longest_silence_s": float(np.max(np.diff(marks))),
        "heldout_mean_pct": (prof.heldout or {}).get("mean_pct", float("nan")),
        "heldout_max_pct": (prof.heldout or {}).get("max_pct", float("nan")),
        "rounds": f"{prof.info['rounds_timed']} of {prof.info['rounds']}",
        "notes": notes,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="tiny-gpt2", help="tiny-gpt2 (realrun's default) or another")
    ap.add_argument(
        "--rows", type=int, default=4, help="the rows every policy may hold (default 4)"
    )
    ap.add_argument(
        "--prompt-len", default="uniform:64,1024", help="prompt lengths (default uniform:64,1024)"
    )
    ap.add_argument("--output-len", default="uniform:16,64", help="output lengths")
    ap.add_argument("--requests", type=int, default=40, help="requests (default 40)")
    ap.add_argument("--rate", type=float, default=0.5, help="arrivals per second (default 0.5)")
    ap.add_argument(
        "--budget", type=float, default=90.0, help="profile budget, seconds (default 90)"
    )
    ap.add_argument("--repeats", type=int, default=2, help="profiles taken one after another")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    for name, v, lo in (
        ("rows", a.rows, 1),
        ("requests", a.requests, 1),
        ("repeats", a.repeats, 1),
    ):
        if v < lo:  # argparse's error: one line naming the option, exit code 2
            ap.error(f"--{name} must be a whole number >= {lo}, got {v}")
    if not a.rate > 0 or not a.budget > 0:
        ap.error(f"--rate and --budget must be > 0, got {a.rate} and {a.budget}")
    try:
        prompts = parse_length(a.prompt_len, "prompt-len")
        outputs = parse_length(a.output_len, "output-len")
    except (ConfigError, ValueError) as e:
        ap.error(f"--prompt-len / --output-len: {e}")
    lm = load_model(a.model, device="cpu", threads=a.threads)
    engine = Engine(lm)
    workload = make_workload(Poisson(a.rate), prompts, outputs, n=a.requests, seed=1)
    limits = limits_for(lm)
    print(f"model: {lm.describe()}")
    print(
        f"workload: {a.requests} requests at {a.rate:g}/s, prompts {a.prompt_len}, outputs "
        f"{a.output_len}; every policy at most {a.rows} rows; budget {a.budget:g} s"
    )
    print(
        f"host yardstick (10M additions): {yardstick():.3f} s; load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'profile':>7} {'estimate s':>10} {'took s':>7} {'took/est':>8} {'wall s':>7} "
        f"{'longest silence s':>17} {'held-out mean/worst %':>21}  rounds"
    )
    builders = policies(a.rows)
    for k in range(a.repeats):
        r = one_profile(engine, workload, builders, limits, a.budget)
        if k == 0:
            for line in r["notes"]:
                print(f"  {line}")
        print(
            f"{k + 1:>7} {r['estimate_s']:>10.0f} {r['seconds']:>7.0f} "
            f"{r['seconds'] / r['estimate_s']:>8.2f} {r['wall_s']:>7.0f} "
            f"{r['longest_silence_s']:>17.1f} {r['heldout_mean_pct']:>10.1f} / "
            f"{r['heldout_max_pct']:<9.1f}  {r['rounds']}"
        )
    print(f"host yardstick after: {yardstick():.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
