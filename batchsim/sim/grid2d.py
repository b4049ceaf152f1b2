"""A table of measured seconds on a grid of shapes, read between its points.

``Grid2D`` holds the seconds a pass of each (x, y) shape took (rows and width for decode,
rows and query length for prefill) and interpolates bilinearly between them, the last
cell's slope carrying on beyond the grid. Noise may make a bigger pass look cheaper than a
smaller one; the model assumes it never is, so the table is made monotone in both axes on
the way in (isotonic fits, which move one outlier's neighbours a little, where a running
maximum would lift every point after it). Every cell is checked on the way in too: a
number, positive, under an hour (``MAX_PASS_SECONDS``), and a bad one is named by its place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError, is_number, show

__all__ = ["Grid2D", "MAX_PASS_SECONDS", "plain_numbers"]

#: The longest a pass, or any other time a calibration holds, may take (an hour, as a linear
#: calibration's coefficients): no hardware is that slow, and 1e300 s overflows the first sum it
#: enters.
MAX_PASS_SECONDS = 3600.0


def plain_numbers(a: np.ndarray) -> list:
    """Numbers as a message prints them: 32 and 0.5, not np.float64(32.0)."""
    return [int(v) if float(v).is_integer() else float(v) for v in np.asarray(a).ravel().tolist()]


def _axis(name: str, values) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != 1 or len(a) < 1 or not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ConfigError(
            f"{name} must be a list of finite numbers >= 0, got "
            f"{show(plain_numbers(a) if a.ndim == 1 else values)}"
        )
    if np.any(np.diff(a) <= 0):
        raise ConfigError(f"{name} must be strictly increasing, got {show(plain_numbers(a))}")
    return a


def isotonic(y: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``y`` in least squares (pool adjacent violators).

    Where noise makes one point dearer than the next, both take their mean: one outlier moves
    its neighbour a little, where a running maximum would raise every point after it to its
    level."""
    vals, counts = [], []
    for v in y.tolist():
        vals.append(v)
        counts.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            c = counts[-2] + counts[-1]
            vals[-2] = (vals[-2] * counts[-2] + vals[-1] * counts[-1]) / c
            counts[-2] = c
            vals.pop()
            counts.pop()
    return np.repeat(vals, counts)


def _monotone(z: np.ndarray, sweeps: int = 4) -> np.ndarray:
    """Non-decreasing along both axes: isotonic fits of the rows and columns, alternated, then a
    running maximum to remove what the alternation left (nothing, or next to nothing)."""
    z = z.copy()
    for _ in range(sweeps):
        z = np.apply_along_axis(isotonic, 1, z)
        z = np.apply_along_axis(isotonic, 0, z)
    return np.maximum.accumulate(np.maximum.accumulate(z, axis=0), axis=1)


@dataclass(frozen=True, eq=False)
class Grid2D:
    """Seconds measured at (x, y) grid points, interpolated bilinearly, monotone in both axes."""

    x: np.ndarray
    y: np.ndarray
    z: np.ndarray  # shape (len(x), len(y))
    name: str = "grid"

    def __post_init__(self) -> None:
        x, y = _axis(f"{self.name} rows", self.x), _axis(f"{self.name} columns", self.y)
        z = np.asarray(self.z, dtype=np.float64)
        if z.shape != (len(x), len(y)):
            raise ConfigError(
                f"{self.name} seconds must be a {len(x)} x {len(y)} table (rows x columns), got "
                f"{' x '.join(str(n) for n in z.shape) or 'one number'}"
            )
        bad = ~np.isfinite(z) | (z <= 0) | (z > MAX_PASS_SECONDS)
        if bad.any():
            i, j = (int(v) for v in np.argwhere(bad)[0])
            raise ConfigError(
                f"{self.name} seconds[{i}][{j}] must be a pass time in (0, {MAX_PASS_SECONDS:g}] "
                f"seconds, got {show(float(z[i, j]))}"
            )
        # Monotone in both axes: a bigger pass never costs less (noise may say otherwise).
        z = _monotone(z)
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "z", z)

    @staticmethod
    def _cell(axis: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index of each value's cell (its left grid point) and the fraction across it,
        extrapolating."""
        if len(axis) == 1:
            return np.zeros(len(v), dtype=np.int64), np.zeros(len(v))
        i = np.clip(np.searchsorted(axis, v, side="right") - 1, 0, len(axis) - 2)
        # Below the first grid point a pass costs what the smallest measured one did (never less);
        # beyond the last, the last cell's slope carries on.
        return i, np.maximum((v - axis[i]) / (axis[i + 1] - axis[i]), 0.0)

    def __call__(self, xv, yv) -> np.ndarray:
        xv = np.atleast_1d(np.asarray(xv, dtype=np.float64))
        yv = np.atleast_1d(np.asarray(yv, dtype=np.float64))
        xv, yv = np.broadcast_arrays(xv, yv)
        z = self.z
        i, fx = self._cell(self.x, xv)
        j, fy = self._cell(self.y, yv)
        if len(self.x) == 1 and len(self.y) == 1:
            return np.full(xv.shape, z[0, 0])
        if len(self.x) == 1:
            return z[0, j] + fy * (z[0, j + 1] - z[0, j])
        if len(self.y) == 1:
            return z[i, 0] + fx * (z[i + 1, 0] - z[i, 0])
        z00, z01, z10, z11 = z[i, j], z[i, j + 1], z[i + 1, j], z[i + 1, j + 1]
        return z00 * (1 - fx) * (1 - fy) + z10 * fx * (1 - fy) + z01 * (1 - fx) * fy + z11 * fx * fy

    def as_dict(self) -> dict:
        return {"rows": self.x.tolist(), "columns": self.y.tolist(), "seconds": self.z.tolist()}

    @classmethod
    def from_dict(cls, d: dict, name: str) -> Grid2D:
        missing = [k for k in ("rows", "columns", "seconds") if k not in d]
        if missing:
            raise ConfigError(
                f"{name} grid needs rows, columns and seconds, and has no {' or '.join(missing)}"
            )
        parts = {k: _numbers(d[k], f"{name} {k}") for k in ("rows", "columns", "seconds")}
        return cls(parts["rows"], parts["columns"], parts["seconds"], name)


def _numbers(v, where: str) -> np.ndarray:
    """A list (or a table) of numbers as an array; the first cell that is no number is named."""

    def walk(x, path):
        if isinstance(x, list):
            for i, item in enumerate(x):
                walk(item, f"{path}[{i}]")
        elif not is_number(x):
            raise ConfigError(f"{where}{path} must be a number, got {show(x)}")

    walk(v, "")
    try:
        return np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):  # lists of uneven lengths
        raise ConfigError(
            f"{where} must be a list of numbers (a table: rows of equal length), got {show(v)}"
        ) from None
