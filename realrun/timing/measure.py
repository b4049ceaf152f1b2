"""Timing the real engine's passes: what ``realrun profile`` measures, and how.

Hand-made steps run through the very engine the runner uses (so the Python around the
model, the KV copies when rows join and leave, everything the runner will see is in the
measurement); the engine's own log of every pass it ran, with the pass's planned shape
(``batchsim.core.plan``), gives the times. Rows that only need to *be there* for a decode
pass are filled with random KV (``Engine.fill_rows``) instead of being prefilled: a pass's
time depends on the shapes it reads, not the numbers.

Whole grids are swept in interleaved rounds, so a burst of load from another process
spoils one sweep of a point, not all of it. Besides the grid: a few shapes between grid
points (held out, for an honest error), the cold start after the server sleeps, each
policy's gap between steps, timed by a short burst through the real driver, and the slow
probe: some seconds of one decode pass over and over, whose log times show how the machine's
speed wanders over seconds (``batchsim.sim.slowdrift``).
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from batchsim.core.step import Chunk, Step
from batchsim.core.workload import Request, Workload

from .gap import step_gap
from .grid import Grid, validation_shapes
from .prefills import refine_prefill as _refine
from .prefills import time_prefill as _time_prefill
from .probe import WARMUP, probe_width, slow_probe
from .samples import Samples, robust_mean
from .wake import wake

__all__ = [
    "measure",
    "round_schedule",
    "schedule",
    "robust_mean",
    "Samples",
]


def schedule(grid: Grid) -> list[tuple]:
    """What ``measure`` times, one entry per progress tick, in its order: ("decode", rows, width),
    ("prefill", rows, length), ("past", query, past), ("join", rows, width, prompt) for each round;
    then ("probe", width), ("wake", idle, prompt) and ("gap", policy). ``grid`` as ``measure`` times
    it (clipped to the model's context). ``realrun.timing.profile_size`` prices it to say how long
    is left."""
    wake_n = min(32, grid.prefill_lengths[-1])
    return (
        round_schedule(grid) * grid.rounds
        + [("probe", probe_width(grid))]
        + [("wake", idle, wake_n) for idle in grid.wake_idle]
        + [("gap", name) for name in grid.policies]
    )


def round_schedule(grid: Grid) -> list[tuple]:
    """One round's entries of ``schedule``: what ``measure`` ticks for each round it times or leaves
    out."""
    validation = validation_shapes(grid, np.random.default_rng(grid.seed))
    return (
        [("decode", b, w) for b, w in _decode_points(grid, validation)]
        + [("prefill", b, n) for b, n in _prefill_points(grid, validation)]
        + [("past", q, p) for q, p in grid.past]
        + [("join", *j) for j in grid.join]
    )


def _decode_points(grid: Grid, validation: dict) -> list[tuple[int, int]]:
    return list(itertools.product(grid.decode_rows, grid.decode_widths)) + validation["decode"]


def _prefill_points(grid: Grid, validation: dict) -> list[tuple[int, int]]:
    pts = [
        (b, n)
        for b in grid.prefill_rows
        for n in grid.prefill_lengths
        if b * n <= grid.max_prefill_tokens
    ]
    return pts + validation["prefill"]


def measure(
    engine, grid: Grid, policies: dict | None = None, progress=False, budget_s: float | None = None
) -> dict:
    """Time the grid on ``engine``; returns the raw timings (``build`` turns them into a model).

    ``progress``: True, a bar; an object with ``update(n)`` and ``close()``, ticked once per entry
    of ``schedule``. ``budget_s``: rounds after the first are left out once the rounds so far say
    the next would end beyond the budget (the result's ``rounds_timed`` says how many ran)."""
    grid = grid.clipped(engine.lm.n_positions)
    rng = np.random.default_rng(grid.seed)
    longest = max(
        max(grid.prefill_lengths),
        max(q + p for q, p in grid.past) if grid.past else 0,
        max((n for *_, n in grid.join), default=0),
    )
    pool = max(max(grid.decode_rows), max(grid.prefill_rows)) + grid.repeats + 4
    engine.start(
        Workload(tuple(Request(i, 0.0, longest, 1 << 30) for i in range(pool)), "profile pool")
    )
    ids = list(range(pool))
    s = Samples()
    validation = validation_shapes(grid, rng)
    decode_pts = _decode_points(grid, validation)
    prefill_pts = _prefill_points(grid, validation)
    bar = progress if hasattr(progress, "update") else _bar(bool(progress), len(schedule(grid)))
    extra, repeat_extra, joins, runs = [], [], [], []
    # The process's very first passes run cold (caches, allocator, the CPU's clock): spend them
    # here.
    engine.fill_rows(ids[:2], [grid.decode_widths[0]] * 2)
    engine.execute(
        Step(
            decode=tuple(ids[:2]),
            kv_read=2 * grid.decode_widths[0],
            decode_width=grid.decode_widths[0],
            repeat=10,
        )
    )
    engine.release(ids[:2])
    reps = max(2, grid.repeats // 2)
    t0, rounds_timed = time.monotonic(), 0
    for rnd in range(grid.rounds):
        per_round = (time.monotonic() - t0) / rnd if rnd else 0.0
        if rnd and budget_s is not None and time.monotonic() - t0 + per_round > budget_s:
            if bar is not None:  # the rounds left out count as done
                # the count schedule() gives a round
                bar.update((grid.rounds - rnd) * len(round_schedule(grid)))
            break
        # Each round takes its shapes in an order of its own: in size order, a slow minute of the
        # machine lands on neighbours (every large prefill, say), which then agree with each other
        # and with held-out shapes timed beside them, and no fit or check can tell. Shuffled, it
        # lands on shapes spread over the grid, where it shows as noise that the prefill surface
        # (smooth.py) averages out and the held-out shapes can see.
        order = np.random.default_rng([grid.seed, rnd])
        _time_decode(
            engine, grid, ids, _shuffled(decode_pts, order), s, runs, extra, repeat_extra, bar
        )
        _time_prefill(engine, ids, _shuffled(prefill_pts, order), reps, rnd, longest, s, bar)
        if rnd == 0:
            grid = _refine(
                engine, grid, ids, reps, longest, s, validation, time.monotonic() - t0, bar
            )
            for _ in range(len(_prefill_points(grid, validation)) - len(prefill_pts)):
                _tick(bar)  # the added points count as the first round's, as schedule(grid) says
            prefill_pts = _prefill_points(grid, validation)
        _time_past(engine, grid, reps, s, bar)
        _time_join(engine, grid, ids, joins, bar)
        rounds_timed += 1
    key = ("decode", grid.decode_rows[0], probe_width(grid))
    probe = slow_probe(engine, grid, ids[0], s.mean(key) if key in s.by_key else 0.01)
    _tick(bar)
    woke = wake(engine, grid, ids, bar)
    gaps, bursts = {}, []
    for name in grid.policies:
        gaps[name], passes = step_gap(engine, name, (policies or {}).get(name), grid, bar)
        bursts.extend(passes)
    if bar is not None:
        bar.close()
    return {
        "grid": grid,
        "samples": s,
        "validation": validation,
        "step_extra": extra,
        "repeat_extra": repeat_extra,
        "joins": joins,
        "decode_runs": runs,
        "gaps": gaps,
        "burst_passes": bursts,
        "wake": woke,
        "n_positions": int(engine.lm.n_positions),
        "slow_probe": probe,
        "rounds_timed": rounds_timed,
    }


def _shuffled(points: list, rng: np.random.Generator) -> list:
    return [points[i] for i in rng.permutation(len(points))]


# -- one round of the grid, a kind of pass at a time (rounds interleave the kinds) ----------------


def _time_decode(
    engine,
    grid: Grid,
    ids: list[int],
    points,
    s: Samples,
    runs: list,
    extra: list,
    repeat_extra: list,
    bar,
) -> None:
    log = engine.pass_log
    for b, w in points:
        rows = ids[:b]
        engine.fill_rows(rows, [w - WARMUP] * b)
        log.clear()
        t0, ends = engine.execute(
            Step(
                decode=tuple(rows),
                kv_read=b * (w - WARMUP),
                decode_width=w - WARMUP,
                repeat=grid.repeats + WARMUP,
            )
        )
        # The first passes over freshly made rows run slow (new buffers, kernels for a new shape),
        # which a running server's rows, a column wider each pass, are not: they are not kept.
        secs = np.array([x for _, x in log])[WARMUP:]
        s.add(("decode", b, w), secs)
        # consecutive passes: how a slow pass's neighbours fare (the spread's lag1)
        runs.append(secs)
        steps = np.diff(np.concatenate([[t0], ends]))[WARMUP:]
        extra.append(steps[0] - secs[0])
        repeat_extra.extend(steps[1:] - secs[1:])
        engine.release(rows)
        _tick(bar)


def _time_past(engine, grid: Grid, reps: int, s: Samples, bar) -> None:
    """A prefill over a cached past, paired with the same chunk over no past, timed back to back.

    The pair's difference is what the past costs: timed a moment apart, the machine's level cancels,
    where a difference against the prefill grid (timed seconds earlier, on jittered lengths) is of
    two numbers each a few per cent off, and came out negative (so ``past_cost`` 0) in every profile
    of one course session. The past is prefilled first, untimed."""
    log = engine.pass_log
    for q, p in grid.past:
        for _ in range(reps):
            engine.execute(Step(prefill=(Chunk(0, 0, p, False),)))
            log.clear()
            engine.execute(Step(prefill=(Chunk(0, p, q, True),), kv_read=p))
            s.add(("past", q, p), log[0][1])
            engine.release([0])
            log.clear()
            engine.execute(Step(prefill=(Chunk(0, 0, q, True),)))
            s.add(("past0", q, p), log[0][1])
            engine.release([0])
        _tick(bar)


def _time_join(engine, grid: Grid, ids: list[int], joins: list, bar) -> None:
    """A prompt joining decoding rows: what the step costs beyond its passes."""
    log = engine.pass_log
    for b, w, n in grid.join:
        rows = ids[:b]
        engine.fill_rows(rows, [w] * b)
        for r in range(grid.repeats):
            new = ids[b + r]
            log.clear()
            t0, ends = engine.execute(
                Step(
                    prefill=(Chunk(new, 0, n, True),),
                    decode=tuple(rows),
                    kv_read=b * (w + r),
                    decode_width=w + r,
                )
            )
            joins.append(((ends[-1] - t0) - sum(x for _, x in log), n))
            engine.release([new])
        engine.release(rows)
        _tick(bar)


def _bar(progress: bool, total: int):
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="profiling", unit="point", leave=False)


def _tick(bar) -> None:
    if bar is not None:
        bar.update(1)
