"""scripts/busy.py, the busy laptop of `make test-busy` and the fidelity benches: the command's exit
code passes through, bad flags get one line and exit 2, and no burner outlives the command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "busy.py"

#: The child prints the burners' pids (its siblings: children of busy.py) so the test can check them
#: after.
SIBLINGS = (
    "import os, subprocess; me = os.getpid(); ppid = os.getppid(); out = subprocess.run(['ps', "
    "'-o', 'pid=', '--ppid', str(ppid)], capture_output=True, text=True).stdout; print(' '.join(p "
    "for p in out.split() if int(p) != me))"
)


def _busy(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--bursts", "0.5"], "--bursts"),
        (["--bursts", "0,1"], "--bursts"),
        (["--bursts", "a,b"], "--bursts"),
        (["--burners", "-1"], "--burners"),
        (["--limit", "0"], "--limit"),
    ],
)
def test_a_bad_flag_gets_one_line_naming_it_and_exit_2(flags, named):
    got = _busy(*flags, "--", sys.executable, "-c", "pass")
    assert got.returncode == 2
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in got.stderr


@pytest.mark.parametrize("bursts", [[], ["--bursts", "0.05,0.05"]])
def test_the_exit_code_passes_through_and_no_burner_outlives_the_command(bursts):
    got = _busy(
        "--burners", "2", *bursts, "--", sys.executable, "-c", f"{SIBLINGS}; raise SystemExit(3)"
    )
    assert got.returncode == 3
    pids = [int(p) for p in got.stdout.split()]
    assert len(pids) == 2  # the two burners ran beside the command
    for pid in pids:  # killed and reaped by busy.py before it exited
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
