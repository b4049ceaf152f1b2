"""Sweeps on Dask: a LocalCluster of two workers gives the serial sweep's numbers exactly, a worker
that dies is replaced and its task rerun, and a scheduler that cannot be reached is one line, exit
2."""

from __future__ import annotations

import os
import sys

import pytest

distributed = pytest.importorskip(
    "dask.distributed", reason="Dask is the [dask] extra, which `make test` installs"
)

import cloudpickle  # noqa: E402  (Dask's own dependency)

from batchsim.cli import build_parser, main  # noqa: E402
from batchsim.cli.sweep import sweep  # noqa: E402
from batchsim.core.errors import ConfigError  # noqa: E402
from batchsim.sim import tasks  # noqa: E402

# Workers import functions by name; this module is not on their path, so send its functions whole.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def sweep_args(*extra):
    return build_parser().parse_args(
        [
            "sweep",
            "max_seqs=4,16",
            "--policy",
            "continuous,dynamic",
            "--requests",
            "150",
            "--rate",
            "8",
            "--replicas",
            "2",
            "--no-plots",
            *extra,
        ]
    )


def test_a_sweep_on_a_local_cluster_of_two_equals_the_serial_sweep():
    local, notes_local, cfg_local = sweep(sweep_args("--scheduler", "local", "--jobs", "2"))
    serial, notes_serial, cfg_serial = sweep(sweep_args("--scheduler", "none"))
    assert list(local) == list(serial) and len(serial) == 4
    assert local == serial  # every figure, to the last bit: same seeds, same code, another process
    assert any("local Dask cluster of 2 workers" in n for n in notes_local)
    # not vacuous
    assert local["max_seqs=4 continuous"]["p99_e2e"] != local["max_seqs=16 continuous"]["p99_e2e"]


def die_once(marker: str) -> int:
    """Kills the worker process running it, the first time; returns its pid the second."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return os.getpid()


def test_a_worker_that_dies_is_replaced_and_no_result_is_lost(tmp_path):
    markers = [str(tmp_path / f"m{i}") for i in range(3)]
    got = tasks.run_tasks(die_once, markers, scheduler="local", jobs=2, progress=False)
    assert len(got) == 3 and all(isinstance(pid, int) for pid in got)
    assert all(os.path.exists(m) for m in markers)  # each task really died once before it succeeded


def test_an_unreachable_scheduler_is_one_line_and_exit_2(monkeypatch, capsys):
    monkeypatch.setattr(tasks, "CONNECT_TIMEOUT", 0.5)
    code = main(
        [
            "sweep",
            "max_seqs=4,8",
            "--policy",
            "continuous",
            "--requests",
            "20",
            "--no-plots",
            "--scheduler",
            "tcp://127.0.0.1:9",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "scheduler tcp://127.0.0.1:9: cannot connect" in err[0]


@pytest.mark.parametrize(
    "spec", ["lokal", "tcp://", "tcp://host", "tcp://host:0", "http://host:8786", "tcp://a b:1"]
)
def test_a_malformed_scheduler_names_itself(spec):
    with pytest.raises(ConfigError, match="scheduler must be local, none or tcp://HOST:PORT"):
        tasks.check_scheduler(spec)


def test_without_dask_local_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(tasks, "dask_available", lambda: False)
    with pytest.raises(ConfigError, match=r"pip install 'batchsim\[dask\]'"):
        tasks.check_scheduler("local")
    notes = []
    assert tasks.run_tasks(abs, [-1, -2], jobs=2, notes=notes) == [1, 2]
    assert "Dask is not installed" in notes[0]
