"""Coverage, checked on runs held out: does a new run land inside the interval the compare gave it?

A compare (``realrun.judge.compare.compare_policies``) ends with an interval for one run per policy
and metric (``realrun.judge.interval``). Whether 90 % of new runs land inside it is a claim, so it
is measured: after the compare, a few more runs per policy, none of which set the level the
prediction stands on, each held up to two intervals: the prediction made before the runs (at the
profile's or the canaries' level) and the one made after them at the level the compare's own passes
read. Both benches use this: ``bench/fidelity.py --coverage H`` (our engine, four policies
interleaved) and ``bench/vllm_fidelity.py --coverage H`` (vLLM, the continuous policy, on the server
it was profiled on).

An interval can cover by being wide, so each is also given its sharpness: its half-width against
the half-width the held-out runs themselves call for, 1.645 x their own sd of ln(metric) with the
seeds' (a run's own luck, which a handful of held-out runs reads poorly); near 1x is sharp, above
1.5x is wide.

But a right interval does not read 1x on this check, so each sharpness is printed beside the one a
right interval would read in its place (``right_sharpness``): the same spread, degrees of freedom,
reference runs and number of held-out runs, with the machine exactly as the interval says. Three
things put it above 1x, none of them a fault of the interval:

- Student's t: a spread read with 2 degrees of freedom widens the interval by 2.92 / 1.645 = 1.78x,
  as it must to hold nine runs in ten (``realrun.judge.interval``);
- the level the prediction stands on is itself one reading (the profile): its error is shared by
  every later run, so it widens the interval (x sqrt(2) with one reference run) but not the held-out
  runs' spread around each other, which cannot show it;
- three held-out runs read their own sd with 2 degrees of freedom, and the median of a ratio over so
  small a denominator lies above the ratio of the true values.

So the ratio of the two, observed over right, is what says how much wider an interval is than it
need be; the right one's own figure is what a right interval reads on this check with these runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from realrun.judge.equivalence import Z90, t90
from realrun.judge.interval import STORED_DF_MAX, MetricSpread, RunSpread, interval_for
from realrun.judge.level_move import LevelMove

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
    "right_sharpness",
    "DRAWS",
]

#: The metrics held-out runs are checked on: those the course holds a tolerance for.
COVERED = ("p50_e2e", "p99_e2e", "p50_ttft", "request_throughput")
#: A 90 % two-sided interval in standard deviations (the printed tables name 1.645).
Z = Z90  # realrun.judge.equivalence's, the one the intervals are built with
#: Draws of the machine behind each right interval's sharpness: its median to within about 2 %.
DRAWS = 4000


@dataclass(frozen=True)
class HeldOut:
    """One metric of one held-out run: inside the interval made before the runs and the one at the
    passes' level (None: the compare made none), each interval's half-width on a log scale, the
    seeds' sd of ln(metric), and every held-out run's value of this metric for this policy (for
    their own sd); what the intervals were built of, for the sharpness a right interval would read
    (``right_sharpness``): the level's part of a run's sd, e x sigma (``level_sd``), the degrees of
    freedom sigma was read with (0: taken as known), and the runs each interval's level was read
    from (before the runs ``ref_runs``, the profile; at the passes' level ``repeats``)."""

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
    level_sd: float = 0.0
    df: int = 0
    ref_runs: int = 1
    repeats: int = 1
    move_sd: float = 0.0
    move_df: int = 1
    # the interval made before the runs without the level's move (None: no move was used), so one
    # set of held-out runs shows what holding it changed
    inside_plain: bool | None = None
    half_plain: float | None = None

    def __post_init__(self) -> None:
        if self.run < 0:
            raise ValueError(f"run must be >= 0, got {self.run}")
        if self.df < 0 or self.ref_runs < 1 or self.repeats < 1:
            raise ValueError(
                f"df must be >= 0 and ref_runs, repeats >= 1, got {self.df}, {self.ref_runs} and "
                f"{self.repeats}"
            )
        for name in ("half_before", "half_after", "seed_sd", "level_sd", "move_sd", "half_plain"):
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
    shuffled by ``rng``, as the compare's own repeats are, so a slow minute spreads over every
    policy."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    runs: dict[str, list[dict]] = {label: [] for label in labels}
    for _ in range(count):
        for i in rng.permutation(len(labels)):
            runs[labels[int(i)]].append(run_once(labels[int(i)]))
    return runs


def held_up(shape: str, report, runs: dict[str, list[dict]]) -> list[HeldOut]:
    """Every held-out run's ``COVERED`` metrics against the one-run intervals of ``report``'s row of
    the same label: the prediction made before the runs (its level read from ``ref_runs`` runs) and
    the one at the passes' level (read from the compare's repeats; none where the compare made
    none)."""
    out = []
    for row in report.rows:
        if row.label not in runs or row.partial or not row.parts:
            continue
        repeats = max(1, len(row.repeats))
        for k in COVERED:
            part = row.parts[k]
            before = interval_for(
                row.predicted.get(k), part, report.spread, 1, row.ref_runs, move=report.move
            )
            plain = (
                interval_for(row.predicted.get(k), part, report.spread, 1, row.ref_runs)
                if report.move is not None
                else None
            )
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
                        part.elasticity * report.spread.sd,
                        report.spread.df,
                        row.ref_runs,
                        repeats,
                        part.elasticity * report.move.sd if report.move is not None else 0.0,
                        report.move.df if report.move is not None else 1,
                        None if plain is None else bool(plain[0] <= m <= plain[1]),
                        None if plain is None else _half(plain),
                    )
                )
    return out


