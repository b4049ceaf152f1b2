"""Padded batches: the taxi, the bus and the bus with a timetable.

These three policies run a batch the way Hugging Face ``generate()`` does: the
prompts are left-padded to the longest one, every row keeps decoding until the
*longest* output in the batch is done (finished rows ride along, computing
padding), and every request is delivered when the batch ends. That waste is
exactly what continuous batching removes, so it is modelled, not ignored.

- ``Taxi``: one passenger per ride. No waiting for company, no sharing.
- ``Static(max_batch=N)``: the bus that leaves only when all N seats are taken, or
  the laundromat that runs a machine only when it holds N loads. When arrivals
  have ended (``close``), a partly full bus still departs, so no request is
  stranded at the stop.
- ``Dynamic(max_batch, max_wait)``: the Triton / Ray Serve batcher. Leave when the
  bus is full or when the first passenger has waited ``max_wait`` seconds,
  whichever comes first.

Limits: a padded batch holds, for every row, the padded prompt plus the longest
output (``rows x (P + L)`` KV tokens), reserved when the batch forms; every row
decodes until the longest output is done, so the batch uses ``P + L - 1`` positions of
the model's context; and its prefill computes ``rows x P`` tokens in one pass. A batch
that would break any of these is cut to the longest FIFO prefix that does not (two
requests that each fit alone may not fit together). A request that breaks one alone
is rejected on arrival, with the reason.

Textbook: ``batchsim/textbook/padded.py``, held to the same records by ``tests/test_textbook.py``.
What is here for speed alone: a batch's decode passes are one ``Step`` repeated until the next
row's answer is done (the textbook asks ``next_step`` every pass), its ids and output lengths
kept as arrays, and the distinct output lengths sorted (``_ends``) to count the padded rows.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque

import numpy as np

from ..errors import check_knob
from ..knobs import DynamicKnobs, StaticKnobs
from ..step import Step, StepOutcome, Wait, fast_chunk, fast_step
from ..workload import Request
from .base import Policy

__all__ = ["PaddedBatchPolicy", "Taxi", "Static", "Dynamic"]

# Deadlines are compared with a little slack: a timer set for t may fire at t minus one ulp.
_EPS = 1e-9


class PaddedBatchPolicy(Policy):
    """Common machinery; subclasses decide when a batch departs (``_ready``) and how big it is."""

    max_batch: int = 1
    #: Every request of a batch is delivered when the batch ends, as ``generate()`` returns.
    streams = False

    def start(self, limits=None) -> None:
        super().start(limits)
        self.queue: deque[Request] = deque()
        self.batch: list[Request] = []
        self.batch_prompt = 0  # P: the longest prompt
        self.batch_len = 0  # L: the longest output
        self.steps_done = 0  # 0: not prefilled yet
        self._reserved = 0

    @property
    def max_rows(self) -> int:  # type: ignore[override]
        return self.max_batch

    # -- when does the bus leave -------------------------------------------------
    def _ready(self, now: float) -> bool:
        raise NotImplementedError

    def _deadline(self) -> float | None:
        return None

    # -- the protocol --------------------------------------------------------------
    def on_arrival(self, request: Request, now: float) -> str | None:
        reason = self._never_fits(request) or self.limits.step_tokens_reason(request.prompt_tokens)
        if reason is not None:
            return reason
        need = request.prompt_tokens + request.output_tokens
        if self.kv_budget is not None and need > self.kv_budget:
            return (
                f"needs {need} KV tokens (prompt + output), more than the whole budget of "
                f"{self.kv_budget}"
            )
        self.queue.append(request)
        return None

    @property
    def idle(self) -> bool:
        return not self.queue and not self.batch

    def counts(self) -> tuple[int, int]:
        return len(self.batch), len(self.queue)

    def cancel(self, request_id: int) -> bool:
        """A queued request leaves the queue. One in the batch rides on to the batch's end,
        computing padding, because a padded batch is one tensor that ``generate()`` runs to its
        longest answer."""
        for r in self.queue:
            if r.id == request_id:
                self.queue.remove(r)
                return True
        return False

    def _form_batch(self) -> None:
        """Textbook: ``PaddedBatch.form_batch``."""
        rows: list[Request] = []
        outs: list[int] = []
        p = L = 0
        fits, most = self.limits.padded_batch_fits, self.max_batch
        for r in self.queue:
            if len(rows) == most:
                break
            p2, L2 = max(p, r.prompt_tokens), max(L, r.output_tokens)
            if not fits(len(rows) + 1, p2, L2):
                break  # cut the batch to what the server holds; the rest wait for the next one
            rows.append(r)
            outs.append(r.output_tokens)
            p, L = p2, L2
        popleft = self.queue.popleft
        for _ in rows:
            popleft()
        self.batch, self.batch_prompt, self.batch_len, self.steps_done = rows, p, L, 0
        self._ids = tuple([r.id for r in rows])
        self._batch_ids = np.array(self._ids, dtype=np.int64)
        self._batch_outs = np.array(outs, dtype=np.int64)
        # The distinct output lengths, shortest first: a row turns to padding at each of them.
        self._ends = sorted(set(outs)) if len(outs) > 1 else outs
        self._reserved = len(rows) * (p + L)
        # left-padding columns of the rectangle
        self._padding = len(rows) * p - sum(r.prompt_tokens for r in rows)
        self._use_kv(self._reserved)

    def next_action(self, now: float) -> Step | Wait:
        """Textbook: ``PaddedBatch.next_step``, asked once for the passes until the next row is
        done."""
        if not self.batch:
            if not self.queue or not self._ready(now):
                return Wait(self._deadline() if self.queue else None)
            self._form_batch()
        B, P = len(self.batch), self.batch_prompt
        s = self.steps_done
        if s == 0:
            chunks = tuple([fast_chunk(r.id, 0, r.prompt_tokens, True) for r in self.batch])
            return fast_step(
                chunks, (), 0, 0, 1, False, (), self.kv_in_use, prefill_padding=self._padding
            )
        # rows whose answer is done: they ride along as padding
        padded = bisect_right(self._ends, s)
        # Repeat only while the shape holds: when the next row finishes, one more row turns to
        # padding, and the step log (padded_rows per repetition) must say so.
        return fast_step(
            (),
            self._ids,
            B * (P + s - 1),
            P + s - 1,
            self._ends[padded] - s,
            False,
            (),
            self.kv_in_use,
            padded_rows=int(np.count_nonzero(self._batch_outs <= s)) if padded else 0,
            kv_padding=self._padding,
        )

    def on_step_end(self, step: Step, done: int, now: float) -> StepOutcome:
        """Textbook: ``PaddedBatch.step_done``, for ``done`` passes at once."""
        s0 = self.steps_done
        ids = self._batch_ids
        self.steps_done = s0 + done
        # Every row still producing makes a token at each repetition: a run never outlasts the
        # shortest answer still going (see next_action), so each makes ``done`` of them.
        if s0 >= self._ends[0]:
            ids = ids[self._batch_outs > s0]
        counts = np.empty(len(ids), dtype=np.int64)
        counts.fill(done)
        finished: tuple[int, ...] = ()
        if self.steps_done >= self.batch_len:
            # every row is delivered when the batch ends, including rows that finished earlier
            # and produced nothing in this last run (they were filtered out of ids above)
            finished = self._ids
            self._use_kv(-self._reserved)
            self._reserved = 0
            self.batch = []
        return StepOutcome(ids, counts, finished)


class Taxi(PaddedBatchPolicy):
    """No batching: one request per ride, in arrival order."""

    name = "taxi"
    max_batch = 1

    def _ready(self, now: float) -> bool:
        return True

    def __repr__(self) -> str:
        return "Taxi()"


class Static(PaddedBatchPolicy):
    """The bus that waits for N: depart only with ``max_batch`` requests (or with fewer after
    ``close``)."""

    name = "static"

    def __init__(
        self, max_batch: int = StaticKnobs.max_batch
    ) -> None:  # the default: batchsim.core.knobs
        check_knob("max_batch", max_batch)
        self.max_batch = int(max_batch)

    def _ready(self, now: float) -> bool:
        return len(self.queue) >= self.max_batch or self.closed

    def __repr__(self) -> str:
        return f"Static(max_batch={self.max_batch})"


class Dynamic(PaddedBatchPolicy):
    """Depart when ``max_batch`` are waiting or the oldest has waited ``max_wait`` seconds."""

    name = "dynamic"

    def __init__(
        self, max_batch: int = DynamicKnobs.max_batch, max_wait: float = DynamicKnobs.max_wait
    ) -> None:
        check_knob("max_batch", max_batch)
        check_knob("max_wait", max_wait)
        self.max_batch = int(max_batch)
        self.max_wait = float(max_wait)

    def _deadline(self) -> float | None:
        return self.queue[0].arrival + self.max_wait

    def _ready(self, now: float) -> bool:
        return len(self.queue) >= self.max_batch or now + _EPS >= self._deadline()  # type: ignore[operator]

    def __repr__(self) -> str:
        return f"Dynamic(max_batch={self.max_batch}, max_wait={self.max_wait:g})"
