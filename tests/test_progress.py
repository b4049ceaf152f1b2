"""The progress bar is decoration: it shows on stderr and changes no number."""

from __future__ import annotations

import numpy as np

from batchsim import (
    LinearStepTime,
    Poisson,
    Uniform,
    make_policy,
    make_workload,
    simulate,
    summarize,
)


def test_progress_bar_reports_on_stderr_and_leaves_results_unchanged(capsys):
    wl = make_workload(Poisson(20.0), Uniform(8, 64), Uniform(4, 32), n=300, seed=3)
    st = LinearStepTime(0.01, 1e-5, 1e-4)
    quiet = simulate(wl, make_policy("continuous", max_seqs=16), st)
    capsys.readouterr()
    shown = simulate(wl, make_policy("continuous", max_seqs=16), st, progress=True)
    err = capsys.readouterr().err
    assert "simulating continuous" in err
    assert summarize(quiet) == summarize(shown)
    assert np.array_equal(quiet.records.finish, shown.records.finish)
