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
from batchsim.sim.grid2d import isotonic

from .grid import Grid

__all__ = [
    "measure",
    "schedule",
    "robust_mean",
    "probe_log",
    "probe_passes",
    "probe_series",
    "WARMUP",
    "Samples",
]

WARMUP = 2
#: The fewest passes of the slow probe: fewer cannot tell a drift from noise (``fit_slow_drift``).
PROBE_PASSES = 120


class Samples:
    """Timed passes by shape key: each key's seconds, and their robust mean."""

    def __init__(self) -> None:
        self.by_key: dict[tuple, list[float]] = {}

    def add(self, key: tuple, seconds) -> None:
        self.by_key.setdefault(key, []).extend(float(s) for s in np.atleast_1d(seconds))

    def mean(self, key: tuple) -> float:
        return robust_mean(self.by_key[key])


#: cold/warm pairs timed after each idle (at least; more where the grid repeats more)
WAKE_PAIRS = 5


def robust_mean(xs) -> float:
    """The mean of the timings, leaving out those over twice their median.

    The mean, because the simulator adds step times up and a median would underestimate the busy
    time of right-skewed timings. But a pass that took twice the usual time was interrupted by
    another process: the core was lent away, which says nothing about this engine's passes."""
    t = np.asarray(xs, dtype=float)
    return float(t[t <= 2 * np.median(t)].mean())


def schedule(grid: Grid) -> list[tuple]:
    """What ``measure`` times, one entry per progress tick, in its order: ("decode", rows, width),
    ("prefill", rows, length), ("past", query, past), ("join", rows, width, prompt) for each round;
    then ("probe", width), ("wake", idle, prompt) and ("gap", policy). ``grid`` as ``measure`` times it
    (clipped to the model's context). ``realrun.timing.profile_size`` prices it to say how long is left."""
    wake_n = min(32, grid.prefill_lengths[-1])
    return (
        _one_round(grid) * grid.rounds
        + [("probe", _probe_width(grid))]
        + [("wake", idle, wake_n) for idle in grid.wake_idle]
        + [("gap", name) for name in grid.policies]
    )


def _one_round(grid: Grid) -> list[tuple]:
    """One round's entries of ``schedule``: what ``measure`` ticks for each round it times or leaves out."""
    validation = _validation_shapes(grid, np.random.default_rng(grid.seed))
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

    ``progress``: True, a bar; an object with ``update(n)`` and ``close()``, ticked once per entry of
    ``schedule``. ``budget_s``: rounds after the first are left out once the rounds so far say the
    next would end beyond the budget (the result's ``rounds_timed`` says how many ran)."""
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
    validation = _validation_shapes(grid, rng)
    decode_pts = _decode_points(grid, validation)
    prefill_pts = _prefill_points(grid, validation)
    bar = progress if hasattr(progress, "update") else _bar(bool(progress), len(schedule(grid)))
    extra, repeat_extra, joins, runs = [], [], [], []
    # The process's very first passes run cold (caches, allocator, the CPU's clock): spend them here.
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
                bar.update((grid.rounds - rnd) * len(_one_round(grid)))
            break
        _time_decode(engine, grid, ids, decode_pts, s, runs, extra, repeat_extra, bar)
        _time_prefill(engine, ids, prefill_pts, reps, rnd, longest, s, bar)
        _time_past(engine, grid, reps, s, bar)
        _time_join(engine, grid, ids, joins, bar)
        rounds_timed += 1
    probe = _slow_probe(engine, grid, ids, s)
    _tick(bar)
    wake = _wake(engine, grid, ids, bar)
    gaps = {
        name: _gap(engine, name, (policies or {}).get(name), grid, bar) for name in grid.policies
    }
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
        "wake": wake,
        "n_positions": int(engine.lm.n_positions),
        "slow_probe": probe,
        "rounds_timed": rounds_timed,
    }


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


def _time_prefill(
    engine, ids: list[int], points, reps: int, rnd: int, longest: int, s: Samples, bar
) -> None:
    log = engine.pass_log
    for b, n in points:
        for n2 in _jittered(n, reps, rnd, longest):
            rows = ids[:b]
            log.clear()
            engine.execute(Step(prefill=tuple(Chunk(i, 0, n2, True) for i in rows)))
            s.add(("prefill", b, n), log[0][1])
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


def _wake(engine, grid: Grid, ids: list[int], bar) -> dict:
    """What a step costs extra after the server slept: the sleep's overshoot, and a cold first few passes.

    After each idle time, a short prefill and a few decode passes run twice: right after the sleep
    (cold) and at once again (warm); the difference is the cold start's cost."""
    clock, n = engine.clock, min(32, grid.prefill_lengths[-1])

    def sequence() -> float:
        t0 = clock()
        engine.execute(Step(prefill=(Chunk(ids[0], 0, n, True),)))
        engine.execute(Step(decode=(ids[0],), kv_read=n, decode_width=n, repeat=4))
        t1 = clock()
        engine.release([ids[0]])
        return t1 - t0

    late, extra = [], []
    for idle in grid.wake_idle:
        paired = []
        for _ in range(max(WAKE_PAIRS, grid.repeats)):
            target = clock() + idle
            time.sleep(idle)
            late.append(clock() - target)
            cold = sequence()
            paired.append(cold - sequence())
        # The median of paired differences: each cold run is set against the warm run beside it,
        # so a slow moment of the machine lands on both (a difference of two means of three runs
        # each read +7 ms after 5 ms idle and +2 ms after 20 ms on a 11 ms pass, beside other work).
        extra.append(max(0.0, float(np.median(paired))))
        _tick(bar)
    # Longer idle leaves the caches no warmer: the extra never falls as the idle grows. Where
    # noise says it does, the two readings pool (isotonic), instead of a short idle priced dearer.
    extra = isotonic(np.asarray(extra)).tolist() if extra else extra
    return {
        "idle": list(grid.wake_idle),
        "extra": extra,
        "late": float(np.mean(late)) if late else 0.0,
    }


