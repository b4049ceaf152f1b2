"""Progress where no terminal watches: a line now and then, never a bar's carriage returns."""

from __future__ import annotations

import io

import pytest

from batchsim.core.progress_lines import LineProgress, span


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_short_run_prints_nothing_and_a_long_one_a_line_every_interval():
    out, clock = io.StringIO(), Clock()
    p = LineProgress(10_000, "serving continuous", stream=out, first=10, every=30, clock=clock)
    for i in range(10_000):
        clock.t = i * 0.01  # 100 requests a second: the run takes 100 s
        p.update(1)
    p.close()
    lines = out.getvalue().splitlines()
    # After 10 s, then every 30 s (looked at every 10 requests): at 10, 40, 70 s, and the last line.
    assert len(lines) == 4, lines
    assert "\r" not in out.getvalue()
    assert lines[0].startswith(
        "serving continuous: 1,010 of 10,000 requests (10%) in 10 s; about 1 min 30 s left"
    )
    assert lines[-1] == "serving continuous: 10,000 of 10,000 requests (100%) in 1 min 40 s, done"

    quiet, clock = io.StringIO(), Clock()
    q = LineProgress(1_000, "x", stream=quiet, clock=clock)
    for i in range(1_000):
        clock.t = i * 0.005  # 5 s in all: less than the first line's 10 s
        q.update(1)
    q.close()
    assert quiet.getvalue() == ""


def test_spans_read_as_a_person_says_them():
    assert [span(s) for s in (4.4, 65, 3725)] == ["4 s", "1 min 05 s", "1 h 02 min"]
    with pytest.raises(ValueError, match="total must be >= 1"):
        LineProgress(0, "x")


def test_a_long_scenario_run_without_a_terminal_prints_lines_not_a_bar(capsys, monkeypatch):
    """What a student saw as 15 silent minutes: the run command, stderr to a file. Lines come
    out."""
    from batchsim.cli import main
    from batchsim.core import progress_lines

    ticks = iter(range(0, 10**9, 7))  # every look at the clock: 7 s later
    monkeypatch.setattr(progress_lines, "clock_now", lambda: float(next(ticks)))
    code = main(
        [
            "run",
            "--policy",
            "continuous",
            "--requests",
            "20000",
            "--rate",
            "20",
            "--summary-only",
            "--no-plots",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0
    assert (
        "simulating continuous" in err
        and "of 20,000 requests" in err
        and "left" in err
        and "\r" not in err
    )
