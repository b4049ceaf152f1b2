"""Run a command beside CPU-bound processes of its own: a student's laptop, with a browser and a
call.

    python scripts/busy.py [--burners 2] [--limit 3600] [--bursts ON,OFF] -- make test

Each burner is a pure-Python loop at normal priority (a browser tab is not niced either). They
start before the command, and stop when it ends, when this script is interrupted, or after
``--limit`` seconds, whichever comes first, so a burner never outlives the check. The exit code is
the command's. ``make test-busy`` runs the whole test suite this way: a test that passes only on a
quiet machine fails there.

``--bursts ON,OFF`` makes the load come and go, as a call's video or a page's script does: each
burner burns for ON seconds, then sleeps for OFF seconds, the burners out of step with each other.
A short reading of the machine (a canary of a tenth of a second) then catches a burst or misses it,
while a run of many seconds averages over several: the load that makes a few readings disagree with
the run's own passes (``realrun.timing.pass_level``).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

BURN = (
    "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    "
    "sum(range(1000))\n"
)
#: A burner that comes and goes: ON seconds of work, OFF seconds asleep, starting ``phase`` seconds
#: in.
BURST = (
    "import time\nend = time.monotonic() + {limit}\ntime.sleep({phase})\nwhile time.monotonic() < "
    "end:\n    stop = time.monotonic() + {on}\n    while time.monotonic() < stop:\n        "
    "sum(range(1000))\n    time.sleep({off})\n"
)


def _bursts(text: str) -> tuple[float, float]:
    """``ON,OFF`` seconds, each > 0; ValueError naming the flag otherwise."""
    parts = text.split(",")
    try:
        on, off = (float(x) for x in parts)
    except ValueError:
        raise ValueError(f"--bursts must be ON,OFF seconds (e.g. 0.5,3), got {text!r}") from None
    if not (0 < on <= 3600 and 0 < off <= 3600):
        raise ValueError(f"--bursts must be ON,OFF seconds in (0, 3600], got {text!r}")
    return on, off


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--burners", type=int, default=2, help="CPU-bound processes beside the command (default 2)"
    )
    ap.add_argument(
        "--limit",
        type=float,
        default=3600.0,
        help="seconds after which the burners stop anyway (default 3600)",
    )
    ap.add_argument(
        "--bursts",
        metavar="ON,OFF",
        default=None,
        help="burn ON seconds, sleep OFF seconds, over and over (default: burn all the time)",
    )
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        print(
            "busy: give the command after --, e.g. python scripts/busy.py -- make test",
            file=sys.stderr,
        )
        return 2
    if not 0 <= a.burners <= 64:
        print(f"busy: --burners must be 0 to 64, got {a.burners}", file=sys.stderr)
        return 2
    if not a.limit > 0:
        print(f"busy: --limit must be > 0 seconds, got {a.limit}", file=sys.stderr)
        return 2
    try:
        bursts = _bursts(a.bursts) if a.bursts is not None else None
    except ValueError as e:
        print(f"busy: {e}", file=sys.stderr)
        return 2
    if bursts is None:
        code_of = [BURN.format(limit=a.limit)] * a.burners
        how = "CPU-bound processes"
    else:  # out of step: burner i starts its first burst i/n of a cycle late
        on, off = bursts
        code_of = [
            BURST.format(limit=a.limit, on=on, off=off, phase=(on + off) * i / max(a.burners, 1))
            for i in range(a.burners)
        ]
        how = f"processes burning {on:g} s in every {on + off:g} s"
    burners = [subprocess.Popen([sys.executable, "-c", c]) for c in code_of]
    print(f"busy: {a.burners} {how} running beside: {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    child = subprocess.Popen(cmd)
    try:
        code = child.wait()
    except KeyboardInterrupt:
        child.send_signal(signal.SIGINT)
        code = child.wait()
    finally:
        for b in burners:
            b.kill()
        for b in burners:
            b.wait()
    print(
        f"busy: the command exited {code} after {time.monotonic() - t0:.0f} s beside {a.burners} "
        f"burners (load average now {os.getloadavg()[0]:.1f})",
        file=sys.stderr,
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
