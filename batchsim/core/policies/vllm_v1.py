"""Continuous batching as vLLM's V1 scheduler does it: ``make_policy("continuous", scheduler="vllm-v1")`` (``VLLMV1``).

batchsim's ``Continuous`` is the textbook scheduler: every running row decodes every
step, and the step's token budget (``max_batched_tokens``) is for prompt tokens.
vLLM's V1 scheduler (vLLM 0.32, ``vllm/v1/core/sched/scheduler.py``) schedules the same
queues in a slightly different order, and this flavour follows it, so that batchsim can
predict vLLM rather than an idealised vLLM:

1. **one budget for every token.** A decoding row spends one token of
   ``max_batched_tokens`` too, so 60 decoding rows leave a 2,048-token budget
   1,988 tokens of prompt;
2. **running requests first, in the order they were admitted.** Each takes what it
   needs (a decode: one token; a prompt part-way through chunked prefill: the rest of
   it, up to what the budget has left). When the budget runs out, the rows after it sit
   this step out, decodes included;
3. **a running request that needs a KV block preempts the newest request** (recompute,
   back to the front of ``waiting``), whether it decodes or continues a chunk; if the
   newest is itself, it stops the running phase;
4. **waiting requests are admitted only in a step that preempted nobody**, in FIFO order,
   while fewer than ``max_seqs`` run, each with as many of its tokens as the budget has
   left (chunked prefill) and only if that chunk fits in the free blocks whole;
5. **no watermark**: vLLM 0.32 keeps none by default (``watermark=0.0``);
6. **async scheduling** (on by default in vLLM 0.32, ``async_scheduling=True`` here): step
   k+1 is scheduled when step k starts, while it runs, so a request that arrives during
   step k can join step k+2 at the earliest, unless nothing else would run in step k+1
   (then vLLM schedules afresh when step k ends). Seen in vLLM's own timestamps: without
   this rule, batchsim's time to first token came out a fifth short at 50-85 % busy.

What this flavour leaves out: with async scheduling a finished request's row and blocks
are also reused one step late (a second-order effect at these loads), and prefix caching
is off in every run we compare.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from ..knobs import SCHEDULERS, ContinuousKnobs
from ..step import Chunk, Step, Wait, fast_chunk
from .continuous import Continuous

__all__ = ["VLLMV1", "SCHEDULERS"]


class VLLMV1(Continuous):
    """``Continuous`` scheduled the way vLLM's V1 scheduler does (see the module's docstring)."""

    scheduler = "vllm-v1"

    # The knobs' defaults are ContinuousKnobs' (batchsim.core.knobs): one source for every default.
    def __init__(self, max_seqs: int = ContinuousKnobs.max_seqs,
                 max_batched_tokens: int = ContinuousKnobs.max_batched_tokens,
                 block_size: int = ContinuousKnobs.block_size, chunked_prefill: bool = ContinuousKnobs.chunked_prefill,
                 watermark: float = 0.0, async_scheduling: bool = True) -> None:
        super().__init__(max_seqs, max_batched_tokens, block_size, chunked_prefill, watermark)
        self.async_scheduling = bool(async_scheduling)

    def __repr__(self) -> str:
        # What a run's result names it by (``describe()``): ``Continuous(..., scheduler="vllm-v1", ...)``
        # reads as the continuous policy with the knob that chose this flavour, not as a call that
        # builds it (``Continuous`` takes no scheduler: ``make_policy`` or ``VLLMV1(...)`` does).
        return super().__repr__()[:-1] + f', scheduler="vllm-v1", async_scheduling={self.async_scheduling})'

    def start(self, limits=None) -> None:
        super().start(limits)
        self._arrived: dict[int, float] = {}
        self._decided = -math.inf  # when the step now running was chosen (async: the next one's cut-off)
        self._started = 0.0

    def on_arrival(self, request, now: float):
        reason = super().on_arrival(request, now)
        if reason is None:
            self._arrived[request.id] = now
        return reason

    def next_action(self, now: float) -> Step | Wait:
        if self.idle:
            return Wait(None)
        preempted: list[int] = []
        chunks: list[Chunk] = []
        chunk_rows: list[int] = []
        decoding, budget, free, need = self._schedule_running(preempted, chunks, chunk_rows)
        # Async scheduling: this step was chosen when the previous one started, so whoever arrived
        # since waits a step, unless nothing else runs (then vLLM schedules afresh at the step's end).
        late = self._not_yet_seen() if self.async_scheduling and self.rows.n else deque()
        if not preempted or not self.rows.n:
            budget, free = self._admit(budget, free, chunks, chunk_rows)
        self.waiting.extend(late)
        rows = self.rows
        if isinstance(decoding, slice):  # every running row decodes (the rows admitted now follow them)
            n_decode = decoding.stop
        else:
            decoding = np.concatenate([decoding, np.zeros(rows.n - len(decoding), dtype=bool)])
            n_decode = int(np.count_nonzero(decoding))
        kv = rows.kv[decoding]
        # No repeat when a row sat out, or when a request waits for the next step to see it.
        prefilling = bool(chunks or preempted) or n_decode < rows.n or bool(late)
        horizon = self._repeat_horizon(decoding, kv, prefilling, n_decode)
        self._decided = self._started = now
        return self._emit(chunks, chunk_rows, decoding, kv, n_decode, preempted, need, horizon)

    def on_step_end(self, step: Step, done: int, now: float):
        # The cut-off for the next step is when the last repetition of this one started.
        self._decided = self._started + (now - self._started) * (done - 1) / done
        return super().on_step_end(step, done, now)

    def _not_yet_seen(self) -> deque:
        """Take off the end of ``waiting`` the requests that arrived after the previous step was chosen."""
        late: deque = deque()
        while self.waiting and self._arrived.get(self.waiting[-1].id, -math.inf) > self._decided:
            late.appendleft(self.waiting.pop())
        return late

    def _schedule_running(self, preempted: list[int], chunks: list[Chunk],
                          chunk_rows: list[int]) -> tuple[slice | np.ndarray, int, int | None, int]:
        """vLLM's first loop: running rows in admission order, within one token budget.

        Returns (which rows decode: a slice when all do, budget left, blocks free after this step's
        decodes (None: unlimited), blocks the decoding rows will take at the step's end)."""
        rows, pool = self.rows, self.pool
        budget = self._budget
        if not rows.partial and rows.n <= budget:
            # The common step: every row decodes one token and the budget holds them all. If their new
            # blocks fit too, the loop below would preempt nobody and schedule every row: skip it (and
            # the per-row Python it costs), with the very same outcome.
            need = rows.block_need() if pool.limited else 0
            if not pool.limited or need <= pool.free:
                return slice(0, rows.n), budget - rows.n, pool.free - need if pool.limited else None, need
        decoding = np.zeros(rows.n, dtype=bool)
        need = 0  # blocks the decoding rows take when their token lands (``on_step_end`` takes them)
        i = 0
        while i < rows.n and budget > 0:
            kv, target = rows.kv.item(i), rows.target.item(i)
            held = pool.blocks_for(kv)  # a row holds the blocks its cache fills
            n = 1 if kv >= target else min(target - kv, budget)
            extra = max(0, pool.blocks_for(kv + n) - held) if pool.limited else 0
            gone = False
            while pool.limited and extra + need > pool.free:
                victim = rows.n - 1  # the newest: never one already scheduled this step (those are < i)
                preempted.append(self._preempt_newest())
                decoding = decoding[: rows.n]
                if victim == i:
                    gone = True
                    break
            if gone:
                break
            if kv >= target:
                decoding[i] = True
                need += extra
            else:
                self._take_blocks(extra)
                chunks.append(fast_chunk(rows.ids.item(i), kv, n, kv + n == target))
                chunk_rows.append(i)
            budget -= n
            i += 1
        free = pool.free - need if pool.limited else None
        return decoding, budget, free, need
