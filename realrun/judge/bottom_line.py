"""The last line of ``realrun compare``: did the simulator get it right, as right as this machine
allows?

A table of 36 numbers leaves the reader to decide; this line decides, from what the table
already holds. Two questions, in the order a student asks them:

1. **Is the ranking of the policies preserved?** (``realrun.judge.ranking``: every pair told apart
   by more than its runs' spread, predicted the same way round.)
2. **How many metrics agree, disagree, or cannot be told on this machine?** The median and
   the largest error, then the verdicts by equivalence (``realrun.judge.equivalence``: the error's
   90 % interval against the metric's tolerance), and the machine's run-to-run spread they
   stand on, with where it came from (with one run per policy: the canaries, or assumed).

A prediction is of the machine it was made for. Where this machine's passes, pooled over every
policy, ran beyond ``CONTRADICTS`` and their error away from the level predicted at (the bare run on
a laptop twice as slow as the course machine, whose reference calibration it predicts from), the
line says so first and judges the prediction made again at this machine's level: a taxi that
saturates on the slow laptop is then predicted to saturate, and the verdict is about the simulator,
not about the laptop. The verdict at the level predicted at is kept in a word, beside it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .equivalence import EQ_VERDICTS
from .ranking import RANK_BY, measured_order, metric_name, pairs
from .row import CompareReport
from .table import DEFAULT_METRICS

__all__ = ["verdict_line", "verdict_dict"]


def _ranking(rows, key: str) -> str:
    name = metric_name(key)
    ps = pairs(rows, key)
    if not ps:
        return f"one policy measured: no ranking by {name} to judge"
    order = measured_order(rows, key)
    apart = [p for p in ps if p.apart]
    if not apart:
        return f"no ranking by {name} to judge: every pair lies within its runs' spread ({order})"
    wrong = [p for p in apart if not p.same]
    if wrong:
        p = wrong[0]
        more = f", and {len(wrong) - 1} more pair(s)" if len(wrong) > 1 else ""
        return (
            f"ranking by {name} NOT preserved: {p.b} measured {p.gap_pct:.0f} % above {p.a} (runs' "
            f"spread {p.spread_pct:.0f} %), predicted below it{more}"
        )
    return (
        f"ranking by {name} preserved ({order}: {len(apart)} of {len(ps)} pairs apart by more than "
        f"their "
        "runs' spread, each predicted in that order)"
    )


def _errors(rows) -> str:
    errs = [(abs(e), row.label, k) for row in rows for k, e in row.errors.items() if e is not None]
    if not errs:
        return "no errors to judge"
    worst = max(errs)
    med = float(np.median([e for e, *_ in errs]))
    head = (
        f"errors {med:.0f} % median, {worst[0]:.0f} % largest ({worst[1]} {metric_name(worst[2])})"
    )
    # The metrics the course holds a tolerance for, as the table shows them.
    verdicts = [
        v for row in rows for k, v in row.verdicts.items() if v is not None and k in DEFAULT_METRICS
    ]
    if not verdicts:
        return head
    n = {v: sum(x == v for x in verdicts) for v in EQ_VERDICTS}
    spread = rows[0].spread
    where = (
        f" (this machine's level moves {spread.sd:.0%} from run to run, {spread.source})"
        if spread is not None
        else ""
    )
    return (
        f"{head}: of {len(verdicts)} toleranced figures, {n['agrees']} agree within tolerance, "
        f"{n['disagrees']} disagree, {n['cannot tell']} this machine cannot tell{where}"
    )


def _judged(report: CompareReport) -> list:
    """The rows the verdict judges: as predicted, or, where this machine is off the level predicted
    at, each with its prediction at this machine's level (``realrun.judge.compare._machine``)."""
    if report.machine_level is None or not any(
        r.predicted_at_machine is not None for r in report.rows
    ):
        return report.rows
    return [
        replace(r, predicted=r.predicted_at_machine) if r.predicted_at_machine is not None else r
        for r in report.rows
    ]


def _off(report: CompareReport, rows, key: str) -> str:
    """'' where the verdict judges the prediction as made; else what this machine ran at, and the
    ranking's verdict at the level predicted at."""
    if rows is report.rows:
        return ""
    apart = [p for p in pairs(report.rows, key) if p.apart]
    # With no pair measured apart there is no ranking to keep or lose: say so, not "preserved".
    before = (
        "no two policies were apart"
        if not apart
        else "the ranking was " + ("preserved" if all(p.same for p in apart) else "NOT preserved")
    )
    return (
        f"this machine ran its passes at {report.machine_level.text()} the profile's price, so "
        f"judged at that level, predicted again after the run (at the level predicted at, "
        f"{before}): "
    )


def verdict_line(report: CompareReport, key: str = RANK_BY) -> str:
    """One line: the ranking, then the errors against the spread (see the module's docstring)."""
    rows = _judged(report)
    return f"verdict: {_off(report, rows, key)}{_ranking(rows, key)}; {_errors(rows)}"


def verdict_dict(report: CompareReport, key: str = RANK_BY) -> dict:
    """The same for ``--json``: the line, and every pair the ranking judged."""
    rows = _judged(report)
    ps = pairs(rows, key)
    apart = [p for p in ps if p.apart]
    return {
        "line": verdict_line(report, key),
        "rank_by": key,
        "ranking_preserved": (all(p.same for p in apart) if apart else None),
        "judged_at": "the level predicted at"
        if rows is report.rows
        else "this machine's level, after the run",
        "machine_level": report.machine_level.as_dict()
        if report.machine_level is not None
        else None,
        "measured_order": measured_order(rows, key),
        "pairs": [p.as_dict() for p in ps],
    }
