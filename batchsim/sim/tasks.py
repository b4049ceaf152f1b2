"""Many independent simulations at once, on a Dask cluster or one after another.

A sweep runs one simulation per value of a knob; a capacity plan runs one per candidate
fleet. Each is independent of the others, so they go to ``dask.distributed``, an
existing engine for exactly this, rather than to a pool of our own:

- ``--scheduler local``: a ``LocalCluster`` on this machine, one single-threaded worker
  process per core (at most one per task): the default when Dask is installed and there
  is more than one task;
- ``--scheduler tcp://HOST:8786``: the scheduler of a cluster already running
  (``dask scheduler`` and ``dask worker tcp://HOST:8786`` on the machines);
- ``--scheduler none``: here, one after another.

Every task carries its own seeds, so results are the same on every scheduler; they
come back in the tasks' order. A worker that dies mid-task (killed, out of memory) is
replaced and its task run again by Dask's scheduler (up to its
``distributed.scheduler.allowed-failures``, 3 by default), so no result is lost. Dask
is an optional extra (``pip install 'batchsim[dask]'``): without it, the tasks run here,
and a note says so.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Sequence

from ..core.errors import ConfigError, check_at_most, check_int_at_least, show

__all__ = [
    "SCHEDULER_HELP",
    "add_scheduler_args",
    "check_scheduler",
    "dask_available",
    "run_tasks",
    "worker_count",
]

SCHEDULER_HELP = (
    "where the simulations run: local (a Dask LocalCluster on this machine's cores; the default "
    "when Dask is installed), tcp://HOST:PORT (a running Dask scheduler) or none (here, one by one)"
)
_ADDRESS = re.compile(r"^tcp://(?P<host>[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>\d{1,5})$")
#: Seconds to wait for a remote scheduler before saying it cannot be reached.
CONNECT_TIMEOUT = 5.0
#: Seconds a connected scheduler is given to have a worker: with the connect, inside the 30 s a user
#: waits before deciding something hangs (issue 38), and long enough for a worker that is still
#: starting.
WORKER_TIMEOUT = 20.0


def add_scheduler_args(p) -> None:
    p.add_argument("--scheduler", default=None, help=SCHEDULER_HELP)
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="worker processes of a local scheduler (default: one per CPU, at most one per task)",
    )


def dask_available() -> bool:
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        return False
    return True


def check_scheduler(spec: str | None) -> str | None:
    """``local``, ``none``, a ``tcp://HOST:PORT`` address, or None (decide by the tasks)."""
    if spec is None:
        return None
    s = str(spec).strip()
    if s in ("local", "none"):
        if s == "local" and not dask_available():
            raise ConfigError(
                "scheduler local needs Dask: pip install 'batchsim[dask]' (or --scheduler none)"
            )
        return s
    m = _ADDRESS.match(s)
    if not m or not 1 <= int(m.group("port")) <= 65535:
        raise ConfigError(f"scheduler must be local, none or tcp://HOST:PORT, got {show(spec)}")
    if not dask_available():
        raise ConfigError(f"scheduler {s} needs Dask: pip install 'batchsim[dask]'")
    return s


def worker_count(jobs: int | None, tasks: int) -> int:
    if jobs is not None:
        check_int_at_least("jobs", jobs, 1)
        check_at_most("jobs", jobs, 4 * (os.cpu_count() or 1), "four per CPU")
    return max(1, min(tasks, jobs or os.cpu_count() or 1))


def run_tasks(
    fn: Callable,
    tasks: Sequence,
    scheduler: str | None = None,
    jobs: int | None = None,
    progress: bool | None = None,
    desc: str = "tasks",
    notes: list | None = None,
) -> list:
    """``[fn(t) for t in tasks]``, in order, on the scheduler asked for.

    ``fn`` returns None when it was interrupted (Ctrl-C reaches workers too). On Ctrl-C, or at
    the first None, the results of the leading tasks that finished are returned: the caller
    reports those and names the one cut short.
    """
    scheduler = check_scheduler(scheduler)
    workers = worker_count(jobs, len(tasks))
    if scheduler is None:
        scheduler = "local" if len(tasks) > 1 and workers > 1 and dask_available() else "none"
        if scheduler == "none" and len(tasks) > 1 and workers > 1 and notes is not None:
            notes.append(
                "note: Dask is not installed, so the simulations ran one by one here (pip install "
                "'batchsim[dask]' runs them on every core)"
            )
    show_bar = sys.stderr.isatty() if progress is None else progress
    if scheduler == "none":
        return _serial(fn, tasks, show_bar, desc)
    return _on_dask(fn, tasks, scheduler, workers, show_bar, desc, notes)


def _bar(show: bool, n: int, desc: str):
    if not show or not n:
        return None
    from tqdm import tqdm

    return tqdm(total=n, desc=desc, unit="task", leave=False)


def _serial(fn: Callable, tasks: Sequence, show: bool, desc: str) -> list:
    done: list = []
    bar = _bar(show, len(tasks), desc)
    try:
        for t in tasks:
            r = fn(t)
            if r is None:
                break
            done.append(r)
            if bar is not None:
                bar.update(1)
    except KeyboardInterrupt:
        pass
    finally:
        if bar is not None:
            bar.close()
    return done


def _connect(scheduler: str, workers: int):
    from dask.distributed import Client, LocalCluster

    if scheduler == "local":
        cluster = LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
        return Client(cluster), cluster
    from .probe import probe_scheduler

    # Client's timeout bounds the connect, not the handshake: the probe bounds both (see probe.py).
    probe_scheduler(scheduler, CONNECT_TIMEOUT)
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError) as e:
        raise ConfigError(
            f"scheduler {scheduler}: cannot connect ({str(e).splitlines()[0][:120]})"
        ) from None
    # Dask read a stray reply as a frame length: the address, not the run, is wrong
    except MemoryError:
        raise ConfigError(f"scheduler {scheduler}: does not speak Dask's protocol") from None
    # A scheduler with no worker takes the tasks and waits, silently and without end, for one to
    # join.
    try:
        client.wait_for_workers(1, timeout=WORKER_TIMEOUT)
    except TimeoutError:
        client.close()
        raise ConfigError(
            f"scheduler {scheduler}: no worker joined it within {WORKER_TIMEOUT:g} s (start one "
            f"with `dask worker {scheduler}`, or pass --scheduler local or none)"
        ) from None
    return client, None


def _on_dask(
    fn: Callable, tasks: Sequence, scheduler: str, workers: int, show: bool, desc: str, notes
) -> list:
    from dask.distributed import as_completed

    client, cluster = _connect(scheduler, workers)
    bar = _bar(show, len(tasks), desc)
    done: list = []
    futures = []
    try:
        # pure=False: two tasks that look alike (a sweep of the same value twice) are still run
        # twice.
        futures = client.map(fn, list(tasks), pure=False)
        for _ in as_completed(futures):
            if bar is not None:
                bar.update(1)
        for f in futures:
            r = f.result()
            if r is None:
                break
            done.append(r)
        if notes is not None:
            where = (
                f"a local Dask cluster of {workers} workers"
                if cluster is not None
                else f"the Dask cluster at {scheduler}"
            )
            notes.append(f"simulations ran on {where}")
    except KeyboardInterrupt:
        done = _leading(futures)
    finally:
        if bar is not None:
            bar.close()
        client.close()
        if cluster is not None:
            cluster.close()
    return done


def _leading(futures) -> list:
    """The results of the leading futures that had finished when the run was cut short."""
    out = []
    for f in futures:
        if f.status != "finished":
            break
        r = f.result()
        if r is None:
            break
        out.append(r)
    return out
