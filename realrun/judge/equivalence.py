"""Does the prediction agree with the measurement, as far as R runs on this machine can tell?

A measurement on a shared laptop moves from one run to the next by several per cent, so "the
error is 7 %" says little until it is held up to how sure the runs are. The test here is one of
equivalence (as a drug trial shows two doses equivalent): the error of the prediction gets a 90 %
confidence interval from the runs, and the interval is held up to the metric's tolerance ±Δ:

- **agrees**: the whole interval lies inside ±Δ;
- **disagrees**: the whole interval lies outside it;
- **cannot tell**: the interval straddles an edge. Then the useful answers are how small a
  difference R runs on this machine can show (the interval's half-width), and how many runs
  would show Δ.

Errors are read on a log scale, ``d = ln(predicted / measured)``: a run 20 % slow and one 20 %
fast are equally far from the truth there, and ``exp(d) - 1`` is the familiar (p - m) / m.
The interval is ``mean(d) ± q · sd / √R``: ``sd`` is the run-to-run spread of the metric on this
machine (pooled over every policy of the compare, so a compare of 4 policies × 3 runs has 8
degrees of freedom, not 2), ``q`` the t quantile for its degrees of freedom; with no repeats at
all, ``sd`` is the spread the interval model expects (``realrun.judge.interval``) and ``q`` the
normal quantile, and the verdict says so.

The prediction's own uncertainty (its median over S seeds) is added: ``sd_centre`` / √S.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Judgement", "EQ_VERDICTS", "judge", "t90", "runs_to_show", "pooled_log_sd"]

EQ_VERDICTS = ("agrees", "disagrees", "cannot tell")

#: The 95th percentile of Student's t (a two-sided 90 % interval) by degrees of freedom; between
#: table entries interpolated in 1/df, past the last the normal's 1.645 (standard tables).
_T95 = {
    1: 6.314,
    2: 2.920,
    3: 2.353,
    4: 2.132,
    5: 2.015,
    6: 1.943,
    7: 1.895,
    8: 1.860,
    9: 1.833,
    10: 1.812,
    12: 1.782,
    15: 1.753,
    20: 1.725,
    30: 1.697,
    60: 1.671,
    120: 1.658,
}
Z90 = 1.645


def t90(df: int | None) -> float:
    """The multiplier of a two-sided 90 % interval: Student's t for ``df`` degrees of freedom, the
    normal's for None (a spread taken as known)."""
    if df is None:
        return Z90
    if df < 1:
        raise ValueError(f"df must be >= 1 or None, got {df}")
    if df in _T95:
        return _T95[df]
    keys = sorted(_T95)
    if df > keys[-1]:
        return Z90 + (_T95[keys[-1]] - Z90) * keys[-1] / df
    lo = max(k for k in keys if k < df)
    hi = min(k for k in keys if k > df)
    w = (1 / df - 1 / hi) / (1 / lo - 1 / hi)
    return _T95[hi] + w * (_T95[lo] - _T95[hi])


def pooled_log_sd(groups: list[list[float]]) -> tuple[float | None, int]:
    """The run-to-run sd of ln(value), pooled over groups (each group: one policy's repeats), and
    its degrees of freedom; (None, 0) with no group of two or more positive values."""
    ss, df = 0.0, 0
    for g in groups:
        a = np.asarray([x for x in g if x is not None and np.isfinite(x) and x > 0], dtype=float)
        if len(a) >= 2:
            la = np.log(a)
            ss += float(((la - la.mean()) ** 2).sum())
            df += len(a) - 1
    return (math.sqrt(ss / df), df) if df else (None, 0)


def runs_to_show(
    tolerance_pct: float, sd: float, df: int | None, centre_var: float = 0.0
) -> int | None:
    """The fewest runs whose interval's half-width fits inside ±``tolerance_pct`` (what an error of
    0 needs to be called *agrees*); ``centre_var``: the prediction's own variance (ln scale), which
    more runs do not shrink. None where it alone fills the tolerance (more seeds, not more runs,
    would help)."""
    room = (math.log1p(tolerance_pct / 100.0) / t90(df)) ** 2 - centre_var
    if room <= 0:
        return None
    return max(1, math.ceil(sd**2 / room))


