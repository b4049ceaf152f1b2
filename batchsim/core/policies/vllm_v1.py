"""Continuous batching as vLLM's V1 scheduler does it:
``make_policy("continuous", scheduler="vllm-v1")`` (``VLLMV1``).

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
   left (chunked prefill), and only if the free blocks hold its **whole** context, not
   just this step's chunk (``scheduler_reserve_full_isl``, on by default in vLLM 0.32:
   ``allocate_slots(..., full_sequence_must_fit=True)`` at admission);
5. **no watermark**: vLLM 0.32 keeps none by default (``watermark=0.0``);
6. **async scheduling** (on by default in vLLM 0.32, ``async_scheduling=True`` here): step
   k+1 is scheduled when step k starts, while it runs (``EngineCore.step_with_batch_queue``),
   so a request that arrives during step k can join step k+2 at the earliest, and a request
   whose last token step k computes still holds its row and its blocks when step k+1 is
   chosen (vLLM skips it, may preempt it as the newest, and frees it when the token lands).
   When the step so chosen would run nothing, vLLM schedules afresh once step k ends, with
   everything known. vLLM's CPU build turns it off whatever it is asked (its CPU platform's
   own rule), and its step log shows each step scheduled after the one before was done: the
   vLLM side of a compare on the CPU takes ``async_scheduling=False``
   (``realrun.reference.vllm.knobs.VLLMKnobs.async_scheduling``). There, with the rule, a
   request that arrived while a step ran was predicted 22 % slower to its first token than
   vLLM served it; without it, 9 % faster. (A time to first token "a fifth short without the
   rule", read on the CPU earlier, was of a server not yet warmed, whose prefill steps ran up
   to 2.7x their price: ``realrun.reference.vllm.warm``.)

``realrun.reference.vllm.referee`` holds this flavour to vLLM's own ``Scheduler`` step by step, with
no clock (``tests/test_vllm_referee.py``). Prefix caching is off in every run we compare.
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
    def __init__(
        self,
        max_seqs: int = ContinuousKnobs.max_seqs,
        max_batched_tokens: int = ContinuousKnobs.max_batched_tokens,
        block_size: int = ContinuousKnobs.block_size,
        chunked_prefill: bool = ContinuousKnobs.chunked_prefill,
        watermark: float = 0.0,
        async_scheduling: bool = True,
    ) -> None:
        super().__init__(max_seqs, max_batched_tokens, block_size, chunked_prefill, watermark)
        self.async_scheduling = bool(async_scheduling)

    def __repr__(self) -> str:
        # What a run's result names it by (``describe()``):
        # ``Continuous(..., scheduler="vllm-v1", ...)`` reads as the continuous policy with the knob
        # that chose this flavour, not as a call that builds it (``Continuous`` takes no scheduler:
        # ``make_policy`` or ``VLLMV1(...)`` does).
        return (
            super().__repr__()[:-1]
            + f', scheduler="vllm-v1", async_scheduling={self.async_scheduling})'
        )

    def start(self, limits=None) -> None:
        super().start(limits)
        self._arrived: dict[int, float] = {}
        # when the step now running was chosen (async: the next one's cut-off)
        self._decided = -math.inf
        self._started = 0.0
        self._ended = -math.inf  # when the last step ended
        # Async only: each running request's place in vLLM's running list (admission order) and the
        # blocks it holds when it finishes, so that a request finishing in a step can stay in the
        # next step's decision as vLLM keeps it there (``_ghosts``: (place, id, blocks), oldest
        # first).
        self._place: dict[int, int] = {}
        self._places = 0
        self._final_blocks: dict[int, int] = {}
        self._ghosts: list[tuple[int, int, int]] = []
        #: Async: requests vLLM preempts while their last token is in flight (they finish when it
        #: lands, nothing is recomputed, so no step lists them as preempted).
        self.last_token_preemptions = 0

    def on_arrival(self, request, now: float):
        reason = super().on_arrival(request, now)
        if reason is None:
            self._arrived[request.id] = now
            if self.async_scheduling:
                self._final_blocks[request.id] = self.pool.blocks_for(
                    request.prompt_tokens + request.output_tokens - 1
                )
        return reason

    def cancel(self, request_id: int) -> bool:
        gone = super().cancel(request_id)
        if gone:
            self._arrived.pop(request_id, None)
            self._place.pop(request_id, None)
            self._final_blocks.pop(request_id, None)
        return gone

    def next_action(self, now: float) -> Step | Wait:
        if self.idle:
            return Wait(None)
        # Async: chosen while the previous step runs (it ended just now), with what was known then.
        ahead = self.async_scheduling and now == self._ended
        ghosts, self._ghosts = (self._ghosts if ahead else []), []
        preempted: list[int] = []
        chunks: list[Chunk] = []
        chunk_rows: list[int] = []
        decoding, need, late = self._decide(preempted, chunks, chunk_rows, ghosts, ahead)
        rows = self.rows
        if (
            ahead
            and not chunks
            and (not rows.n or (not isinstance(decoding, slice) and not decoding.any()))
        ):
            # The step chosen ahead runs nothing: vLLM schedules afresh when the running step's
            # output is in, with every arrival seen and every finished request gone.
            decoding, need, late = self._decide(preempted, chunks, chunk_rows, [], False)
        # every running row decodes (the rows admitted now follow them)
        if isinstance(decoding, slice):
            n_decode = decoding.stop
        else:
            decoding = np.concatenate([decoding, np.zeros(rows.n - len(decoding), dtype=bool)])
            n_decode = int(np.count_nonzero(decoding))
        kv = rows.kv[decoding]
        # No repeat when a row sat out, when a request waits for the next step to see it, or when a
        # finished request still held its place (the next step is chosen without it).
        prefilling = bool(chunks or preempted or late or ghosts) or n_decode < rows.n
        horizon = self._repeat_horizon(decoding, kv, prefilling, n_decode)
        self._decided = self._started = now
        return self._emit(chunks, chunk_rows, decoding, kv, n_decode, preempted, need, horizon)

    def _decide(
        self,
        preempted: list[int],
        chunks: list[Chunk],
        chunk_rows: list[int],
        ghosts: list[tuple[int, int, int]],
        ahead: bool,
    ) -> tuple[slice | np.ndarray, int, deque]:
        """vLLM's ``schedule()``: the running loop, then (if nobody was preempted) the waiting loop.

        ``ghosts`` (finished requests vLLM still holds) keep their blocks and rows for the decision;
        ``ahead``: requests that arrived after the previous step was chosen are not seen yet.
        Returns (which rows decode, blocks they take at the step's end, the requests not seen)."""
        held, places = sum(g[2] for g in ghosts), len(ghosts)  # (the running loop may preempt some)
        self.pool.take(held)
        self.max_seqs -= places
        mine: list[
            int
        ] = []  # preempted by this call: a fresh schedule admits after an empty one's preemptions
        last = self.last_token_preemptions
        try:
            decoding, budget, free, need = self._schedule_running(mine, chunks, chunk_rows, ghosts)
            late = self._not_yet_seen() if ahead else deque()
            # A preemption of a request whose last token is in flight stops admission too (vLLM's
            # ``if not preempted_reqs``), though nothing is recomputed.
            if (not mine and last == self.last_token_preemptions) or not self.rows.n:
                self._admit(budget, free, chunks, chunk_rows)
            self.waiting.extend(late)
            preempted += mine
        finally:
            self.max_seqs += places
            # those not preempted: freed as their token lands
            self.pool.take(-sum(g[2] for g in ghosts))
        return decoding, need, late

    def _admit(
        self, budget: int, free: int | None, chunks: list[Chunk], chunk_rows: list[int]
    ) -> tuple[int, int | None]:
        n0 = self.rows.n
        out = super()._admit(budget, free, chunks, chunk_rows)
        if self.async_scheduling:
            # vLLM appends each to its running list, resumed ones too
            for rid in self.rows.id_list[n0:]:
                self._place[rid] = self._places
                self._places += 1
        return out

    def _admission_blocks(self, waiting, chunk_blocks: int) -> int:
        # vLLM 0.32 admits only a request whose whole context fits the free blocks
        # (``scheduler_reserve_full_isl=True``), though it allocates them chunk by chunk.
        return max(chunk_blocks, self.pool.blocks_for(waiting.target))

    def on_step_end(self, step: Step, done: int, now: float):
        # The cut-off for the next step is when the last repetition of this one started.
        self._decided = self._started + (now - self._started) * (done - 1) / done
        self._ended = now
        outcome = super().on_step_end(step, done, now)
        if outcome.finished:
            arrived = self._arrived
            for r in outcome.finished:
                del arrived[r]  # only a waiting request's arrival is ever asked for
            if self.async_scheduling:
                self._ghosts = sorted(
                    (self._place.pop(r), r, self._final_blocks.pop(r)) for r in outcome.finished
                )
        return outcome

    def _not_yet_seen(self) -> deque:
        """Take off the end of ``waiting`` the requests that arrived after the previous step was
        chosen."""
        late: deque = deque()
        while self.waiting and self._arrived.get(self.waiting[-1].id, -math.inf) > self._decided:
            late.appendleft(self.waiting.pop())
        return late

    def _schedule_running(
        self,
        preempted: list[int],
        chunks: list[Chunk],
        chunk_rows: list[int],
        ghosts: list[tuple[int, int, int]],
    ) -> tuple[slice | np.ndarray, int, int | None, int]:
        """vLLM's first loop: running rows in admission order, within one token budget.

        Returns (which rows decode: a slice when all do, budget left, blocks free after this step's
        decodes (None: unlimited), blocks the decoding rows will take at the step's end)."""
        rows, pool = self.rows, self.pool
        budget = self._budget
        if not rows.partial and rows.n <= budget:
            # The common step: every row decodes one token and the budget holds them all. If their
            # new blocks fit too, the loop below would preempt nobody and schedule every row: skip
            # it (and the per-row Python it costs), with the very same outcome.
            need = rows.block_need()  # counted with no limit too: the step's KV in use holds them
            if not pool.limited or need <= pool.free:
                return (
                    slice(0, rows.n),
                    budget - rows.n,
                    pool.free - need if pool.limited else None,
                    need,
                )
        decoding = np.zeros(rows.n, dtype=bool)
        need = (
            0  # blocks the decoding rows take when their token lands (``on_step_end`` takes them)
        )
        i = 0
        while i < rows.n and budget > 0:
            kv, target = rows.kv.item(i), rows.target.item(i)
            held = pool.blocks_for(kv)  # a row holds the blocks its cache fills
            n = 1 if kv >= target else min(target - kv, budget)
            extra = max(0, pool.blocks_for(kv + n) - held)
            gone = False
            while pool.limited and extra + need > pool.free:
                if ghosts and ghosts[-1][0] > self._place[rows.id_list[-1]]:
                    # The newest in vLLM's running list is a request whose last token is in flight.
                    pool.take(-ghosts.pop()[2])
                    self.last_token_preemptions += 1
                    continue
                # the newest: never one already scheduled this step (those are < i)
                victim = rows.n - 1
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
