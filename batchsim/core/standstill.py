"""A policy that makes no progress: asked at one instant, again and again, it neither runs nor
waits.

A server asks its policy what to do next; ``Wait(until)`` with ``until`` already come means "ask me
again now", which is right once (a deadline that just fell due: the policy acts when asked again).
A policy that answers it every time, at the same instant, would keep the server asking forever,
and the run would hang without a word: lab 1's timetable bus does exactly that when its deadline
test is written ``now > deadline`` instead of ``now >= deadline``. The watch below counts such
answers in a row at one instant and stops the run with an error that names the policy, the
instant and the answer. It costs a comparison per such answer and nothing per step.
"""

from __future__ import annotations

__all__ = ["NoProgress", "StandStill", "LIMIT"]

#: How many "wait until now or earlier" answers in a row, at one instant, a run allows. A right
#: policy gives one; several servers, a user's processes and arrivals at that instant add a few.
#: Ten thousand is far past anything legitimate and a fraction of a second of a student's time.
LIMIT = 10_000


class NoProgress(RuntimeError):
    """A policy asked again and again at one instant neither ran a step nor waited for a later
    time."""


class StandStill:
    """Counts a server's answers of ``Wait`` for a time already come, at one instant, with no step
    between."""

    __slots__ = ("at", "steps", "count")

    def __init__(self) -> None:
        self.at: float | None = None
        self.steps = -1
        self.count = 0

    def check(self, policy, now: float, until: float | None, steps: int, closed: bool) -> None:
        """The policy answered ``Wait(until)`` at ``now``, after its server's ``steps``-th step;
        ``closed``: every request has arrived."""
        if until is None:
            if closed:  # nothing will ever wake it
                raise NoProgress(
                    f"{_name(policy)}: waits with no deadline and no arrival to come, but is not "
                    f"idle"
                )
            return
        if until > now:
            return
        if now != self.at or steps != self.steps:
            self.at, self.steps, self.count = now, steps, 0
        self.count += 1
        if self.count >= LIMIT:
            raise NoProgress(
                f"{_name(policy)}: at t={now:.9g} s it answered Wait(until={until!r}) {LIMIT:,} "
                f"times in a row, a wait for "
                "a time that has already come, so the server would ask it again at the same "
                "instant forever. When its deadline has come, a policy must run a step (or wait "
                "for a later time): check how it compares the time with its deadline (>= rather "
                "than >)."
            )


def _name(policy) -> str:
    return getattr(policy, "name", type(policy).__name__)
