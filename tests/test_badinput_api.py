"""Bad input to the Python API, and the two hangs of issue 38: each is one ``ConfigError`` (a
``ValueError``) naming the argument and the value, or from a command line exit code 2 and one line
naming the flag; the package's notes are ``BatchsimNote`` warnings a caller can filter."""

from __future__ import annotations

import logging
import threading
import warnings

import numpy as np
import pytest

import batchsim
from batchsim import (
    BatchsimNote,
    ConfigError,
    Poisson,
    Uniform,
    make_policy,
    make_workload,
    simulate,
)
from batchsim.core.arrivals import RushHour
from batchsim.core.policies import POLICY_NAMES
from batchsim.core.workload import Request, Workload


def _wl(n: int = 6) -> Workload:
    return make_workload(Poisson(50.0), Uniform(2, 10), Uniform(1, 6), n=n, seed=1)


def _result():
    return simulate(_wl(), make_policy("continuous"), batchsim.ConstantStepTime(0.01))


#: (the call, the words its message must hold: the argument and the value)
BATCHSIM_CASES = {
    "make_workload('poisson', ...)": (
        lambda: make_workload("poisson", Uniform(2, 9), Uniform(1, 4), n=3),
        ("arrival", "'poisson'", "Poisson("),
    ),
    "make_workload(..., prompt_len='uniform:1,3')": (
        lambda: make_workload(Poisson(1.0), "uniform:1,3", Uniform(1, 4), n=3),
        ("prompt_len", "'uniform:1,3'"),
    ),
    "summarize(None)": (lambda: batchsim.summarize(None), ("result", "None")),
    "summarize(res, slo='fast')": (
        lambda: batchsim.summarize(_result(), slo="fast"),
        ("slo", "'fast'", "SLO("),
    ),
    "summarize(res, streaming='yes')": (
        lambda: batchsim.summarize(_result(), streaming="yes"),
        ("streaming", "'yes'"),
    ),
    "from_arrays with a negative prompt": (
        lambda: Workload.from_arrays([0.0, 1.0], [5, -3], [2, 2]),
        ("prompts", "-3", "request 1"),
    ),
    "from_arrays with a zero output": (
        lambda: Workload.from_arrays([0.0, 1.0], [5, 3], [0, 2]),
        ("outputs", "0", "request 0"),
    ),
    "from_arrays with 2.5 tokens": (
        lambda: Workload.from_arrays([0.0], [2.5], [2]),
        ("prompts", "2.5"),
    ),
    "from_arrays arriving before 0": (
        lambda: Workload.from_arrays([-1.0, 1.0], [5, 3], [2, 2]),
        ("arrival", "-1.0"),
    ),
    "from_arrays of text": (
        lambda: Workload.from_arrays([0.0], ["many"], [2]),
        ("prompts", "'many'"),
    ),
    "Request(0, -1.0, 10, 10)": (lambda: Request(0, -1.0, 10, 10), ("arrival", "-1.0")),
    "Request(0, 0.0, 0, 10)": (lambda: Request(0, 0.0, 0, 10), ("prompt_tokens", "0")),
    "Request(-2, 0.0, 3, 10)": (lambda: Request(-2, 0.0, 3, 10), ("id", "-2")),
    "Request(0, nan, 3, 3)": (lambda: Request(0, float("nan"), 3, 3), ("arrival", "nan")),
    "RushHour('5@2')": (
        lambda: RushHour("5@2"),
        ("phases", "'5@2'", "parse_arrival('rush-hour:5@2'"),
    ),
    "RushHour(((5, 2), (3,)))": (lambda: RushHour(((5, 2), (3,))), ("phases[1]", "(3,)")),
}


@pytest.mark.parametrize("case", list(BATCHSIM_CASES), ids=list(BATCHSIM_CASES))
def test_the_api_refuses_by_argument_and_value(case):
    call, words = BATCHSIM_CASES[case]
    with pytest.raises(ConfigError) as caught:
        call()
    assert all(w in str(caught.value) for w in words), (str(caught.value), words)


def test_what_the_checks_let_through_is_unchanged():
    # Numbers of numpy's kinds are numbers; whole floats are whole; a request from the arrays is
    # plain.
    r = Request(np.int64(0), np.float64(1.5), np.int64(3), 2)
    assert (r.arrival, r.prompt_tokens) == (1.5, 3)
    wl = Workload.from_arrays(np.array([0.0, 0.5]), [3.0, 4.0], np.array([1, 2], dtype=np.int32))
    assert wl.prompt_tokens.tolist() == [3, 4] and wl.request(1) == Request(1, 0.5, 4, 2)
    assert RushHour([(5, 2.0), (5, 4.0)]).mean_rate == 3.0
    s = batchsim.summarize(_result(), slo=batchsim.SLO(e2e=10.0), streaming=np.bool_(True))
    assert s["completed"] == 6


def _notes(call) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    assert all(issubclass(w.category, BatchsimNote) for w in caught), [w.category for w in caught]
    return [str(w.message) for w in caught]


