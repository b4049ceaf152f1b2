"""``realrun compare``'s table: one screen that says, per policy and metric, where one run should
land, where it did, and what the machine lets us conclude.

In the order a reader asks:

1. **Did the simulator make the same decisions?** The schedule first: each measured run's step times
   fed back through the simulator's scheduler (``realrun.judge.decompose``, the replay) must give
   the very same records. If they do, every timing error below is the cost model's or the machine's,
   never the scheduler's.
2. **Per policy and metric**: the prediction, the interval one run lands in 90 % of the time
   (``realrun.judge.interval``), the measured value (median of the runs), the error with its 90 %
   interval and the verdict by equivalence (``realrun.judge.equivalence``): *agrees*, *disagrees*,
   *cannot tell*.
3. **What the machine can show**: its run-to-run spread and where it came from; for the metrics it
   cannot tell, how small a difference these runs show and how many runs would show the tolerance;
   for a miss whose cause is the machine's level since the profile, the prediction at that level.

By default the four metrics with the course's tolerances (p50 and p99 E2E, p50 TTFT, throughput);
``--explain`` adds every metric, the seeds' band, the canaries, the notes and where each error came
from (the decomposition). ``--json`` keeps everything.
"""

from __future__ import annotations

import numpy as np

from .decompose import format_decomposition
from .row import COMPARE_METRICS, KEYS, CompareReport, CompareRow
from .verdict import TARGETS

__all__ = ["format_compare", "schedule_line", "DEFAULT_METRICS", "machine_lines"]

#: The metrics the default table shows: those the course holds a tolerance for.
DEFAULT_METRICS = ("p50_e2e", "p99_e2e", "p50_ttft", "request_throughput")
_SHOWN = {"agrees": "agrees", "disagrees": "DISAGREES", "cannot tell": "cannot tell"}


def schedule_line(report: CompareReport) -> str:
    """Whether each measured run's step times, replayed through the simulator's scheduler, gave its
    records."""
    checked = [(r.label, r.decomposition) for r in report.rows if r.decomposition is not None]
    if not checked:
        return "schedule: not checked (no step trace kept for a replay)"
    off = [
        (lab, d) for lab, d in checked if d.replay_max_diff_s is None or d.replay_max_diff_s >= 1e-9
    ]
    if not off:
        worst = max(d.replay_max_diff_s for _, d in checked)
        return (
            f"schedule: the same decisions as the simulator's in every run ({len(checked)} "
            f"replayed, largest difference {worst:.0e} s): what differs below is time, not "
            f"scheduling"
        )
    lab, d = off[0]
    why = (
        d.replay_note
        if d.replay_max_diff_s is None
        else f"records differ by up to {d.replay_max_diff_s:.3g} s"
    )
    return f"schedule: NOT the simulator's for {lab} ({why}): the timing verdicts below mix both"


def _cells(
    row: CompareRow, key: str, label: str, scale: float, fmt: str, first: bool, explain: bool
) -> tuple[str, ...]:
    p, m = row.predicted.get(key), row.measured.get(key)
    iv = row.interval_one_run.get(key)
    j = row.judgements.get(key)
    f = lambda x: "-" if x is None else fmt.format(x * scale)  # noqa: E731
    runs = len(row.repeats)
    meas = f(m) + (f" ({runs})" if runs > 1 else "")
    err = "-" if j is None else f"{j.error_pct:+.0f}% [{j.low_pct:+.0f},{j.high_pct:+.0f}]"
    v = "-" if j is None else _SHOWN[j.verdict]
    cause = row.causes.get(key)
    if cause == "level":
        v += " (level)"
    band = row.band.get(key)
    extra = (f"{f(band[0])}-{f(band[1])}" if band else "-",) if explain else ()
    return (
        row.label if first else "",
        label,
        f(p),
        f"{f(iv[0])}-{f(iv[1])}" if iv else "-",
        *extra,
        meas,
        err,
        v,
    )


#: Beyond this many runs "--repeats N" is no advice (1,048 runs of a compare is days): such a figure
#: is out of this machine's reach, and the line says so instead.
MANY_RUNS = 50


