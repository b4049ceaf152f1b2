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

from .fold import fold_events
from .step import Step, StepOutcome
from .steplog import CHUNK, STEP_FIELDS, StepLog, StepTotals
from .workload import Workload

__all__ = ["Records", "Recorder", "STEP_FIELDS", "REQUEST_FIELDS", "fold_events", "FOLD_ROWS"]

REQUEST_FIELDS = (
    "id", "arrival", "prompt_tokens", "output_tokens", "start", "first_token", "finish",
    "tokens", "preemptions", "itl_mean", "itl_max", "rejected",
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
    replica: np.ndarray | None = None  # a fleet's: which server each request was routed to
    totals_by_replica: list[StepTotals] | None = field(default=None, repr=False)  # a log kept as totals only

    def __len__(self) -> int:
        return len(self.arrival)

    @property
    def completed(self) -> int:
        return int(np.count_nonzero(~np.isnan(self.finish)))

    @property
    def summary_only(self) -> bool:
        return False

    @property
    def last_arrival(self) -> float | None:
        return float(self.arrival[-1]) if len(self.arrival) else None

    def last_finish(self) -> float | None:
        return float(np.nanmax(self.finish)) if self.completed else None

    def last_step_end(self) -> float | None:
        """When the last step ended (None: no step ran)."""
        if self.totals_by_replica is not None:
            ends = [t.last_end for t in self.totals_by_replica if t.last_end is not None]
            return max(ends) if ends else None
        st = self.steps
        if not len(st["start"]):
            return None
        if "replica" in st:  # a fleet's servers overlap: the last row is not the last to end
            return float((st["start"] + st["duration"]).max())
        return float(st["start"][-1] + st["duration"][-1])

    def step_totals(self) -> StepTotals:
        """The step log's sums (for the summary), from the kept log or from the totals kept instead."""
        if self.totals_by_replica is not None:
            t = StepTotals()
            for x in self.totals_by_replica:
                t = t.merged(x)
            return t
        return StepTotals.of(self.steps)

    def for_replica(self, i: int) -> "Records":
        """One server's share of a fleet's records: its requests (renumbered in order) and its steps."""
        if self.replica is None:
            if i != 0:
                raise IndexError(f"replica {i} of a single server")
            return self
        mine = self.replica == i
        ids = np.flatnonzero(mine)
        steps = {k: v[self.steps["replica"] == i] for k, v in self.steps.items() if k != "replica"}
        r = Records(*(getattr(self, k)[ids] for k in _PER_REQUEST), [self.rejected[j] for j in ids.tolist()], steps)
        if self.totals_by_replica is not None:
            r.totals_by_replica = [self.totals_by_replica[i]]
        return r

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
            if self.replica is not None:
                rows[-1]["replica"] = int(self.replica[i])
        return rows

    def write_csv(self, directory: str | Path, prefix: str = "") -> tuple[Path, Path]:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        req_path, step_path = d / f"{prefix}requests.csv", d / f"{prefix}steps.csv"
        with req_path.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=REQUEST_FIELDS + (("replica",) if self.replica is not None else ()))
            w.writeheader()
            w.writerows(self.request_rows())
        with step_path.open("w", newline="") as fh:
            w = csv.writer(fh)
            fields = [k for k in (*STEP_FIELDS, "replica") if k in self.steps]
            w.writerow(fields)
            w.writerows(zip(*(self.steps[k].tolist() for k in fields)))
        return req_path, step_path

    def to_json(self) -> str:
        return json.dumps({"requests": self.request_rows(), "steps": {k: v.tolist() for k, v in self.steps.items()}})


_PER_REQUEST = ("arrival", "prompt_tokens", "output_tokens", "start", "first_token", "finish", "last_token", "tokens",
                "preemptions", "itl_max")


