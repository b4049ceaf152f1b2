"""Where one new run will land: the prediction as an interval for one run, and for the median of R
runs.

A 90 % band over the simulation's seeds holds what varies *inside* a run: which passes were slow,
when the machine's slow drift struck. On a shared laptop the largest variation is elsewhere: the
machine's level from one run to the next (a neighbour's build, the fan, the other core), 10-30 %
on the course's VMs. A band that leaves it out cannot cover, however right the model. So the
variance of a metric is put together from its parts, on a log scale (a run 10 % slow and one 10 %
fast are equally far off):

- the run's own luck: the seeds' spread of ln(metric), ``s_seed``;
- the machine's level from one run to the next, ``σ`` (``RunSpread``, measured on this machine): a
  run at a level 10 % slower moves a metric by about ``e`` × 10 %, where ``e`` is the metric's
  elasticity to the level, read from two simulations at the level × 1.1 and ÷ 1.1 (``e`` is about
  1 for a latency at light load, more near saturation, where waits compound, and about 0 for
  throughput below saturation, which the arrivals set);
- the level the prediction was made at is itself a reading, of ``n_ref`` runs (the profile is
  one): ``σ² / n_ref`` more, shared by every run; or, where it is larger, the level's move from
  that reading to the runs, ``τ²``, measured by the compares on this machine
  (``realrun.judge.level_move``: a profile and runs minutes after it lie further apart than
  consecutive runs do).

One run: ``sd² = s_seed² + e² σ² (1 + 1/n_ref)``. The median of R runs: the per-run parts shrink
by the variance of a median of R normal draws, ``1/R`` for R ≤ 2 and ``π / (2R + 1)`` beyond
(within 2 % of the exact values for R = 3 to 5), the shared part does not. The interval is
``centre × exp(±t sd)``, with ``t`` Student's 90 % multiplier for the degrees of freedom the
run-to-run spread was read with (2.92 from three runs of one policy, 1.86 from twelve runs of four),
and 1.645 for a spread taken as known: an sd read from a few runs is as likely to be too small as
too large, and with 1.645 the interval of a spread read from three runs holds three runs in four,
not nine in ten. The model's own error is not in it: that is what a coverage check
on runs held out (``bench/fidelity.py --coverage``) is for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .equivalence import Z90, t90

__all__ = [
    "RunSpread",
    "ASSUMED",
    "MetricSpread",
    "interval_for",
    "elasticity",
    "median_share",
    "LEVEL_STEP",
    "MAX_ELASTICITY",
    "seed_log_sd",
    "STORED_DF_MAX",
    "AGREE_TAIL",
    "agree",
    "f_cdf",
]

#: The level factor of the two simulations that read a metric's elasticity (× and ÷ this).
LEVEL_STEP = 1.1
#: Past saturation a latency's elasticity grows without bound (the queue never drains); beyond this
#: the interval would say nothing a reader can use, so it is capped and the run called saturated.
MAX_ELASTICITY = 10.0


@dataclass(frozen=True)
class RunSpread:
    """The machine's level from one run to the next: the sd of ln(level) (a fraction), how many runs
    and degrees of freedom it was read from, and where (``source``, said in the report)."""

    sd: float
    source: str
    runs: int = 0
    df: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sd) and self.sd >= 0):
            raise ValueError(f"sd must be a finite number >= 0, got {self.sd}")
        if self.runs < 0 or self.df < 0:
            raise ValueError(f"runs and df must be >= 0, got {self.runs} and {self.df}")

    def as_dict(self) -> dict:
        return {"sd": round(self.sd, 4), "source": self.source, "runs": self.runs, "df": self.df}

    def text(self) -> str:
        return f"{self.sd:.1%} from one run to the next ({self.source})"

    def pooled_with(self, earlier: RunSpread | None) -> RunSpread:
        """This spread pooled with one read on this machine before (stored with the calibration, or
        given): variances weighted by degrees of freedom, the earlier one's capped at
        ``STORED_DF_MAX``. A spread read from three runs has 2 df, and Student's t for 2 df (2.92)
        makes its interval 1.8 times the width a known spread would give; with 8 more df, t is 1.81.

        Not pooled where the two differ by more than one machine's readings do 19 times in 20
        (``agree``, an exact F test with 2.5 % on either side): the machine has changed since, and
        this compare's own runs, the nearest to the runs it predicts, stand alone with their own t
        (said in the source). On the interval's own model (20,000 draws), three runs pooled with
        nine earlier of the same machine hold 89 % of new runs, at 1.07x the width a known spread
        gives, against 90 % at 1.48x alone; pooled with a reading of a machine twice as quiet then,
        they hold 76 %: a spread that has grown since is the one case pooling cannot see, and what a
        held-out check would show."""
        if earlier is None or earlier.df < 1 or self.df < 1:
            return self
        df = min(earlier.df, STORED_DF_MAX)
        if not agree(self.sd, self.df, earlier.sd, df):
            return replace(
                self,
                source=f"{self.source}; not pooled with the {earlier.sd:.1%} read earlier (further "
                "apart than one machine's readings: it has changed since)",
            )
        sd = math.sqrt((self.df * self.sd**2 + df * earlier.sd**2) / (self.df + df))
        return RunSpread(
            sd,
            f"{self.source}, pooled with {df} more read earlier on this machine ({earlier.sd:.1%})",
            self.runs + earlier.runs,
            self.df + df,
        )

    @classmethod
    def from_levels(cls, levels: dict[str, list[float]]) -> RunSpread | None:
        """From each run's level (measured / priced over all its passes), grouped by policy: the sd
        of ln(level) within each policy, pooled (a policy's levels differ from another's by the
        model's error, not the machine's). None with fewer than 2 degrees of freedom."""
        from .equivalence import pooled_log_sd

        sd, df = pooled_log_sd(list(levels.values()))
        if sd is None or df < 2:
            return None
        runs = sum(len(v) for v in levels.values())
        return cls(
            sd, f"the passes of this compare's {runs} runs, {df} degrees of freedom", runs, df
        )


#: The most degrees of freedom a spread from earlier compares keeps when pooled with a new one: the
#: machine changes (a quiet evening, a busy morning), so older evidence ages, and this compare's own
#: runs always weigh at least df / (df + 8).
STORED_DF_MAX = 8
#: Two readings of the spread are pooled unless the ratio of their variances lies in either tail of
#: what one machine gives, this share on each side (a two-sided 5 % test of one machine).
AGREE_TAIL = 0.025


def agree(sd_a: float, df_a: int, sd_b: float, df_b: int, tail: float = AGREE_TAIL) -> bool:
    """Whether two sds, read with these degrees of freedom, could be of one machine: s_a² / s_b²
    within the middle ``1 - 2 tail`` of Snedecor's F(df_a, df_b), which that ratio follows when both
    read one sigma. Exact, not a normal approximation of ln F: ln of a variance read with 2 df has a
    long tail to the low side, and a test symmetric on the log scale refused 6.1 % of same-machine
    pairs whose own 2-df reading was the lower against an 8-df one, and 0.2 % whose own was the
    higher (40,000 pairs): it left a reading low by chance to stand alone, the one error that
    narrows an interval below its runs, 2.4 times as often as a test of 2.5 % a side should."""
    if sd_a <= 0 or sd_b <= 0:
        return False
    p = f_cdf((sd_a / sd_b) ** 2, df_a, df_b)
    return tail <= p <= 1.0 - tail


def f_cdf(x: float, d1: float, d2: float) -> float:
    """P(F <= x) for Snedecor's F with ``d1`` and ``d2`` degrees of freedom: the regularised
    incomplete beta function I_y(d1 / 2, d2 / 2) at y = d1 x / (d1 x + d2) (written out: the
    package has no scipy)."""
    if not (d1 > 0 and d2 > 0):
        raise ValueError(f"d1 and d2 must be > 0, got {d1} and {d2}")
    if x <= 0:
        return 0.0
    return _beta_cdf(d1 * x / (d1 * x + d2), d1 / 2, d2 / 2)


def _beta_cdf(y: float, a: float, b: float) -> float:
    """I_y(a, b) by its continued fraction (modified Lentz), on the side of the symmetry I_y(a, b) =
    1 - I_{1-y}(b, a) where it converges fast (y < (a + 1) / (a + b + 2))."""
    if y <= 0.0:
        return 0.0
    if y >= 1.0:
        return 1.0
    if y > (a + 1) / (a + b + 2):
        return 1.0 - _beta_cdf(1.0 - y, b, a)
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(y) + b * math.log1p(-y)
    )
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * y / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 300):
        for num in (
            m * (b - m) * y / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * y / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-12:
            break
    return front * f / a


#: No repeats, no canaries that could tell, no stored spread: the middle of the 10-30 % this
#: course's VMs showed from run to run, said as assumed (``--repeats 2`` measures it).
ASSUMED = RunSpread(
    0.15, "assumed, the middle of what the course's VMs show; --repeats 2 measures this machine's"
)


def median_share(repeats: int) -> float:
    """The variance of the median of ``repeats`` normal draws, as a share of one draw's."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    return 1.0 / repeats if repeats <= 2 else math.pi / (2 * repeats + 1)


