"""What a server needs from whoever carries out its steps: the executor, one per clock.

The policy decides *what* a step is; the executor makes it happen and says *when* it
ended. The simulator's prices it with a step-time model (``batchsim.sim.executors``),
realrun's runs it on a real model and reads the clock (``WallExecutor``), a replay hands
back the times a real run measured. The server process (``batchsim.core.server``) is the
same for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import simpy

from .step import Step

__all__ = ["Executor", "StopRun", "INTERRUPTED"]

INTERRUPTED = "interrupted (Ctrl-C) before it finished"


class StopRun(Exception):
    """Raised by an executor that cannot go on (a GPU out of memory): the run stops, keeping what it
    measured."""


class Executor(Protocol):
    """Runs or prices the steps of one server.

    ``can_cut``: True if ``run`` only prices a repeated step, so that ``cut`` can shorten it
    afterwards when an arrival interrupts it (the simulator); False if ``run`` really runs it,
    so it must be told beforehand where to stop (``stop_at``) and is never cut (the wall clock,
    a replay).
    """

    can_cut: bool

    def environment(self) -> simpy.Environment:
        """The clock this executor's steps are timed on: a fresh SimPy environment for one run."""
        ...

    def run(self, step: Step, now: float, stop_at: float | None) -> tuple[float, Sequence[float]]:
        """Run or price ``step`` (up to ``step.repeat`` passes), decided at ``now``; return its
        start and the end of each pass that ran. ``stop_at``: stop after the first pass ending at or
        after it."""
        ...

    def cut(self, k: int) -> None:
        """Only the first ``k`` passes of the step just priced ran (an arrival ended it). Only
        called when ``can_cut``."""
        ...

    def release(self, finished: tuple[int, ...]) -> None:
        """Those requests are done (a real engine drops their cache rows)."""
        ...
