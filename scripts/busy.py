"""Run a command beside CPU-bound processes of its own: a student's laptop, with a browser and a call.

    python scripts/busy.py [--burners 2] [--limit 3600] -- make test

Each burner is a pure-Python loop at normal priority (a browser tab is not niced either). They
start before the command, and stop when it ends, when this script is interrupted, or after
``--limit`` seconds, whichever comes first, so a burner never outlives the check. The exit code is
the command's. ``make test-busy`` runs the whole test suite this way: a test that passes only on a
quiet machine fails there.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

BURN = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    sum(range(1000))\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--burners", type=int, default=2, help="CPU-bound processes beside the command (default 2)")
    ap.add_argument("--limit", type=float, default=3600.0, help="seconds after which the burners stop anyway (default 3600)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        print("busy: give the command after --, e.g. python scripts/busy.py -- make test", file=sys.stderr)
        return 2
    if not 0 <= a.burners <= 64:
        print(f"busy: --burners must be 0 to 64, got {a.burners}", file=sys.stderr)
        return 2
    if not a.limit > 0:
        print(f"busy: --limit must be > 0 seconds, got {a.limit}", file=sys.stderr)
        return 2
    burners = [subprocess.Popen([sys.executable, "-c", BURN.format(limit=a.limit)]) for _ in range(a.burners)]
    print(f"busy: {a.burners} CPU-bound processes running beside: {' '.join(cmd)}", file=sys.stderr, flush=True)
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
    print(f"busy: the command exited {code} after {time.monotonic() - t0:.0f} s beside {a.burners} burners "
          f"(load average now {os.getloadavg()[0]:.1f})", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
