"""Timing the profile's prefill points: each point's passes in a round, and the search for bends.

Split from ``measure`` (which runs the rounds) because a prefill point is where a profile spends
its time: a long prompt's pass takes seconds, so how many of them a point gets, and how far the
search for bends (``refine``) may go, decide whether a profile keeps to its estimate.
"""

from __future__ import annotations

import math

from batchsim.core.step import Chunk, Step

from .grid import Grid, jittered
from .refine import refine_lengths
from .samples import Samples

__all__ = ["POINT_S", "time_prefill", "refine_prefill"]

#: Seconds of passes that time a prefill point in one round (see ``time_prefill``).
POINT_S = 0.3


def time_prefill(
    engine, ids: list[int], points, reps: int, rnd: int, longest: int, s: Samples, bar
) -> None:
    """Each point's ``reps`` jittered lengths, or fewer once its passes this round add up to
    ``POINT_S``: a pass that long averages the machine's moment-to-moment noise by itself, and more
    of them back to back meet the same minute, which only the later rounds escape. A point cut short
    keeps its timings scaled to its own length (``secs x n / length``: the lengths that averaged to
    n are not all there). On tiny-gpt2, a workload of at most 4 rows and prompts to 1,024 tokens
    took 66-70 s to profile with four passes of every point a round, and 39-45 s with this rule;
    with the search for bends kept to its share as well (``refine``'s ``price_cell``), 32-33 s
    (bench/profile_time.py)."""
    log = engine.pass_log
    for b, n in points:
        timed: list[tuple[int, float]] = []
        for n2 in jittered(n, reps, rnd, longest):
            rows = ids[:b]
            log.clear()
            engine.execute(Step(prefill=tuple(Chunk(i, 0, n2, True) for i in rows)))
            timed.append((n2, log[0][1]))
            engine.release(rows)
            if sum(t for _, t in timed) >= POINT_S:
                break
        cut = len(timed) < reps
        s.add(("prefill", b, n), [t * n / n2 if cut else t for n2, t in timed])
        if bar is not None:
            bar.update(1)


def refine_prefill(
    engine, grid: Grid, ids, reps: int, longest: int, s: Samples, validation, round_s, bar=None
):
    """The grid with prompt lengths added where the prefill cost bends (``refine.refine_lengths``);
    a progress bar that takes notes (``profile_size.Ticker``) says which shape is timed."""
    note = getattr(bar, "note", None) or (lambda text: None)
    log = engine.pass_log

    def one(b: int, n: int) -> float:
        log.clear()
        engine.execute(Step(prefill=tuple(Chunk(i, 0, n, True) for i in ids[:b])))
        engine.release(ids[:b])
        return log[0][1]

    def seconds(b: int, n: int) -> float:
        key = ("prefill", b, n)
        return s.mean(key) if key in s.by_key else 0.0

    def cell_reps(b: int, hi: int) -> int:
        # as time_prefill's POINT_S, but two at least: ``misses`` reads the timings' own spread
        return min(reps, max(2, math.ceil(POINT_S / max(seconds(b, hi), 1e-9))))

    def price_cell(b: int, lo: int, m: int, hi: int) -> float:
        t_lo, t_hi = seconds(b, lo), seconds(b, hi)
        return cell_reps(b, hi) * (t_lo + (t_lo + t_hi) / 2 + t_hi)

    def time_cell(b: int, lo: int, m: int, hi: int) -> dict[int, list[float]]:
        note(f"looking for bends in the prefill cost: {b} x {lo}..{hi} tokens")
        k_reps = cell_reps(b, hi)
        lengths = {n: jittered(n, k_reps, 0, longest) for n in (lo, m, hi)}
        out: dict[int, list[float]] = {lo: [], m: [], hi: []}
        for k in range(k_reps):  # pass by pass, the order turned each time (lo m hi, hi m lo)
            for n in (lo, m, hi) if k % 2 == 0 else (hi, m, lo):
                out[n].append(one(b, lengths[n][k]))
        s.add(("prefill", b, m), out[m])
        return out

    def time_point(b: int, n: int) -> None:
        note(f"looking for bends in the prefill cost: {b} x {n} tokens")
        time_prefill(engine, ids, [(b, n)], reps, 0, longest, s, None)

    refined, _ = refine_lengths(
        grid,
        time_cell=time_cell,
        time_point=time_point,
        forget=lambda b, n: s.by_key.pop(("prefill", b, n), None),
        round_s=round_s,
        avoid=frozenset(n for _, n in validation["prefill"]),
        price_cell=price_cell,
    )
    note("")
    return refined
