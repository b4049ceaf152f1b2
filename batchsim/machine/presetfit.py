"""Fitting an engine preset: the three numbers that bring batchsim closest to an engine's record.

An engine's preset sets the roofline's knobs (``compute_eff``, ``memory_eff``, ``overhead``).
``fit`` runs batchsim on every published point of the engine that the preset does not hold out,
over a grid of the three knobs, and keeps the set with the least loss: the mean squared log of
predicted / measured within each metric family (throughput, TPOT, TTFT), averaged over the
families, so that a family with many points does not outvote one with few, and a point 2x fast
costs as much as one 2x slow. The held-out points are then predicted with the chosen set and
reported apart: how far the preset carries beyond the points it was fitted to.

``python -m batchsim.machine.presetfit vllm`` reruns the fit that engines.json records (about a
minute: every point, every grid cell). A grid, not an optimiser: three knobs, a few hundred
cells, and the answer is the same on every machine.
"""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np

from ..core.errors import ConfigError
from .engines import engine_profile, engine_profiles
from .validation import Point, points, predict

__all__ = ["GRID", "loss", "errors", "fit", "neighbours"]

#: The cells tried. Below 0.3 of the compute roof or 0.6 of the bandwidth no published point of a
#: tuned engine sits; the overhead spans an engine on CUDA graphs (0.5 ms) to a Python loop (4 ms).
GRID = {
    "compute_eff": tuple(round(float(x), 2) for x in np.arange(0.30, 0.701, 0.05)),
    "memory_eff": tuple(round(float(x), 2) for x in np.arange(0.60, 0.851, 0.05)),
    "overhead": tuple(round(float(x), 4) for x in np.arange(0.0005, 0.00401, 0.0005)),
}


def errors(pts: list[Point], knobs: dict) -> dict[str, float]:
    """Signed error (predicted / measured - 1) of each point with ``knobs``."""
    return {p.id: predict(p, knobs=knobs) / p.value - 1 for p in pts}


def loss(pts: list[Point], errs: dict[str, float]) -> float:
    """Mean over metric families of the mean squared log error within each family."""
    fams: dict[str, list[float]] = {}
    for p in pts:
        fams.setdefault(p.family, []).append(math.log1p(errs[p.id]) ** 2)
    return sum(sum(v) / len(v) for v in fams.values()) / len(fams)


def _split(engine: str) -> tuple[list[Point], list[Point]]:
    if engine not in engine_profiles():
        raise ConfigError(f"engine must be one of {', '.join(engine_profiles())}, got {engine!r}")
    held = set(engine_profile(engine).held_out_ids)
    mine = [p for p in points() if p.engine == engine]
    return [p for p in mine if p.id not in held], [p for p in mine if p.id in held]


def fit(engine: str, grid: dict = GRID) -> dict:
    """The grid cell of least loss on the engine's fitted points, and its errors on both sets."""
    fitted, held = _split(engine)
    best = None
    for ce, me, oh in itertools.product(grid["compute_eff"], grid["memory_eff"], grid["overhead"]):
        knobs = {"compute_eff": ce, "memory_eff": me, "overhead": oh}
        value = loss(fitted, errors(fitted, knobs))
        if best is None or value < best[0]:
            best = (value, knobs)
    value, knobs = best
    return {
        "knobs": knobs,
        "loss": value,
        "fitted": errors(fitted, knobs),
        "held_out": errors(held, knobs),
    }


def neighbours(knobs: dict, grid: dict = GRID) -> list[dict]:
    """The grid cells one step from ``knobs`` along each knob (a cell of the grid itself)."""
    out = []
    for name, values in grid.items():
        i = values.index(knobs[name])
        out += [{**knobs, name: values[j]} for j in (i - 1, i + 1) if 0 <= j < len(values)]
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    engine = args[0] if args else "vllm"
    try:
        result = fit(engine)
    except ConfigError as exc:
        print(f"presetfit: {exc}", file=sys.stderr)
        return 2
    k = result["knobs"]
    print(
        f"{engine}: compute_eff {k['compute_eff']:g}, memory_eff {k['memory_eff']:g}, overhead "
        f"{k['overhead'] * 1e3:g} ms (loss {result['loss']:.4f})"
    )
    for label in ("fitted", "held_out"):
        errs = result[label]
        for pid, e in errs.items():
            print(f"  {label:<8} {pid:<48} {e:+.1%}")
        if errs:
            absolute = sorted(abs(e) for e in errs.values())
            print(
                f"  {label}: {len(errs)} points, median |error| {float(np.median(absolute)):.1%}, "
                f"worst {absolute[-1]:.1%}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
