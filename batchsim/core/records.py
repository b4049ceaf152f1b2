"""What happened to every request and every step: the logbook both clocks write.

The simulator and realrun's wall-clock runner feed the same ``Recorder`` with the
same calls, so their ``Records`` have one schema and ``batchsim.core.metrics`` reads
either. Per request: arrival, start of its first step, first token, finish,
tokens produced, preemptions, rejection reason, and its inter-token gaps
summarised as a mean and a max, so ITL and TPOT are exact without storing a
timestamp per token. Per step (a repeated step is one row): start, duration,
repetitions, batch size, prompt tokens, decode rows, padded rows, KV in use.

Arrays are indexed by request id (ids are 0..n-1), so updating a whole batch is a
handful of numpy operations whatever its size.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .step import Step, StepOutcome
from .workload import Workload

__all__ = ["Records", "Recorder", "SimResult", "STEP_FIELDS", "REQUEST_FIELDS"]

REQUEST_FIELDS = (
    "id", "arrival", "prompt_tokens", "output_tokens", "start", "first_token", "finish",
    "tokens", "preemptions", "itl_mean", "itl_max", "rejected",
)
STEP_FIELDS = (
    "start", "duration", "repeat", "batch_size", "prompt_tokens", "decode_rows", "padded_rows",
    "kv_in_use", "preempted",
)


@dataclass
class Records:
    """Per-request arrays (NaN where a time never happened) and the step log (dict of arrays)."""

    arrival: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    start: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    last_token: np.ndarray
    tokens: np.ndarray
    preemptions: np.ndarray
    itl_max: np.ndarray
    rejected: list[str | None]
    steps: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.arrival)

    @property
    def completed_mask(self) -> np.ndarray:
        return ~np.isnan(self.finish)

    @property
    def rejected_mask(self) -> np.ndarray:
        return np.array([r is not None for r in self.rejected], dtype=bool)

    @property
    def itl_mean(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.tokens > 1, (self.last_token - self.first_token) / (self.tokens - 1), np.nan)

    def request_rows(self) -> list[dict]:
        itl = self.itl_mean
        rows = []
        for i in range(len(self)):
            rows.append({
                "id": i,
                "arrival": float(self.arrival[i]),
                "prompt_tokens": int(self.prompt_tokens[i]),
                "output_tokens": int(self.output_tokens[i]),
                "start": _f(self.start[i]),
                "first_token": _f(self.first_token[i]),
                "finish": _f(self.finish[i]),
                "tokens": int(self.tokens[i]),
                "preemptions": int(self.preemptions[i]),
                "itl_mean": _f(itl[i]),
                "itl_max": _f(self.itl_max[i]),
                "rejected": self.rejected[i],
            })
        return rows

    def write_csv(self, directory: str | Path, prefix: str = "") -> tuple[Path, Path]:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        req_path, step_path = d / f"{prefix}requests.csv", d / f"{prefix}steps.csv"
        with req_path.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=REQUEST_FIELDS)
            w.writeheader()
            w.writerows(self.request_rows())
        with step_path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(STEP_FIELDS)
            w.writerows(zip(*(self.steps[k].tolist() for k in STEP_FIELDS)))
        return req_path, step_path

    def to_json(self) -> str:
        return json.dumps({"requests": self.request_rows(), "steps": {k: v.tolist() for k, v in self.steps.items()}})


def _f(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


class Recorder:
    """Fed by a driver as a run goes; ``records()`` hands out the finished logbook."""

    def __init__(self, workload: Workload) -> None:
        n = len(workload)
        self.arrival = workload.arrivals
        self.prompt_tokens = workload.prompt_tokens
        self.output_tokens = workload.output_tokens
        nan = np.full(n, np.nan)
        self.start, self.first_token, self.finish, self.last_token = nan.copy(), nan.copy(), nan.copy(), nan.copy()
        self.itl_max = nan.copy()
        self.tokens = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.rejected: list[str | None] = [None] * n
        self._steps: list[tuple] = []
        self._events: list[tuple[np.ndarray, np.ndarray, np.ndarray, float]] = []

    def reject(self, request_id: int, reason: str) -> None:
        self.rejected[request_id] = reason

    def reject_unfinished(self, reason: str, arrived: int | None = None) -> None:
        """After a run stopped early: reject, with the reason, every request neither finished nor
        rejected, so the conservation check still holds (requests ``>= arrived`` never arrived)."""
        finish = self.records().finish
        for i in np.flatnonzero(np.isnan(finish)).tolist():
            if self.rejected[i] is None:
                self.rejected[i] = reason if arrived is None or i < arrived else f"{reason} (never arrived)"

    def step(self, step: Step, t_start: float, ends: np.ndarray, outcome: StepOutcome) -> None:
        """Record ``len(ends)`` repetitions of ``step`` that began at t_start and ended at ``ends``."""
        m = len(ends)
        start = self.start
        for c in step.prefill:
            if start[c.request_id] != start[c.request_id]:  # NaN: first time this request is served
                start[c.request_id] = t_start
        if step.preempted:
            np.add.at(self.preemptions, np.asarray(step.preempted, dtype=np.int64), 1)
        if len(outcome.token_ids):
            # Token bookkeeping is deferred: a list append here, one vectorised pass in records().
            self._events.append((outcome.token_ids, outcome.token_counts, ends, t_start))
        if outcome.finished:
            self.finish[np.asarray(outcome.finished, dtype=np.int64)] = ends[-1]
        self._steps.append((
            t_start, float(ends[-1] - t_start), m, step.batch_size, step.prefill_tokens,
            len(step.decode), step.padded_rows, step.kv_in_use, len(step.preempted),
        ))

    def _fold_events(self) -> None:
        """Fold the buffered token events into the per-request arrays, all in numpy.

        Each event says: row ``id`` produced ``c`` tokens, one at the end of each of the first
        c repetitions of a run whose repetitions ended at ``ends``. So its first token is at
        ends[0], its last at ends[c-1], and the gaps inside the run are the step durations
        2..c. The gap before its first token is the distance from the same request's previous
        event. Events are in time order, so a stable sort by id keeps each request's in order.
        """
        if not self._events:
            return
        ev, self._events = self._events, []
        ids = np.concatenate([e[0] for e in ev])
        counts = np.concatenate([e[1] for e in ev])
        lens = np.fromiter((len(e[0]) for e in ev), dtype=np.int64, count=len(ev))
        m = np.fromiter((len(e[2]) for e in ev), dtype=np.int64, count=len(ev))
        ends = np.concatenate([e[2] for e in ev])
        prev_end = np.concatenate([np.concatenate(([e[3]], e[2][:-1])) for e in ev])
        durs = np.append(ends - prev_end, np.nan)  # one spare slot keeps reduceat's indices in range
        off = np.repeat(np.cumsum(m) - m, lens)  # where each event's run starts in `ends`
        first = ends[off]
        last = ends[off + counts - 1]
        inner = np.full(len(ids), np.nan)
        multi = counts > 1
        if multi.any():
            lo, hi = off[multi] + 1, off[multi] + counts[multi]
            inner[multi] = np.maximum.reduceat(durs, np.column_stack([lo, hi]).ravel())[::2]
        order = np.argsort(ids, kind="stable")
        ids, counts, first, last, inner = ids[order], counts[order], first[order], last[order], inner[order]
        same = np.zeros(len(ids), dtype=bool)
        same[1:] = ids[1:] == ids[:-1]
        before = np.where(same, first - np.roll(last, 1), first - self.last_token[ids])  # NaN if no earlier token
        gap = np.fmax(inner, before)
        np.fmax.at(self.itl_max, ids, gap)
        np.fmin.at(self.first_token, ids, first)
        np.fmax.at(self.last_token, ids, last)
        np.add.at(self.tokens, ids, counts)

    def records(self) -> Records:
        self._fold_events()
        cols = list(zip(*self._steps)) if self._steps else [()] * len(STEP_FIELDS)
        dtypes = (float, float, np.int64, np.int64, np.int64, np.int64, np.int64, np.int64, np.int64)
        steps = {k: np.asarray(c, dtype=t) for k, c, t in zip(STEP_FIELDS, cols, dtypes)}
        return Records(
            self.arrival, self.prompt_tokens, self.output_tokens, self.start, self.first_token, self.finish,
            self.last_token, self.tokens, self.preemptions, self.itl_max, self.rejected, steps,
        )


@dataclass
class SimResult:
    """A finished run, on either clock: the records plus what the summary needs to know about the server."""

    records: Records
    policy: str
    step_time: str
    kv_budget_tokens: int | None
    kv_peak_tokens: int
    preemptions: int
    workload: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def makespan(self) -> float:
        """From time 0 (the first arrival) until the last request finished or was turned away."""
        r = self.records
        ends = [np.nanmax(r.finish)] if r.completed_mask.any() else []
        if len(r.arrival):
            ends.append(float(r.arrival[-1]))
        if len(r.steps["start"]):
            ends.append(float(r.steps["start"][-1] + r.steps["duration"][-1]))
        return float(max(ends)) if ends else 0.0
