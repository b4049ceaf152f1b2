"""Timed shapes as points, how far a model's price is from each, and the textbook's linear fit.

The profile keeps every shape it timed as a ``ProfilePoint`` (its pass, its mean seconds, its
spread; the held-out ones marked ``validation-``): the calibration file lists them, the held-out
error is the model's price against them (``pass_errors``), and lesson 4 fits the linear model
through them (``fit_linear``): a fixed cost, per prompt token, per decode row, per KV token read.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from batchsim.core.errors import ConfigError
from batchsim.core.plan import Pass
from batchsim.sim.steptime import LinearStepTime, StepTimeModel

from .grid import Grid

__all__ = ["ProfilePoint", "points_of", "point_pass", "pass_errors", "fit_linear", "nnls_relative"]


@dataclass(frozen=True)
class ProfilePoint:
    """One timed shape: kind (decode | prefill | past | validation-*), its pass, and seconds
    (mean)."""

    kind: str
    prefill_tokens: int
    decode_rows: int
    kv_read: float  # what attention reads (rows x width for a rectangle)
    seconds: float
    spread: float  # (max - min) / median of the repetitions
    rows: int = 0
    query: int = 0
    past: float = 0.0
    samples: int = 0


def points_of(meas: dict) -> list[ProfilePoint]:
    """Every timed shape as a point (validation shapes marked), for the file and the linear fit."""
    grid: Grid = meas["grid"]
    val = {("decode", b, w) for b, w in meas["validation"]["decode"]} | {
        ("prefill", b, n) for b, n in meas["validation"]["prefill"]
    }
    mid = (grid.repeats - 1) / 2
    out = []
    for key, xs in meas["samples"].by_key.items():
        kind, a, c = key
        t = np.asarray(xs)
        spread = float((t.max() - t.min()) / np.median(t))
        label = ("validation-" if key in val else "") + kind
        if kind == "decode":
            out.append(
                ProfilePoint(
                    label, 0, a, a * (c + mid), float(t.mean()), spread, a, 1, c + mid, len(t)
                )
            )
        elif kind == "prefill":
            out.append(
                ProfilePoint(label, a * c, 0, 0.0, float(t.mean()), spread, a, c, 0.0, len(t))
            )
        # the same chunk with no past: the pair's other half, not a shape of the model
        elif kind == "past0":
            continue
        else:  # past: one row of a new tokens after c cached
            out.append(
                ProfilePoint(label, a, 0, float(c), float(t.mean()), spread, 1, a, float(c), len(t))
            )
    return out


def point_pass(q: ProfilePoint) -> Pass:
    if q.decode_rows:
        return Pass(decode_rows=q.decode_rows, kv_read=int(q.kv_read), attn_read=int(q.kv_read))
    return Pass(
        prefill_tokens=q.prefill_tokens,
        prefill_rows=q.rows,
        query=q.query,
        attn_read=int(q.rows * q.past),
    )


def pass_errors(model: StepTimeModel, points: list[ProfilePoint]) -> np.ndarray:
    """Signed error, % of measured, of the model's price of each point's pass."""
    pred = np.array([model.pass_time(point_pass(q)) for q in points])
    meas = np.array([q.seconds for q in points])
    return (pred - meas) / meas * 100


# -- the textbook fit ---


def _design(points: list[ProfilePoint]) -> tuple[np.ndarray, np.ndarray]:
    X = np.array([[1.0, p.prefill_tokens, p.decode_rows, p.kv_read] for p in points])
    y = np.array([p.seconds for p in points])
    return X, y


def nnls_relative(X: np.ndarray, t: np.ndarray) -> np.ndarray | None:
    """Non-negative coefficients c minimising the sum of (X @ c / t - 1)^2 (relative residuals), the
    first column's kept > 0: the best over every active set of the others; None where none is."""
    A = X / t[:, None]  # each row divided by its time: relative residuals
    ones = np.ones(len(t))
    scale = np.abs(A).max(0)
    scale[scale == 0] = 1.0
    As = A / scale
    others = range(1, X.shape[1])
    best, best_res = None, np.inf
    for k in range(X.shape[1]):
        for extra in itertools.combinations(others, k):
            cols = [0, *extra]
            coef, *_ = np.linalg.lstsq(As[:, cols], ones, rcond=None)
            if np.any(coef < 0) or coef[0] <= 0:
                continue
            res = float(np.sum((As[:, cols] @ coef - ones) ** 2))
            if res < best_res:
                full = np.zeros(X.shape[1])
                full[cols] = coef
                best, best_res = full / scale, res
    return best


def fit_linear(
    points: list[ProfilePoint], source: str = "realrun profile", plan: str = "fused"
) -> LinearStepTime:
    """Non-negative least squares on relative error, c0 > 0: the best of every active set."""
    if len(points) < 2:
        raise ConfigError(f"profile needs at least 2 points to fit, got {len(points)}")
    best = nnls_relative(*_design(points))
    if best is None:
        raise ConfigError("profile: no non-negative fit found (are the measured times positive?)")
    return LinearStepTime(
        float(best[0]), float(best[1]), float(best[2]), float(best[3]), source=source, plan=plan
    )