@dataclass(frozen=True)
class Judgement:
    """One metric's verdict: the error (%, of the runs' geometric mean), its 90 % interval, the
    tolerance, the smallest difference these runs can show (%), the runs that would show the
    tolerance, and where the spread came from."""

    verdict: str
    error_pct: float
    low_pct: float
    high_pct: float
    tolerance_pct: float
    resolvable_pct: float
    # None: the prediction's own seeds fill the tolerance; more runs cannot settle it
    runs_needed: int | None
    runs: int
    spread_source: str

    def __post_init__(self) -> None:
        if self.verdict not in EQ_VERDICTS:
            raise ValueError(f"verdict must be one of {EQ_VERDICTS}, got {self.verdict!r}")
        if not self.low_pct <= self.error_pct <= self.high_pct:
            raise ValueError(
                f"error_pct {self.error_pct} must lie in [{self.low_pct}, {self.high_pct}]"
            )

    def as_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "error_pct": round(self.error_pct, 2),
            "interval_pct": [round(self.low_pct, 2), round(self.high_pct, 2)],
            "tolerance_pct": self.tolerance_pct,
            "resolvable_pct": round(self.resolvable_pct, 2),
            "runs_needed": self.runs_needed,
            "runs": self.runs,
            "spread_from": self.spread_source,
        }

    def text(self) -> str:
        head = f"{self.error_pct:+.0f} % [{self.low_pct:+.0f}, {self.high_pct:+.0f}]"
        if self.verdict != "cannot tell":
            return f"{head}: {self.verdict} within ±{self.tolerance_pct:g} %"
        need = (
            f"{self.runs_needed} would show ±{self.tolerance_pct:g} %"
            if self.runs_needed is not None
            else "the prediction's own seeds are too few to show it: raise --seeds"
        )
        return (
            f"{head}: cannot tell at ±{self.tolerance_pct:g} %: {self.runs} run(s) here show "
            f"±{self.resolvable_pct:.0f} %; {need}"
        )


def judge(
    predicted: float,
    measured: list[float],
    tolerance_pct: float,
    sd: float,
    df: int | None,
    spread_source: str = "",
    sd_centre: float = 0.0,
    seeds: int = 1,
) -> Judgement | None:
    """The verdict on ``predicted`` against the runs ``measured`` (positive numbers), at
    ±``tolerance_pct``.

    ``sd``: the run-to-run sd of ln(metric) on this machine, with ``df`` degrees of freedom (None:
    taken as known); ``sd_centre``: the seeds' sd of ln(prediction), over ``seeds`` seeds. None when
    there is nothing positive to judge."""
    if tolerance_pct <= 0 or not math.isfinite(tolerance_pct):
        raise ValueError(f"tolerance_pct must be > 0, got {tolerance_pct}")
    if sd < 0 or not math.isfinite(sd):
        raise ValueError(f"sd must be a finite number >= 0, got {sd}")
    ms = [float(m) for m in measured if m is not None and math.isfinite(m) and m > 0]
    if not ms or predicted is None or not math.isfinite(predicted) or predicted <= 0:
        return None
    d = math.log(predicted) - np.log(ms)
    centre = float(d.mean())
    se = math.sqrt(sd**2 / len(ms) + sd_centre**2 / max(1, seeds))
    half = t90(df) * se
    lo, hi = centre - half, centre + half
    below, above = math.log1p(-min(tolerance_pct, 99.0) / 100.0), math.log1p(tolerance_pct / 100.0)
    if below <= lo and hi <= above:
        v = "agrees"
    elif hi < below or lo > above:
        v = "disagrees"
    else:
        v = "cannot tell"
    pct = lambda x: (math.exp(x) - 1.0) * 100.0  # noqa: E731
    need = runs_to_show(tolerance_pct, sd, df, sd_centre**2 / max(1, seeds))
    return Judgement(
        v, pct(centre), pct(lo), pct(hi), tolerance_pct, pct(half), need, len(ms), spread_source
    )