def seed_log_sd(values: list[float]) -> float:
    """The seeds' sd of ln(metric): a run's own luck (0 with one seed or a non-positive value)."""
    a = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    if len(a) < 2 or (a <= 0).any():
        return 0.0
    return float(np.log(a).std(ddof=1))


def elasticity(low: float | None, high: float | None, step: float = LEVEL_STEP) -> float:
    """|d ln(metric) / d ln(level)| from the metric at level ÷ ``step`` and × ``step``, capped at
    ``MAX_ELASTICITY`` (0 where either is missing or not positive)."""
    if (
        low is None
        or high is None
        or not (np.isfinite(low) and np.isfinite(high))
        or low <= 0
        or high <= 0
    ):
        return 0.0
    return min(MAX_ELASTICITY, abs(math.log(high / low)) / (2.0 * math.log(step)))


@dataclass(frozen=True)
class MetricSpread:
    """One metric's parts: the seeds' sd of ln(metric), its elasticity to the level."""

    seed_sd: float
    elasticity: float

    def __post_init__(self) -> None:
        if self.seed_sd < 0 or self.elasticity < 0:
            raise ValueError(
                f"seed_sd and elasticity must be >= 0, got {self.seed_sd} and {self.elasticity}"
            )

    def run_sd(self, spread: RunSpread) -> float:
        """How far one run's ln(metric) moves from the next's on this machine (no reference
        term)."""
        return math.sqrt(self.seed_sd**2 + (self.elasticity * spread.sd) ** 2)

    def log_sd(self, spread: RunSpread, repeats: int = 1, ref_runs: int = 1, move=None) -> float:
        """The sd of ln(the median of ``repeats`` new runs) around a prediction made at a level read
        from ``ref_runs`` runs (``move``, a ``realrun.judge.level_move.LevelMove``: how far that
        level was measured to lie from the runs', which then stands for the reference's term where
        it is the larger)."""
        return self.log_sd_df(spread, repeats, ref_runs, move)[0]

    def log_sd_df(
        self, spread: RunSpread, repeats: int = 1, ref_runs: int = 1, move=None
    ) -> tuple[float, float | None]:
        """(``log_sd``, its degrees of freedom): the run spread's (None where taken as known) or,
        where the move's term is used, the Welch-Satterthwaite degrees of freedom of the two
        readings' sum, ``V² / (a² / df_a + b² / df_b)`` (the seeds' part counted with the run
        spread's, as without a move)."""
        if ref_runs < 1:
            raise ValueError(f"ref_runs must be >= 1, got {ref_runs}")
        level = (self.elasticity * spread.sd) ** 2
        own = median_share(repeats) * (self.seed_sd**2 + level) + level / ref_runs
        df: float | None = spread.df if spread.df >= 1 else None
        shared = (self.elasticity * move.sd) ** 2 if move is not None else 0.0
        if shared <= level / ref_runs:
            return math.sqrt(own), df
        own -= level / ref_runs
        v = own + shared
        denom = (own**2 / df if df is not None else 0.0) + shared**2 / move.df
        return math.sqrt(v), v**2 / denom


def interval_for(
    centre: float | None,
    part: MetricSpread,
    spread: RunSpread,
    repeats: int = 1,
    ref_runs: int = 1,
    z: float | None = None,
    move=None,
) -> list[float] | None:
    """[low, high]: where the median of ``repeats`` new runs lands 90 % of the time (None: no
    centre). ``z``: the multiplier; by default Student's for the spread's degrees of freedom
    (``t90``), the normal's 1.645 for a spread with none (assumed, or given). ``move``: the level's
    measured move from the reference to the runs (``MetricSpread.log_sd_df``)."""
    if centre is None or not np.isfinite(centre) or centre <= 0:
        return None
    sd, df = part.log_sd_df(spread, repeats, ref_runs, move)
    if z is None:
        z = t90(df) if df is not None else Z90
    h = z * sd
    return [centre * math.exp(-h), centre * math.exp(h)]
