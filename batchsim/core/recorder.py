"""Recording a run as it goes: the step's row, first starts and finishes, and the token events.

Both clocks feed a ``Recorder`` the same calls (``step``, ``reject``, ``route``), and ``records()``
hands out the logbook (``batchsim.core.records.Records``).

A step tells the recorder which requests produced how many tokens; keeping a timestamp
per token would cost 8 bytes a token, so the recorder buffers these events and folds
them (``fold_events``), every few tens of thousands of rows, into each request's first token,
last token, token count and longest gap between two tokens, all in numpy. Folding in chunks
gives, to the bit, what one fold at the end gives.

Textbook (``batchsim/textbook/``): ``Request.got_token``, called for each token as its pass
ends, and ``run.records``; the buffering and the fold are here for speed alone.
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path

import numpy as np

from .records import Records
from .step import Step, StepOutcome
from .steplog import CHUNK, StepLog
from .workload import Workload

__all__ = ["Recorder", "fold_events", "FOLD_ROWS"]


_chain = chain.from_iterable

#: Token rows buffered before they are folded into the per-request arrays.
FOLD_ROWS = 1 << 16


class Recorder:
    """Fed by a driver as a run goes; ``records()`` hands out the finished logbook.

    Token events are folded into the per-request arrays every ``fold_rows`` rows, so the
    buffer stays bounded however long the run; ``steps``: "keep" the step log, or keep only
    its "summary" (totals); ``steps_path`` also streams it to a CSV file. ``replicas`` > 1:
    a fleet, whose steps and requests carry the replica that served them.
    """

    def __init__(
        self,
        workload: Workload,
        fold_rows: int = FOLD_ROWS,
        steps: str = "keep",
        steps_path: str | Path | None = None,
        replicas: int = 1,
        step_chunk: int = CHUNK,
    ) -> None:
        n = len(workload)
        self.arrival = workload.arrivals
        self.prompt_tokens = workload.prompt_tokens
        self.output_tokens = workload.output_tokens
        nan = np.full(n, np.nan)
        self.start, self.first_token, self.finish, self.last_token = (
            nan.copy(),
            nan.copy(),
            nan.copy(),
            nan.copy(),
        )
        self.itl_max = nan
        self.tokens = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.rejected: list[str | None] = [None] * n
        self.replica = np.zeros(n, dtype=np.int16) if replicas > 1 else None
        self.fold_rows = fold_rows
        self.log = StepLog(
            keep=steps == "keep", path=steps_path, replicas=replicas, chunk=step_chunk
        )
        self._rows = self.log.rows  # the log's list of rows not yet packed, appended to directly
        self._ends = self.log.ends  # each server's last step end, as its clock had it
        self._events: list[tuple] = []
        self._buffered = 0

    def reject(self, request_id: int, reason: str) -> None:
        self.rejected[request_id] = reason

    def route(self, request_id: int, replica: int) -> None:
        self.replica[request_id] = replica

    def reject_unfinished(self, reason: str, arrived: int | None = None) -> None:
        """After a run stopped early: reject, with the reason, every request neither finished nor
        rejected, so the conservation check still holds (requests ``>= arrived`` never arrived).
        Only the requests recorded (one ``rejected`` entry each): a recorder that grows keeps spare
        capacity beyond them, NaN, which is no request's."""
        for i in np.flatnonzero(np.isnan(self.finish[: len(self.rejected)])).tolist():
            if self.rejected[i] is None:
                self.rejected[i] = (
                    reason if arrived is None or i < arrived else f"{reason} (never arrived)"
                )

    def step(
        self, step: Step, t_start: float, ends, outcome: StepOutcome, replica: int = 0
    ) -> None:
        """Record ``len(ends)`` repetitions of ``step`` that began at t_start and ended at ``ends``.
        Textbook: the end of ``serve``'s loop, once a pass (one row here for a run of passes)."""
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
            # rows and step ends: both are kept until the fold
            self._buffered += len(ids) + len(ends)
            if self._buffered >= self.fold_rows:
                self._fold()
        t_end = self._ends[replica] = float(ends[-1])
        if outcome.finished:
            finish = self.finish
            for rid in outcome.finished:  # a request or two, mostly: cheaper than a fancy index
                finish[rid] = t_end
        row = (
            t_start,
            t_end - t_start,
            len(ends),
            len(prefill) + len(step.decode),
            prompt,
            len(step.decode),
            step.padded_rows,
            step.kv_in_use,
            len(step.preempted),
        )
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
            self.arrival,
            self.prompt_tokens,
            self.output_tokens,
            self.start,
            self.first_token,
            self.finish,
            self.last_token,
            self.tokens,
            self.preemptions,
            self.itl_max,
            self.rejected,
            self.log.arrays(),
            self.replica,
            step_ends=list(self.log.ends),
        )
        if not self.log.keep:
            r.totals_by_replica = self.log.totals
        return r


