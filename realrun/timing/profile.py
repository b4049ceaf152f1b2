"""Time the real engine's passes on a grid and build batchsim's profiled step-time model.

``profile`` times the engine's passes (``realrun.timing.measure``, on the shapes
``realrun.timing.grid`` chooses) and from the timings builds a ``ProfiledStepTime``: the decode and
prefill grids (means of every repetition, swept in interleaved rounds, so a burst of load from
another process spoils one sweep of a point, not all of it), the cost of a continued chunk's
attention to its cached past, the engine's work around its passes, and each policy's gap between
steps, timed by a short burst through the real driver. The mean, not the median: the simulator adds
step times up, and times are skewed to the right, so a median would underestimate the busy time; but
without the timings over twice the median, which are another process borrowing the core
(``robust_mean``).

It also fits the textbook ``LinearStepTime`` to the same passes, for comparison and for
the course; and it times a few shapes between the grid points that the model never saw,
to report an honest held-out error.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from batchsim.core.errors import ConfigError
from batchsim.sim.profiled import Grid2D, ProfiledStepTime
from batchsim.sim.slowdrift import fit_slow_drift
from batchsim.sim.spread import SpreadGrid, StepSpread, lag1_of, ratio_quantiles
from batchsim.sim.steptime import LinearStepTime, StepTimeModel, load_step_time

from .cold import decode_cold
from .grid import GRIDS, Grid, grid_for_workload
from .measure import Samples, measure
from .points import ProfilePoint, fit_linear, pass_errors, point_pass, points_of
from .smooth import choose_prefill

__all__ = [
    "Grid",
    "GRIDS",
    "ProfilePoint",
    "Profile",
    "measure",
    "fit_linear",
    "profile",
    "grid_for_workload",
    "spread_from",
    "load_calibration",
    "pass_errors",
    "point_pass",
]


# -- the model -------------------------------------------------------------------------------


def build(meas: dict, source: str, plan: str = "grouped") -> ProfiledStepTime:
    """The profiled model from ``measure``'s timings, pricing steps as the engine runs them
    (``plan``)."""
    grid: Grid = meas["grid"]
    s: Samples = meas["samples"]
    mid = (grid.repeats - 1) / 2  # a decode point's passes read widths w .. w + repeats - 1
    dz = np.array(
        [[s.mean(("decode", b, w)) for w in grid.decode_widths] for b in grid.decode_rows]
    )
    decode = Grid2D(
        np.array(grid.decode_rows, float), np.array(grid.decode_widths, float) + mid, dz, "decode"
    )
    pz = np.full((len(grid.prefill_rows), len(grid.prefill_lengths)), np.nan)
    for i, b in enumerate(grid.prefill_rows):
        for j, n in enumerate(grid.prefill_lengths):
            if ("prefill", b, n) in s.by_key:
                pz[i, j] = s.mean(("prefill", b, n))
    # points above the pass limit: scale the largest measured rows by rows
    for j in range(pz.shape[1]):
        known = np.flatnonzero(np.isfinite(pz[:, j]))
        top = known[-1]
        for i in range(top + 1, pz.shape[0]):
            pz[i, j] = pz[top, j] * grid.prefill_rows[i] / grid.prefill_rows[top]
    prefill = Grid2D(
        np.array(grid.prefill_rows, float), np.array(grid.prefill_lengths, float), pz, "prefill"
    )
    spread = _spread(
        grid, s, decode, prefill, meas.get("decode_runs", []), meas.get("slow_probe") or []
    )
    past_cost = fit_past_cost(
        [
            (q * p, s.mean(("past", q, p)) - s.mean(("past0", q, p)))
            for q, p in grid.past
            if ("past0", q, p) in s.by_key
        ]
    )
    # Small differences of two clock readings: their median, which a preempted pass cannot move.
    step_extra = max(0.0, float(np.median(meas["step_extra"]))) if meas["step_extra"] else 0.0
    # The median: now and then a join outgrows the batch's buffers and copies all of it (the
    # profile's batches start with no room to spare, so it happens here more than in a run).
    joins = meas["joins"]
    join_cost = (
        max(0.0, float(np.median([(r - step_extra) / n for r, n in joins]))) if joins else 0.0
    )
    wake = meas["wake"]
    gaps = meas["gaps"]
    model = ProfiledStepTime(
        decode,
        prefill,
        past_cost=past_cost,
        step_extra=step_extra,
        join_cost=join_cost,
        repeat_extra=max(0.0, float(np.median(meas["repeat_extra"])))
        if meas["repeat_extra"]
        else 0.0,
        step_gap=float(np.mean(list(gaps.values()))) if gaps else 0.0,
        policy_gaps=dict(gaps),
        wake_late=max(0.0, wake["late"]),
        wake_idle=tuple(wake["idle"]),
        wake_extra=tuple(wake["extra"]),
        plan=plan,
        source=source,
        context_len=meas.get("n_positions"),
        spread=spread,
    )
    # A step's first decode passes, priced on the grid just built, against the bursts' repeated
    # ones.
    cold = decode_cold(model.pass_time, meas.get("burst_passes") or [])
    return replace(
        model,
        first_decode_extra=cold["first"],
        second_decode_extra=cold["second"],
        extra={**model.extra, "decode_cold_passes": cold["n"]},
    )


def fit_past_cost(pairs: list[tuple[float, float]]) -> float:
    """Seconds per (new token, cached token) pair: the least-squares slope through the origin of
    each continued chunk's extra time (over the same chunk with no past) against its pairs; never
    negative."""
    x = np.array([a for a, _ in pairs], float)
    y = np.array([b for _, b in pairs], float)
    if not len(x) or not np.any(x > 0):
        return 0.0
    return max(0.0, float(np.dot(x, y) / np.dot(x, x)))


def _spread(
    grid: Grid, s: Samples, decode: Grid2D, prefill: Grid2D, runs: list, probe: list
) -> StepSpread:
    return spread_from(
        grid, decode, prefill, lambda kind, b, n: s.by_key.get((kind, b, n)), runs, probe
    )


def spread_from(
    grid: Grid, decode: Grid2D, prefill: Grid2D, samples_of, runs: list, probe: list
) -> StepSpread:
    """Each grid point's timings as quantiles of time / mean (``batchsim.sim.spread``), from
    ``samples_of(kind, rows, n)`` (its seconds, or None where untimed); a prefill point above the
    pass limit, never timed, takes the spread of the largest rows timed at its length. ``runs``:
    stretches of consecutive passes (for ``lag1``); ``probe``: seconds of the same pass over a few
    seconds (the slow drift). Our engine's profile and vLLM's both make their spread here."""
    dq = np.array(
        [
            [ratio_quantiles(samples_of("decode", b, w)) for w in grid.decode_widths]
            for b in grid.decode_rows
        ]
    )
    pq = np.full((len(grid.prefill_rows), len(grid.prefill_lengths), dq.shape[2]), np.nan)
    for i, b in enumerate(grid.prefill_rows):
        for j, n in enumerate(grid.prefill_lengths):
            if samples_of("prefill", b, n):
                pq[i, j] = ratio_quantiles(samples_of("prefill", b, n))
    for j in range(pq.shape[1]):
        known = np.flatnonzero(np.isfinite(pq[:, j, 0]))
        pq[known[-1] + 1 :, j] = pq[known[-1], j]
    return StepSpread(
        SpreadGrid(decode.x, decode.y, dq, "spread decode"),
        SpreadGrid(prefill.x, prefill.y, pq, "spread prefill"),
        lag1=lag1_of(runs),
        slow=fit_slow_drift(probe),
    )


# -- the result ------------------------------------------------------------------------------

#: A held-out error above this (mean, %) says the machine's speed moved while the profile timed its
#: shapes. Quiet, these CPUs give 6-14 % mean (part of it the grid's own shape between its points,
#: not noise); a profile taken through bursts of other work gave 19-35 %. The profile is kept (what
#: was timed is not thrown away), and its text says to take it again when the machine is quiet.
HELDOUT_WARN_PCT = 20.0


@dataclass
class Profile:
    """The profiled model, the textbook linear fit, every timed shape, and the held-out errors."""

    model: ProfiledStepTime
    linear: LinearStepTime
    points: list[ProfilePoint]
    seconds: float
    info: dict = field(default_factory=dict)

    @property
    def heldout(self) -> dict[str, float]:
        """Errors (%) of the profiled and the linear model on the held-out shapes, mean and
        worst."""
        val = [q for q in self.points if q.kind.startswith("validation-")]
        if not val:
            return {}
        e, lin = np.abs(pass_errors(self.model, val)), np.abs(pass_errors(self.linear, val))
        return {
            "mean_pct": float(e.mean()),
            "max_pct": float(e.max()),
            "linear_mean_pct": float(lin.mean()),
            "linear_max_pct": float(lin.max()),
            "shapes": len(val),
        }

    @property
    def heldout_mean_pct(self) -> float:
        return self.heldout.get("mean_pct", float("nan"))

    def as_dict(self) -> dict:
        lin = self.linear
        return {
            **self.model.as_dict(),
            "profile_seconds": round(self.seconds, 2),
            **self.info,
            "heldout": self.heldout,
            "linear": {"c0": lin.c0, "c1": lin.c1, "c2": lin.c2, "c3": lin.c3},
            "points": [asdict(q) for q in self.points],
        }

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.as_dict(), indent=2) + "\n")
        return p

    def text(self) -> str:
        m, h, lin = self.model, self.heldout, self.linear
        gaps = ", ".join(f"{k} {v * 1e3:.2f}" for k, v in m.policy_gaps.items())
        wake = ", ".join(
            f"{i * 1e3:g} ms: +{e * 1e3:.2f}" for i, e in zip(m.wake_idle, m.wake_extra)
        )
        cv = ""
        if m.spread is not None:
            cv = (
                f"; spread (CV) of a pass: decode {np.median(m.spread.decode.cv()):.0%} median, "
                f"prefill {np.median(m.spread.prefill.cv()):.0%}, consecutive passes correlated "
                f"{m.spread.lag1:.2f}; "
                + (m.spread.slow.text() if m.spread.slow is not None else "no slow drift seen")
            )
        lines = [
            f"profiled step time: {len(self.points)} shapes timed in {self.seconds:.1f} s; decode "
            f"1 row {float(m.decode(1, m.decode.y[0])[0]) * 1e3:.2f} ms .. "
            f"{len(m.decode.x)}x{len(m.decode.y)} grid, prefill "
            f"{len(m.prefill.x)}x{len(m.prefill.y)} grid{cv}",
            f"  around each step {m.step_extra * 1e3:.3f} ms, per joining token "
            f"{m.join_cost * 1e6:.2f} us, gap between steps (ms): {gaps}",
            f"  after sleeping: {m.wake_late * 1e3:.3f} ms late, then cold passes (ms extra after "
            f"idle {wake})",
            f"  a step's first decode pass +{m.first_decode_extra * 1e3:.3f} ms, its second "
            f"+{m.second_decode_extra * 1e3:.3f} ms beyond a repeated one"
            + (
                " (from the bursts' {} first, {} second and {} repeated passes)".format(*cold_n)
                if (cold_n := m.extra.get("decode_cold_passes"))
                else ""
            ),
        ]
        if h:
            lines.append(
                f"  held-out error on {h['shapes']} shapes between grid points: "
                f"{h['mean_pct']:.1f} % mean, {h['max_pct']:.1f} % worst (a linear fit: "
                f"{h['linear_mean_pct']:.1f} %, {h['linear_max_pct']:.1f} %)"
            )
            if h["mean_pct"] > HELDOUT_WARN_PCT:
                lines.append(
                    f"  warning: a held-out error of {h['mean_pct']:.0f} % (over "
                    f"{HELDOUT_WARN_PCT:.0f} %) says the "
                    "machine's speed likely moved while it was timed (other work?); its "
                    "predictions will be off by as much: profile again with the machine quiet"
                )
        surf = self.info.get("prefill_surface")
        if isinstance(surf, dict):
            used = self.info.get("prefill_model") == "surface"
            lines.append(
                f"  prefill priced by "
                f"{'a surface fitted to every timed point' if used else 'the timed grid'}: on "
                f"{surf['shapes']} held-out prefill shapes the surface is "
                f"{surf['heldout_mean_pct']:.1f} % off (mean), the grid "
                f"{surf['grid_heldout_mean_pct']:.1f} %"
            )
        lines.append(
            f"  linear fit per pass: {lin.c0 * 1e3:.3f} ms + {lin.c1 * 1e6:.2f} us x prompt tokens "
            f"+ {lin.c2 * 1e6:.2f} us x decode rows + {lin.c3 * 1e9:.2f} ns x KV tokens read"
        )
        return "\n".join(lines)


def profile(
    engine,
    grid: Grid | str = "quick",
    policies: dict | None = None,
    progress=False,
    budget_s: float | None = None,
) -> Profile:
    """Time ``grid`` on ``engine`` and build the model; ``Profile.write(path)`` saves the
    calibration. ``progress`` and ``budget_s``: as ``measure`` takes them."""
    import torch
    import transformers

    if isinstance(grid, str):
        if grid not in GRIDS:
            raise ConfigError(f"grid must be one of {', '.join(GRIDS)}, got {grid!r}")
        grid = GRIDS[grid]
    lm = engine.lm
    t0 = time.perf_counter()
    meas = measure(engine, grid, policies, progress, budget_s)
    seconds = time.perf_counter() - t0
    source = f"realrun profile: {lm.name} on {lm.device}, {lm.dtype}, {lm.threads} threads"
    points = points_of(meas)
    # the pool's engine packs its passes ("paged"); the rectangle's groups them
    plan = getattr(engine, "plan", "grouped")
    model = build(meas, source, plan)
    # The grid, or a surface fitted to all its prefill points where that holds out better
    # (smooth.py).
    model, prefill_choice = choose_prefill(model, points)
    # The canary's own readings now, while the profile's level holds: later canaries are held up to
    # them.
    from .canary import Canary

    model = replace(model, extra={**model.extra, "canary": Canary(engine, model).take_reference()})
    linear = fit_linear(
        [q for q in points if not q.kind.startswith("validation-")], f"{source} (linear)", plan=plan
    )
    info = {
        "model_name": lm.name,
        "model_source": lm.source,
        "random_weights": lm.random_weights,
        "n_positions": lm.n_positions,
        "device": lm.device,
        "dtype": lm.dtype,
        "threads": lm.threads,
        "engine": getattr(engine, "name", "ours"),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "rounds_timed": meas["rounds_timed"],
        "rounds": meas["grid"].rounds,
        **prefill_choice,
    }
    return Profile(model, linear, points, seconds, info)


def load_calibration(path: str | Path) -> StepTimeModel:
    """The step-time model of a calibration file (profiled, or linear from an older or hand-made
    file)."""
    return load_step_time(path)


def load_profilepoints_of(path: str | Path) -> list[ProfilePoint]:
    """The timed shapes stored in a calibration file (for plots and refits)."""
    data = json.loads(Path(path).read_text())
    return [ProfilePoint(**q) for q in data.get("points", [])]
