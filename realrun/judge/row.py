"""One policy's row of a comparison: predicted (median over seeds, with its band), measured (median
over repeats, with every repeat), and what follows from the two: errors, the repeats' spread,
verdicts, whether the measurement fell inside the band, and the prediction at the profile's own
level beside the one at the canaries' (``realrun.judge.compare`` fills them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from batchsim.core.result import RunResult

from ..timing.canary import CanaryReading, Level
from ..timing.pass_level import PassLevel
from .decompose import Decomposition
from .equivalence import Judgement, judge
from .interval import RunSpread, interval_for
from .level_move import LevelMove, next_move
from .verdict import TARGETS, noise_pct

__all__ = ["COMPARE_METRICS", "CompareRow", "CompareReport", "error_pct", "KEYS", "THROUGHPUT"]

#: (summary key, label, display scale, format)
COMPARE_METRICS = (
    ("request_throughput", "req/s", 1.0, "{:.2f}"),
    ("output_throughput", "output tok/s", 1.0, "{:.0f}"),
    ("mean_ttft", "mean TTFT ms", 1e3, "{:.1f}"),
    ("p50_ttft", "p50 TTFT ms", 1e3, "{:.1f}"),
    ("p99_ttft", "p99 TTFT ms", 1e3, "{:.1f}"),
    ("mean_tpot", "mean TPOT ms", 1e3, "{:.2f}"),
    ("mean_e2e", "mean E2E s", 1.0, "{:.3f}"),
    ("p50_e2e", "p50 E2E s", 1.0, "{:.3f}"),
    ("p99_e2e", "p99 E2E s", 1.0, "{:.3f}"),
)
THROUGHPUT = ("request_throughput", "output_throughput")
KEYS = tuple(k for k, *_ in COMPARE_METRICS)


def error_pct(predicted: float | None, measured: float | None) -> float | None:
    """(predicted - measured) / measured in percent; None when either is missing or measured is
    0."""
    if predicted is None or measured is None or measured == 0:
        return None
    return (predicted - measured) / measured * 100.0


@dataclass
class CompareRow:
    """One policy: ``predicted`` (median over seeds), ``band`` ({metric: [low, high]}, with seeds),
    ``measured`` (median over repeats) and ``repeats`` (every repeat's summary)."""

    label: str
    policy: str
    predicted: dict
    measured: dict
    sim: RunResult | None = None
    real: RunResult | None = None
    decomposition: Decomposition | None = None
    partial: bool = False  # the measured run was cut short: compared over what it finished
    band: dict = field(default_factory=dict)
    repeats: list = field(default_factory=list)
    # (before, after) of each run's canary: readings, or seconds
    canary: list = field(default_factory=list)
    seeds: int = 1
    predicted_at_profile: dict | None = (
        None  # the median prediction at the profile's level (a level was applied)
    )
    pass_level: PassLevel | None = (
        None  # the level the runs' own passes read (realrun.timing.pass_level)
    )
    predicted_at_passes: dict | None = (
        None  # the median prediction at that level, made after the run
    )
    predicted_at_machine: dict | None = (
        None  # at the machine's level over every policy, where it is off (after the run)
    )
    # {metric: MetricSpread}: the seeds' spread and the level's elasticity
    parts: dict = field(default_factory=dict)
    # each run's level over its passes (measured / priced)
    run_levels: list = field(default_factory=list)
    spread: RunSpread | None = (
        None  # the machine's run-to-run spread this compare used (realrun.judge.interval)
    )
    # {metric: (sd of ln, df) of the repeats pooled over policies, or None}
    metric_sd: dict = field(default_factory=dict)
    ref_runs: int = 1  # runs the prediction's level was read from (the profile: one)
    # each run's level against the prices the prediction used (the profile's, or the canaries')
    move_levels: list = field(default_factory=list)
    # the level's move from the prediction's reference to its runs (realrun.judge.level_move)
    move: LevelMove | None = None

    @property
    def errors(self) -> dict[str, float | None]:
        return {
            k: (
                None
                if self.partial and k in THROUGHPUT
                else error_pct(self.predicted.get(k), self.measured.get(k))
            )
            for k in KEYS
        }

    @property
    def noise(self) -> dict[str, float | None]:
        """How far the repeats lie from their median, % per metric (None with one repeat)."""
        return noise_pct(self.repeats, KEYS)

    def _judged(self, k: str) -> bool:
        return (
            not (self.partial and k in THROUGHPUT) and k in self.parts and self.spread is not None
        )

    def interval(self, repeats: int = 1) -> dict[str, list[float] | None]:
        """{metric: [low, high]}: where the median of ``repeats`` new runs lands 90 % of the time
        (``realrun.judge.interval``; empty before the compare has its spread)."""
        return {
            k: interval_for(
                self.predicted.get(k),
                self.parts[k],
                self.spread,
                repeats,
                self.ref_runs,
                move=self.move,
            )
            for k in KEYS
            if self._judged(k)
        }

    @property
    def interval_one_run(self) -> dict[str, list[float] | None]:
        return self.interval(1)

    @property
    def interval_median(self) -> dict[str, list[float] | None]:
        return self.interval(max(1, len(self.repeats)))

    @property
    def judgements(self) -> dict[str, Judgement | None]:
        """Per metric, the verdict by equivalence (``realrun.judge.equivalence``): the repeats'
        spread pooled over the compare's policies where it has two degrees of freedom, else the
        spread the interval model expects of one run (taken as known)."""
        out: dict[str, Judgement | None] = {}
        for k in KEYS:
            if not self._judged(k):
                out[k] = None
                continue
            runs = [x.get(k) for x in self.repeats] or [self.measured.get(k)]
            pooled = self.metric_sd.get(k)
            if pooled is not None:
                sd, df, src = (
                    pooled[0],
                    pooled[1],
                    f"the repeats, pooled over the policies ({pooled[1]} df)",
                )
            else:
                sd, df, src = (
                    self.parts[k].run_sd(self.spread),
                    None,
                    "expected: " + self.spread.source,
                )
            out[k] = judge(
                self.predicted.get(k),
                runs,
                TARGETS[k],
                sd,
                df,
                src,
                self.parts[k].seed_sd,
                self.seeds,
            )
        return out

    @property
    def verdicts(self) -> dict[str, str | None]:
        """agrees / disagrees / cannot tell per metric (None: not judged)."""
        return {k: (j.verdict if j is not None else None) for k, j in self.judgements.items()}

    @property
    def causes(self) -> dict[str, str | None]:
        """Per metric that disagrees: ``level`` where the prediction at the level the runs' passes
        read is within tolerance (the machine moved since the profile, not the model), else
        ``model``."""
        at = self.errors_at_passes
        return {
            k: (
                None
                if v != "disagrees"
                else "level"
                if at.get(k) is not None and abs(at[k]) <= TARGETS[k]
                else "model"
            )
            for k, v in self.verdicts.items()
        }

    @property
    def in_band(self) -> dict[str, bool | None]:
        """Whether the median measurement lies inside the interval for the median of the repeats
        (None: none)."""
        iv = self.interval_median
        out = {}
        for k in KEYS:
            b, m = iv.get(k), self.measured.get(k)
            out[k] = None if b is None or m is None else bool(b[0] <= m <= b[1])
        return out

    @property
    def in_one_run(self) -> dict[str, list[bool]]:
        """Per metric, whether each repeat lies inside the one-run interval (what coverage
        counts)."""
        iv = self.interval_one_run
        return {
            k: [bool(b[0] <= x.get(k) <= b[1]) for x in self.repeats if x.get(k) is not None]
            for k, b in iv.items()
            if b is not None
        }

    @property
    def busy(self) -> float:
        return float(self.measured.get("busy_fraction") or 0.0)

    @property
    def errors_at_profile(self) -> dict[str, float | None]:
        """The errors of the prediction at the profile's level (the same as ``errors`` when none was
        applied)."""
        base = (
            self.predicted_at_profile if self.predicted_at_profile is not None else self.predicted
        )
        return {
            k: (
                None
                if self.partial and k in THROUGHPUT
                else error_pct(base.get(k), self.measured.get(k))
            )
            for k in KEYS
        }

    @property
    def errors_at_passes(self) -> dict[str, float | None]:
        """The errors of the prediction at the level the runs' passes read (empty: none made)."""
        if self.predicted_at_passes is None:
            return {}
        return {
            k: (
                None
                if self.partial and k in THROUGHPUT
                else error_pct(self.predicted_at_passes.get(k), self.measured.get(k))
            )
            for k in KEYS
        }

    def as_dict(self) -> dict:
        return {
            "predicted": self.predicted,
            "predicted_band": self.band,
            "measured": self.measured,
            "repeats": self.repeats,
            "error_pct": self.errors,
            "repeat_spread_pct": self.noise,
            "verdicts": self.verdicts,
            "in_band": self.in_band,
            "seeds": self.seeds,
            "interval_one_run": self.interval_one_run,
            "interval_median": self.interval_median,
            "judgements": {
                k: (j.as_dict() if j is not None else None) for k, j in self.judgements.items()
            },
            "causes": {k: c for k, c in self.causes.items() if c is not None},
            "run_levels": [round(x, 4) for x in self.run_levels],
            "elasticity": {k: round(p.elasticity, 3) for k, p in self.parts.items()},
            "canary_s": [[_seconds(x) for x in c] for c in self.canary],
            "canary": [
                [x.as_dict() if isinstance(x, CanaryReading) else None for x in c]
                for c in self.canary
            ],
            **(
                {
                    "predicted_at_profile": self.predicted_at_profile,
                    "error_pct_at_profile": self.errors_at_profile,
                }
                if self.predicted_at_profile is not None
                else {}
            ),
            **(
                {
                    "pass_level": self.pass_level.as_dict(),
                    "predicted_at_passes": self.predicted_at_passes,
                    "error_pct_at_passes": self.errors_at_passes,
                }
                if self.pass_level is not None
                else {}
            ),
            **(
                {"predicted_at_machine": self.predicted_at_machine}
                if self.predicted_at_machine is not None
                else {}
            ),
        }


def _seconds(x) -> float | None:
    return x.seconds if isinstance(x, CanaryReading) else x


@dataclass
class CompareReport:
    rows: list[CompareRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: list = field(default_factory=list)
    config: dict = field(default_factory=dict)
    level: Level | None = (
        None  # the machine's level over the runs, from the canaries (None: no canary readings)
    )
    spread: RunSpread | None = None  # the machine's run-to-run spread the intervals stand on
    # the level's move from the prediction's reference to the runs the intervals before the runs
    # stand on (realrun.judge.level_move), and this compare's own reading of it (mean ln level)
    move: LevelMove | None = None
    move_here: float | None = None
    # {metric: (sd of ln, df)}: the repeats pooled over the policies
    metric_sd: dict = field(default_factory=dict)
    machine_level: PassLevel | None = (
        None  # every policy's passes pooled (realrun.timing.pass_level.machine_level)
    )

    @property
    def move_next(self) -> LevelMove | None:
        """What a later compare on this machine should start from (``level_move.next_move``): the
        move the intervals used, else this compare's own reading."""
        return next_move(self.move, self.move_here)
