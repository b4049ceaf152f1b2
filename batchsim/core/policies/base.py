"""The interface every batching policy offers to both clocks.

A policy is pure scheduling logic: it never sleeps, never reads a clock and never
touches a model. A driver (the simulator or realrun's wall-clock runner)
calls, in this order:

    policy.start(limits)                    # fresh state for a run under the server's limits
    policy.on_arrival(request, now)         # for each arrival; may reject it, with the reason
    action = policy.next_action(now)        # a Step to run, or Wait(until)
    outcome = policy.on_step_end(step, done, now)   # after running `done` repetitions
    policy.close(now)                       # no more arrivals will come
    policy.cancel(request_id)               # (a live server) its client has gone, between steps

and repeats the middle three until the policy is ``idle`` after ``close``. There is
one such driver, ``batchsim.core.driver.drive``, for both clocks. Because it passes
``now`` in, the same object runs on simulated time and on wall-clock time, which is
what makes predicted and measured comparable.

The server's limits (``ServerLimits``: KV budget, the model's context, tokens per
pass) are the policy's to enforce: it rejects on arrival what can never run, with a
reason, and never forms a step that breaks them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from ..limits import ServerLimits, as_limits
from ..step import Step, StepOutcome, Wait
from ..workload import Request

__all__ = ["Policy"]


class Policy(ABC):
    """Base class. Subclasses set ``name`` and implement the four abstract methods."""

    name: str = "policy"
    #: The most rows a step of this policy may hold (checked by the tests' invariants).
    max_rows: int = 1
    #: Whether its server delivers each token as it is produced (as vLLM's does), unless a summary
    #: is told otherwise; a padded batch returns whole answers when it ends (``PaddedBatchPolicy``).
    streams: bool = True

    def start(self, limits: ServerLimits | int | None = None) -> None:
        """Reset all state for a new run under the server's limits (an int: a KV budget in
        tokens)."""
        self.limits = as_limits(limits)
        self.kv_budget = self.limits.kv_budget_tokens
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

    def _never_fits(self, request: Request) -> str | None:
        """The reason shared by every policy: the request alone passes the model's context."""
        return self.limits.context_reason(request.prompt_tokens, request.output_tokens)

    @abstractmethod
    def next_action(self, now: float) -> Step | Wait:
        """What to run now."""

    @abstractmethod
    def on_step_end(self, step: Step, done: int, now: float) -> StepOutcome:
        """Account for ``done`` (1..step.repeat) repetitions of ``step``, finished at ``now``."""

    def counts(self) -> tuple[int, int]:
        """(running, waiting): requests in the batch now, and queued for it (a live server's
        metrics)."""
        raise NotImplementedError(f"{self.name} does not count its queues")

    def cancel(self, request_id: int) -> bool:
        """Withdraw a request whose client has gone (a live server's disconnect): True if it is gone
        now, its queue place and its KV memory free; False if it rides on to its end.

        The driver calls it only between steps, never while a step it decided is running. This base
        policy withdraws nothing: every request runs to its end."""
        return False

    @property
    @abstractmethod
    def idle(self) -> bool:
        """Nothing waiting and nothing running."""

    def _use_kv(self, delta: int) -> None:
        self.kv_in_use += delta
        if self.kv_budget is not None and self.kv_in_use > self.kv_budget:
            raise AssertionError(
                f"{self.name}: KV in use {self.kv_in_use} exceeds budget {self.kv_budget}"
            )
        self.kv_peak = max(self.kv_peak, self.kv_in_use)

    def describe(self) -> str:
        return repr(self)
