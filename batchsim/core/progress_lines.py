"""Progress as plain lines, for a long run whose stderr is not a terminal.

A progress bar redraws one line with carriage returns: in a log file, a CI job or a
notebook's captured output that is one endless line, or nothing until the end. A run of
ten million requests takes many minutes, and a silent one looks hung (a student killed
one after 15 minutes). So where nobody watches a terminal, a long run prints a short line
now and then instead: how far it is, how long it has taken, about how long is left.

The first line comes after ``first`` seconds (a run that ends sooner prints nothing),
then one every ``every`` seconds, and a last one when the run ends. ``update`` is called
once per request served, millions of times, so it reads the clock only every
thousandth of the run.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["LineProgress", "span"]

#: The clock progress is read from (a module attribute: a test can stand in for it).
clock_now: Callable[[], float] = time.monotonic


def span(seconds: float) -> str:
    """A duration as a person says it: 42 s, 3 min 05 s, 1 h 02 min."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class LineProgress:
    """``tqdm``'s ``update``/``close``, printed as a line every ``every`` seconds on ``stream``."""

    def __init__(
        self,
        total: int,
        desc: str,
        stream: TextIO | None = None,
        first: float = 10.0,
        every: float = 30.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if total < 1:
            raise ValueError(f"total must be >= 1, got {total!r}")
        self.total, self.desc, self.every = total, desc, every
        self.clock = clock if clock is not None else clock_now
        self.stream = stream if stream is not None else sys.stderr
        self.n = 0
        self.lines = 0
        self.t0 = self.clock()
        self._due = self.t0 + first
        self._step = max(1, total // 1000)  # requests between two looks at the clock
        self._look = self._step

    def update(self, k: int = 1) -> None:
        self.n += k
        if self.n >= self._look:
            self._look = self.n + self._step
            now = self.clock()
            if now >= self._due:
                self._due = now + self.every
                self._print(now)

    def _print(self, now: float, last: bool = False) -> None:
        took = now - self.t0
        line = (
            f"{self.desc}: {self.n:,} of {self.total:,} requests ({self.n / self.total:.0%}) in "
            f"{span(took)}"
        )
        if last:
            line += ", done"
        elif self.n:
            line += f"; about {span(took * (self.total - self.n) / self.n)} left"
        print(line, file=self.stream, flush=True)
        self.lines += 1

    def close(self) -> None:
        """The run ended (or stopped): a last line, if any was printed before."""
        if self.lines:
            self._print(self.clock(), last=self.n >= self.total)