def hold_out(
    shape: str, report, run_once: Callable[[str], dict], count: int, rng: np.random.Generator
) -> list[HeldOut]:
    """``count`` fresh runs of every whole row of ``report`` (rounds in a shuffled order), each held
    up to its intervals (``held_up``). The runs come after the compare's, so none of them set its
    level."""
    labels = [r.label for r in report.rows if not r.partial and r.parts]
    return held_up(shape, report, run_rounds(labels, run_once, count, rng))


def _half(interval: list[float]) -> float:
    """An interval's half-width on the log scale it was built on (``centre x exp(+-h)``)."""
    return math.log(interval[1] / interval[0]) / 2


def sharpness(rows: list[HeldOut]) -> tuple[float, float]:
    """(before, at the passes' level) for one shape, policy and metric: half-width / (Z x sqrt(the
    held-out runs' sd of ln(metric)^2 + the seeds' sd^2)); nan where that cannot be read (fewer than
    two positive values) or no interval at that level was made."""
    first = rows[0]
    vals = [x for x in first.values if x is not None and x > 0]
    sd = float(np.log(vals).std(ddof=1)) if len(vals) > 1 else float("nan")
    denom = Z * math.sqrt(sd**2 + first.seed_sd**2)
    if not (denom > 0 and math.isfinite(denom)):
        return float("nan"), float("nan")
    return first.half_before / denom, (
        first.half_after / denom if first.half_after is not None else float("nan")
    )


