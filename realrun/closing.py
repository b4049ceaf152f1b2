"""The last line of ``realrun compare``: did the simulator get it right, as right as this machine allows?

A table of 36 numbers leaves the reader to decide; this line decides, from what the table
already holds. Two questions, in the order a student asks them:

1. **Is the ranking of the policies preserved?** (``realrun.ranking``: every pair told apart
   by more than its runs' spread, predicted the same way round.)
2. **How many metrics agree, disagree, or cannot be told on this machine?** The median and
   the largest error, then the verdicts by equivalence (``realrun.equivalence``: the error's
   90 % interval against the metric's tolerance), and the machine's run-to-run spread they
   stand on, with where it came from (with one run per policy: the canaries, or assumed).
"""

from __future__ import annotations

import numpy as np

from .compare_row import CompareReport
from .compare_table import DEFAULT_METRICS
from .equivalence import EQ_VERDICTS
from .ranking import RANK_BY, measured_order, metric_name, pairs

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
        return (f"ranking by {name} NOT preserved: {p.b} measured {p.gap_pct:.0f} % above {p.a} (runs' spread "
                f"{p.spread_pct:.0f} %), predicted below it{more}")
    return (f"ranking by {name} preserved ({order}: {len(apart)} of {len(ps)} pairs apart by more than their "
            "runs' spread, each predicted in that order)")


def _errors(rows) -> str:
    errs = [(abs(e), row.label, k) for row in rows for k, e in row.errors.items() if e is not None]
    if not errs:
        return "no errors to judge"
    worst = max(errs)
    med = float(np.median([e for e, *_ in errs]))
    head = f"errors {med:.0f} % median, {worst[0]:.0f} % largest ({worst[1]} {metric_name(worst[2])})"
    # The metrics the course holds a tolerance for, as the table shows them.
    verdicts = [v for row in rows for k, v in row.verdicts.items() if v is not None and k in DEFAULT_METRICS]
    if not verdicts:
        return head
    n = {v: sum(x == v for x in verdicts) for v in EQ_VERDICTS}
    spread = rows[0].spread
    where = f" (this machine's level moves {spread.sd:.0%} from run to run, {spread.source})" if spread is not None else ""
    return (f"{head}: of {len(verdicts)} toleranced figures, {n['agrees']} agree within tolerance, {n['disagrees']} disagree, "
            f"{n['cannot tell']} this machine cannot tell{where}")


def verdict_line(report: CompareReport, key: str = RANK_BY) -> str:
    """One line: the ranking, then the errors against the spread (see the module's docstring)."""
    return f"verdict: {_ranking(report.rows, key)}; {_errors(report.rows)}"


def verdict_dict(report: CompareReport, key: str = RANK_BY) -> dict:
    """The same for ``--json``: the line, and every pair the ranking judged."""
    ps = pairs(report.rows, key)
    apart = [p for p in ps if p.apart]
    return {"line": verdict_line(report, key), "rank_by": key,
            "ranking_preserved": (all(p.same for p in apart) if apart else None),
            "measured_order": measured_order(report.rows, key), "pairs": [p.as_dict() for p in ps]}
