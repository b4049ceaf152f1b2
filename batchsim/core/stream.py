"""Summary-only records: a run of ten million requests in the memory of a few thousand.

A full run keeps every request's times to the end (``Recorder``: about 90 bytes a
request). A summary-only run (``simulate(..., records="summary")``) keeps a request
only while it is in flight: its times live in a ring of slots indexed by id, and the
moment it is finished (or turned away) its latencies are folded into running sums and
quantile sketches (``QuantileSketch``) and its slot is handed to a later request. The
step log is kept as totals. Memory is then set by how many requests are in flight at
once, not by how many the run serves.

What it gives up: per-request arrays (no CSV of requests, no latency plots), exact
percentiles (each is within the sketch's stated relative error, 0.5 % by default, of
the exact one), and the freedom to choose the SLO afterwards: goodput needs every
objective checked on each request together, so the SLO is given when the run starts.
Means, counts, tokens, throughput and busy time are exact.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .recorder import FOLD_ROWS, fold_events
from .sketch import DEFAULT_RELATIVE_ERROR, QuantileSketch
from .step import Step, StepOutcome
from .steplog import StepLog, StepTotals
from .workload import Workload

__all__ = ["StreamRecorder", "StreamRecords", "StreamStats", "SKETCHED"]

#: The latencies a summary-only run sketches (summarize's names).
SKETCHED = ("ttft", "e2e", "queue_wait", "tpot", "itl_max")


@dataclass
class StreamStats:
    """Running sums and sketches of the finished requests of one server (or a whole fleet)."""

    alpha: float = DEFAULT_RELATIVE_ERROR
    completed: int = 0
    output_tokens: int = 0
    gaps: int = 0  # token gaps (tokens - 1, summed): ITL's denominator
    gap_time: float = 0.0
    last_finish: float | None = None
    slo_met: int = 0
    sums: dict = field(default_factory=dict)
    sketches: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for k in SKETCHED:
            self.sums.setdefault(k, [0.0, 0])
            self.sketches.setdefault(k, QuantileSketch(self.alpha))

    def add(self, name: str, values: np.ndarray) -> None:
        v = values[np.isfinite(values)]
        s = self.sums[name]
        s[0] += float(v.sum())
        s[1] += len(v)
        self.sketches[name].add(v)

    def merged(self, other: StreamStats) -> StreamStats:
        out = StreamStats(
            self.alpha,
            self.completed + other.completed,
            self.output_tokens + other.output_tokens,
            self.gaps + other.gaps,
            self.gap_time + other.gap_time,
            max((x for x in (self.last_finish, other.last_finish) if x is not None), default=None),
            self.slo_met + other.slo_met,
        )
        for k in SKETCHED:
            out.sums[k] = [self.sums[k][0] + other.sums[k][0], self.sums[k][1] + other.sums[k][1]]
            out.sketches[k] = self.sketches[k].merge(other.sketches[k])
        return out


class StreamRecords:
    """What a summary-only run keeps: per-server stats, rejections by reason, step totals.

    ``rejected`` maps each reason to how many requests it turned away (``rejections`` reads it).
    """

    def __init__(
        self,
        arrived: int,
        stats: list[StreamStats],
        rejected_by: list[Counter],
        totals: list[StepTotals],
        last_arrival: float | None,
        slo,
        streaming: bool,
    ) -> None:
        self.arrived = arrived
        self.stats = stats
        self.rejected_by = rejected_by
        self.rejected = sum(rejected_by, Counter())
        self.totals_by_replica = totals
        self.last_arrival = last_arrival
        self.slo = slo
        self.streaming = streaming

    def __len__(self) -> int:
        return self.arrived

    @property
    def summary_only(self) -> bool:
        return True

    @property
    def completed(self) -> int:
        return sum(s.completed for s in self.stats)

    def fleet_stats(self) -> StreamStats:
        out = self.stats[0]
        for s in self.stats[1:]:
            out = out.merged(s)
        return out

    def step_totals(self) -> StepTotals:
        t = StepTotals()
        for x in self.totals_by_replica:
            t = t.merged(x)
        return t

    def last_step_end(self) -> float | None:
        ends = [t.last_end for t in self.totals_by_replica if t.last_end is not None]
        return max(ends) if ends else None

    def last_finish(self) -> float | None:
        return self.fleet_stats().last_finish

    def for_replica(self, i: int) -> StreamRecords:
        rej = self.rejected_by[i]
        return StreamRecords(
            self.stats[i].completed + sum(rej.values()),
            [self.stats[i]],
            [rej],
            [self.totals_by_replica[i]],
            self.last_arrival,
            self.slo,
            self.streaming,
        )


class StreamRecorder:
    """The summary-only recorder: the ``Recorder``'s calls, a ring of live requests, sketches.

    ``slo`` and ``streaming`` (whether a token counts as delivered when produced, as
    ``summarize`` decides it) fix how goodput is counted, since no request is kept to
    count it later.
    """

    def __init__(
        self,
        workload: Workload,
        slo=None,
        streaming: bool = True,
        replicas: int = 1,
        fold_rows: int = FOLD_ROWS,
        alpha: float = DEFAULT_RELATIVE_ERROR,
        capacity: int = 1 << 16,
        steps_path=None,
    ) -> None:
        self.arrival = workload.arrivals
        self.n = len(workload)
        self.slo, self.streaming = slo, streaming
        self.stats = [StreamStats(alpha) for _ in range(replicas)]
        # per server, by reason
        self.rejected_by: list[Counter] = [Counter() for _ in range(replicas)]
        self.fold_rows = fold_rows
        self.log = StepLog(keep=False, path=steps_path, replicas=replicas)
        self._rows = self.log.rows
        self.replicas = replicas
        self.lo = 0  # every id below this is finished or rejected, and its slot handed on
        self._events: list[tuple] = []
        self._buffered = 0
        self._finished: list[np.ndarray] = []
        self._alloc(capacity)

    # -- the ring of live requests ----------------------------------------------------------
    def _alloc(self, cap: int) -> None:
        self.cap, self.mask = cap, cap - 1
        self.start, self.first_token, self.last_token, self.finish, self.itl_max = (
            np.full(cap, np.nan) for _ in range(5)
        )
        self.tokens = np.zeros(cap, dtype=np.int64)
        self.replica = np.zeros(cap, dtype=np.int16)
        self.done = np.zeros(cap, dtype=bool)

    def _room_for(self, rid: int) -> None:
        """Grow the ring (doubling) until request ``rid`` has a slot beside every live one."""
        if rid - self.lo < self.cap:
            return
        cap = self.cap
        while rid - self.lo >= cap:
            cap *= 2
        ids = np.arange(self.lo, self.lo + self.cap)
        old = ids & self.mask
        saved = [
            (name, getattr(self, name)[old])
            for name in (
                "start",
                "first_token",
                "last_token",
                "finish",
                "itl_max",
                "tokens",
                "replica",
                "done",
            )
        ]
        self._alloc(cap)
        new = ids & self.mask
        for name, values in saved:
            getattr(self, name)[new] = values

    def _slot(self, ids: np.ndarray) -> np.ndarray:
        return ids & self.mask

    # -- the Recorder's calls -----------------------------------------------------------------
    def reject(self, request_id: int, reason: str) -> None:
        self._room_for(request_id)
        j = request_id & self.mask
        self.rejected_by[int(self.replica[j])][reason] += 1
        self.done[j] = True

    def route(self, request_id: int, replica: int) -> None:
        self._room_for(request_id)
        self.replica[request_id & self.mask] = replica

    def step(
        self, step: Step, t_start: float, ends, outcome: StepOutcome, replica: int = 0
    ) -> None:
        prefill = step.prefill
        prompt = step.prefill_padding
        if prefill:
            start, mask = self.start, self.mask
            for c in prefill:
                rid = c.request_id
                if rid - self.lo >= self.cap:
                    self._room_for(rid)
                    start, mask = self.start, self.mask
                j = rid & mask
                if start[j] != start[j]:
                    start[j] = t_start
                prompt += c.length
        ids = outcome.token_ids
        if len(ids):
            self._events.append((ids, outcome.token_counts, ends, t_start))
            self._buffered += len(ids) + len(ends)
        t_end = self.log.ends[replica] = float(ends[-1])
        if outcome.finished:
            fin = np.asarray(outcome.finished, dtype=np.int64)
            self.finish[fin & self.mask] = t_end
            self._finished.append(fin)
        if self._buffered >= self.fold_rows:
            self._fold()
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
        rows.append(row if self.replicas == 1 else row + (replica,))
        if len(rows) >= self.log.chunk:
            self.log.pack()

    def reject_unfinished(self, reason: str, arrived: int | None = None) -> None:
        """After a run stopped early: every request neither finished nor rejected is rejected with
        the reason (those ``>= arrived`` never arrived), so the counts still add up."""
        self._fold()
        ids = np.arange(self.lo, self.n)
        open_ = np.ones(len(ids), dtype=bool)
        # later ids were never given a slot: nothing happened to them
        slotted = ids < self.lo + self.cap
        open_[slotted] = ~self.done[ids[slotted] & self.mask]
        left = ids[open_]
        before = int(np.count_nonzero(left < (self.n if arrived is None else arrived)))
        if before:  # a run cut short: counted against the fleet as a whole (server 0's tally)
            self.rejected_by[0][reason] += before
        if len(left) - before:
            self.rejected_by[0][f"{reason} (never arrived)"] += len(left) - before
        self.lo = self.n

    # -- folding finished requests into the stats ---------------------------------------------
    def _fold(self) -> None:
        ev, self._events, self._buffered = self._events, [], 0
        fold_events(
            ev, self.first_token, self.last_token, self.itl_max, self.tokens, slot=self._slot
        )
        if self._finished:
            fin, self._finished = np.concatenate(self._finished), []
            self._account(fin)
        self._advance()

    def _account(self, ids: np.ndarray) -> None:
        j = ids & self.mask
        arr = self.arrival[ids]
        first, last, fin, tok = (
            self.first_token[j],
            self.last_token[j],
            self.finish[j],
            self.tokens[j],
        )
        ttft = first - arr
        e2e = fin - arr
        delivered = ttft if self.streaming else e2e
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(tok > 1, (fin - first) / (tok - 1), np.nan)
        slo = self.slo
        ok = slo.met(delivered, e2e, fin - first, tok) if slo is not None and slo.any else None
        groups = (
            [(0, slice(None))]
            if self.replicas == 1
            else [(r, self.replica[j] == r) for r in np.unique(self.replica[j]).tolist()]
        )
        for r, sel in groups:
            st = self.stats[r]
            st.completed += len(ids[sel])
            st.output_tokens += int(tok[sel].sum())
            st.gaps += int((tok[sel] - 1).sum())
            st.gap_time += float((last[sel] - first[sel]).sum())
            top = float(fin[sel].max())
            st.last_finish = top if st.last_finish is None else max(st.last_finish, top)
            for name, v in (
                ("ttft", ttft),
                ("e2e", e2e),
                ("queue_wait", self.start[j] - arr),
                ("tpot", tpot),
                ("itl_max", self.itl_max[j]),
            ):
                st.add(name, v[sel])
            if ok is not None:
                st.slo_met += int(np.count_nonzero(ok[sel]))
        self.done[j] = True

    def _advance(self) -> None:
        """Hand on the slots of the leading run of finished (or rejected) requests."""
        span = min(self.cap, self.n - self.lo)
        if span <= 0:
            return
        ids = np.arange(self.lo, self.lo + span)
        j = ids & self.mask
        d = self.done[j]
        k = span if d.all() else int(np.argmin(d))
        if not k:
            return
        j = j[:k]
        for a in (self.start, self.first_token, self.last_token, self.finish, self.itl_max):
            a[j] = np.nan
        self.tokens[j] = 0
        self.replica[j] = 0
        self.done[j] = False
        self.lo += k

    def records(self) -> StreamRecords:
        self._fold()
        self.log.close()
        return StreamRecords(
            self.n,
            self.stats,
            self.rejected_by,
            self.log.totals,
            float(self.arrival[-1]) if self.n else None,
            self.slo,
            self.streaming,
        )
