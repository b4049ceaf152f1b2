"""One policy's row of a comparison: predicted (median over seeds, with its band), measured (median
over repeats, with every repeat), and what follows from the two: errors, the repeats' spread,
verdicts, whether the measurement fell inside the band, and the prediction at the profile's own
level beside the one at the canaries' (``realrun.compare`` fills them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from batchsim.core.result import RunResult

from .canary import CanaryReading, Level
from .decompose import Decomposition
from .pass_level import PassLevel
from .verdict import TARGETS, noise_pct, verdict

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
    """(predicted - measured) / measured in percent; None when either is missing or measured is 0."""
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
    canary: list = field(default_factory=list)  # (before, after) of each run's canary: readings, or seconds
    seeds: int = 1
    predicted_at_profile: dict | None = None  # the median prediction at the profile's level (a level was applied)
    pass_level: PassLevel | None = None  # the level the runs' own passes read (realrun.pass_level)
    predicted_at_passes: dict | None = None  # the median prediction at that level, made after the run

    @property
    def errors(self) -> dict[str, float | None]:
        return {k: (None if self.partial and k in THROUGHPUT else error_pct(self.predicted.get(k), self.measured.get(k)))
                for k in KEYS}

    @property
    def noise(self) -> dict[str, float | None]:
        """How far the repeats lie from their median, % per metric (None with one repeat)."""
        return noise_pct(self.repeats, KEYS)

    @property
    def verdicts(self) -> dict[str, str | None]:
        errs, noise = self.errors, self.noise
        return {k: verdict(errs[k], TARGETS[k], noise[k]) for k in KEYS}

    @property
    def in_band(self) -> dict[str, bool | None]:
        """Whether the median measurement lies inside the predicted 90 % band (None: no band)."""
        out = {}
        for k in KEYS:
            b, m = self.band.get(k), self.measured.get(k)
            out[k] = None if b is None or m is None or (self.partial and k in THROUGHPUT) else bool(b[0] <= m <= b[1])
        return out

    @property
    def busy(self) -> float:
        return float(self.measured.get("busy_fraction") or 0.0)

    @property
    def errors_at_profile(self) -> dict[str, float | None]:
        """The errors of the prediction at the profile's level (the same as ``errors`` when none was applied)."""
        base = self.predicted_at_profile if self.predicted_at_profile is not None else self.predicted
        return {k: (None if self.partial and k in THROUGHPUT else error_pct(base.get(k), self.measured.get(k)))
                for k in KEYS}

    @property
    def errors_at_passes(self) -> dict[str, float | None]:
        """The errors of the prediction at the level the runs' passes read (empty: none made)."""
        if self.predicted_at_passes is None:
            return {}
        return {k: (None if self.partial and k in THROUGHPUT else error_pct(self.predicted_at_passes.get(k),
                                                                            self.measured.get(k))) for k in KEYS}

    def as_dict(self) -> dict:
        return {"predicted": self.predicted, "predicted_band": self.band, "measured": self.measured,
                "repeats": self.repeats, "error_pct": self.errors, "repeat_spread_pct": self.noise,
                "verdict": self.verdicts, "in_band": self.in_band, "seeds": self.seeds,
                "canary_s": [[_seconds(x) for x in c] for c in self.canary],
                "canary": [[x.as_dict() if isinstance(x, CanaryReading) else None for x in c] for c in self.canary],
                **({"predicted_at_profile": self.predicted_at_profile,
                    "error_pct_at_profile": self.errors_at_profile} if self.predicted_at_profile is not None else {}),
                **({"pass_level": self.pass_level.as_dict(), "predicted_at_passes": self.predicted_at_passes,
                    "error_pct_at_passes": self.errors_at_passes} if self.pass_level is not None else {})}


def _seconds(x) -> float | None:
    return x.seconds if isinstance(x, CanaryReading) else x


@dataclass
class CompareReport:
    rows: list[CompareRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: list = field(default_factory=list)
    config: dict = field(default_factory=dict)
    level: Level | None = None  # the machine's level over the runs, from the canaries (None: no canary readings)
