"""The canary: a few fixed passes timed around every measured run, against the profile's own price.

A profile taken minutes before the runs is the shape of the cost; the machine's level moves
under it (another process on the other core, the CPU's clock). So before and after each
measured run ``Canary`` times a few passes whose price the profile knows exactly (grid
points): prefill passes of one row at the grid's middle length, and one-row decode passes at
its middle width. Each reading is measured / priced, prefill and decode apart, because they
move apart: compute-bound prefill slows when a neighbour shares the core's arithmetic,
memory-bound decode when it shares the memory bus.

The readings are held up to the canary's own readings at the end of the profile (``reference``,
kept in the calibration as ``canary``), not to the price alone: the canary's passes run in a
state no grid point was timed in (fresh rows, just after a run or a canary of the other kind),
and measured here its decode passes read 1.06-1.20x their price while the runs between them
ran their decode passes at 0.98-1.00x. Whatever the canary costs beyond the price, it costs at
the profile too, and the ratio of the two cancels it. A calibration without a reference (an
older file) is read against the price, and a note says so.

One reading is a fraction of a second and swings with the moment (16 decode passes read 0.70x
and 1.12x of the reference in one session, while the runs between them ran their passes at
0.95-1.12x of the price), so the level the prediction is moved to is the session's: the median
of every reading, before and after every run of every policy (``session_level``), with its
standard error. It moves the prediction only when it lies further from 1 than both two standard
errors and ``ACCURACY``, because the canary's median misreads the runs' level by that much: in
seven runs measured back to back its decode read 10 % below the level the runs' own passes ran
at, and in two sessions of ``bench/fidelity.py`` (gpt2-6l, quiet machine) it read 1.11-1.20x
while the profile's own shapes timed again the profile's way read 0.98-1.02x, and moving the
prediction there doubled the p50 E2E error (13 % to 22 % mean). A neighbour that takes the
core's arithmetic moved prefill by 1.2-1.5x, which it does catch. A correction smaller than its
own error adds noise.

Besides the level, the runs' level moves from one run to the next (the taxi's four runs of
that session ran their decode passes at 1.12x, 0.96x, 0.95x and 0.99x the price): at 70 % busy
a 7 % slower run waits 40 % longer. ``Level.run_sd`` estimates that run-to-run spread from the
canaries: the variance of each run's mean reading (before and after), less the canary's own
noise, which the difference of its two readings shows (with a steady level within a run,
var(mean) = var(level) + var(noise) / 2 and var(after - before) = 2 var(noise)). Each seed of a
banded prediction draws its run's level from it, so the band is as wide as one run's level makes it.

The canary uses nothing of the runs it brackets, only passes of its own: the prediction it
moves is still a prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchsim.core.errors import ConfigError, show
from batchsim.core.step import Chunk, Step
from batchsim.core.workload import Request, Workload
from batchsim.sim.level import LevelStepTime
from batchsim.sim.steptime import StepTimeModel

from .probe import probe_log

__all__ = ["ACCURACY", "Canary", "CanaryReading", "Level", "session_level", "grid_middle"]

#: How far the canary's median was seen from the level the runs it bracketed ran at (see above):
#: a level closer to 1 than this is not told apart from 1.
ACCURACY = 0.20


@dataclass(frozen=True)
class CanaryReading:
    """One canary: measured / priced for its prefill and decode passes (medians), and its
    seconds."""

    prefill: float
    decode: float
    seconds: float

    def __post_init__(self) -> None:
        for name in ("prefill", "decode", "seconds"):
            v = getattr(self, name)
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not math.isfinite(v)
                or v <= 0
            ):
                raise ConfigError(f"canary {name} must be a positive number, got {show(v)}")

    def as_dict(self) -> dict:
        return {
            "prefill": round(self.prefill, 4),
            "decode": round(self.decode, 4),
            "seconds": round(self.seconds, 4),
        }


def grid_middle(axis) -> int:
    """The middle point of a grid's axis, rounded: where a profile's price is its own mean, not an
    edge's."""
    a = list(axis)
    return int(round(float(a[len(a) // 2])))


class Canary:
    """``Canary(engine, model)()`` -> a ``CanaryReading``: ``prefills`` one-row prefill passes and
    ``decodes`` one-row decode passes on ``engine``, each held up to ``model``'s price of it."""

    def __init__(self, engine, model: StepTimeModel, prefills: int = 4, decodes: int = 16) -> None:
        self.engine, self.model = engine, model
        ref = (getattr(model, "extra", None) or {}).get("canary")
        #: The canary's own (prefill, decode) at the end of the profile; None: held up to the price
        #: alone.
        self.reference: tuple[float, float] | None = (
            (float(ref["prefill"]), float(ref["decode"])) if ref else None
        )
        self.prefills, self.decodes = int(prefills), int(decodes)
        pre, dec = getattr(model, "prefill", None), getattr(model, "decode", None)
        ctx = int(getattr(engine.lm, "n_positions", 1024))
        # The middle of a profiled model's grid (its price there is the profile's own means, not an
        # edge's extrapolation); 64 otherwise.
        self.length = min(ctx // 2, grid_middle(pre.y) if pre is not None else 64)
        self.width = min(ctx // 2, grid_middle(dec.y) if dec is not None else 64)

    def raw(self) -> CanaryReading:
        """One reading against the model's price alone."""
        e, clock = self.engine, self.engine.clock
        t0 = clock()
        e.start(Workload((Request(0, 0.0, self.length, 1 << 30),), "canary"))
        dec = [s / self.model.pass_time(p) for p, s in probe_log(e, self.width, self.decodes)]
        e.pass_log.clear()
        for _ in range(self.prefills):
            e.execute(Step(prefill=(Chunk(0, 0, self.length, True),)))
            e.release([0])
        pre = [s / self.model.pass_time(p) for p, s in e.pass_log]
        e.start(Workload(()))
        return CanaryReading(float(np.median(pre)), float(np.median(dec)), clock() - t0)

    def __call__(self) -> CanaryReading | None:
        """One reading against the reference (the canary at the profile), or the price without one
        (None where the engine's canary could read nothing: ``VLLMCanary``)."""
        r = self.raw()
        if r is None or self.reference is None:
            return r
        return CanaryReading(r.prefill / self.reference[0], r.decode / self.reference[1], r.seconds)

    def take_reference(self, readings: int = 3) -> dict | None:
        """The canary's median over ``readings`` now (at the end of a profile): what later readings
        are held up to, kept in the calibration."""
        rs = [r for r in (self.raw() for _ in range(readings)) if r is not None]
        # (only vLLM's canary can come back empty) held up to the price alone, as an older profile
        if not rs:
            return None
        ref = {
            "prefill": float(np.median([r.prefill for r in rs])),
            "decode": float(np.median([r.decode for r in rs])),
        }
        self.reference = (ref["prefill"], ref["decode"])
        return ref


@dataclass(frozen=True)
class Level:
    """The session's level, prefill and decode: the median reading, its standard error, and how much
    the level moves from one run to the next (``run_sd``, a fraction; 0 when the canaries cannot
    tell)."""

    prefill: float
    decode: float
    prefill_se: float
    decode_se: float
    readings: int
    prefill_run_sd: float = 0.0
    decode_run_sd: float = 0.0

    def applied(self) -> tuple[float, float]:
        """(prefill, decode) factors the prediction is moved by: each, unless within 2 se or
        ``ACCURACY`` of 1."""

        def one(f: float, se: float) -> float:
            return f if abs(f - 1.0) > max(2.0 * se, ACCURACY) else 1.0

        return one(self.prefill, self.prefill_se), one(self.decode, self.decode_se)

    def model(
        self, step_time: StepTimeModel, rng: np.random.Generator | None = None
    ) -> StepTimeModel:
        """``step_time`` at this level; with ``rng``, at one run's level: each factor normal around
        the applied one, with the level's standard error and the run-to-run spread (one seed's share
        of the band)."""
        p, d = self.applied()
        if rng is not None:
            p = max(
                0.05,
                p
                * (1.0 + _sd(self.prefill_se, self.prefill_run_sd) * float(rng.standard_normal())),
            )
            d = max(
                0.05,
                d * (1.0 + _sd(self.decode_se, self.decode_run_sd) * float(rng.standard_normal())),
            )
        return step_time if (p, d) == (1.0, 1.0) else LevelStepTime(step_time, p, d)

    def as_dict(self) -> dict:
        p, d = self.applied()
        return {
            "prefill": round(self.prefill, 4),
            "decode": round(self.decode, 4),
            "prefill_se": _round(self.prefill_se),
            "decode_se": _round(self.decode_se),
            "readings": self.readings,
            "applied": [round(p, 4), round(d, 4)],
            "run_sd": [round(self.prefill_run_sd, 4), round(self.decode_run_sd, 4)],
        }

    def text(self) -> str:
        p, d = self.applied()
        # Written before the runs' passes are read: a policy whose passes contradict it is not moved
        # (its own note).
        moved = (
            "the prediction is moved to that level where the runs' own passes do not contradict it"
            if (p, d) != (1.0, 1.0)
            else f"both within two standard errors or {ACCURACY:.0%} of 1, so the prediction is "
            f"not moved"
        )
        return (
            f"machine level over the runs ({self.readings} canaries): prefill passes "
            f"{self.prefill:.3f}x (+-{self.prefill_se:.3f}), decode passes {self.decode:.3f}x "
            f"(+-{self.decode_se:.3f}) the profile's; {moved}; from run to run the level moves by "
            f"{self.prefill_run_sd:.1%} (prefill) and {self.decode_run_sd:.1%} (decode), which the "
            f"band holds"
        )


def _sd(se: float, run_sd: float) -> float:
    return math.sqrt((se if math.isfinite(se) else 0.0) ** 2 + run_sd**2)


def _round(x: float) -> float | None:
    return round(x, 4) if math.isfinite(x) else None


def session_level(pairs: list[tuple[CanaryReading, CanaryReading]]) -> Level | None:
    """From the (before, after) readings of every run: the median of every reading, per kind, with
    the standard error of a median (1.25 sd / sqrt n), and the run-to-run spread (see the module's
    docstring)."""
    readings = [r for pair in pairs for r in pair]
    if not readings:
        return None
    n = len(readings)

    def med_se(xs: list[float]) -> tuple[float, float]:
        a = np.asarray(xs, dtype=np.float64)
        se = 1.2533 * float(a.std(ddof=1)) / math.sqrt(n) if n > 1 else float("inf")
        return float(np.median(a)), se

    def run_sd(kind: str, level: float) -> float:
        if len(pairs) < 3:
            return 0.0
        b = np.array([getattr(x, kind) for x, _ in pairs]) / level
        a = np.array([getattr(y, kind) for _, y in pairs]) / level
        return math.sqrt(
            max(0.0, float(((a + b) / 2).var(ddof=1)) - float((a - b).var(ddof=1)) / 4)
        )

    p, pse = med_se([r.prefill for r in readings])
    d, dse = med_se([r.decode for r in readings])
    return Level(p, d, pse, dse, n, run_sd("prefill", p), run_sd("decode", d))