def _slow_probe(engine, grid: Grid, ids: list[int], s: Samples) -> list[float]:
    """About ``grid.probe_s`` seconds (at least ``PROBE_PASSES`` passes) of consecutive one-row decode
    passes at the grid's middle width, in stretches that fit the context (each refilled, its first
    passes dropped as the grid's are)."""
    w = _probe_width(grid)
    key = ("decode", grid.decode_rows[0], w)
    one = s.mean(key) if key in s.by_key else 0.01
    return probe_series(engine, w, probe_passes(grid.probe_s, one), ids[0])


def _probe_width(grid: Grid) -> int:
    return grid.decode_widths[len(grid.decode_widths) // 2]


def probe_passes(seconds: float, pass_s: float) -> int:
    """How many passes of ``pass_s`` seconds fill ``seconds`` of a probe: at least ``PROBE_PASSES``, at most 4,000."""
    return int(min(4000, max(PROBE_PASSES, seconds / max(pass_s, 1e-5))))


def probe_log(engine, width: int, passes: int, rid: int = 0) -> list:
    """(planned pass, seconds) of ``passes`` consecutive one-row decode passes over ``width`` tokens of
    (random) KV, in stretches that fit the model's context: each stretch refilled and its first passes
    dropped (fresh rows run slow at first). The engine must hold no rows; it holds none after."""
    stretch = max(8, min(256, int(engine.lm.n_positions) - 1 - width - WARMUP))
    out: list = []
    log = engine.pass_log
    while len(out) < passes:
        k = min(stretch, passes - len(out))
        engine.fill_rows([rid], [width])
        log.clear()
        engine.execute(Step(decode=(rid,), kv_read=width, decode_width=width, repeat=k + WARMUP))
        out.extend(log[WARMUP:])
        engine.release([rid])
    return out


def probe_series(engine, width: int, passes: int, rid: int = 0) -> list[float]:
    """The seconds of ``probe_log``'s passes."""
    return [s for _, s in probe_log(engine, width, passes, rid)]


def _jittered(n: int, reps: int, rnd: int, longest: int) -> list[int]:
    """``reps`` prompt lengths around n, averaging n, none used in an earlier round.

    A real run's prompts are of many lengths, each a shape the CPU's kernels meet for the first
    time or nearly (which costs a few per cent); the same length timed over and over would be
    cheaper than any prompt a run sees."""
    if n < 8:
        return [n] * reps
    half = [rnd * reps // 2 + j + 1 for j in range(reps // 2)]
    out = [n + d for d in half] + [n - d for d in half] + ([n] if reps % 2 else [])
    return [min(max(1, x), longest) for x in out]


def _validation_shapes(grid: Grid, rng: np.random.Generator) -> dict:
    """Shapes strictly between grid points (never measured for the model), to hold out."""
    out: dict = {"decode": [], "prefill": []}
    for _ in range(grid.validation // 2 + grid.validation % 2):
        b = int(rng.integers(grid.decode_rows[0], grid.decode_rows[-1] + 1))
        w = int(rng.integers(grid.decode_widths[0], grid.decode_widths[-1] + 1))
        if (b, w) not in out["decode"] and not (b in grid.decode_rows and w in grid.decode_widths):
            out["decode"].append((b, w))
    for _ in range(grid.validation // 2):
        n = int(rng.integers(grid.prefill_lengths[0], grid.prefill_lengths[-1] + 1))
        hi = max(1, min(grid.prefill_rows[-1], grid.max_prefill_tokens // n))
        b = int(rng.integers(1, hi + 1))
        if (b, n) not in out["prefill"] and not (
            b in grid.prefill_rows and n in grid.prefill_lengths
        ):
            out["prefill"].append((b, n))
    return out


def _gap(engine, name: str, policy, grid: Grid, bar) -> float:
    """Mean seconds between a step's end and the next one's start, over a short burst through the driver."""
    from batchsim.core.arrivals import Poisson
    from batchsim.core.lengths import Uniform
    from batchsim.core.policies import make_policy
    from batchsim.core.workload import make_workload

    from ..clock.runner import run_real

    p_hi = max(8, min(64, grid.prefill_lengths[-1]))
    wl = make_workload(Poisson(400.0), Uniform(8, p_hi), Uniform(4, 24), n=24, seed=grid.seed)
    pol = make_policy(name, max_batch=8, max_seqs=16) if policy is None else _fresh(policy)
    res = run_real(wl, pol, engine, trace=True)
    gaps = [t_start - decided for decided, _, t_start, _ in res.meta["trace"]]
    _tick(bar)
    return robust_mean(gaps) if gaps else 0.0


def _fresh(policy):
    import copy

    return copy.deepcopy(policy)


def _bar(progress: bool, total: int):
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc="profiling", unit="point", leave=False)


def _tick(bar) -> None:
    if bar is not None:
        bar.update(1)
