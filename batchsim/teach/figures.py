"""Small drawings the lessons share: who rode which bus, latency curves, memory over time.

Each function draws on a matplotlib ``Axes`` it is given, so a lesson can put
several side by side in one ``Figure``. They read only ``Records`` (the
logbook both clocks write), so a simulated run and a measured one draw alike.
"""

from __future__ import annotations

import numpy as np

from ..core.records import Records

__all__ = [
    "POLICY_COLORS",
    "draw_timeline",
    "draw_cdf",
    "draw_step_series",
    "t_quantile_975",
    "mean_ci",
]

#: One colour per policy in every figure of the course (the taxi is yellow).
POLICY_COLORS = {
    "taxi": "#e8a317",
    "static": "#1f77b4",
    "dynamic": "#2ca02c",
    "continuous": "#9467bd",
}


def draw_timeline(
    ax, records: Records, first: int = 40, title: str = "", one_bus: bool = False
) -> None:
    """The bus timeline: one line per request (first ``first`` of them), grey while it waits at the
    stop, coloured while it rides; requests that boarded together share a colour, and the dot marks
    its first token. A padded batch shows as a block of lines that start and end together.
    ``one_bus``: continuous batching has no batches to tell apart (one bus that never stops), so
    every ride gets one colour."""
    n = min(first, len(records))
    arrival, start, finish, ftok = (
        records.arrival[:n],
        records.start[:n],
        records.finish[:n],
        records.first_token[:n],
    )
    # Requests that started in the same step rode the same bus: colour by boarding time.
    boarded = np.unique(start[np.isfinite(start)])
    cmap = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    for i in range(n):
        ax.hlines(
            i, arrival[i], start[i] if np.isfinite(start[i]) else arrival[i], color="0.75", lw=2
        )
        if np.isfinite(start[i]):
            k = int(np.searchsorted(boarded, start[i]))
            ax.hlines(
                i,
                start[i],
                finish[i],
                color=POLICY_COLORS["continuous"] if one_bus else cmap[k % len(cmap)],
                lw=2.5,
            )
            ax.plot(ftok[i], i, "k.", ms=3)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_ylabel("request (arrival order)")
    ax.set_title(title or "who rides which bus: grey = waiting, colour = riding")


def draw_cdf(ax, values: np.ndarray, label: str, color: str | None = None, lw: float = 1.5) -> None:
    """Empirical CDF of the finite values (the share of requests done within x seconds)."""
    v = np.sort(values[np.isfinite(values)])
    if not len(v):
        return
    ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=label, color=color, lw=lw)


def draw_step_series(ax, records: Records, key: str, label: str, color: str | None = None) -> None:
    """A step-log column (``kv_in_use``, ``batch_size``) against time, as a staircase."""
    s = records.steps
    if not len(s["start"]):
        return
    t = np.append(s["start"], s["start"][-1] + s["duration"][-1])
    y = np.append(s[key], s[key][-1])
    ax.step(t, y, where="post", label=label, color=color, lw=1.2)


# Two-sided 95 % Student-t quantiles t(0.975, df) for df = 1..30, from any statistics table
# (e.g. NIST/SEMATECH e-Handbook of Statistical Methods, table 1.3.6.7.2); beyond 30 the
# normal 1.96 is within 2 %.
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t_quantile_975(df: int) -> float:
    if df < 1:
        return float("nan")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def mean_ci(values) -> tuple[float, float]:
    """Mean and the half-width of its 95 % confidence interval (NaN half-width for one value)."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2:
        return float(v.mean()) if len(v) else float("nan"), float("nan")
    return float(v.mean()), t_quantile_975(len(v) - 1) * float(v.std(ddof=1)) / np.sqrt(len(v))
