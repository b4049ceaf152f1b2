"""Sizing a profile before it runs: the shapes this workload reaches, and how long timing them
takes.

A profile fitted to the policies' limits times shapes a workload may never reach: a sparse trace
replayed in real time rarely holds more than a few requests at once, yet a grid sized to a
continuous policy's 32 rows timed 32-row batches of its longest prompts (349 s on one such trace,
against the 40 s the progress line announced). So before the grid is chosen:

1. ``pilot`` times a dozen passes of the engine (about a second) and fits the textbook linear
   model to their wall times: a rough price of a pass on this machine, now;
2. ``reach`` simulates each policy on the workload at that price, made ``SLOWER`` times slower
   (a slower moment queues more requests, so it reaches more rows), and keeps the most rows and
   the most prompt tokens any step held: the grid goes that far, never further than the policy;
3. ``estimate`` prices every point of the grid the profile will time, in the order it times
   them (``realrun.timing.measure.schedule``), so the estimate can be printed before the profile
   starts and the progress lines can say how much is left; ``within_budget`` thins a grid whose
   estimate is above the budget (fewer repetitions, then coarser axes) instead of overrunning it.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, replace

import numpy as np

from batchsim.core.errors import ConfigError
from batchsim.core.step import Chunk, Step
from batchsim.core.workload import Request, Workload
from batchsim.sim.steptime import LinearStepTime

from .grid import Grid
from .measure import round_schedule, schedule
from .prefills import POINT_S
from .probe import PROBE_PASSES, WARMUP
from .refine import SHARE

__all__ = ["SLOWER", "Reach", "pilot", "reach", "estimate", "within_budget", "point_costs"]

#: How much slower than the pilot's price the workload is simulated to find the rows it reaches:
#: the level moves 10-30 % between runs here, and the profile must cover the slow ones too.
SLOWER = 1.5


def pilot(engine, repeats: int = 3) -> LinearStepTime:
    """The linear model fitted to the wall times of a few passes of ``engine`` (about a second on
    the default model): decode at 1 and 8 rows, short and long; prefill of 1 and 4 rows."""
    from .profile import ProfilePoint, fit_linear

    n_pos = int(engine.lm.n_positions)
    short, long_ = max(8, min(32, n_pos // 8)), max(16, min(256, n_pos // 2))
    engine.start(Workload(tuple(Request(i, 0.0, long_, 1 << 30) for i in range(12)), "pilot"))
    clock = engine.clock
    points = []

    def timed(step: Step) -> float:
        t0 = clock()
        engine.execute(step)
        return clock() - t0

    for b, w in ((1, short), (1, long_), (8, short), (8, long_)):
        rows = list(range(b))
        engine.fill_rows(rows, [w] * b)
        # a fresh row's first pass runs slow
        timed(Step(decode=tuple(rows), kv_read=b * w, decode_width=w))
        secs = [
            timed(Step(decode=tuple(rows), kv_read=b * (w + 1 + k), decode_width=w + 1 + k))
            for k in range(repeats)
        ]
        engine.release(rows)
        points.append(
            ProfilePoint("decode", 0, b, float(b * w), float(np.median(secs)), 0.0, b, 1, float(w))
        )
    for b, n in ((1, short), (1, long_), (4, long_)):
        secs = []
        for _ in range(repeats):
            rows = list(range(b))
            secs.append(timed(Step(prefill=tuple(Chunk(i, 0, n, True) for i in rows))))
            engine.release(rows)
        points.append(ProfilePoint("prefill", b * n, 0, 0.0, float(np.median(secs)), 0.0, b, n))
    return fit_linear(points, "realrun profile pilot", plan=getattr(engine, "plan", "grouped"))


@dataclass(frozen=True)
class Reach:
    """The most rows and prompt tokens one step of this workload holds under these policies."""

    rows: int
    prefill_tokens: int


def reach(workloads, builders: dict, model: LinearStepTime, limits=None) -> Reach:
    """Simulate each policy (``builders``: label -> a function making a fresh policy) on its
    workload (one ``Workload`` for all, or label -> ``Workload``) at ``model``'s price made
    ``SLOWER`` times slower; the most rows and prompt tokens any of their steps held."""
    from batchsim.sim.simulator import simulate

    slow = LinearStepTime(
        model.c0 * SLOWER,
        model.c1 * SLOWER,
        model.c2 * SLOWER,
        model.c3 * SLOWER,
        source="pilot, slowed",
        plan=model.plan,
    )
    rows, tokens = 1, 1
    for label, build in builders.items():
        wl = workloads[label] if isinstance(workloads, dict) else workloads
        if not len(wl):
            continue
        steps = simulate(wl, build(), slow, limits=limits).records.steps
        if len(steps.get("batch_size", ())):
            rows = max(rows, int(steps["batch_size"].max()), int(steps["padded_rows"].max()))
            tokens = max(tokens, int(steps["prompt_tokens"].max()))
    return Reach(rows, tokens)


def point_costs(grid: Grid, model: LinearStepTime, gap_s: dict | None = None) -> list[float]:
    """Seconds of each tick of the profile's ``schedule``, priced by ``model`` (the pilot)."""

    def p(prefill: float = 0, rows: float = 0, kv: float = 0) -> float:
        return model.step_time(prefill_tokens=prefill, decode_rows=rows, kv_read=kv)

    reps = max(2, grid.repeats // 2)
    out = []
    for kind, *shape in schedule(grid):
        if kind == "decode":
            b, w = shape
            out.append((grid.repeats + WARMUP + 1) * p(rows=b, kv=b * w))
        elif kind == "prefill":
            b, n = shape
            one = p(prefill=b * n)  # as many as add up to POINT_S, at least one (measure's rule)
            out.append(min(reps, max(1, math.ceil(POINT_S / max(one, 1e-9)))) * one)
        elif kind == "past":
            q, past = shape
            out.append(reps * (p(prefill=past) + p(prefill=q, kv=past) + p(prefill=q)))
        elif kind == "join":
            b, w, n = shape
            out.append(grid.repeats * (p(prefill=n) + p(rows=b, kv=b * w)))
        elif kind == "probe":
            (w,) = shape
            out.append(max(grid.probe_s, PROBE_PASSES * p(rows=1, kv=w)))
        elif kind == "wake":
            idle, n = shape
            out.append(max(3, grid.repeats) * (idle + 2 * (p(prefill=n) + 4 * p(rows=1, kv=n))))
        else:  # a policy's burst through the driver: 24 requests, as ``gap.step_gap`` sends them
            (name,) = shape
            out.append(
                (gap_s or {}).get(name, 24 * (p(prefill=40) + 14 * p(rows=8, kv=8 * 60)) / 4)
            )
    return out


def estimate(grid: Grid, model: LinearStepTime) -> float:
    """Seconds the profile of ``grid`` should take on the machine ``model`` was fitted on: its
    ticks, and the search for bends after the first round, which may spend ``refine.SHARE`` of that
    round's decode and prefill seconds (it ticks nothing of its own)."""
    costs = point_costs(grid, model)
    first_round = zip(round_schedule(grid), costs)  # schedule() starts with the first round
    search = SHARE * sum(c for (kind, *_), c in first_round if kind in ("decode", "prefill"))
    return float(sum(costs) + search)


def within_budget(grid: Grid, model: LinearStepTime, budget_s: float) -> tuple[Grid, float]:
    """``grid`` thinned until its estimate fits ``budget_s`` seconds: fewer repetitions first (down
    to 4), fewer held-out shapes, a shorter slow probe, then each axis coarser (every other point,
    the ends kept). Returns the grid and its estimate; a grid that cannot be thinned further is
    returned as it is, even if it is still above the budget (the caller says so)."""
    if not budget_s > 0:
        raise ConfigError(f"profile budget must be seconds > 0, got {budget_s!r}")
    est = estimate(grid, model)
    while est > budget_s:
        thinner = _thinner(grid)
        if thinner is None:
            break
        grid, est = thinner, estimate(thinner, model)
    return grid, est


def _thinner(grid: Grid) -> Grid | None:
    if grid.repeats > 4:
        return replace(grid, repeats=max(4, grid.repeats // 2))
    if grid.validation > 6 or grid.probe_s > 2:
        return replace(grid, validation=min(grid.validation, 6), probe_s=min(grid.probe_s, 2.0))
    for name in ("decode_widths", "prefill_lengths", "decode_rows", "prefill_rows"):
        axis = getattr(grid, name)
        if len(axis) > 3:
            kept = tuple(sorted(set(axis[::2]) | {axis[-1]}))
            g = replace(grid, **{name: kept})
            if g.prefill_rows[0] * g.prefill_lengths[0] <= g.max_prefill_tokens:
                return g
    return None


class Ticker:
    """Progress through a profile, by its priced ticks (``point_costs``): a line at least every
    ``every`` seconds (``say(text)``), from a thread of its own, so a shape that takes a minute
    still says so; about how long is left is the pilot's price of what is left, scaled by how
    long the ticks so far took against their price. ``close()`` stops the thread."""

    def __init__(self, costs: list[float], say, every: float = 5.0, clock=time.monotonic) -> None:
        self.costs, self.say, self.every, self.clock = costs, say, every, clock
        self.done = 0
        self.doing = ""  # what the profile times beyond its ticks (``note``)
        self.t0 = self.last = self.tick_at = clock()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="profile progress", daemon=True)
        self._thread.start()

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.done = min(len(self.costs), self.done + n)
            self.tick_at = self.clock()

    def note(self, doing: str) -> None:
        """Say what is timed between ticks (the search for bends in the prefill cost): a line that
        only repeated its count would look stuck. An empty note ends it."""
        with self._lock:
            self.doing = doing

    def line(self) -> str:
        """What the next progress line says."""
        with self._lock:
            now, done = self.clock(), self.done
            priced = sum(self.costs[:done])
            scale = (self.tick_at - self.t0) / priced if done and priced > 0 else 1.0
            current = self.costs[done] * scale if done < len(self.costs) else 0.0
            left = sum(self.costs[done + 1 :]) * scale + max(0.0, current - (now - self.tick_at))
            doing = f" ({self.doing})" if self.doing else ""
        return (
            f"profiling: {done} of {len(self.costs)} shapes timed{doing}, about {left:.0f} s left"
        )

    def _watch(self) -> None:
        while not self._stop.wait(self.every):
            self.say(self.line())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every + 1)