def _f(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


#: Token rows buffered before they are folded into the per-request arrays.
FOLD_ROWS = 1 << 16


class Recorder:
    """Fed by a driver as a run goes; ``records()`` hands out the finished logbook.

    Token events are folded into the per-request arrays every ``fold_rows`` rows, so the
    buffer stays bounded however long the run; ``steps``: "keep" the step log, or keep only
    its "summary" (totals); ``steps_path`` also streams it to a CSV file. ``replicas`` > 1:
    a fleet, whose steps and requests carry the replica that served them.
    """

    def __init__(self, workload: Workload, fold_rows: int = FOLD_ROWS, steps: str = "keep",
                 steps_path: str | Path | None = None, replicas: int = 1, step_chunk: int = CHUNK) -> None:
        n = len(workload)
        self.arrival = workload.arrivals
        self.prompt_tokens = workload.prompt_tokens
        self.output_tokens = workload.output_tokens
        nan = np.full(n, np.nan)
        self.start, self.first_token, self.finish, self.last_token = nan.copy(), nan.copy(), nan.copy(), nan.copy()
        self.itl_max = nan
        self.tokens = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.rejected: list[str | None] = [None] * n
        self.replica = np.zeros(n, dtype=np.int16) if replicas > 1 else None
        self.fold_rows = fold_rows
        self.log = StepLog(keep=steps == "keep", path=steps_path, replicas=replicas, chunk=step_chunk)
        self._rows = self.log.rows  # the log's list of rows not yet packed, appended to directly
        self._events: list[tuple] = []
        self._buffered = 0

    def reject(self, request_id: int, reason: str) -> None:
        self.rejected[request_id] = reason

    def route(self, request_id: int, replica: int) -> None:
        self.replica[request_id] = replica

    def reject_unfinished(self, reason: str, arrived: int | None = None) -> None:
        """After a run stopped early: reject, with the reason, every request neither finished nor
        rejected, so the conservation check still holds (requests ``>= arrived`` never arrived)."""
        for i in np.flatnonzero(np.isnan(self.finish)).tolist():
            if self.rejected[i] is None:
                self.rejected[i] = reason if arrived is None or i < arrived else f"{reason} (never arrived)"

    def step(self, step: Step, t_start: float, ends, outcome: StepOutcome, replica: int = 0) -> None:
        """Record ``len(ends)`` repetitions of ``step`` that began at t_start and ended at ``ends``."""
        prefill = step.prefill
        prompt = step.prefill_padding
        if prefill:
            start = self.start
            for c in prefill:
                rid = c.request_id
                if start[rid] != start[rid]:  # NaN: first time this request is served
                    start[rid] = t_start
                prompt += c.length
        if step.preempted:
            np.add.at(self.preemptions, np.asarray(step.preempted, dtype=np.int64), 1)
        ids = outcome.token_ids
        if len(ids):
            # Token bookkeeping is deferred: a list append here, one vectorised pass per chunk.
            self._events.append((ids, outcome.token_counts, ends, t_start))
            self._buffered += len(ids) + len(ends)  # rows and step ends: both are kept until the fold
            if self._buffered >= self.fold_rows:
                self._fold()
        t_end = float(ends[-1])
        if outcome.finished:
            finish = self.finish
            for rid in outcome.finished:  # a request or two, mostly: cheaper than a fancy index
                finish[rid] = t_end
        row = (t_start, t_end - t_start, len(ends), len(prefill) + len(step.decode), prompt,
               len(step.decode), step.padded_rows, step.kv_in_use, len(step.preempted))
        rows = self._rows
        rows.append(row if self.replica is None else row + (replica,))
        if len(rows) >= self.log.chunk:
            self.log.pack()

    def _fold(self) -> None:
        ev, self._events, self._buffered = self._events, [], 0
        fold_events(ev, self.first_token, self.last_token, self.itl_max, self.tokens)

    def records(self) -> Records:
        self._fold()
        self.log.close()
        r = Records(
            self.arrival, self.prompt_tokens, self.output_tokens, self.start, self.first_token, self.finish,
            self.last_token, self.tokens, self.preemptions, self.itl_max, self.rejected, self.log.arrays(), self.replica,
        )
        if not self.log.keep:
            r.totals_by_replica = self.log.totals
        return r
