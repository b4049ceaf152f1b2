"""Lab 1, solution: the bus with a timetable.

Part B, the derivation. A bus's window opens with its first passenger, who waits
``w = max_wait``. During the window others arrive as a Poisson stream: on average
``rate * w`` of them, each at a uniform moment, so each waits ``w / 2`` on average.
Per bus, the total wait is ``w + rate * w * w / 2`` shared by ``1 + rate * w``
passengers:

    mean wait = (w + rate w^2 / 2) / (1 + rate w)

Windows do not overlap and Poisson arrivals forget the past, so every bus is
alike. (With rate w small the answer tends to w: almost everyone rides alone and
waits the whole window; with rate w large it tends to w / 2 - but then the bus
fills and leaves early, which this formula ignores.)
"""

from __future__ import annotations

from batchsim.core.errors import check_int_at_least, check_nonneg
from batchsim.core.policies import PaddedBatchPolicy

_EPS = 1e-9


class TimetableBus(PaddedBatchPolicy):
    """Leave when ``seats`` are taken or the first passenger has waited ``max_wait`` seconds."""

    name = "timetable"

    def __init__(self, seats: int = 8, max_wait: float = 0.1) -> None:
        check_int_at_least("seats", seats, 1)
        check_nonneg("max_wait", max_wait)
        self.max_batch = seats
        self.max_wait = float(max_wait)

    def _deadline(self) -> float:
        return self.queue[0].arrival + self.max_wait

    def _ready(self, now: float) -> bool:
        # Not "or self.closed": a real server cannot know that nobody else will come, so the
        # last bus too leaves on its timetable (and the reference Dynamic batcher does the same).
        return len(self.queue) >= self.max_batch or now + _EPS >= self._deadline()


def predict_mean_wait(rate: float, max_wait: float) -> float:
    """The mean wait at the stop when every bus leaves ``max_wait`` after its first passenger."""
    w = max_wait
    return (w + rate * w * w / 2) / (1 + rate * w)