def test_a_knob_the_policy_does_not_read_is_a_note_a_caller_can_filter():
    (note,) = _notes(lambda: make_policy("taxi", max_batch=4))
    assert "max_batch=4" in note and "taxi reads no knob" in note
    (note,) = _notes(lambda: make_policy("continuous", max_wait=0.1))
    assert "max_wait=0.1" in note and "max_seqs" in note
    # One set for every policy (each that reads knobs reads one of it) is the lessons' idiom: quiet.
    every = dict(max_batch=8, max_wait=0.1, max_seqs=16)
    assert _notes(lambda: [make_policy(n, **every) for n in POLICY_NAMES]) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error", BatchsimNote)
        with pytest.raises(BatchsimNote):
            make_policy("taxi", max_batch=4)
    assert issubclass(BatchsimNote, UserWarning) and not issubclass(BatchsimNote, ConfigError)


# -- realrun's Python API --------------------------------------------------------------------------
def test_realrun_api_refuses_by_argument_and_value():
    pytest.importorskip("torch")
    from realrun.clock.runner import context_reason, run_real
    from realrun.engine.engine import Engine
    from realrun.engine.inputs import prompt_ids

    cases = [
        (lambda: context_reason(-1, 5, 1024), ("prompt", "-1")),
        (lambda: context_reason(5, 0, 1024), ("output", "0")),
        (lambda: context_reason(5, 5, 0), ("context_len", "0")),
        (lambda: Engine(None), ("lm", "None", "load_model")),
        (
            lambda: run_real(_wl(), "continuous", object()),
            ("policy", "'continuous'", "make_policy('continuous')"),
        ),
        (lambda: run_real([1, 2], make_policy("taxi"), object()), ("workload", "[1, 2]")),
        (lambda: run_real(_wl(), make_policy("taxi"), None), ("engine", "None")),
        (lambda: prompt_ids(_wl().request(0), 0), ("vocab", "0")),
        (lambda: prompt_ids("hello", 50), ("req", "'hello'")),
    ]
    for call, words in cases:
        with pytest.raises(ConfigError) as caught:
            call()
        assert all(w in str(caught.value) for w in words), (str(caught.value), words)
    assert context_reason(1000, 30, 1024) is not None and context_reason(10, 10, 1024) is None
    assert len(prompt_ids(_wl().request(0), 50)) == _wl().request(0).prompt_tokens


# -- the command lines ----------------------------------------------------------------------------
def _refused(main, argv, capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, (code, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("engine", ["hf-generate", "vllm"])
def test_kv_with_an_engine_that_does_not_read_it_is_refused(engine, capsys):
    pytest.importorskip("torch")
    from realrun.cli import main

    err = _refused(main, ["run", "--kv", "paged", "--engine", engine, "--policy", "static"], capsys)
    assert "--kv paged" in err and f"engine {engine}" in err


def test_a_busy_that_stretches_the_run_past_a_day_is_refused_once_it_sets_the_rate(capsys):
    """Before: the day check ran before --busy set the rate, so --busy 0.000001 ran for days
    silently."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from realrun.cli import main

    err = _refused(
        main,
        ["compare", "--busy", "0.000001", "--calibration", "reference", "--requests", "8"],
        capsys,
    )
    assert "--busy 1e-06" in err and "more than a day" in err and "raise --busy" in err, err


def test_the_span_check_counts_every_run():
    from realrun.clock.real_span import check_real_span

    check_real_span([40_000.0, 40_000.0], allowed=False)  # 22 h in all: long, allowed
    with pytest.raises(ConfigError, match="more than a day"):
        check_real_span([40_000.0, 40_000.0, 40_000.0], allowed=False)
    check_real_span([40_000.0] * 3, allowed=True)


def test_a_dask_scheduler_without_workers_is_an_error_naming_the_flag(capsys, monkeypatch):
    """A scheduler on loopback with no worker: sweep used to wait for one forever, silently."""
    distributed = pytest.importorskip("dask.distributed")
    from batchsim.cli import main
    from batchsim.sim import tasks

    # The default gives a worker 20 s to join, inside the 30 s with the connect's 5; the
    # test, which only needs the refusal, gives it 1 s.
    assert tasks.WORKER_TIMEOUT + tasks.CONNECT_TIMEOUT <= 30
    monkeypatch.setattr(tasks, "WORKER_TIMEOUT", 1.0)
    with distributed.LocalCluster(
        n_workers=0,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
        silence_logs=logging.CRITICAL,
    ) as cluster:
        address = cluster.scheduler_address
        argv = [
            "sweep",
            "max_seqs=2,4",
            "--policy",
            "continuous",
            "--requests",
            "20",
            "--scheduler",
            address,
        ]
        codes: list[int] = []
        run = threading.Thread(target=lambda: codes.append(main(argv)), daemon=True)
        run.start()
        # a watchdog against the old hang, not a measure: the refusal comes within its own 25 s
        # limit
        run.join(600)
        assert codes, (
            "sweep still waiting after 600 s on a scheduler without workers: the hang is back"
        )
        err = capsys.readouterr().err.strip()
        assert codes == [2] and len(err.splitlines()) == 1, (codes, err)
    assert f"scheduler {address}" in err and "no worker" in err and "--scheduler" in err, err
