"""Coverage, checked on runs held out: does a new run land inside the interval the compare gave it?

A compare (``realrun.judge.compare.compare_policies``) ends with an interval for one run per policy and
metric (``realrun.judge.interval``). Whether 90 % of new runs land inside it is a claim, so it is measured:
after the compare, a few more runs per policy, none of which set the level the prediction stands on,
each held up to two intervals: the prediction made before the runs (at the profile's or the
canaries' level) and the one made after them at the level the compare's own passes read. Both
benches use this: ``bench/fidelity.py --coverage H`` (our engine, four policies interleaved) and
``bench/vllm_fidelity.py --coverage H`` (vLLM, the continuous policy, on the server it was profiled on).

An interval can cover by being wide, so each is also given its sharpness: its half-width against
the half-width the held-out runs themselves call for, 1.645 x their own sd of ln(metric) with the
seeds' (a run's own luck, which a handful of held-out runs reads poorly); near 1x is sharp, above
1.5x is wide.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from realrun.judge.interval import interval_for

__all__ = [
    "COVERED",
    "HeldOut",
    "Z",
    "coverage_lines",
    "held_up",
    "hold_out",
    "run_rounds",
    "shape_lines",
    "sharpness",
]

#: The metrics held-out runs are checked on: those the course holds a tolerance for.
COVERED = ("p50_e2e", "p99_e2e", "p50_ttft", "request_throughput")
#: A 90 % two-sided interval in standard deviations (the printed tables name 1.645).
Z = 1.645


@dataclass(frozen=True)
class HeldOut:
    """One metric of one held-out run: inside the interval made before the runs and the one at the
    passes' level (None: the compare made none), each interval's half-width on a log scale, the seeds'
    sd of ln(metric), and every held-out run's value of this metric for this policy (for their own sd)."""

    shape: str
    policy: str
    metric: str
    run: int
    inside_before: bool
    inside_after: bool | None
    half_before: float
    half_after: float | None
    seed_sd: float
    values: tuple

    def __post_init__(self) -> None:
        if self.run < 0:
            raise ValueError(f"run must be >= 0, got {self.run}")
        for name in ("half_before", "half_after", "seed_sd"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v}")
        if (self.inside_after is None) != (self.half_after is None):
            raise ValueError(
                f"inside_after and half_after are both given or both None, got {self.inside_after} "
                f"and {self.half_after}"
            )


def run_rounds(
    labels: list[str], run_once: Callable[[str], dict], count: int, rng: np.random.Generator
) -> dict[str, list[dict]]:
    """``count`` rounds, each running every label once (``run_once(label) -> summary``) in an order
    shuffled by ``rng``, as the compare's own repeats are, so a slow minute spreads over every policy."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    runs: dict[str, list[dict]] = {label: [] for label in labels}
    for _ in range(count):
        for i in rng.permutation(len(labels)):
            runs[labels[int(i)]].append(run_once(labels[int(i)]))
    return runs


def held_up(shape: str, report, runs: dict[str, list[dict]]) -> list[HeldOut]:
    """Every held-out run's ``COVERED`` metrics against the one-run intervals of ``report``'s row of the
    same label: the prediction made before the runs (its level read from ``ref_runs`` runs) and the one
    at the passes' level (read from the compare's repeats; none where the compare made none)."""
    out = []
    for row in report.rows:
        if row.label not in runs or row.partial or not row.parts:
            continue
        repeats = max(1, len(row.repeats))
        for k in COVERED:
            part = row.parts[k]
            before = interval_for(row.predicted.get(k), part, report.spread, 1, row.ref_runs)
            after = (
                interval_for(row.predicted_at_passes.get(k), part, report.spread, 1, repeats)
                if row.predicted_at_passes is not None
                else None
            )
            values = tuple(s.get(k) for s in runs[row.label])
            for j, m in enumerate(values):
                if (
                    m is None
                    or before is None
                    or (row.predicted_at_passes is not None and after is None)
                ):
                    continue
                out.append(
                    HeldOut(
                        shape,
                        row.label,
                        k,
                        j,
                        bool(before[0] <= m <= before[1]),
                        None if after is None else bool(after[0] <= m <= after[1]),
                        _half(before),
                        None if after is None else _half(after),
                        part.seed_sd,
                        values,
                    )
                )
    return out


def hold_out(
    shape: str, report, run_once: Callable[[str], dict], count: int, rng: np.random.Generator
) -> list[HeldOut]:
    """``count`` fresh runs of every whole row of ``report`` (rounds in a shuffled order), each held up to
    its intervals (``held_up``). The runs come after the compare's, so none of them set its level."""
    labels = [r.label for r in report.rows if not r.partial and r.parts]
    return held_up(shape, report, run_rounds(labels, run_once, count, rng))


