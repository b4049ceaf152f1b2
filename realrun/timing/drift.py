"""Did the machine change under us? Drift between the profile and the runs, and other work on it.

A prediction is made from a profile taken minutes earlier; a CPU's speed moves in that
time (its clock, its caches, the other processes on it), and the measurement moves with
it while the prediction cannot. So ``realrun.timing.canary`` times a few fixed passes around every
measured run and the prediction is made at the machine's level over the runs; after the runs
``recheck`` times a few of the profile's own shapes once more and reports how far the machine
moved; ``load_warning`` says when the load average shows other work on the machine.
(``realrun.timing.jitter`` times one small pass beside loops of its length, for ``realrun doctor``.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from batchsim.core.step import Chunk, Step
from batchsim.core.workload import Request, Workload
from batchsim.sim.profiled import ProfiledStepTime

__all__ = ["Drift", "recheck", "load_warning", "REFERENCE_APART_PCT"]

#: How far (%) this machine's passes may be from the shipped reference's before the drift line says
#: the prediction is another machine's: about the run-to-run spread of a pass on a quiet 2-core
#: laptop.
REFERENCE_APART_PCT = 20.0


@dataclass(frozen=True)
class Drift:
    """Measured / profiled time of each shape timed again, and their median.

    ``applied`` is the factor the shapes say the machine moved by: the median, unless it lies
    within two standard errors of 1 (the shapes' own scatter over the square root of their count).
    A correction smaller than its own error is noise, and applying it adds that noise to every
    predicted figure: on a machine whose passes jitter by 30 % or more, five shapes timed eight
    times each measured 0.90-1.02x while the runs that followed them ran at 0.97-1.13x."""

    shapes: tuple[tuple[str, int, int, float], ...]  # (kind, rows, query or width, ratio)
    ratio: float

    @property
    def error(self) -> float:
        r = np.array([q for *_, q in self.shapes], dtype=float)
        return float(r.std(ddof=1) / np.sqrt(len(r))) if len(r) > 1 else float("inf")

    @property
    def applied(self) -> float:
        return self.ratio if abs(self.ratio - 1) > 2 * self.error else 1.0

    def text(self, reference: bool = False) -> str:
        """The drift as one line; ``reference``: the profile is the course machine's shipped one,
        not this machine's, so a gap is the two machines' difference, and the line says how to close
        it."""
        pct = (self.ratio - 1) * 100
        when = "the course machine's reference" if reference else "while profiling"
        # Not "expect errors of that size": a queue near full load turns a step-time error into a
        # waiting-time error several times larger (8 % here, 61 % in the taxi's TTFT, in one run).
        verdict = (
            "the machine held steady"
            if abs(pct) < 5
            else f"this machine ran {abs(pct):.0f} % {'slower' if pct > 0 else 'faster'} at the "
            f"end than {when}; "
            "a busy server's queue stretches such a step-time error into a waiting-time error "
            "several times larger, so latencies can miss by far more than this"
        )
        line = (
            f"drift: {len(self.shapes)} profiled shapes timed again after the runs take "
            f"{self.ratio:.2f}x their profiled time ({verdict})"
        )
        if reference and abs(pct) >= REFERENCE_APART_PCT:
            # The bare run predicts the course machine's times, the same on every run (lesson 7); on
            # a machine this far from it the errors measure the two machines apart, not the
            # simulator.
            line += (
                f"; the prediction is the course machine's, and this machine is {abs(pct):.0f} % "
                f"away from it: "
                "python -m realrun compare profiles this machine first (about 40 s more) and "
                "predicts for it"
            )
        return line


def _shapes(model: ProfiledStepTime) -> list[tuple[str, int, int]]:
    d, p = model.decode, model.prefill
    rows = [int(d.x[0]), int(d.x[len(d.x) // 2]), int(d.x[-1])]
    width = int(round(d.y[len(d.y) // 2]))
    lengths = [int(p.y[len(p.y) // 2]), int(p.y[-1])]
    return [("decode", b, width) for b in rows] + [("prefill", 1, n) for n in lengths]


def recheck(engine, model: ProfiledStepTime, repeats: int = 8) -> Drift:
    """Time a few of the profile's shapes once more on ``engine``, the way the profile did (it is
    reset: call it between runs)."""
    from .measure import robust_mean
    from .probe import WARMUP

    shapes = _shapes(model)
    longest = max(n for k, _, n in shapes if k == "prefill")
    pool = max(b for _, b, _ in shapes) + 1
    engine.start(
        Workload(tuple(Request(i, 0.0, longest, 1 << 30) for i in range(pool)), "drift check")
    )
    ids = list(range(pool))
    out = []
    for kind, b, n in shapes:
        engine.pass_log.clear()
        if kind == "decode":
            rows = ids[:b]
            engine.fill_rows(rows, [n] * b)
            engine.execute(
                Step(decode=tuple(rows), kv_read=b * n, decode_width=n, repeat=repeats + WARMUP)
            )
            engine.release(rows)
            # fresh rows run slow at first (the profile drops these too)
            del engine.pass_log[:WARMUP]
        else:
            for _ in range(max(2, repeats // 2)):
                engine.execute(Step(prefill=(Chunk(0, 0, n, True),)))
                engine.release([0])
        measured = robust_mean([s for _, s in engine.pass_log])
        passes = [p for p, _ in engine.pass_log]
        predicted = float(np.mean([model.pass_time(p) for p in passes]))
        out.append((kind, b, n, measured / predicted))
    engine.start(Workload(()))
    return Drift(tuple(out), float(np.median([r for *_, r in out])))


def load_warning(threads: int) -> str | None:
    """A line when the 1-minute load average shows work beyond this run's own threads (None:
    quiet)."""
    try:
        la = os.getloadavg()[0]
    except OSError:
        return None
    if la > threads + 0.5:
        return (
            f"warning: load average {la:.2f} with {threads} thread(s) of ours: other work is on "
            f"this machine, and it "
            "stretches measured times (not predicted ones); for fidelity figures, measure on a "
            "quiet machine"
        )
    return None
