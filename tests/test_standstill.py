"""A policy that makes no progress stops the run with a message, never hangs it
(batchsim.core.standstill).

Lab 1's commonest mistake, ``now > deadline`` for ``now >= deadline``, leaves the timetable bus
answering "wait until now" forever at one instant; before this guard, the lab's check printed
nothing for minutes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from batchsim import ConstantStepTime, Poisson, Uniform, make_policy, make_workload, simulate
from batchsim.core.standstill import LIMIT, NoProgress, StandStill
from batchsim.core.step import Wait

ROOT = Path(__file__).resolve().parents[1]


class StuckAtDeadline(type(make_policy("taxi"))):
    """The taxi, except that once a request waits it answers ``Wait(now)`` and never runs it."""

    name = "stuck"

    def next_action(self, now: float):
        action = super().next_action(now)
        return Wait(now) if not isinstance(action, Wait) else action


def test_a_policy_that_waits_until_now_forever_is_stopped_and_named():
    wl = make_workload(Poisson(5.0), Uniform(8, 16), Uniform(2, 4), n=5, seed=0)
    with pytest.raises(NoProgress) as e:
        simulate(wl, StuckAtDeadline(), ConstantStepTime(0.01))
    msg = str(e.value)
    assert (
        msg.startswith("stuck: at t=")
        and f"{LIMIT:,} times in a row" in msg
        and "Wait(until=" in msg
    )


def test_the_count_starts_again_at_a_new_instant_or_after_a_step():
    w = StandStill()
    for _ in range(LIMIT - 1):
        w.check(None, 1.0, 1.0, 0, False)
    for _ in range(LIMIT - 1):
        w.check(None, 2.0, 1.5, 0, False)  # a new instant: counted afresh
    w.check(None, 2.0, 2.0, 1, False)  # a step ran between: counted afresh
    assert w.count == 1
    w.check(None, 2.0, 3.0, 1, False)  # a wait for a later time is never counted
    assert w.count == 1
    with pytest.raises(NoProgress, match="NoneType: at t=2 s"):
        for _ in range(LIMIT):
            w.check(None, 2.0, 2.0, 1, False)


def test_no_deadline_after_the_last_arrival_is_no_progress_either():
    with pytest.raises(NoProgress, match="no deadline and no arrival to come"):
        StandStill().check(make_policy("taxi"), 1.0, None, 0, True)
    StandStill().check(make_policy("taxi"), 1.0, None, 0, False)  # an arrival may still come: fine


def test_lab1_with_the_strict_comparison_fails_in_seconds_saying_why(tmp_path):
    solution = (ROOT / "course" / "teacher" / "solutions" / "lab1_timetable.py").read_text()
    wrong = solution.replace("now + _EPS >= self._deadline()", "now > self._deadline()")
    assert wrong != solution, "the teacher's solution no longer reads as this test expects"
    (tmp_path / "lab1_timetable.py").write_text(wrong)
    for f in ("conftest.py", "test_lab1.py"):
        shutil.copy(ROOT / "course" / "labs" / f, tmp_path / f)
    # timeout: a watchdog against the very hang this guards against, not a speed limit.
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:benchmark",
            "-k",
            "each_bus_leaves",
            str(tmp_path / "test_lab1.py"),
            "--labs",
            str(tmp_path),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 1, p.stdout[-2000:]
    assert "NoProgress" in p.stdout and "(>= rather than >)" in p.stdout, p.stdout[-2000:]
