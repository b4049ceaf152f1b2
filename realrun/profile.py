"""Measure how long the real engine's steps take, and fit batchsim's cost model to it.

The simulator prices a step with ``LinearStepTime``:

    t = c0 + c1 * prompt_tokens + c2 * decode_rows + c3 * kv_tokens_read

``profile`` runs hand-made steps through the very engine the runner uses (so the
Python around the model, the KV copies when rows join and leave, everything the runner
will see is in the measurement) over a grid. Rows that only need to *be there* for a
decode step are filled with random KV (``Engine.fill_rows``) instead of being prefilled:
a step's time depends on the shapes it reads, not the numbers.

- decode steps: batch sizes x context lengths (how the fixed cost c0 is shared, and
  what reading a longer KV cache costs), with every row at the same length (a padded
  batch: its policy counts the padding as KV read) and with rows of lengths spread from a
  quarter of the context to all of it ("ragged": a continuous batch, whose policy counts
  only real tokens while the engine's rectangular attention also reads the left padding);
- prefill steps: rows x prompt lengths (the per-token cost of a prompt);
- mixed steps: one prompt admitted while a batch decodes (what continuous batching
  does at every arrival: in this engine that is two passes and a KV rebuild).

Every point is the mean of several repetitions, swept in one or more rounds. The mean,
not the median: the simulator adds step times up, and on a CPU shared with anything
else the times are skewed to the right (a step now and then waits for the core), so a
median-based fit underestimates the busy time, and at 70 % load the latency with it.
Single steps vary by 10-40 %; the fit is over many points, which smooths them.
Besides one fit over every point (the calibration batchsim loads), each family of
policies gets a fit on the steps it runs (``FAMILIES``): padded batches on equal rows,
continuous batching on ragged rows and on admissions (two passes in this engine).
``compare`` predicts each policy with its family's fit.

Each fit is a non-negative least squares on relative error (a 2 ms step matters as much
as a 200 ms one), solved exactly for four unknowns by trying every set of active
coefficients. A quarter of the points are held out of a first fit to report an honest
error; the coefficients written are then fitted on all of them.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from batchsim.core.errors import ConfigError, check_int_at_least
from batchsim.core.step import Chunk, Step
from batchsim.sim.steptime import LinearStepTime
from batchsim.core.workload import Request, Workload

__all__ = [
    "Grid", "GRIDS", "ProfilePoint", "Profile", "Fit", "FAMILIES", "POLICY_FAMILY", "measure", "fit_linear",
    "fit_with_heldout", "profile", "grid_for_workload", "load_calibration",
]


@dataclass(frozen=True)
class Grid:
    """What to measure. decode and ragged: (rows, context); prefill: (rows, tokens each);
    mixed: (rows, context, prompt). Ragged and mixed rows have contexts spread over [context/4, context]."""

    decode: tuple[tuple[int, int], ...]
    prefill: tuple[tuple[int, int], ...]
    mixed: tuple[tuple[int, int, int], ...] = ()
    repeats: int = 5
    ragged: tuple[tuple[int, int], ...] = ()
    rounds: int = 1  # sweeps of the whole grid; a point's time is the median over all its repetitions

    def __post_init__(self) -> None:
        check_int_at_least("repeats", self.repeats, 1)
        check_int_at_least("rounds", self.rounds, 1)
        for b, c in self.decode + self.ragged:
            check_int_at_least("decode rows", b, 1)
            check_int_at_least("decode context", c, 1)
        for b, n in self.prefill:
            check_int_at_least("prefill rows", b, 1)
            check_int_at_least("prefill tokens", n, 1)

    def clipped(self, n_positions: int) -> "Grid":
        """Drop points that would run past the model's context."""
        room = n_positions - self.repeats - 1
        return Grid(
            tuple((b, c) for b, c in self.decode if c <= room),
            tuple((b, n) for b, n in self.prefill if n <= n_positions),
            tuple((b, c, n) for b, c, n in self.mixed if c <= room and n <= n_positions),
            self.repeats,
            tuple((b, c) for b, c in self.ragged if c <= room),
            self.rounds,
        )


