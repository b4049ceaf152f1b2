"""How far the level a prediction was made at lies from the level its runs ran at.

A prediction made before the runs is priced at the profile's level, read over a minute or so of
passes. The interval (``realrun.judge.interval``) counted that reading as one more run: its error
``σ² / n_ref`` beside each run's own ``σ²``. On these VMs that is too little. The machine's level
wanders over minutes, so consecutive runs agree more closely (``σ``, read from their passes) than a
profile and runs made minutes after it:

- vLLM's profile, timed twice back to back on one server (35 s each, 2026-12-07), read its decode
  points 1 % apart on the whole one time and 15 % apart the next, while each point's timings moved
  only 5-8 % around that common shift: the profile is one reading of a wandering level, and more
  rounds of its points would not have helped;
- in vLLM's fidelity bench the runs' passes sat -25 %, -1 % and -11 % from the profile's prices
  (root mean square 17.7 %), against a run-to-run spread of 4-6 %.

So the move is measured as well. Each compare reads its own: ``δ``, the mean of ln(measured /
priced) over every run's passes, priced as the prediction priced them. Its square holds the move
``τ²`` and the runs' own spread ``σ² / N`` (N runs), so ``δ² - σ² / N`` estimates ``τ²`` with one
degree of freedom. Moves read earlier on this machine (stored with the calibration, or given with
``--level-move``) pool with it, weighted by their degrees of freedom (an earlier reading's capped at
``STORED_DF_MAX``, as the run spread's is: the machine changes, and older evidence ages).

The interval made before the runs then takes ``max(σ² / n_ref, τ²)`` for its reference (``τ²``
already holds the profile's own reading error, so the two are not added), and its multiplier is
Student's for the Welch-Satterthwaite degrees of freedom of the sum (``interval.log_sd_df``).

The move holds the model's own error at the level too (a pass the model prices 10 % dear moves
every run by 10 %): the prediction made before the runs carries that error, so its interval should
hold it. The prediction at the level the runs' own passes read takes both out, and keeps ``σ² / R``.

A compare's own move alone (one degree of freedom, Student's t 6.31) is not used: it would make
every interval say nothing. It is used pooled with an earlier one, and it is reported, so that the
next compare (or the next shape of a bench) can start from it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["LevelMove", "move_of", "read_move", "next_move", "parse_sd_df"]


@dataclass(frozen=True)
class LevelMove:
    """``sd``: how far (sd of ln) the runs' level lies from the level a prediction was made at,
    beyond the runs' own spread; ``df``: the compares it was read from; ``source``: where (said in
    the report)."""

    sd: float
    source: str
    df: int = 1

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sd) and self.sd >= 0):
            raise ValueError(f"sd must be a finite number >= 0, got {self.sd}")
        if self.df < 1:
            raise ValueError(f"df must be >= 1, got {self.df}")

    def as_dict(self) -> dict:
        return {"sd": round(self.sd, 4), "df": self.df, "source": self.source}

    def text(self) -> str:
        return (
            f"{self.sd:.1%} between the level a prediction before the runs stands on and the "
            f"runs' ({self.source})"
        )

    def pooled_with(self, earlier: LevelMove | None, df_max: int) -> LevelMove:
        """Pooled with a move read earlier: variances weighted by degrees of freedom, the earlier
        one's capped at ``df_max``."""
        if earlier is None:
            return self
        df = min(earlier.df, df_max)
        var = (self.df * self.sd**2 + df * earlier.sd**2) / (self.df + df)
        return LevelMove(
            math.sqrt(var),
            f"{self.source}, pooled with {df} read earlier ({earlier.sd:.1%}: {earlier.source})",
            self.df + df,
        )


def move_of(levels: list[float], run_sd: float) -> tuple[float, float] | None:
    """(δ, τ) of one compare: ``levels`` are its runs' levels (measured / priced over all their
    passes, priced as the prediction priced them); ``δ`` the mean of their logs, ``τ`` the move
    beyond the runs' own spread, ``sqrt(max(0, δ² - run_sd² / N))``. None without a level."""
    a = np.asarray([x for x in levels if x is not None and np.isfinite(x) and x > 0], dtype=float)
    if not len(a):
        return None
    delta = float(np.log(a).mean())
    return delta, math.sqrt(max(0.0, delta**2 - run_sd**2 / len(a)))


def read_move(
    levels: list[float], run_sd: float, earlier: LevelMove | None, df_max: int
) -> tuple[LevelMove | None, float | None]:
    """(the move an interval made before the runs uses, this compare's own δ): this compare's move
    pooled with ``earlier``; None where there is no earlier one (one compare's move alone is not
    used, see the module's docstring)."""
    got = move_of(levels, run_sd)
    if got is None:
        return earlier, None
    delta, tau = got
    if earlier is None:
        return None, delta
    here = LevelMove(tau, f"this compare's runs read {math.exp(delta):.2f}x the prices", 1)
    return here.pooled_with(earlier, df_max), delta


def next_move(used: LevelMove | None, here: float | None) -> LevelMove | None:
    """What a later compare on this machine should start from: the move this one used (pooled),
    else its own reading alone (one degree of freedom); None where it read none."""
    if used is not None:
        return used
    if here is None:
        return None
    return LevelMove(abs(here), f"one compare's runs read {math.exp(here):.2f}x the prices", 1)


def parse_sd_df(text: str, flag: str) -> tuple[float, int]:
    """``SD:DF`` as a flag gives it: an sd of ln(level) as a share or a percentage (0.08, 8%) and
    the degrees of freedom it was read with (a whole number from 1; without one, 1: a guess weighs
    little). ``ValueError`` naming ``flag`` otherwise."""
    sd_text, _, df_text = str(text).partition(":")
    try:
        sd = float(sd_text[:-1]) / 100 if sd_text.endswith("%") else float(sd_text)
        df = int(df_text) if df_text else 1
    except ValueError:
        sd, df = math.nan, 0
    if not (math.isfinite(sd) and 0 <= sd < 1) or df < 1:
        raise ValueError(
            f"{flag} must be SD:DF, an sd of ln(level) in [0, 1) or a percentage (8%) and its "
            f"degrees of freedom (a whole number >= 1), got {text!r}"
        )
    return sd, df