def machine_lines(report: CompareReport, keys=DEFAULT_METRICS) -> list[str]:
    """What this machine can show: its spread, the metrics it cannot tell (and the runs that would),
    and each miss that the level since the profile explains."""
    out = []
    if report.spread is not None:
        out.append(f"this machine's level moves {report.spread.text()}")
    if report.move is not None:
        out.append(f"and {report.move.text()}")
    unsure = [
        (r.label, k, r.judgements[k])
        for r in report.rows
        for k in keys
        if r.judgements.get(k) is not None and r.judgements[k].verdict == "cannot tell"
    ]
    if unsure:
        shown = min(j.resolvable_pct for *_, j in unsure)
        head = (
            f"cannot tell: {len(unsure)} of the figures above; {unsure[0][2].runs} run(s) on this "
            f"machine show a difference of {shown:.0f} % at best"
        )
        settled = [x for x in unsure if x[2].runs_needed is not None]
        near = [x for x in settled if x[2].runs_needed <= MANY_RUNS]
        far = [x for x in settled if x[2].runs_needed > MANY_RUNS]
        if near:
            lab, k, j = max(near, key=lambda x: x[2].runs_needed)
            head += (
                f", and {j.runs_needed} runs would settle "
                f"{'the hardest' if not far else 'all but ' + str(len(far))} ({lab} {_name(k)} at "
                f"±{TARGETS[k]:g} %): --repeats {j.runs_needed}"
            )
        if far:
            lab, k, j = max(far, key=lambda x: x[2].runs_needed)
            head += (
                f"{';' if near else ','} {len(far)} would need more than {MANY_RUNS} runs (the "
                f"hardest, {lab} {_name(k)} at ±{TARGETS[k]:g} %, {j.runs_needed}): a quieter "
                f"machine or a longer run, not repeats"
            )
        if len(settled) < len(unsure):
            head += "; for some, the prediction's own seeds fill the tolerance: raise --seeds"
        out.append(head)
    for r in report.rows:
        lv = [k for k in keys if r.causes.get(k) == "level"]
        if lv and r.pass_level is not None:
            at = r.errors_at_passes
            out.append(
                f"{r.label}: the runs agree with each other but the machine ran at "
                f"{r.pass_level.text()} the profile's price since it was made "
                f"({_canaries(report)}); predicted again at that level: "
                + ", ".join(f"{_name(k)} {at[k]:+.0f} %" for k in lv)
                + " (made after the run)"
            )
        if any(r.causes.get(k) == "model" for k in keys):
            ks = [k for k in keys if r.causes.get(k) == "model"]
            out.append(
                f"{r.label}: {', '.join(_name(k) for k in ks)} DISAGREE beyond this machine's "
                f"spread, and not "
                "because of its level: the cost model is off (--explain: where the error comes "
                "from)"
            )
    return out


def _canaries(report: CompareReport) -> str:
    lv = report.level
    if lv is None:
        return "no canary readings"
    return f"the canaries read {lv.prefill:.2f}x prefill, {lv.decode:.2f}x decode"


def _name(key: str) -> str:
    return (
        next(lab for k, lab, *_ in COMPARE_METRICS if k == key).replace(" ms", "").replace(" s", "")
    )


def format_compare(report: CompareReport, decomposition: bool = True, explain: bool = False) -> str:
    """The schedule line, then per policy the table (the four toleranced metrics, every metric with
    ``explain``), then what this machine can show; with ``explain`` and ``decomposition``, where
    each error came from."""
    keys = KEYS if explain else DEFAULT_METRICS
    head = (
        "policy",
        "metric",
        "predicted",
        "one run, 90%",
        *(("seeds' band",) if explain else ()),
        "measured",
        "error [90% CI]",
        "verdict",
    )
    lines = []
    for row in report.rows:
        shown = [m for m in COMPARE_METRICS if m[0] in keys]
        for i, (key, label, scale, fmt) in enumerate(shown):
            lines.append(_cells(row, key, label, scale, fmt, i == 0, explain))
    widths = [
        max(len(h), *(len(r[i]) for r in lines)) if lines else len(h) for i, h in enumerate(head)
    ]

    def line(cells) -> str:
        return "  ".join(
            c.ljust(w) if i < 2 or i >= len(cells) - 1 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    out = [
        schedule_line(report),
        "",
        line(head),
        "  ".join("-" * w for w in widths),
        *(line(r) for r in lines),
    ]
    if report.rows:
        vs = [r.verdicts.get(k) for r in report.rows for k in keys]
        counts = ", ".join(f"{sum(v == name for v in vs)} {name}" for name in _SHOWN)
        runs = sorted({len(r.repeats) for r in report.rows})
        out.append(
            f"verdicts: {counts} (tolerances: "
            + ", ".join(f"{_name(k)} ±{TARGETS[k]:g} %" for k in DEFAULT_METRICS)
            + f"; {'/'.join(map(str, runs))} run(s) per policy; measured = median of the runs)"
        )
        out += machine_lines(report, keys)
        if explain:
            within = [x for r in report.rows for xs in r.in_one_run.values() for x in xs]
            if within:
                out.append(
                    f"runs inside their one-run interval: {sum(within)} of {len(within)} "
                    f"({np.mean(within):.0%}; 90 % expected)"
                )
    if explain and decomposition:
        for row in report.rows:
            if row.decomposition is not None:
                out += [""] + format_decomposition(row.label, row.decomposition)
    return "\n".join(out)