def _cross(rows, contexts):
    return tuple((b, c) for b in rows for c in contexts)


def _spread(b: int, c: int) -> list[int]:
    """b row lengths spread evenly from c/4 to c (one row: c)."""
    if b == 1:
        return [c]
    return [int(x) for x in np.linspace(max(1, c // 4), c, b).round()]


GRIDS = {
    # About 10 s for tiny-gpt2 on 2 CPU cores: enough for the default compare.
    "quick": Grid(
        decode=_cross((1, 4, 16, 32, 64), (16, 96, 256)),
        prefill=((1, 16), (1, 64), (1, 256), (4, 64), (8, 128), (16, 64), (32, 32)),
        mixed=((4, 64, 32), (16, 96, 64), (32, 128, 128), (32, 256, 64)),
        repeats=5,
        ragged=_cross((4, 16, 64), (96, 256)),
    ),
    "full": Grid(
        decode=_cross((1, 2, 4, 8, 16, 32, 64, 128), (16, 64, 256, 768)),
        prefill=((1, 16), (1, 64), (1, 256), (1, 1024), (4, 64), (4, 256), (8, 128), (16, 64), (16, 256), (64, 32), (32, 64)),
        mixed=((4, 64, 32), (16, 128, 64), (32, 256, 128), (64, 128, 256), (64, 512, 64)),
        repeats=7,
        ragged=_cross((4, 16, 64, 128), (64, 256, 768)),
    ),
}


def grid_for_workload(workload: Workload, max_rows: int, max_prefill: int, repeats: int = 5, rounds: int = 1) -> Grid:
    """A quick grid that covers what this workload will run: its batch sizes, contexts and prompts."""
    if not len(workload):
        return GRIDS["quick"]
    ctx = int(np.max(workload.prompt_tokens + workload.output_tokens))
    rows = int(min(max_rows, len(workload)))
    # dense at the small end: at moderate load most steps are small, and step time bends there
    batches = sorted({1, *(b for b in (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256) if b < rows), rows})
    contexts = sorted({max(8, ctx // 8), max(8, ctx // 3), max(8, ctx)})
    p_max = int(np.max(workload.prompt_tokens))
    p_mean = max(1, int(np.mean(workload.prompt_tokens)))
    prefill = {(1, max(1, p_max // 4)), (1, p_mean), (1, p_max)}
    for b in batches[1:]:
        n = max(1, min(p_mean, max_prefill // b))
        prefill.add((b, n))
    mixed = {(b, c, p_mean) for b in batches[1:] for c in contexts[1:]}
    ragged = _cross(batches[1:], contexts[1:])
    return Grid(tuple(_cross(batches, contexts)), tuple(sorted(prefill)), tuple(sorted(mixed)), repeats, ragged, rounds)


@dataclass(frozen=True)
class ProfilePoint:
    kind: str  # decode | ragged | prefill | mixed
    prefill_tokens: int
    decode_rows: int
    kv_read: float
    seconds: float  # mean of the repetitions (what the fit uses)
    spread: float  # (max - min) / median of the repetitions
    median: float = float("nan")  # median of the repetitions


#: Which measured steps each family of policies runs. A padded batch (taxi, static, dynamic) is
#: one pass over rows of equal length; a continuous batch admits a request with a second pass
#: (prefill, then decode) and pads attention over rows of different lengths. batchsim's model has
#: one fixed cost per step and counts only real KV tokens for continuous batching, so one set of
#: coefficients averaging both families mispredicts both: each family gets its own fit.
FAMILIES = {
    "padded": ("decode", "prefill"),
    "continuous": ("ragged", "mixed", "prefill", "decode-1"),
}
POLICY_FAMILY = {"taxi": "padded", "static": "padded", "dynamic": "padded", "continuous": "continuous"}


def _in_family(q: ProfilePoint, family: str) -> bool:
    kinds = FAMILIES[family]
    return q.kind in kinds or ("decode-1" in kinds and q.kind == "decode" and q.decode_rows == 1)


@dataclass
class Fit:
    """One fitted model and its errors (percent): on its own points, and held out of a first fit."""

    model: LinearStepTime
    points: int
    fit_mean_pct: float
    heldout_mean_pct: float
    heldout_max_pct: float

    def as_dict(self) -> dict:
        m = self.model
        return {"c0": m.c0, "c1": m.c1, "c2": m.c2, "c3": m.c3, "n_points": self.points,
                "fit_mean_abs_error_pct": round(self.fit_mean_pct, 2),
                "heldout_mean_abs_error_pct": round(self.heldout_mean_pct, 2),
                "heldout_max_abs_error_pct": round(self.heldout_max_pct, 2)}

    def text(self) -> str:
        m = self.model
        return (f"{m.c0 * 1e3:.3f} ms + {m.c1 * 1e6:.2f} us x prompt tokens + {m.c2 * 1e6:.2f} us x decode rows "
                f"+ {m.c3 * 1e9:.2f} ns x KV tokens read; {self.points} points, mean error {self.fit_mean_pct:.1f} %, "
                f"held-out {self.heldout_mean_pct:.1f} % (worst {self.heldout_max_pct:.1f} %)")


def fit_with_heldout(points: list[ProfilePoint], source: str) -> Fit:
    """Fit on all points; the held-out error comes from a first fit without every fourth point."""
    held = [p for i, p in enumerate(points) if i % 4 == 3]
    train = [p for i, p in enumerate(points) if i % 4 != 3]
    if len(train) >= 4 and held:
        h = _errors_pct(fit_linear(train, source), held)
        h_mean, h_max = float(h.mean()), float(h.max())
    else:
        h_mean = h_max = float("nan")
    model = fit_linear(points, source)
    return Fit(model, len(points), float(_errors_pct(model, points).mean()), h_mean, h_max)


@dataclass
class Profile:
    """The measured points, one fit over all of them (``model``, what batchsim loads) and one per family."""

    points: list[ProfilePoint]
    overall: Fit
    families: dict[str, Fit]
    seconds: float
    info: dict = field(default_factory=dict)

    @property
    def model(self) -> LinearStepTime:
        return self.overall.model

    @property
    def heldout_mean_pct(self) -> float:
        return self.overall.heldout_mean_pct

    @property
    def heldout_max_pct(self) -> float:
        return self.overall.heldout_max_pct

    @property
    def fit_mean_pct(self) -> float:
        return self.overall.fit_mean_pct

    def model_for(self, policy_name: str) -> LinearStepTime:
        fam = self.families.get(POLICY_FAMILY.get(policy_name, ""))
        return fam.model if fam is not None else self.model

    def write(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        o = self.overall.as_dict()
        self.model.to_json(
            p,
            **{k: v for k, v in o.items() if k not in ("c0", "c1", "c2", "c3")},
            profile_seconds=round(self.seconds, 2),
            **self.info,
            families={name: f.as_dict() for name, f in self.families.items()},
            points=[asdict(q) for q in self.points],
        )
        return p

    def text(self) -> str:
        lines = [
            f"step time = {self.overall.text()}  (profiled in {self.seconds:.1f} s)",
        ]
        for name, f in self.families.items():
            lines.append(f"  {name} policies: {f.text()}")
        return "\n".join(lines)


def load_calibration(path: str | Path) -> tuple[LinearStepTime, dict[str, LinearStepTime]]:
    """The overall model of a calibration file, and its per-family models when it has them."""
    overall = LinearStepTime.from_json(path)
    data = json.loads(Path(path).read_text())
    fams = {}
    for name, f in (data.get("families") or {}).items():
        try:
            fams[name] = LinearStepTime(float(f["c0"]), float(f["c1"]), float(f["c2"]), float(f["c3"]), source=f"{overall.source} ({name})")
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"calibration {str(path)!r}: family {name!r} must have numbers c0..c3") from None
    return overall, fams


# -- measuring -----------------------------------------------------------------------------

class _Ids:
    def __init__(self) -> None:
        self.next = 0

    def take(self, k: int) -> list[int]:
        ids = list(range(self.next, self.next + k))
        self.next += k
        return ids


def _workload_for(grid: Grid) -> tuple[Workload, dict]:
    """One synthetic workload holding every request the grid's steps will touch, in order."""
    reqs: list[Request] = []
    plan: dict = {"decode": [], "ragged": [], "prefill": [], "mixed": []}
    ids = _Ids()

    def add(prompt: int, out: int) -> int:
        (rid,) = ids.take(1)
        reqs.append(Request(rid, 0.0, prompt, out))
        return rid

    for b, c in grid.decode:
        plan["decode"].append([add(c, grid.repeats + 2) for _ in range(b)])
    for b, c in grid.ragged:
        plan["ragged"].append([add(x, grid.repeats + 2) for x in _spread(b, c)])
    for b, n in grid.prefill:
        plan["prefill"].append([[add(n, 1) for _ in range(b)] for _ in range(grid.repeats)])
    for b, c, n in grid.mixed:
        rows = [add(x, 2 * grid.repeats + 4) for x in _spread(b, c)]
        newcomers = [add(n, 1) for _ in range(grid.repeats)]
        plan["mixed"].append((rows, newcomers))
    return Workload(tuple(reqs), "profile grid"), plan


def measure(engine, grid: Grid, progress: bool = False) -> list[ProfilePoint]:
    """Run the grid's steps through ``engine``; one ProfilePoint per grid point.

    With ``grid.rounds`` > 1 the whole grid is swept again: a burst of load from another process
    then spoils one sweep of a point, not all its repetitions, and the median discards it.
    """
    grid = grid.clipped(engine.lm.n_positions)
    workload, plan = _workload_for(grid)
    reqs = {r.id: r for r in workload.requests}
    samples: dict[int, list[float]] = {}
    shapes: list[tuple] = []
    bar = None
    total = (len(grid.decode) + len(grid.ragged) + len(grid.prefill) + len(grid.mixed)) * grid.rounds
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, desc="profiling", unit="point", leave=False)

    def prefill(ids: list[int]) -> float:
        step = Step(prefill=tuple(Chunk(i, 0, reqs[i].prompt_tokens, True) for i in ids))
        t0, ends = engine.execute(step)
        return ends[-1] - t0

    def point(k, kind, pt, rows, kv, times):
        if k == len(shapes):
            shapes.append((kind, int(pt), int(rows), float(kv)))
        samples.setdefault(k, []).extend(float(t) for t in times)
        if bar is not None:
            bar.update(1)

    for _ in range(grid.rounds):
        engine.start(workload)
        k = 0
        for kind, ids in [("decode", ids) for ids in plan["decode"]] + [("ragged", ids) for ids in plan["ragged"]]:
            engine.fill_rows(ids, [reqs[i].prompt_tokens for i in ids])
            t0, ends = engine.execute(Step(decode=tuple(ids), repeat=grid.repeats))
            durs = np.diff(np.concatenate([[t0], ends]))
            # pass j reads each row's prompt plus the j tokens generated before it (the middle pass here)
            kv = sum(reqs[i].prompt_tokens for i in ids) + len(ids) * (grid.repeats - 1) / 2
            point(k, kind, 0, len(ids), kv, durs)
            k += 1
            engine.release(ids)
        for (b, n), reps in zip(grid.prefill, plan["prefill"]):
            times = []
            for ids in reps:
                times.append(prefill(ids))
                engine.release(ids)
            point(k, "prefill", b * n, 0, 0, times)
            k += 1
        for (_, _, n), (rows, newcomers) in zip(grid.mixed, plan["mixed"]):
            engine.fill_rows(rows, [reqs[i].prompt_tokens for i in rows])
            times, kv = [], []
            held = sum(reqs[i].prompt_tokens for i in rows)
            for new in newcomers:
                step = Step(prefill=(Chunk(new, 0, n, True),), decode=tuple(rows))
                t0, ends = engine.execute(step)
                times.append(ends[-1] - t0)
                kv.append(held)
                held += len(rows)
                engine.release([new])
            point(k, "mixed", n, len(rows), float(np.median(kv)), times)
            k += 1
            engine.release(rows)
    if bar is not None:
        bar.close()
    points = []
    for k, (kind, pt, rows, kv) in enumerate(shapes):
        t = np.asarray(samples[k])
        med = float(np.median(t))
        points.append(ProfilePoint(kind, pt, rows, kv, float(t.mean()), float((t.max() - t.min()) / med), med))
    return points


# -- fitting --------------------------------------------------------------------------------

def _design(points: list[ProfilePoint]) -> tuple[np.ndarray, np.ndarray]:
    X = np.array([[1.0, p.prefill_tokens, p.decode_rows, p.kv_read] for p in points])
    y = np.array([p.seconds for p in points])
    return X, y


def fit_linear(points: list[ProfilePoint], source: str = "realrun profile") -> LinearStepTime:
    """Non-negative least squares on relative error, c0 > 0: the best of every active set."""
    if len(points) < 2:
        raise ConfigError(f"profile needs at least 2 points to fit, got {len(points)}")
    X, y = _design(points)
    A, b = X / y[:, None], np.ones(len(y))  # each row divided by its time: relative residuals
    scale = np.abs(A).max(0)
    scale[scale == 0] = 1.0
    As = A / scale
    best, best_res = None, np.inf
    for k in range(0, 4):
        for extra in itertools.combinations((1, 2, 3), k):
            cols = [0, *extra]
            coef, *_ = np.linalg.lstsq(As[:, cols], b, rcond=None)
            if np.any(coef < 0) or coef[0] <= 0:
                continue
            res = float(np.sum((As[:, cols] @ coef - b) ** 2))
            if res < best_res:
                full = np.zeros(4)
                full[cols] = coef
                best, best_res = full / scale, res
    if best is None:  # cannot happen with c0 alone unless times are absurd; keep a clear message
        raise ConfigError("profile: no non-negative fit found (are the measured times positive?)")
    return LinearStepTime(float(best[0]), float(best[1]), float(best[2]), float(best[3]), source=source)


def _errors_pct(model: LinearStepTime, points: list[ProfilePoint]) -> np.ndarray:
    X, y = _design(points)
    pred = model.times(X[:, 1], X[:, 2], X[:, 3])
    return np.abs(pred - y) / y * 100


def profile(engine, grid: Grid | str = "quick", progress: bool = False) -> Profile:
    """Measure ``grid`` on ``engine`` and fit; ``Profile.write(path)`` saves the calibration."""
    import torch
    import transformers

    if isinstance(grid, str):
        if grid not in GRIDS:
            raise ConfigError(f"grid must be one of {', '.join(GRIDS)}, got {grid!r}")
        grid = GRIDS[grid]
    lm = engine.lm
    t0 = time.perf_counter()
    points = measure(engine, grid, progress)
    seconds = time.perf_counter() - t0
    source = f"realrun profile: {lm.name} on {lm.device}, {lm.dtype}, {lm.threads} threads"
    overall = fit_with_heldout(points, source)
    families = {}
    for name in FAMILIES:
        sub = [q for q in points if _in_family(q, name)]
        if len(sub) >= 4 and len(sub) < len(points):
            families[name] = fit_with_heldout(sub, f"{source} ({name} policies)")
    info = {
        "model_name": lm.name, "model_source": lm.source, "random_weights": lm.random_weights,
        "device": lm.device, "dtype": lm.dtype, "threads": lm.threads, "engine": getattr(engine, "name", "ours"),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    return Profile(points, overall, families, seconds, info)


def load_profile_points(path: str | Path) -> list[ProfilePoint]:
    """The measured points stored in a calibration file (for plots and refits)."""
    data = json.loads(Path(path).read_text())
    return [ProfilePoint(**q) for q in data.get("points", [])]