def right_sharpness(
    rows: list[HeldOut], rng: np.random.Generator, draws: int = DRAWS
) -> tuple[float, float]:
    """(before, at the passes' level): the median sharpness a right interval would read in the place
    of ``rows``' one (a shape, policy and metric), ``draws`` times over a machine that is exactly as
    the interval says: each run's ln(metric) is e x the run's level, sd e x sigma, plus the run's
    own luck, sd s (the seeds'); sigma's reading has the interval's degrees of freedom (sigma x
    sqrt(chi2_df / df)); as many held-out runs as ``rows`` had. Each draw builds the interval as
    ``realrun.judge.interval.interval_for`` does and reads its sharpness as ``sharpness`` does; nan
    where that could not read one (fewer than two held-out runs). The centre's own error does not
    enter: it moves where the held-out runs land, not their spread or the interval's width."""
    first = rows[0]
    n = sum(1 for x in first.values if x is not None and x > 0)
    if n < 2:
        return float("nan"), float("nan")
    s, level = first.seed_sd, first.level_sd
    z = t90(first.df) if first.df >= 1 else Z
    # sigma as read (its ratio to the true one), then n held-out runs of the true machine
    read = np.sqrt(rng.chisquare(first.df, draws) / first.df) if first.df >= 1 else np.ones(draws)
    runs = rng.standard_normal((draws, n)) * level + rng.standard_normal((draws, n)) * s
    denom = Z * np.sqrt(runs.std(axis=1, ddof=1) ** 2 + s**2)

    def median_at(ref_runs: int, move: float = 0.0) -> float:
        if move > 0:  # the level's move with its own degrees of freedom: built draw by draw as
            # realrun.judge.interval builds it
            shift = LevelMove(move, "drawn", first.move_df)
            half = np.empty(draws)
            for i in range(draws):
                spread = RunSpread(level * read[i], "drawn", 0, first.df)
                sd, df = MetricSpread(s, 1.0).log_sd_df(spread, 1, ref_runs, shift)
                half[i] = (t90(df) if df is not None else Z) * sd
        else:
            half = z * np.sqrt(s**2 + (level * read) ** 2 * (1 + 1 / ref_runs))
        ok = denom > 0
        return float(np.median(half[ok] / denom[ok])) if ok.any() else float("nan")

    return median_at(first.ref_runs, first.move_sd), (
        median_at(first.repeats) if first.half_after is not None else float("nan")
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


def coverage_lines(rows: list[HeldOut], rng: np.random.Generator | None = None) -> list[str]:
    """The table: per shape, policy and metric, held-out runs inside each interval, its sharpness
    and the sharpness a right interval would read in its place (``right_sharpness``, drawn from
    ``rng``, by default seeded: the same rows print the same table); then the share over all of
    them, the median sharpness of each, and what a spread read with ``STORED_DF_MAX`` degrees of
    freedom would change."""
    rng = np.random.default_rng(0x5EED) if rng is None else rng
    out = [
        (
            "\n== coverage: held-out runs inside their 90 % one-run interval (target 80-95 %); "
            "sharpness: half-width / (1.645 x the held-out runs' sd, with the seeds'), median "
            "(target <= 1.5x); right: what a right interval would read in its place"
        ),
        (
            f"{'shape':7s} {'policy':11s} {'metric':18s} | {'before':>9s} {'at passes':>9s} | "
            f"{'sharp before':>12s} {'at passes':>9s} | {'right before':>12s} {'at passes':>9s}"
        ),
    ]
    sharp_b, sharp_a, right_b, right_a, more_b = [], [], [], [], []
    for (shape, pol, k), rs in _groups(rows, lambda r: (r.shape, r.policy, r.metric)).items():
        sb, sa = sharpness(rs)
        rb, ra = right_sharpness(rs, rng)
        sharp_b.append(sb)
        sharp_a.append(sa)
        right_b.append(rb)
        right_a.append(ra)
        # a spread taken as known (df 0) stays so; one read with fewer than STORED_DF_MAX gets that
        # many
        more = rs[0].df if rs[0].df == 0 else max(rs[0].df, STORED_DF_MAX)
        more_b.append(right_sharpness([replace(rs[0], df=more)], rng)[0])
        out.append(
            f"{shape:7s} {pol:11s} {k:18s} | {_of(*_count(rs, False))} {_of(*_count(rs, True))} | "
            f"{sb:>11.2f}x {sa:>8.2f}x | {rb:>11.2f}x {ra:>8.2f}x"
        )
    if rows:
        b, n = _count(rows, False)
        a, na = _count(rows, True)
        at = f"{a} of {na} ({a / na:.0%})" if na else "none made"
        out.append(
            f"all: inside the interval made before the runs {b} of {n} ({b / n:.0%}); at the "
            f"passes' level {at}; sharpness median {_median(sharp_b):.2f}x before, "
            f"{_median(sharp_a):.2f}x at the passes' level"
        )
        plain = [r for r in rows if r.inside_plain is not None]
        if plain:
            # the same held-out runs against the intervals without the level's move; sharpness over
            # the same places, with and without (a sharpness scales with its half-width)
            inside = sum(r.inside_plain for r in plain)
            places = [
                (sb, rs[0].half_plain / rs[0].half_before)
                for rs, sb in zip(
                    _groups(rows, lambda r: (r.shape, r.policy, r.metric)).values(), sharp_b
                )
                if rs[0].half_plain is not None and rs[0].half_before > 0
            ]
            out.append(
                f"     without the level's move ({len(plain)} runs whose interval held one): "
                f"{inside} of {len(plain)} ({inside / len(plain):.0%}) inside, against "
                f"{sum(r.inside_before for r in plain)} with it; sharpness median over those "
                f"places {_median([sb * f for sb, f in places]):.2f}x without, "
                f"{_median([sb for sb, _ in places]):.2f}x with it"
            )
        dfs = sorted({r.df for r in rows})
        out.append(
            f"     a right interval in each place would read {_x(_median(right_b))} before, "
            f"{_x(_median(right_a))} at the passes' level, at the median (spread read with "
            f"{'/'.join(map(str, dfs))} degrees of freedom, {_held(rows)} held-out runs); observed "
            f"/ right {_ratio(sharp_b, right_b)} before, {_ratio(sharp_a, right_a)} at the passes' "
            f"level; with the spread read with {STORED_DF_MAX} or more, a right one reads "
            f"{_x(_median(more_b))} before"
        )
    return out


def _held(rows: list[HeldOut]) -> str:
    """How many held-out runs each place had (one figure, or the range)."""
    ns = sorted({sum(1 for x in r.values if x is not None and x > 0) for r in rows})
    return str(ns[0]) if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"


def _x(v: float) -> str:
    """A sharpness as printed: 1.23x, or '-' where none could be read."""
    return f"{v:.2f}x" if math.isfinite(v) else "-"


def _ratio(observed: list[float], right: list[float]) -> str:
    """The median of observed / right over the places where both could be read."""
    r = [o / g for o, g in zip(observed, right) if math.isfinite(o) and math.isfinite(g) and g > 0]
    return f"{float(np.median(r)):.2f}x" if r else "-"


def shape_lines(rows: list[HeldOut], rng: np.random.Generator | None = None) -> list[str]:
    """Per shape, over its policies and metrics: the share inside each interval and the median
    sharpness, with a right interval's beside it (for a bench with one policy per shape, where there
    is no ranking of policies to check)."""
    rng = np.random.default_rng(0x5EED) if rng is None else rng
    out = []
    for shape, rs in _groups(rows, lambda r: r.shape).items():
        groups = list(_groups(rs, lambda r: (r.policy, r.metric)).values())
        sharp = [sharpness(g) for g in groups]
        right = [right_sharpness(g, rng) for g in groups]
        b, n = _count(rs, False)
        a, na = _count(rs, True)
        at = f"{a} of {na} ({a / na:.0%})" if na else "-"
        out.append(
            f"{shape:8s} inside before {b} of {n} ({b / n:.0%}), at passes {at}; sharpness median "
            f"{_median([s[0] for s in sharp]):.2f}x before, {_median([s[1] for s in sharp]):.2f}x "
            f"at passes (a right interval: {_x(_median([r[0] for r in right]))}, "
            f"{_x(_median([r[1] for r in right]))})"
        )
    return out


def _median(xs: list[float]) -> float:
    """The median of what could be read (nan where nothing could: no warning, the table says
    nan)."""
    a = [x for x in xs if not math.isnan(x)]
    return float(np.median(a)) if a else float("nan")
