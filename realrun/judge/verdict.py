"""Is the prediction right, as right as the machine allows, or wrong? A verdict per metric.

A prediction is held up to a measurement, and a measurement has a spread of its own: the
same workload measured twice on a shared CPU differs by several per cent. So ``compare``
measures each policy ``R`` times and, with step noise on, simulates it with several seeds,
and per metric says:

- **agrees**: the median prediction is within the metric's target of the median
  measurement (``TARGETS``);
- **within noise**: outside the target, but no further from the median measurement than the
  farthest repeat is: a second measurement would have missed by as much, so the machine,
  not the model, sets the error;
- **disagrees**: further than either.

Besides, whether the median measurement lies inside the predicted 90 % band (the 5th to 95th
percentile of the seeds' predictions): the band is the simulator's own statement of how much
a run of this length varies, and a measurement outside it is a miss the band did not allow.
"""

from __future__ import annotations

import numpy as np

from batchsim.core.errors import is_number

__all__ = ["TARGETS", "VERDICTS", "median_summary", "band_of", "noise_pct", "verdict"]

#: Target error (%) per metric: the fidelity targets of issue 18 (p50/p99 E2E 10/20, p50 TTFT 15,
#: TPOT 10, throughput 5), and the same for the means and the other tails by analogy.
TARGETS = {
    "request_throughput": 5.0,
    "output_throughput": 5.0,
    "mean_ttft": 15.0,
    "p50_ttft": 15.0,
    "p99_ttft": 20.0,
    "mean_tpot": 10.0,
    "mean_e2e": 10.0,
    "p50_e2e": 10.0,
    "p99_e2e": 20.0,
}
VERDICTS = ("agrees", "within noise", "disagrees")


def median_summary(summaries: list[dict]) -> dict:
    """Each numeric figure's median over the summaries; any other entry as the first has it."""
    if len(summaries) == 1:
        return dict(summaries[0])
    out = {}
    for k, v in summaries[0].items():
        vals = [s.get(k) for s in summaries]
        if all(is_number(x) and np.isfinite(x) for x in vals):
            med = float(np.median(vals))
            out[k] = int(med) if all(isinstance(x, int) for x in vals) and med.is_integer() else med
        else:
            out[k] = v
    return out


def band_of(summaries: list[dict], keys, level: float = 0.90) -> dict[str, list[float]]:
    """{metric: [low, high]}: the central ``level`` of the figures over the summaries (seeds)."""
    lo, hi = (1 - level) / 2, 1 - (1 - level) / 2
    out = {}
    for k in keys:
        vals = [s.get(k) for s in summaries]
        if vals and all(is_number(x) and np.isfinite(x) for x in vals):
            q = np.quantile(np.asarray(vals, dtype=float), [lo, hi])
            out[k] = [float(q[0]), float(q[1])]
    return out


def noise_pct(repeats: list[dict], keys) -> dict[str, float | None]:
    """How far the repeats are from their median, per metric: the farthest, % of the median (None:
    one repeat)."""
    out: dict[str, float | None] = {}
    for k in keys:
        vals = [s.get(k) for s in repeats]
        if len(vals) < 2 or not all(is_number(x) and np.isfinite(x) for x in vals):
            out[k] = None
            continue
        med = float(np.median(vals))
        out[k] = float(max(abs(x - med) for x in vals) / abs(med) * 100) if med else None
    return out


def verdict(error: float | None, target: float, noise: float | None) -> str | None:
    """agrees / within noise / disagrees for an error (% of measured); None when there is no
    error."""
    if error is None or not np.isfinite(error):
        return None
    if abs(error) <= target:
        return "agrees"
    if noise is not None and abs(error) <= noise:
        return "within noise"
    return "disagrees"
