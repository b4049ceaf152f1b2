"""What happened to every request and every step: the logbook both clocks write.

The simulator and realrun's wall-clock runner feed the same ``Recorder``
(``batchsim.core.recorder``) with the same calls, so their ``Records`` have one schema and
``batchsim.core.metrics`` reads either. Per request: arrival, start of its first step, first token,
finish, tokens produced, preemptions, rejection reason, and its inter-token gaps summarised as a
mean and a max, so ITL and TPOT are exact without storing a timestamp per token. Per step (a
repeated step is one row): start, duration, repetitions, batch size, prompt tokens, decode rows,
padded rows, KV in use.

Arrays are indexed by request id (ids are 0..n-1), so updating a whole batch is a
handful of numpy operations whatever its size.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .steplog import STEP_FIELDS, StepTotals

__all__ = ["Records", "STEP_FIELDS", "REQUEST_FIELDS"]

REQUEST_FIELDS = (
    "id",
    "arrival",
    "prompt_tokens",
    "output_tokens",
    "start",
    "first_token",
    "finish",
    "tokens",
    "preemptions",
    "itl_mean",
    "itl_max",
    "rejected",
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
    # a log kept as totals only
    totals_by_replica: list[StepTotals] | None = field(default=None, repr=False)
    #: When each server's last step ended, as its clock had it (None: not known, as in records built
    #: by hand): the last row's start + duration can land an ulp off it (``batchsim.core.steplog``).
    step_ends: list[float | None] | None = field(default=None, repr=False)

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
        if self.step_ends is not None:
            ends = [t for t in self.step_ends if t is not None]
            return max(ends) if ends else None
        st = self.steps
        if not len(st["start"]):
            return None
        if "replica" in st:  # a fleet's servers overlap: the last row is not the last to end
            return float((st["start"] + st["duration"]).max())
        return float(st["start"][-1] + st["duration"][-1])

    def step_totals(self) -> StepTotals:
        """The step log's sums (for the summary), from the kept log or from the totals kept
        instead."""
        if self.totals_by_replica is not None:
            t = StepTotals()
            for x in self.totals_by_replica:
                t = t.merged(x)
            return t
        t = StepTotals.of(self.steps)
        if t.last_end is not None and self.step_ends is not None:
            t.last_end = self.last_step_end()  # the clock's, not the last row's start + duration
        return t

    def for_replica(self, i: int) -> Records:
        """One server's share of a fleet's records: its requests (renumbered in order) and its
        steps."""
        if self.replica is None:
            if i != 0:
                raise IndexError(f"replica {i} of a single server")
            return self
        mine = self.replica == i
        ids = np.flatnonzero(mine)
        steps = {k: v[self.steps["replica"] == i] for k, v in self.steps.items() if k != "replica"}
        r = Records(
            *(getattr(self, k)[ids] for k in _PER_REQUEST),
            [self.rejected[j] for j in ids.tolist()],
            steps,
        )
        if self.totals_by_replica is not None:
            r.totals_by_replica = [self.totals_by_replica[i]]
        if self.step_ends is not None:
            r.step_ends = [self.step_ends[i]]
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
            return np.where(
                self.tokens > 1, (self.last_token - self.first_token) / (self.tokens - 1), np.nan
            )

    def request_rows(self) -> list[dict]:
        itl = self.itl_mean
        rows = []
        for i in range(len(self)):
            rows.append(
                {
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
                }
            )
            if self.replica is not None:
                rows[-1]["replica"] = int(self.replica[i])
        return rows

    def write_csv(self, directory: str | Path, prefix: str = "") -> tuple[Path, Path]:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        req_path, step_path = d / f"{prefix}requests.csv", d / f"{prefix}steps.csv"
        with req_path.open("w", newline="") as fh:
            w = csv.DictWriter(
                fh, fieldnames=REQUEST_FIELDS + (("replica",) if self.replica is not None else ())
            )
            w.writeheader()
            w.writerows(self.request_rows())
        with step_path.open("w", newline="") as fh:
            w = csv.writer(fh)
            fields = [k for k in (*STEP_FIELDS, "replica") if k in self.steps]
            w.writerow(fields)
            w.writerows(zip(*(self.steps[k].tolist() for k in fields)))
        return req_path, step_path

    def to_json(self) -> str:
        return json.dumps(
            {
                "requests": self.request_rows(),
                "steps": {k: v.tolist() for k, v in self.steps.items()},
            }
        )


_PER_REQUEST = (
    "arrival",
    "prompt_tokens",
    "output_tokens",
    "start",
    "first_token",
    "finish",
    "last_token",
    "tokens",
    "preemptions",
    "itl_max",
)


def _f(x: float) -> float | None:
    return None if np.isnan(x) else float(x)
