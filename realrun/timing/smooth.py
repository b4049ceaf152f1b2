"""The prefill table as a smooth surface: four costs fitted to every timed point, kept where it
holds out better.

The profile times each prefill grid point (rows x prompt length) at one moment of the run, and on
the course's 2-core VMs the machine's speed moves 10-30 % from one minute to the next. A grid point
timed in a slow stretch carries that stretch into every price around it: on gpt2-6l, a one-round
profile's 8 x 512 point read 1,075 us a token where the same shape, timed twice minutes later, read
834 and 688 us while its neighbours agreed with the grid; bilinear interpolation then priced
static's padded batches of 300-450-token prompts 20-30 % dear. One noisy point is one of 37; a
surface fitted to all of them is moved by it far less.

The surface is what a prefill pass does, to first order:

    seconds = a * rows * length            (the weights' work, per token)
            + c * rows * length ** 2        (attention within each chunk, per pair of tokens)
            + e * rows + f                  (per row, per pass)

fitted by non-negative least squares on relative error (``points.nnls_relative``, as the linear fit
is), once more without the points beyond three robust deviations.

Which one stands is decided by the profile's held-out prefill shapes (timed between grid points,
never fitted): the surface, where its mean error on them is the lower; the grid otherwise (a quiet,
well-timed profile of an engine whose cost bends where the surface cannot is priced by its grid).
Measured on the course's VM (``bench/prefill_grid.py --refit``: 24 shapes of 1-12 rows x 256-899
tokens timed after the profile, interleaved, level out, |error| median and worst): a profile timed
in size order, grid 11-16 % / 42-55 %, its surface 6-8 % / 18-31 % (three timings); a profile timed
in shuffled order (``measure``), grid 7.7 % / 18 %, its surface 8.4 % / 30 %. Both profiles' own
held-out shapes chose the grid. Shapes timed twice minutes apart differ by 10-20 % here, so neither
table can be shown better than ~8 % on this machine; the choice is left to each profile's own
held-out shapes, and the profile prints both errors.
The surface is written as a table on the grid's rows and on prompt lengths every 2^(1/4) apart
(bilinear interpolation between them misses the quadratic by under 0.5 %), so the calibration's
format and everything that reads it stay as they are.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from batchsim.sim.grid2d import Grid2D
from batchsim.sim.profiled import ProfiledStepTime
from batchsim.sim.spread import SpreadGrid, StepSpread

from .points import ProfilePoint, nnls_relative, pass_errors

__all__ = [
    "fit_surface",
    "surface_grid",
    "with_surface",
    "choose_prefill",
    "TERMS",
    "STEPS_PER_DOUBLING",
]

#: The surface's terms, in the order of its coefficients.
TERMS = ("rows x length", "rows x length^2", "rows", "pass")
#: Prompt lengths of the written table per doubling (bilinear error on the quadratic ~ 1/16 of a
#: doubling grid's).
STEPS_PER_DOUBLING = 4
#: A point further than this many robust deviations (1.4826 x the median absolute residual) from the
#: first fit is left out of the second.
OUTLIER_MADS = 3.0


def _design(rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    return np.stack([rows * lengths, rows * lengths**2, rows, np.ones_like(rows)], axis=1)


def fit_surface(points: list[ProfilePoint]) -> np.ndarray | None:
    """The surface's four coefficients (``TERMS``) from timed prefill points with no cached past;
    None where fewer than 4 points or no non-negative fit."""
    pts = [q for q in points if q.kind == "prefill" and q.rows > 0 and q.query > 0]
    if len(pts) < 4:
        return None
    b = np.array([q.rows for q in pts], float)
    n = np.array([q.query for q in pts], float)
    t = np.array([q.seconds for q in pts], float)
    X = _design(b, n)
    coef = nnls_relative(X, t)
    if coef is None:
        return None
    r = X @ coef / t - 1
    mad = 1.4826 * float(np.median(np.abs(r - np.median(r))))
    keep = np.abs(r - np.median(r)) <= OUTLIER_MADS * max(mad, 1e-9)
    if 4 <= keep.sum() < len(t):
        again = nnls_relative(X[keep], t[keep])
        coef = again if again is not None else coef
    return coef


def surface_grid(coef: np.ndarray, grid: Grid2D) -> Grid2D:
    """The surface as a table on ``grid``'s rows and on lengths ``STEPS_PER_DOUBLING`` a doubling
    from its first column to its last (its own columns among them)."""
    y0, y1 = float(grid.y[0]), float(grid.y[-1])
    steps = int(np.ceil(np.log2(y1 / y0) * STEPS_PER_DOUBLING))
    dense = np.round(y0 * 2.0 ** (np.arange(steps + 1) / STEPS_PER_DOUBLING))
    cols = np.unique(np.concatenate([grid.y, dense[(dense > y0) & (dense < y1)]]))
    b, n = np.meshgrid(grid.x, cols, indexing="ij")
    z = (_design(b.ravel(), n.ravel()) @ coef).reshape(b.shape)
    return Grid2D(grid.x, cols, z, grid.name)


def _spread_on(spread: StepSpread | None, cols: np.ndarray) -> StepSpread | None:
    """The prefill spread's quantiles carried onto new columns: each takes the nearest timed
    column's (in the logarithm of the length: a pass's spread moves slowly with its size)."""
    if spread is None:
        return None
    old = spread.prefill
    near = np.abs(np.log(cols)[:, None] - np.log(old.y)[None, :]).argmin(1)
    return replace(spread, prefill=SpreadGrid(old.x, cols, old.q[:, near, :], old.name))


def with_surface(model: ProfiledStepTime, coef: np.ndarray) -> ProfiledStepTime:
    """``model`` pricing its prefills on the surface ``coef`` (its spread carried onto the
    table)."""
    table = surface_grid(coef, model.prefill)
    return replace(model, prefill=table, spread=_spread_on(model.spread, table.y))


def choose_prefill(
    model: ProfiledStepTime, points: list[ProfilePoint]
) -> tuple[ProfiledStepTime, dict]:
    """The model with the prefill surface in place of the timed grid where it prices the held-out
    prefill shapes better, and what was decided: {"prefill_model": "surface" | "grid", the held-out
    mean errors (%) of both, the coefficients}."""
    held = [q for q in points if q.kind == "validation-prefill"]
    coef = fit_surface(points)
    if coef is None or not held:
        why = "no fit" if coef is None else "no held-out prefill shapes"
        return model, {"prefill_model": "grid", "prefill_surface": why}
    smooth = with_surface(model, coef)
    e_grid = float(np.abs(pass_errors(model, held)).mean())
    e_surf = float(np.abs(pass_errors(smooth, held)).mean())
    info = {
        "prefill_model": "surface" if e_surf < e_grid else "grid",
        "prefill_surface": {
            "terms": list(TERMS),
            "seconds": [float(c) for c in coef],
            "heldout_mean_pct": round(e_surf, 2),
            "grid_heldout_mean_pct": round(e_grid, 2),
            "shapes": len(held),
        },
    }
    return (smooth if e_surf < e_grid else model), info
