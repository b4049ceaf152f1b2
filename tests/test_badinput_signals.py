"""Faults from outside: Ctrl-C in the middle of a run, as a real SIGINT to a real process.

What finished is printed and its records written whole; the run cut short is named; the
exit code is 130; no half-written file is left behind; and the records that were written
conserve every request (completed + rejected = arrived). Each test starts a process,
watches its progress bar on stderr, and interrupts it at a known point rather than after
a guessed sleep, so a slow machine changes nothing (tests/watched.py).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from watched import ROOT, WATCHDOG_S, Watched


def _conserved(requests_csv: Path) -> int:
    with requests_csv.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        # each request finished or rejected, not both
        assert (r["finish"] != "") != (r["rejected"] != ""), r
    return len(rows)


def test_ctrl_c_in_batchsim_run_prints_the_finished_policies(tmp_path):
    n = 100_000
    w = Watched(
        [
            "batchsim",
            "run",
            "--policy",
            "static,taxi",
            "--requests",
            str(n),
            "--step-time",
            "0.002",
            "--progress",
            "--out",
            str(tmp_path),
        ],
        tmp_path,
    )
    w.wait_for("simulating taxi")  # static is done, taxi has started
    code, out, err = w.interrupt()
    assert code == 130, err
    assert "static" in out and "req/s" in out  # the finished policy's table
    assert "interrupted (Ctrl-C) during taxi" in out
    assert "batchsim: interrupted (Ctrl-C) during taxi" in err and "Traceback" not in err
    d = tmp_path / "custom"
    # whole, and only these
    assert sorted(p.name for p in d.iterdir()) == [
        "static-requests.csv",
        "static-steps.csv",
    ]
    assert _conserved(d / "static-requests.csv") == n


def test_ctrl_c_before_any_policy_finished(tmp_path):
    w = Watched(
        [
            "batchsim",
            "run",
            "--policy",
            "taxi",
            "--requests",
            "100000",
            "--step-time",
            "0.002",
            "--progress",
            "--out",
            str(tmp_path),
        ],
        tmp_path,
    )
    w.wait_for("simulating taxi")
    code, out, err = w.interrupt()
    assert code == 130 and "Traceback" not in err
    assert "interrupted (Ctrl-C) during taxi" in err
    d = tmp_path / "custom"
    # nothing finished, nothing written, no partial folder
    assert not d.exists() or not any(d.iterdir())


def test_ctrl_c_in_a_real_run_keeps_what_was_measured(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    w = Watched(
        [
            "realrun",
            "run",
            "--policy",
            "continuous",
            "--requests",
            "400",
            "--rate",
            "20",
            "--threads",
            "1",
            "--prompt-len",
            "8",
            "--output-len",
            "4",
            "--progress",
            "--out",
            str(tmp_path),
            "--no-plots",
        ],
        tmp_path,
    )
    w.wait_for("measuring continuous")
    w.wait_for_count(400, 3)  # some requests have finished: the bar counts them
    code, out, err = w.interrupt()
    assert code == 130, err
    assert "Traceback" not in err
    assert "realrun run: continuous measured" in out and "interrupted (Ctrl-C)" in out
    d = tmp_path / "realrun-run"
    assert sorted(p.name for p in d.iterdir()) == [
        "continuous-measured-requests.csv",
        "continuous-measured-steps.csv",
    ]
    assert _conserved(d / "continuous-measured-requests.csv") == 400
    with (d / "continuous-measured-requests.csv").open(newline="") as fh:
        reasons = {r["rejected"] for r in csv.DictReader(fh)}
    assert any(r.startswith("interrupted") for r in reasons)  # the unfinished, each with its reason


def test_doctor_with_absurd_threads_is_one_line_not_a_crash(tmp_path):
    pytest.importorskip("torch")
    # a hang guard only
    p = subprocess.run(
        [sys.executable, "-m", "realrun", "doctor", "--threads", "100000"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=WATCHDOG_S,
    )
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "threads" in lines[0] and "100000" in lines[0]
