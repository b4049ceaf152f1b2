"""Prompt lengths where the prefill cost bends: a cell's midpoint timed, and kept where the line
misses it.

The profile's prompt lengths roughly double (16, 32, ..., 512, 900) and the model draws a straight
line between two of them (``batchsim.sim.grid2d``). A transformer's prefill is not straight
everywhere: its cost per token steps up where a pass's working set outgrows a cache. On the course's
2-core CPU, gpt2-6l's 8-row prefill cost 710 us a token at 496 tokens and 780 at 511, so a line from
256 to 512 priced 8 rows of 448 tokens 17 % above their measured time, and static's padded batches
of 300-450-token prompts with it. Where such a knee sits depends on the model, the rows and the
machine; no fixed grid can know, so the profile looks:

after its first round, each prompt-length cell, costliest first, has its midpoint timed at one row
and at the most rows both its ends were timed at, the three lengths interleaved pass by pass. Where
the line between the ends misses the midpoint by more than ``TOL`` (twice what the timings' own
noise moves it on a quiet machine) and by more than four standard errors of the miss (what it
moves on a busy one), the midpoint becomes a grid point, timed at every row count now and in each
later round, and both halves are looked at once every cell of the grid has been; elsewhere its
timings are dropped (it is no grid point). At most ``MOST`` lengths are added,
and the search stops once it has spent ``SHARE`` of the first round's time, so the profile stays
near its estimate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from .grid import Grid

__all__ = ["refine_lengths", "misses", "rows_at", "TOL", "MOST", "SHARE", "MIN_CELL"]

#: A midpoint further than this from the line between its cell's ends is a bend. A grid point's mean
#: of four timed passes is 2-3 % off on a quiet machine, so a line between two of them misses a
#: straight cost's midpoint by up to ~3 %; a knee like the one above misses by 10-17 %.
TOL = 0.06
#: The most prompt lengths one profile adds.
MOST = 4
#: The share of the first round's seconds the search may spend (its later rounds time the added
#: lengths too: at most about this share more again).
SHARE = 0.25
#: Tokens: a narrower cell is not split (its midpoint is too near its ends to tell a bend from
#: noise, and a bend inside it moves a price by little).
MIN_CELL = 32


def rows_at(grid: Grid, n: int) -> list[int]:
    """The prefill rows the profile times at length ``n`` (within the pass limit)."""
    return [b for b in grid.prefill_rows if b * n <= grid.max_prefill_tokens]


def refine_lengths(
    grid: Grid,
    time_cell: Callable[[int, int, int, int], dict[int, list[float]]],
    time_point: Callable[[int, int], object],
    forget: Callable[[int, int], None],
    round_s: float,
    avoid: frozenset[int] = frozenset(),
    clock: Callable[[], float] = time.monotonic,
    price_cell: Callable[[int, int, int, int], float] | None = None,
) -> tuple[Grid, list[tuple[int, int]]]:
    """``grid`` with prompt lengths added where the prefill cost bends, and the (rows, length)
    points added (already timed once, as the first round's).

    ``time_cell(b, lo, m, hi)``: times b rows at the three lengths back to back, interleaved, and
    returns each length's seconds; the midpoint's are kept as its timings, the ends' are not (the
    grid's own points keep one count of timings per round). Interleaved, a slow moment of the
    machine lands on all three, where a midpoint held against ends timed a minute earlier would
    read the machine's level as a bend (``_time_past`` pairs its timings for the same reason).
    ``time_point(b, n)``: times shape (b, n) and keeps its timings; ``forget(b, n)``: drops a
    shape's timings (a midpoint the line priced right is no grid point); ``round_s``: the first
    round's seconds so far; ``avoid``: lengths held out (a held-out shape must stay one the model
    never saw); ``price_cell(b, lo, m, hi)``: the seconds ``time_cell`` would take, where known: a
    cell dearer than what is left of the share is passed over for cheaper ones (the costliest cell
    comes first, and one of 4 rows of 512-1,005 tokens took five times the share on tiny-gpt2).

    Cells are looked at a level at a time: every cell of the grid (costliest first) before the
    halves of any, so a knee in a cheaper cell is not starved by noise in a dearer one."""
    lengths = list(grid.prefill_lengths)
    added: list[tuple[int, int]] = []
    t0 = clock()
    # (depth, -hi): the grid's own cells first, the costliest first among them
    cells = sorted((0, -hi, lo, hi) for lo, hi in zip(lengths, lengths[1:]))
    new = 0
    while cells and new < MOST and clock() - t0 < SHARE * round_s:
        depth, _, lo, hi = cells.pop(0)
        ends = rows_at(grid, hi)  # timed at both ends (a shorter end allows at least these rows)
        m = (lo + hi) // 2
        while m in avoid:
            m += 1
        if hi - lo < MIN_CELL or not ends or m >= hi:
            continue
        probe = sorted({ends[0], ends[-1]})
        if (
            price_cell is not None
            and clock() - t0 + sum(price_cell(b, lo, m, hi) for b in probe) > SHARE * round_s
        ):
            continue
        # every probe row timed (its midpoint's timings are kept if the cell splits), then decided
        bent = any([misses(time_cell(b, lo, m, hi), lo, m, hi) for b in probe])
        if not bent:
            for b in probe:
                forget(b, m)
            continue
        for b in rows_at(grid, m):
            if b not in probe:
                time_point(b, m)
            added.append((b, m))
        new += 1
        cells = sorted(cells + [(depth + 1, -m, lo, m), (depth + 1, -hi, m, hi)])
    if not added:
        return grid, []
    return replace(grid, prefill_lengths=tuple(sorted(set(lengths) | {n for _, n in added}))), added


def misses(timed: dict[int, list[float]], lo: int, m: int, hi: int) -> bool:
    """Whether the line between the ends' mean seconds misses the midpoint's by more than ``TOL``
    and by more than four standard errors of that miss (the timings' own noise: the standard error
    is itself read from a few timings, so three would pass a straight cell one time in ten on a busy
    machine, where a profile looks at a dozen)."""
    mean = {n: float(np.mean(timed[n])) for n in (lo, m, hi)}
    var = {
        n: float(np.var(timed[n], ddof=1)) / len(timed[n]) if len(timed[n]) > 1 else 0.0
        for n in (lo, m, hi)
    }
    f = (m - lo) / (hi - lo)
    line = (1 - f) * mean[lo] + f * mean[hi]
    se = np.sqrt((1 - f) ** 2 * var[lo] + f**2 * var[hi] + var[m]) / mean[m]
    return abs(line / mean[m] - 1.0) > max(TOL, 4.0 * se)
