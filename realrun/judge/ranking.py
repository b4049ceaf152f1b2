"""Did the simulator rank the policies as the machine did? The decision a simulator is for.

A capacity planner asks the simulator which policy to run, not what the fourth digit of a
latency is; so the test that matters is whether the policies come out in the measured order.
Two policies are told apart only when their measured gap is larger than their repeats' spread
(the farthest repeat from the median, of each, added): a closer pair is a tie the machine
cannot break, and a simulator that orders a tie either way is not wrong. For every pair told
apart, the prediction must put them the same way round. This is the decision test of
``bench/fidelity.py`` (issue 18), for the rows of one ``realrun compare``.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchsim.core.errors import ConfigError, show

from .row import COMPARE_METRICS, KEYS

__all__ = ["RANK_BY", "Pair", "pairs", "measured_order", "metric_name"]

#: The figure policies are ranked by: the tail a service-level objective is written on.
RANK_BY = "p99_e2e"


def metric_name(key: str) -> str:
    """'p99 E2E' for p99_e2e: the table's label without its unit."""
    for k, label, *_ in COMPARE_METRICS:
        if k == key:
            return label.rsplit(" ", 1)[0] if label.endswith((" ms", " s")) else label
    raise ConfigError(f"rank-by must be one of {', '.join(KEYS)}, got {show(key)}")


@dataclass(frozen=True)
class Pair:
    """Two policies, ``a`` measured below ``b`` on the figure: their gap and the spread, both in %
    of the smaller; ``apart``: the gap is larger than the spread; ``same``: predicted in the same
    order."""

    a: str
    b: str
    gap_pct: float
    spread_pct: float
    apart: bool
    same: bool

    def __post_init__(self) -> None:
        if not (self.gap_pct >= 0 and self.spread_pct >= 0):
            raise ConfigError(
                f"pair {self.a}/{self.b}: gap and spread must be >= 0, got {self.gap_pct!r}, "
                f"{self.spread_pct!r}"
            )

    def as_dict(self) -> dict:
        return {
            "lower": self.a,
            "higher": self.b,
            "gap_pct": round(self.gap_pct, 2),
            "spread_pct": round(self.spread_pct, 2),
            "apart": self.apart,
            "same_order": self.same,
        }


def _farthest(repeats: list[dict], median: float, key: str) -> float:
    vals = [r[key] for r in repeats if r.get(key) is not None]
    return max((abs(v - median) for v in vals), default=0.0)


def _usable(rows, key: str) -> list:
    return [
        r
        for r in rows
        if not r.partial and r.measured.get(key) and r.predicted.get(key) is not None
    ]


def pairs(rows, key: str = RANK_BY) -> list[Pair]:
    """Every pair of the compared rows (``CompareRow``), in measured order, judged on ``key``."""
    metric_name(key)
    rows = sorted(_usable(rows, key), key=lambda r: r.measured[key])
    out = []
    for i, lo in enumerate(rows):
        for hi in rows[i + 1 :]:
            ml, mh = lo.measured[key], hi.measured[key]
            spread = _farthest(lo.repeats, ml, key) + _farthest(hi.repeats, mh, key)
            gap = mh - ml
            out.append(
                Pair(
                    lo.label,
                    hi.label,
                    gap / ml * 100,
                    spread / ml * 100,
                    gap > spread,
                    hi.predicted[key] > lo.predicted[key],
                )
            )
    return out


def measured_order(rows, key: str = RANK_BY) -> str:
    """'continuous < dynamic < taxi ~ static': the measured order, ``~`` between neighbours whose
    gap is within their spread."""
    ps = {(p.a, p.b): p for p in pairs(rows, key)}
    labels = [r.label for r in sorted(_usable(rows, key), key=lambda r: r.measured[key])]
    text = labels[0] if labels else ""
    for a, b in zip(labels, labels[1:]):
        text += (" < " if ps[(a, b)].apart else " ~ ") + b
    return text