def _half(interval: list[float]) -> float:
    """An interval's half-width on the log scale it was built on (``centre x exp(+-h)``)."""
    return math.log(interval[1] / interval[0]) / 2


def sharpness(rows: list[HeldOut]) -> tuple[float, float]:
    """(before, at the passes' level) for one shape, policy and metric: half-width / (Z x sqrt(the held-out
    runs' sd of ln(metric)^2 + the seeds' sd^2)); nan where that cannot be read (fewer than two positive
    values) or no interval at that level was made."""
    first = rows[0]
    vals = [x for x in first.values if x is not None and x > 0]
    sd = float(np.log(vals).std(ddof=1)) if len(vals) > 1 else float("nan")
    denom = Z * math.sqrt(sd**2 + first.seed_sd**2)
    if not (denom > 0 and math.isfinite(denom)):
        return float("nan"), float("nan")
    return first.half_before / denom, (
        first.half_after / denom if first.half_after is not None else float("nan")
    )


def _groups(rows: list[HeldOut], key) -> dict:
    out: dict = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def _count(rows: list[HeldOut], after: bool) -> tuple[int, int]:
    """(inside, of) before the runs, or at the passes' level over the rows that have one."""
    flags = (
        [r.inside_after for r in rows if r.inside_after is not None]
        if after
        else [r.inside_before for r in rows]
    )
    return sum(flags), len(flags)


def _of(inside: int, n: int, width: int = 2) -> str:
    return f"{inside:>4d} of {n:<{width}d}" if n else f"{'-':>{7 + width}s}"


def coverage_lines(rows: list[HeldOut]) -> list[str]:
    """The table: per shape, policy and metric, held-out runs inside each interval and its sharpness; then
    the share over all of them and the median sharpness."""
    out = [
        (
            "\n== coverage: held-out runs inside their 90 % one-run interval (target 80-95 %); sharpness: half-width / "
            "(1.645 x the held-out runs' sd, with the seeds'), median (target <= 1.5x)"
        ),
        (
            f"{'shape':7s} {'policy':11s} {'metric':18s} | {'before':>9s} {'at passes':>9s} | {'sharp before':>12s} "
            f"{'at passes':>9s}"
        ),
    ]
    sharp_b, sharp_a = [], []
    for (shape, pol, k), rs in _groups(rows, lambda r: (r.shape, r.policy, r.metric)).items():
        sb, sa = sharpness(rs)
        sharp_b.append(sb)
        sharp_a.append(sa)
        out.append(
            f"{shape:7s} {pol:11s} {k:18s} | {_of(*_count(rs, False))} {_of(*_count(rs, True))} | {sb:>11.2f}x "
            f"{sa:>8.2f}x"
        )
    if rows:
        b, n = _count(rows, False)
        a, na = _count(rows, True)
        at = f"{a} of {na} ({a / na:.0%})" if na else "none made"
        out.append(
            f"all: inside the interval made before the runs {b} of {n} ({b / n:.0%}); at the passes' level {at}; "
            f"sharpness median {_median(sharp_b):.2f}x before, {_median(sharp_a):.2f}x at the passes' level"
        )
    return out


def shape_lines(rows: list[HeldOut]) -> list[str]:
    """Per shape, over its policies and metrics: the share inside each interval and the median sharpness
    (for a bench with one policy per shape, where there is no ranking of policies to check)."""
    out = []
    for shape, rs in _groups(rows, lambda r: r.shape).items():
        sharp = [sharpness(g) for g in _groups(rs, lambda r: (r.policy, r.metric)).values()]
        b, n = _count(rs, False)
        a, na = _count(rs, True)
        at = f"{a} of {na} ({a / na:.0%})" if na else "-"
        out.append(
            f"{shape:8s} inside before {b} of {n} ({b / n:.0%}), at passes {at}; sharpness median "
            f"{_median([s[0] for s in sharp]):.2f}x before, {_median([s[1] for s in sharp]):.2f}x at passes"
        )
    return out


def _median(xs: list[float]) -> float:
    """The median of what could be read (nan where nothing could: no warning, the table says nan)."""
    a = [x for x in xs if not math.isnan(x)]
    return float(np.median(a)) if a else float("nan")
