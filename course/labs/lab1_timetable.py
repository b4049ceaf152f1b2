"""Lab 1: the bus with a timetable.

A bus that waits for all N seats to fill is cheap to run and cruel at quiet
hours: the first passenger waits for N - 1 others. A timetable fixes it: the bus
leaves when it is full OR when its first passenger has waited ``max_wait``
seconds, whichever comes first. Triton's dynamic batcher and Ray Serve's
``@serve.batch`` both work this way.

Part A. Write that policy as a batchsim policy. ``PaddedBatchPolicy`` already
does the work of a padded batch (forming it, prefilling, decoding, delivering
everyone at the end, reserving KV memory). A subclass decides only *when the bus
leaves*, with two methods:

- ``_ready(now)``: True if a batch should leave now. ``self.queue`` is the deque of
  waiting requests, oldest first (it is never empty when ``_ready`` is called);
  each request has ``.arrival`` (seconds).
- ``_deadline()``: the time at which the bus must leave even if nobody else comes
  (the simulator wakes the policy then). Called only while someone is waiting.

Part B. Predict, before simulating, the mean time a passenger waits at the stop
when traffic is so light that the bus never fills: it always leaves ``max_wait``
after its first passenger. Hint: the first passenger waits ``max_wait``; others
arrive as a Poisson stream of rate ``rate`` during that window, each at a uniform
moment in it. How many others on average, and how long does each wait?

Check your work:  pytest course/labs -k lab1
"""

from __future__ import annotations

from batchsim.core.errors import check_int_at_least, check_nonneg
from batchsim.core.policies import PaddedBatchPolicy


class TimetableBus(PaddedBatchPolicy):
    """Leave when ``seats`` are taken or the first passenger has waited ``max_wait`` seconds."""

    name = "timetable"

    def __init__(self, seats: int = 8, max_wait: float = 0.1) -> None:
        check_int_at_least("seats", seats, 1)
        check_nonneg("max_wait", max_wait)
        self.max_batch = seats  # PaddedBatchPolicy never puts more than max_batch on one bus
        self.max_wait = float(max_wait)

    def _deadline(self) -> float:
        # --- your code here: when must the bus leave, even if nobody else comes? ---
        raise NotImplementedError("your code here: TimetableBus._deadline")

    def _ready(self, now: float) -> bool:
        # --- your code here: full, or the deadline has come (compare with a tiny slack,
        # say 1e-9 s: a timer set for t may fire at t minus one rounding error) ---
        raise NotImplementedError("your code here: TimetableBus._ready")


def predict_mean_wait(rate: float, max_wait: float) -> float:
    """Part B: the mean wait at the stop when every bus leaves ``max_wait`` after its first
    passenger."""
    # --- your code here ---
    raise NotImplementedError("your code here: predict_mean_wait")
