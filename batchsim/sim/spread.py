"""How much a pass's time varies: the spread a profile measured around each grid point's mean.

A pass of one shape, timed twenty times on a real machine, does not take one time: caches,
the allocator, the CPU's clock and the other processes on the core move it by tens of
percent. A simulator that prices every pass at its mean predicts waits that are too short
(in M/G/1 the mean wait grows with 1 + CV^2 of the service time), so the profile keeps,
for every grid point, the *shape* of its timings: the quantiles of ``time / mean`` at
evenly spaced levels 0, 1/(K-1), ..., 1 (the first is the fastest ratio seen, the last the
slowest). Each point's quantile function is read as piecewise linear between its levels and
scaled so that its mean is exactly 1: sampling from it keeps the profiled mean, and only
adds the spread.

Between grid points the quantile functions are mixed with the same bilinear weights the
mean model uses (a weighted sum of non-decreasing functions is non-decreasing, so the mix is
a quantile function too, and its mean stays 1). Beyond the grid the nearest edge's spread
holds: a spread, unlike a mean, has no slope to carry on.

``lag1`` is the correlation of one pass's ratio with the next (consecutive passes of one
timed decode point): a machine that is slow now is slow a moment later too, which a queue
feels far more than independent noise, since a step of many passes averages the latter out.
Samples are drawn through a Gaussian copula (an AR(1) in normal scores), so each pass keeps
its own shape's distribution and consecutive passes share their luck.

``slow`` is the machine's slow drift (``batchsim.sim.slowdrift``): a speed that wanders over
seconds, on top of each pass's own spread (None: an older profile, or a machine that showed none).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError, show
from .slowdrift import SlowDrift

__all__ = ["SpreadGrid", "StepSpread", "LEVELS", "ratio_quantiles", "lag1_of"]

#: Quantile levels a profile stores (0, 5 %, ..., 100 %): 21 numbers per grid point.
LEVELS = 21
#: A ratio past this many times the mean is no timing of this pass but a process that held the core.
_MAX_RATIO = 100.0


def _unit_mean(q: np.ndarray) -> np.ndarray:
    """Each quantile function (last axis, evenly spaced levels) scaled to mean 1 (trapezoid
    rule)."""
    k = q.shape[-1]
    mean = (
        q.mean(axis=-1) if k == 1 else (q.sum(axis=-1) - 0.5 * (q[..., 0] + q[..., -1])) / (k - 1)
    )
    return q / mean[..., None]


def ratio_quantiles(samples, levels: int = LEVELS) -> list[float]:
    """``levels`` quantiles of time / mean of one point's timings, leaving out those over twice
    their median, as the profile's mean does (``realrun.timing.samples.robust_mean``): what is left
    of the spread is the pass's own, and the quantiles' mean is the mean the model prices."""
    t = np.asarray(samples, dtype=np.float64)
    t = t[t <= 2 * np.median(t)]
    r = t / t.mean()
    return _unit_mean(np.quantile(r, np.linspace(0, 1, levels))).tolist()


def lag1_of(runs) -> float:
    """The correlation of consecutive ratios, pooled over runs of consecutive passes (each a list of
    seconds); 0 when there is too little to tell, and never below 0 (a shared machine does not make
    a slow pass followed by a fast one more likely; a negative estimate is noise)."""
    a, b = [], []
    for xs in runs:
        t = np.asarray(xs, dtype=np.float64)
        if len(t) < 3:
            continue
        r = t / np.median(t)
        a.extend(r[:-1] - r.mean())
        b.extend(r[1:] - r.mean())
    if len(a) < 10:
        return 0.0
    a_, b_ = np.asarray(a), np.asarray(b)
    den = math.sqrt(float((a_ * a_).sum() * (b_ * b_).sum()))
    return float(min(max((a_ * b_).sum() / den, 0.0), 0.95)) if den > 0 else 0.0


@dataclass(frozen=True, eq=False)
class SpreadGrid:
    """Quantiles of time / mean at each (x, y) grid point: ``q`` of shape (len(x), len(y),
    levels)."""

    x: np.ndarray
    y: np.ndarray
    q: np.ndarray
    name: str = "spread"

    def __post_init__(self) -> None:
        x, y = np.asarray(self.x, dtype=np.float64), np.asarray(self.y, dtype=np.float64)
        try:
            q = np.asarray(self.q, dtype=np.float64)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{self.name} quantiles must be numbers, got {show(self.q)}"
            ) from None
        if q.ndim != 3 or q.shape[:2] != (len(x), len(y)) or q.shape[2] < 2:
            raise ConfigError(
                f"{self.name} quantiles must be a {len(x)} x {len(y)} table of lists of at least 2 "
                f"ratios, got shape {' x '.join(str(n) for n in q.shape)}"
            )
        bad = ~np.isfinite(q) | (q <= 0) | (q > _MAX_RATIO)
        if bad.any():
            i, j, k = (int(v) for v in np.argwhere(bad)[0])
            raise ConfigError(
                f"{self.name} quantile [{i}][{j}][{k}] must be a ratio to the mean in (0, "
                f"{_MAX_RATIO:g}], got {show(float(q[i, j, k]))}"
            )
        if np.any(np.diff(q, axis=2) < -1e-12):
            i, j = (int(v) for v in np.argwhere(np.diff(q, axis=2) < -1e-12)[0][:2])
            raise ConfigError(
                f"{self.name} quantiles [{i}][{j}] must not decrease (they are a quantile "
                f"function), got {[round(float(v), 4) for v in q[i, j]]}"
            )
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "q", _unit_mean(q))
        # Plain-float copies for ``ratio``, the one-pass path a simulated step takes (numpy on
        # arrays of one element costs microseconds per call, many times over).
        object.__setattr__(self, "_xs", x.tolist())
        object.__setattr__(self, "_ys", y.tolist())
        object.__setattr__(self, "_ql", self.q.tolist())

    @staticmethod
    def _weights(axis: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(axis) == 1:
            return np.zeros(len(v), dtype=np.int64), np.zeros(len(v))
        i = np.clip(np.searchsorted(axis, v, side="right") - 1, 0, len(axis) - 2)
        # no extrapolation of a spread
        return i, np.clip((v - axis[i]) / (axis[i + 1] - axis[i]), 0.0, 1.0)

    def ratios(self, xv, yv, u: np.ndarray) -> np.ndarray:
        """The mixed quantile function at (xv, yv), evaluated at levels ``u`` in [0, 1]."""
        u = np.asarray(u, dtype=np.float64)
        xv = np.broadcast_to(np.asarray(xv, dtype=np.float64), u.shape).ravel()
        yv = np.broadcast_to(np.asarray(yv, dtype=np.float64), u.shape).ravel()
        i, fx = self._weights(self.x, xv)
        j, fy = self._weights(self.y, yv)
        i1 = np.minimum(i + 1, len(self.x) - 1)
        j1 = np.minimum(j + 1, len(self.y) - 1)
        k = self.q.shape[2]
        pos = np.clip(u.ravel(), 0.0, 1.0) * (k - 1)
        lo = np.minimum(pos.astype(np.int64), k - 2)
        f = pos - lo

        def at(a, b):
            return self.q[a, b, lo] * (1 - f) + self.q[a, b, lo + 1] * f

        out = (
            at(i, j) * (1 - fx) * (1 - fy)
            + at(i1, j) * fx * (1 - fy)
            + at(i, j1) * (1 - fx) * fy
            + at(i1, j1) * fx * fy
        )
        return out.reshape(u.shape)

    @staticmethod
    def _at(axis: list, v: float) -> tuple[int, int, float]:
        n = len(axis)
        if n == 1:
            return 0, 0, 0.0
        i = min(max(bisect_right(axis, v) - 1, 0), n - 2)
        return i, i + 1, min(max((v - axis[i]) / (axis[i + 1] - axis[i]), 0.0), 1.0)

    def ratio(self, xv: float, yv: float, u: float) -> float:
        """``ratios`` for one pass, in plain floats (the same numbers, without numpy's per-call
        cost)."""
        i, i1, fx = self._at(self._xs, xv)
        j, j1, fy = self._at(self._ys, yv)
        k = len(self._ql[0][0])
        pos = min(max(u, 0.0), 1.0) * (k - 1)
        lo = min(int(pos), k - 2)
        f = pos - lo
        q = self._ql

        def at(a, b):
            row = q[a][b]
            return row[lo] * (1 - f) + row[lo + 1] * f

        return (
            at(i, j) * (1 - fx) * (1 - fy)
            + at(i1, j) * fx * (1 - fy)
            + at(i, j1) * (1 - fx) * fy
            + at(i1, j1) * fx * fy
        )

    def cv(self) -> np.ndarray:
        """Each point's coefficient of variation (std / mean) of its piecewise-linear quantile
        function."""
        q = self.q
        a, b = q[..., :-1], q[..., 1:]
        second = ((a * a + a * b + b * b) / 3).mean(axis=-1)  # E[r^2] over the linear pieces
        return np.sqrt(np.maximum(second - 1.0, 0.0))


@dataclass(frozen=True, eq=False)
class StepSpread:
    """The decode and prefill grids' spreads, how consecutive passes share their luck, and the
    machine's slow drift."""

    decode: SpreadGrid
    prefill: SpreadGrid
    lag1: float = 0.0
    slow: SlowDrift | None = None

    def __post_init__(self) -> None:
        if (
            isinstance(self.lag1, bool)
            or not isinstance(self.lag1, (int, float))
            or not 0 <= self.lag1 < 1
        ):
            raise ConfigError(f"spread lag1 must be a correlation in [0, 1), got {show(self.lag1)}")
        if self.slow is not None and not isinstance(self.slow, SlowDrift):
            raise ConfigError(f"spread slow must be a SlowDrift, got {show(self.slow)}")

    def as_dict(self) -> dict:
        return {
            "levels": int(self.decode.q.shape[2]),
            "decode": np.round(self.decode.q, 5).tolist(),
            "prefill": np.round(self.prefill.q, 5).tolist(),
            "lag1": round(float(self.lag1), 4),
            **({"slow": self.slow.as_dict()} if self.slow is not None else {}),
        }

    @classmethod
    def from_dict(cls, d, decode_axes: tuple, prefill_axes: tuple, where: str) -> StepSpread:
        if not isinstance(d, dict):
            raise ConfigError(
                f"{where}: spread must be a table of decode and prefill quantiles, got {show(d)}"
            )
        for part in ("decode", "prefill"):
            if not isinstance(d.get(part), list):
                raise ConfigError(
                    f"{where}: spread needs {part} quantiles (a list per grid point), got "
                    f"{show(d.get(part))}"
                )
        try:
            return cls(
                SpreadGrid(*decode_axes, d["decode"], f"{where}: spread decode"),
                SpreadGrid(*prefill_axes, d["prefill"], f"{where}: spread prefill"),
                lag1=d.get("lag1", 0.0),
                slow=None
                if d.get("slow") is None
                else SlowDrift.from_dict(d["slow"], f"{where}: spread"),
            )
        except ConfigError as e:
            msg = str(e)
            raise ConfigError(msg if msg.startswith(where) else f"{where}: {msg}") from None
