"""The machine's level read from the run's own passes: measured over predicted, prefill and decode
apart.

A measured run keeps every pass the engine ran with its planned shape (``meta['passes']``), and the
replay shows the schedule was the simulator's own, so each pass has a price in the cost model. The
ratio of the measured total to the priced total is the level the machine ran at during that run:
thousands of passes, where a canary reads a few dozen in a tenth of a second. Prefill passes (and
those that mix a chunk with decode rows) and decode passes are read apart, as ``LevelStepTime``
scales them apart: a neighbour on the other core moves compute-bound prefill more than memory-bound
decode.

Consecutive passes are not independent (the machine's speed wanders over seconds), so the
standard error is of batch means: the passes in time order cut into ``BLOCKS`` runs of
consecutive passes, each block's ratio of totals, and their spread over sqrt(blocks). A slow
second then widens the error instead of hiding in a large count.

What it is for: a prediction made before the run stays the prediction; the same prediction at the
passes' level, made after the run, is shown beside it (what the model would have said had it known
the machine's speed), so a miss splits into the machine's part and the model's; and a canary level
that the passes contradict does not move the prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchsim.sim.level import LevelStepTime
from batchsim.sim.steptime import StepTimeModel

__all__ = [
    "PassLevel",
    "pass_level",
    "machine_level",
    "run_level",
    "priced_passes",
    "BLOCKS",
    "CONTRADICTS",
    "IDLE_MIN_S",
]

#: Blocks of consecutive passes for the batch-means standard error: enough for a spread, few enough
#: that each block spans seconds of a run (the slow drift's time scale).
BLOCKS = 20
#: A canary level that the passes' level differs from by more than this fraction is contradicted.
CONTRADICTS = 0.20


@dataclass(frozen=True)
class PassLevel:
    """Measured / priced for the run's prefill passes (and mixed ones) and its decode passes: the
    ratio of totals, its batch-means standard error, and how many passes it read (ratio None: none
    ran)."""

    prefill: float | None
    decode: float | None
    prefill_se: float
    decode_se: float
    prefill_n: int
    decode_n: int

    def factors(self) -> tuple[float, float]:
        """(prefill, decode) to scale the model by; a kind that did not run stays at 1."""
        return (self.prefill or 1.0, self.decode or 1.0)

    def model(self, step_time: StepTimeModel) -> StepTimeModel:
        p, d = self.factors()
        return LevelStepTime(step_time, p, d)

    def contradicts(self, prefill: float, decode: float) -> list[str]:
        """Which of a level's (prefill, decode) factors these passes contradict by more than
        ``CONTRADICTS`` beyond their own error (a kind that did not run contradicts nothing)."""
        out = []
        for kind, f, mine, se in (
            ("prefill", prefill, self.prefill, self.prefill_se),
            ("decode", decode, self.decode, self.decode_se),
        ):
            if mine is not None and abs(f / mine - 1.0) > CONTRADICTS + 2.0 * (
                se / mine if math.isfinite(se) else 0.0
            ):
                out.append(kind)
        return out

    def as_dict(self) -> dict:
        return {
            "prefill": _r(self.prefill),
            "decode": _r(self.decode),
            "prefill_se": _r(self.prefill_se),
            "decode_se": _r(self.decode_se),
            "prefill_passes": self.prefill_n,
            "decode_passes": self.decode_n,
        }

    def text(self) -> str:
        def one(kind: str, f: float | None, se: float, n: int) -> str:
            if f is None:
                return f"no {kind} passes"
            err = f" +-{se:.3f}" if math.isfinite(se) else ""
            return f"{kind} {f:.3f}x{err} ({n} passes)"

        return (
            f"{one('prefill', self.prefill, self.prefill_se, self.prefill_n)}, "
            f"{one('decode', self.decode, self.decode_se, self.decode_n)}"
        )


def _r(x: float | None) -> float | None:
    return round(x, 4) if x is not None and math.isfinite(x) else None


def _ratio(priced: np.ndarray, measured: np.ndarray) -> tuple[float | None, float, int]:
    """Ratio of totals and its batch-means standard error (inf with fewer than two blocks)."""
    n = len(measured)
    if n == 0 or priced.sum() <= 0:
        return None, math.inf, n
    level = float(measured.sum() / priced.sum())
    blocks = min(BLOCKS, n // 2)
    if blocks < 2:
        return level, math.inf, n
    cuts = np.array_split(np.arange(n), blocks)
    per = np.array([measured[c].sum() / priced[c].sum() for c in cuts if priced[c].sum() > 0])
    se = float(per.std(ddof=1) / math.sqrt(len(per))) if len(per) > 1 else math.inf
    return level, se, n


#: A pause before a step shorter than this beyond the driver's own gap is the driver's jitter: the
#: simulator sees no idle there, so no cold start is priced.
IDLE_MIN_S = 0.5e-3


def priced_passes(run, model) -> list[tuple]:
    """(pass, priced seconds, measured seconds) for each pass of a measured ``run``, as the
    simulator prices it: the pass's own price, plus the cold start a step pays after the server sat
    idle (``wake_penalty``; ``meta['pass_idle']`` says which passes followed an idle, and how long),
    plus what a step's first decode passes cost beyond repeated ones (``cold_extra``;
    ``meta['pass_rep']``). Without those, a policy that idles between batches, or one whose steps
    are short, would read as a slow machine."""
    log = run.meta.get("passes") or []
    idle = run.meta.get("pass_idle")
    if idle is None or len(idle) != len(log) or not hasattr(model, "wake_penalty"):
        idle = None
    rep = run.meta.get("pass_rep")
    if rep is None or len(rep) != len(log) or not hasattr(model, "cold_extra"):
        rep = None
    gap = float(getattr(model, "step_gap", 0.0) or 0.0)
    out = []
    for i, (p, secs) in enumerate(log):
        t = model.pass_time(p)
        if idle is not None and idle[i] - gap > IDLE_MIN_S:
            t += model.wake_penalty(idle[i] - gap)[1]
        if rep is not None:
            t += model.cold_extra(p, rep[i])
        out.append((p, t, secs))
    return out


def _level_of(priced) -> PassLevel | None:
    """The level of (pass, priced seconds, measured seconds) triples, in the order they ran."""
    pre_p, pre_m, dec_p, dec_m = [], [], [], []
    for p, price, secs in priced:
        if p.prefill_rows:
            pre_p.append(price)
            pre_m.append(secs)
        else:
            dec_p.append(price)
            dec_m.append(secs)
    if not pre_m and not dec_m:
        return None
    p, pse, pn = _ratio(np.asarray(pre_p, float), np.asarray(pre_m, float))
    d, dse, dn = _ratio(np.asarray(dec_p, float), np.asarray(dec_m, float))
    return PassLevel(p, d, pse, dse, pn, dn)


def pass_level(runs, step_time: StepTimeModel, policy_name: str) -> PassLevel | None:
    """The level of ``runs`` (measured results of one policy, each with ``meta['passes']``: (Pass,
    seconds) in the order they ran), against ``step_time`` as the policy is priced; None without
    passes."""
    model = step_time.for_policy(policy_name)
    return _level_of(t for run in runs for t in priced_passes(run, model))


def machine_level(groups) -> PassLevel | None:
    """One level for the machine: every policy's passes pooled, each priced as its own policy is.
    ``groups``: (runs, step_time, policy name) per policy. Where a single policy's level can hold
    that policy's own miss (a shape the model prices wrong), the pool is the machine's speed: a
    laptop twice as slow as the profile's machine reads about 2x here whatever the policies. The
    blocks of the standard error follow the policies' order, so a policy the model misprices widens
    it (conservative)."""
    return _level_of(
        t
        for runs, st, name in groups
        for run in runs
        for t in priced_passes(run, st.for_policy(name))
    )


def run_level(run, step_time: StepTimeModel, policy_name: str) -> float | None:
    """One run's level over all its passes, prefill and decode together (measured total / priced
    total): what moves from one run to the next (``realrun.judge.interval.RunSpread``); None without
    passes."""
    got = priced_passes(run, step_time.for_policy(policy_name))
    priced = sum(t for _, t, _ in got)
    return float(sum(s for *_, s in got) / priced) if got and priced > 0 else None
