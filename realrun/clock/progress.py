"""Progress lines: what a long real run is doing now, and how long it has taken so far.

A real run lasts at least as long as its arrivals span, and a compare measures several of
them after a profile: a minute or two with nothing on the screen reads as a hang. So a run
that will take more than a few seconds says, on stderr, one line as each part begins
(``realrun: [  12 s] measuring taxi, run 2 of 8 (about 70 s left)``), whether or not stderr is a
terminal: a student who pipes the output into a file, or a notebook, sees them too. The bars
of ``--progress`` (at a terminal by default) count within a part; these lines count the parts.

Short runs (a test's three requests) say nothing: their only line on stderr stays the error,
if there is one. ``--no-progress`` silences both.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["FEW_SECONDS", "Progress", "progress_lines"]

#: A run expected to take longer than this says what it is doing.
FEW_SECONDS = 5.0


def progress_lines(args, expected_s: float) -> bool:
    """Whether a run expected to take ``expected_s`` prints progress lines: ``--progress`` yes,
    ``--no-progress`` no, neither: when it takes longer than ``FEW_SECONDS``."""
    chosen = getattr(args, "progress", None)
    return bool(chosen) if chosen is not None else expected_s > FEW_SECONDS


class Progress:
    """``Progress(True).line("measuring taxi")`` prints ``realrun: [   3 s] measuring taxi`` on
    stderr; ``Progress(False)`` prints nothing. The time is the wall time since it was made."""

    def __init__(
        self,
        enabled: bool,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = bool(enabled)
        self.stream = stream
        self.clock = clock
        self.t0 = clock()

    @property
    def elapsed(self) -> float:
        return self.clock() - self.t0

    def line(self, text: str) -> None:
        if self.enabled:
            print(
                f"realrun: [{self.elapsed:4.0f} s] {text}",
                file=self.stream or sys.stderr,
                flush=True,
            )

    def runs(self, total: int, measure):
        """``measure(label, policy)`` wrapped so that each call first says which run of ``total`` it
        is and, after the first, about how long the rest will take (the runs so far, on average)."""
        done = {"n": 0, "t": 0.0}

        def wrapped(label, policy):
            n = done["n"]
            left = f" (about {done['t'] / n * (total - n):.0f} s left)" if n else ""
            self.line(f"measuring {label}, run {n + 1} of {total}{left}")
            t = self.clock()
            try:
                return measure(label, policy)
            finally:
                done["n"] += 1
                done["t"] += self.clock() - t

        return wrapped
