"""The interface every batching policy offers to both clocks.

A policy is pure scheduling logic: it never sleeps, never reads a clock and never
touches a model. A driver (the SimPy simulator or realrun's wall-clock runner)
calls, in this order:

    policy.start(kv_budget_tokens)          # fresh state for a run
    policy.on_arrival(request, now)         # for each arrival; may reject it
    action = policy.next_action(now)        # a Step to run, or Wait(until)
    outcome = policy.on_step_end(step, done, now)   # after running `done` repetitions
    policy.close(now)                       # no more arrivals will come

and repeats the middle three until the policy is ``idle`` after ``close``.
Because the driver passes ``now`` in, the same object runs on simulated time and
on wall-clock time, which is what makes predicted and measured comparable.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from ..step import Step, StepOutcome, Wait
from ..workload import Request

__all__ = ["Policy"]


class Policy(ABC):
    """Base class. Subclasses set ``name`` and implement the four abstract methods."""

    name: str = "policy"
    #: The most rows a step of this policy may hold (checked by the tests' invariants).
    max_rows: int = 1

    def start(self, kv_budget_tokens: int | None = None) -> None:
        """Reset all state for a new run under a KV budget in tokens (None: unlimited)."""
        self.kv_budget = kv_budget_tokens
        self.closed = False
        self.preemptions = 0
        self.kv_in_use = 0
        self.kv_peak = 0

    def close(self, now: float) -> None:
        """No more arrivals: a policy that waits for company must now go with what it has."""
        self.closed = True

    @abstractmethod
    def on_arrival(self, request: Request, now: float) -> str | None:
        """Queue the request, or return the reason it can never be served."""

    @abstractmethod
    def next_action(self, now: float) -> Step | Wait:
        """What to run now."""

    @abstractmethod
    def on_step_end(self, step: Step, done: int, now: float) -> StepOutcome:
        """Account for ``done`` (1..step.repeat) repetitions of ``step``, finished at ``now``."""

    @property
    @abstractmethod
    def idle(self) -> bool:
        """Nothing waiting and nothing running."""

    def _use_kv(self, delta: int) -> None:
        self.kv_in_use += delta
        if self.kv_budget is not None and self.kv_in_use > self.kv_budget:
            raise AssertionError(f"{self.name}: KV in use {self.kv_in_use} exceeds budget {self.kv_budget}")
        self.kv_peak = max(self.kv_peak, self.kv_in_use)

    def describe(self) -> str:
        return repr(self)
