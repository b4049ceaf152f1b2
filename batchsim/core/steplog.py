"""The step log: one row per (possibly repeated) step, kept, streamed to disk, or only summed.

A million-request run takes about two million steps. Kept as Python tuples that is
hundreds of bytes a step; here rows are gathered in a short list and packed, every
``CHUNK`` rows, into numpy columns (72 bytes a row). A run that needs no per-step
detail (a capacity plan, a ten-million-request run) keeps only the sums that the
summary reads (``StepTotals``); either kind may also stream its rows to a CSV file as
they are packed, so the detail is on disk and not in memory.

``StepTotals`` is what ``batchsim.core.metrics.summarize`` reads from the log: busy
time, repetitions, the batch-size histogram, padded rows, the last step's end. From
kept arrays it is computed exactly as from the whole log; summed chunk by chunk it
can differ in the last bits of the busy time (the additions are grouped differently).

A row keeps a step's start and duration (``end - start``); ``start + duration`` read back may
land an ulp either side of the end the clock had (0.1 + (0.4000000000000002 - 0.1) is
0.40000000000000013), and which side depends on how passes were grouped into rows. So the log
also keeps each server's true last end (``ends``, set by the recorder as each step ends), and
that is the end a summary reads: the makespan is the same however a run was grouped.

Textbook: ``serve``'s ``log.append(...)`` (a row a pass) and ``run.records``; the packing into
chunks and the totals are here for long runs alone.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["STEP_FIELDS", "STEP_DTYPES", "StepLog", "StepTotals", "empty_steps"]

STEP_FIELDS = (
    "start",
    "duration",
    "repeat",
    "batch_size",
    "prompt_tokens",
    "decode_rows",
    "padded_rows",
    "kv_in_use",
    "preempted",
)
STEP_DTYPES = (float, float, np.int64, np.int64, np.int64, np.int64, np.int64, np.int64, np.int64)
#: Rows gathered as tuples before they are packed into arrays.
CHUNK = 4096


def empty_steps(fields: tuple[str, ...] = STEP_FIELDS) -> dict[str, np.ndarray]:
    dt = dict(zip(STEP_FIELDS, STEP_DTYPES))
    return {k: np.zeros(0, dtype=dt.get(k, np.int64)) for k in fields}


@dataclass
class StepTotals:
    """The sums of a step log that a summary needs (per replica when ``replica`` is logged)."""

    busy: float = 0.0
    reps: int = 0
    # rows -> repetitions with that many rows
    batch_hist: dict[int, int] = field(default_factory=dict)
    max_batch: int = 0
    batch_reps: int = 0  # sum of rows x repetitions
    padded_reps: int = 0
    decode_reps: int = 0
    last_end: float | None = None
    count: int = 0

    @classmethod
    def of(cls, steps: dict[str, np.ndarray]) -> StepTotals:
        """From a kept log (as ``summarize`` always computed them: one sum over each whole
        column)."""
        t = cls()
        t.add(steps)
        return t

    def add(self, steps: dict[str, np.ndarray]) -> None:
        reps, sizes = steps["repeat"], steps["batch_size"]
        if not len(reps):
            return
        self.busy += float(steps["duration"].sum())
        self.reps += int(reps.sum())
        u, inv = np.unique(sizes, return_inverse=True)
        for k, c in zip(u.tolist(), np.bincount(inv, weights=reps).astype(np.int64).tolist()):
            self.batch_hist[k] = self.batch_hist.get(k, 0) + c
        self.max_batch = max(self.max_batch, int(sizes.max()))
        self.batch_reps += int((sizes * reps).sum())
        self.padded_reps += int((steps["padded_rows"] * reps).sum())
        self.decode_reps += int((steps["decode_rows"] * reps).sum())
        end = float(steps["start"][-1] + steps["duration"][-1])
        self.last_end = end if self.last_end is None else max(self.last_end, end)
        self.count += len(reps)

    def merged(self, other: StepTotals) -> StepTotals:
        t = StepTotals(
            self.busy + other.busy,
            self.reps + other.reps,
            dict(self.batch_hist),
            max(self.max_batch, other.max_batch),
            self.batch_reps + other.batch_reps,
            self.padded_reps + other.padded_reps,
            self.decode_reps + other.decode_reps,
            self.last_end,
            self.count + other.count,
        )
        for k, c in other.batch_hist.items():
            t.batch_hist[k] = t.batch_hist.get(k, 0) + c
        if other.last_end is not None:
            t.last_end = other.last_end if t.last_end is None else max(t.last_end, other.last_end)
        return t


class StepLog:
    """Gathers step rows; ``keep=False`` keeps only totals (per replica); ``path`` streams rows to a
    CSV.

    ``replicas`` > 1 adds a ``replica`` column: which server of a fleet ran the step.
    """

    def __init__(
        self,
        keep: bool = True,
        path: str | Path | None = None,
        replicas: int = 1,
        chunk: int = CHUNK,
    ) -> None:
        self.keep = keep
        self.chunk = chunk
        self.fields = STEP_FIELDS + (("replica",) if replicas > 1 else ())
        self.replicas = replicas
        self.rows: list[tuple] = []
        self.chunks: list[dict[str, np.ndarray]] = []
        self.totals = [StepTotals() for _ in range(replicas)]
        #: When each server's last step ended, as its clock had it (see the module's docstring).
        self.ends: list[float | None] = [None] * replicas
        self._fh = None
        self._writer = None
        self.path = Path(path) if path is not None else None
        if self.path is not None:
            self._fh = self.path.open("w", newline="")
            self._writer = csv.writer(self._fh)
            self._writer.writerow(self.fields)

    def append(self, row: tuple) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.chunk:
            self.pack()

    def pack(self) -> None:
        """Turn the gathered rows into arrays: keep them, write them, or sum them."""
        if not self.rows:
            return
        rows = self.rows.copy()
        self.rows.clear()  # in place: a recorder appends to this very list
        if self._writer is not None:
            self._writer.writerows(rows)
        cols = list(zip(*rows))
        dtypes = STEP_DTYPES + ((np.int64,) if len(self.fields) > len(STEP_FIELDS) else ())
        chunk = {k: np.asarray(c, dtype=t) for k, c, t in zip(self.fields, cols, dtypes)}
        if self.keep:
            self.chunks.append(chunk)
        else:
            self._sum(chunk)

    def _sum(self, chunk: dict[str, np.ndarray]) -> None:
        if self.replicas == 1:
            self.totals[0].add(chunk)
            return
        rep = chunk["replica"]
        for i in np.unique(rep).tolist():
            mask = rep == i
            self.totals[i].add({k: v[mask] for k, v in chunk.items()})

    def close(self) -> None:
        self.pack()
        for t, end in zip(self.totals, self.ends):
            if end is not None:  # the clock's end, not the last row's start + duration
                t.last_end = end
        if self._fh is not None:
            self._fh.close()
            self._fh = self._writer = None

    def arrays(self) -> dict[str, np.ndarray]:
        """The kept log as one array per field (empty when only totals are kept)."""
        self.pack()
        if len(self.chunks) > 1:
            self.chunks = [{k: np.concatenate([c[k] for c in self.chunks]) for k in self.fields}]
        return dict(self.chunks[0]) if self.chunks else empty_steps(self.fields)