def fold_events(
    events: list,
    first_token: np.ndarray,
    last_token: np.ndarray,
    itl_max: np.ndarray,
    tokens: np.ndarray,
    slot=None,
) -> None:
    """Fold buffered token events into per-request arrays, all in numpy.

    Each event is (ids, counts, ends, t_start): row ``id`` produced ``c`` tokens, one at the
    end of each of the first c repetitions of a run that began at t_start and whose
    repetitions ended at ``ends``. So its first token is at ends[0], its last at ends[c-1],
    and the gaps inside the run are the step durations 2..c. The gap before its first token
    is the distance from the same request's previous event. Events are in time order, so a
    stable sort by id keeps each request's in order; a request's last token from an earlier
    fold is in ``last_token``, which is why folding in chunks gives, bit for bit, what one
    fold at the end gives. ``slot(ids)`` maps ids to array positions (a ring of live
    requests in a summary-only run); None: ids are positions.

    Textbook: ``Request.got_token``, called once a token; the sort and the ``reduceat``s do its
    comparisons and its count for a chunk of events at once.
    """
    if not events:
        return
    ids, counts, first, last, inner = _event_rows(events)
    # A stable sort keeps each request's events in time order. The ids of one chunk lie in a narrow
    # window (the requests running meanwhile): as 16-bit offsets from the lowest they sort by radix,
    # several times faster than 32-bit keys, themselves twice as fast as 64-bit ones; the order of
    # equal keys is the same, so the permutation is too.
    lo, hi = int(ids.min()), int(ids.max())
    key = (
        (ids - lo).astype(np.uint16)
        if hi - lo < 2**16
        else ids.astype(np.int32)
        if hi < 2**31
        else ids
    )
    order = np.argsort(key, kind="stable")
    ids = ids[order]
    first = first[order]
    last = last[order]
    counts = counts[order]
    # Each request's events form one group: reduce each group, then update that request once.
    new = np.empty(len(ids), dtype=bool)
    new[0] = True
    np.not_equal(ids[1:], ids[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    u = ids[starts]
    pos = u if slot is None else slot(u)
    prev_last = np.empty_like(last)
    prev_last[1:] = last[:-1]
    prev_last[starts] = last_token[pos]
    gap = first - prev_last  # NaN where no earlier token
    if inner is not None:
        gap = np.fmax(gap, inner[order])
    gmax = np.fmax.reduceat(gap, starts)
    itl_max[pos] = np.fmax(itl_max[pos], gmax)
    first_token[pos] = np.fmin(first_token[pos], first[starts])
    ends_idx = np.empty_like(starts)
    ends_idx[:-1] = starts[1:] - 1
    ends_idx[-1] = len(ids) - 1
    last_token[pos] = np.fmax(last_token[pos], last[ends_idx])
    tokens[pos] += np.add.reduceat(counts, starts)


def _event_rows(
    events: list,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """One row per (event, id), in time order: (ids, token counts, first token's time, last token's
    time, longest gap inside the event's repetitions: None when no event repeated)."""
    id_list = [e[0] for e in events]
    end_list = [e[2] for e in events]
    ne = len(events)
    ids = np.concatenate(id_list)
    counts = np.concatenate([e[1] for e in events])
    lens = np.fromiter(map(len, id_list), dtype=np.int64, count=ne)
    m = np.fromiter(map(len, end_list), dtype=np.int64, count=ne)
    total = int(m.sum())
    if total <= 4 * ne:
        # Steps of a pass or a few (a continuous batch's), their ends short lists of floats: one
        # pass over them all costs less than making each an array for ``concatenate``.
        ends = np.fromiter(_chain(end_list), dtype=np.float64, count=total)
    else:  # long runs of passes (a padded batch's), their ends arrays: copied whole
        ends = np.concatenate(end_list).astype(np.float64, copy=False)
    estart = np.cumsum(m)
    estart -= m
    off = np.repeat(estart, lens)
    first = ends[off]
    off += counts
    off -= 1
    last = ends[off]
    inner = None
    if len(ends) > ne:  # some event ran several repetitions: rows with c > 1 have gaps inside it
        multi = np.flatnonzero(counts > 1)
        if len(multi):
            prev_end = np.empty_like(ends)
            prev_end[1:] = ends[:-1]
            prev_end[estart] = np.fromiter((e[3] for e in events), dtype=np.float64, count=ne)
            durs = ends - prev_end
            durs = np.append(durs, np.nan)
            hi = off[multi] + 1  # one past the row's last repetition
            lo = hi - counts[multi] + 1  # the row's second repetition
            inner = np.full(len(ids), np.nan)
            inner[multi] = np.maximum.reduceat(durs, np.column_stack([lo, hi]).ravel())[::2]
    return ids, counts, first, last, inner
