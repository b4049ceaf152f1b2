"""The CLI's way to the task runner, which lives in the simulator layer (``batchsim.sim.tasks``):
a scenario (teach) runs its rounds with it too, and teach may not import the CLI above it."""

from __future__ import annotations

from ..sim.tasks import (
    SCHEDULER_HELP,
    add_scheduler_args,
    check_scheduler,
    dask_available,
    run_tasks,
    worker_count,
)

__all__ = [
    "SCHEDULER_HELP",
    "add_scheduler_args",
    "check_scheduler",
    "dask_available",
    "run_tasks",
    "worker_count",
]
