"""Continuous batching (Orca's iteration-level scheduling, vLLM's scheduler).

A bus that never stops at a terminus: at every step (one forward pass) passengers
may board and alight. The scheduler keeps two queues, ``waiting`` and ``running``,
and before each step it goes through four phases, each a method below:

1. **make room** (``_make_room``): a running row whose last KV block is full needs a new
   block for its next token; if none is free, the most recently admitted request is
   *preempted* (its KV freed, back to the front of ``waiting``, to recompute its prefill
   over prompt + tokens already generated), as vLLM does by default;
2. **continue chunks** (``_continue_chunks``): prefills split across steps go on;
3. **admit** (``_admit``): waiting requests board in FIFO order while fewer than
   ``max_seqs`` run, the step's prompt tokens fit ``max_batched_tokens`` and free KV
   blocks allow (the chunk the budget allows must fit whole, as in vLLM's V1 scheduler).
   With ``chunked_prefill`` (the default, as in vLLM V1) a long prompt is split across
   steps; without it, a prompt waits for a step with room for all of it, and a prompt
   longer than the whole budget takes a step's prefill to itself, so any request that
   fits in KV memory is served. Nobody boards in a step that had to
   preempt (memory is short right now, and the request just preempted would board again
   at once, which is vLLM V1's rule too); an empty batch always admits, so the run
   cannot stall;
4. **repeat horizon** (``_repeat_horizon``): when nothing is prefilling, the step is one
   decode pass repeated until the first running request finishes (or KV blocks run out),
   in one Step with ``repeat`` = that count. It is ``interruptible`` when an arrival could
   board, so the driver cuts it at the first arrival and nothing differs from stepping one
   token at a time. That is what keeps the simulator fast.

A request leaves the batch the step its last token is produced, freeing its blocks.
KV memory is counted in blocks (``blocks.BlockPool``); ``watermark`` keeps a small share
free when admitting into a non-empty batch.

This is ``batchsim/textbook/continuous.py`` made fast, and held to its records by
``tests/test_textbook.py``: read that first. Each method below names the textbook line it
stands for; what is here and not there (the repeat horizon, the rows as arrays, the figures
kept about them) is there only for speed.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..errors import check_fraction, check_knob
from ..knobs import ContinuousKnobs
from ..step import Chunk, Step, StepOutcome, Wait, fast_chunk, fast_step
from ..workload import Request
from .base import Policy
from .blocks import BlockPool, growth_of, most_steps
from .rows import RunningRows, Waiting

__all__ = ["Continuous"]


class Continuous(Policy):
    name = "continuous"

    def __init__(
        self,
        # The knobs' defaults are ContinuousKnobs' (batchsim.core.knobs): one source for every
        # default.
        max_seqs: int = ContinuousKnobs.max_seqs,
        max_batched_tokens: int = ContinuousKnobs.max_batched_tokens,
        block_size: int = ContinuousKnobs.block_size,
        chunked_prefill: bool = ContinuousKnobs.chunked_prefill,
        watermark: float = 0.01,
    ) -> None:
        for name, value in (
            ("max_seqs", max_seqs),
            ("max_batched_tokens", max_batched_tokens),
            ("block_size", block_size),
            ("chunked_prefill", chunked_prefill),
        ):
            check_knob(name, value)
        self.max_seqs = int(max_seqs)
        self.max_batched_tokens = int(max_batched_tokens)
        self.block_size = int(block_size)
        self.chunked_prefill = bool(chunked_prefill)
        self.watermark = check_fraction("watermark", watermark)

    @property
    def max_rows(self) -> int:  # type: ignore[override]
        return self.max_seqs

    def __repr__(self) -> str:
        return (
            f"Continuous(max_seqs={self.max_seqs}, max_batched_tokens={self.max_batched_tokens}, "
            f"block_size={self.block_size}, chunked_prefill={self.chunked_prefill})"
        )

    # -- state ------------------------------------------------------------------------
    def start(self, limits=None) -> None:
        super().start(limits)
        kv = self.kv_budget
        self.pool = BlockPool(
            None if kv is None else kv // self.block_size, self.block_size, self.watermark
        )
        self.rows = RunningRows(self.max_seqs, self.block_size)  # and the figures kept about them
        self.waiting: deque[Waiting] = deque()
        self._pending: tuple | None = None
        self._blocks = 0  # blocks the running rows hold (ceil(kv / block_size) each, between steps)
        # The step's prompt-token budget: the policy's, and never more than the server's pass holds.
        hard = self.limits.max_step_tokens
        self._budget = (
            self.max_batched_tokens if hard is None else min(self.max_batched_tokens, hard)
        )

    @property
    def total_blocks(self) -> int | None:
        return self.pool.total

    @property
    def free_blocks(self) -> int:
        return self.pool.free

    @property
    def n_running(self) -> int:
        return self.rows.n

    @property
    def running_ids(self) -> tuple[int, ...]:
        return tuple(self.rows.id_list)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.rows.n

    def _take_blocks(self, blocks: int) -> None:
        """Textbook: ``Continuous.take``, for the rows together (a row's own follow from its kv)."""
        # KV is counted in blocks, here and in the pool: the pool's check (never more blocks out
        # than the budget's kv_budget // block_size) is the base policy's check of the budget in
        # tokens.
        self._blocks += blocks
        if self.pool.total is not None:
            self.pool.take(blocks)
        kv = self.kv_in_use = self._blocks * self.block_size
        if kv > self.kv_peak:
            self.kv_peak = kv

    # -- the protocol -----------------------------------------------------------------
    def on_arrival(self, request: Request, now: float) -> str | None:
        p, o = request.prompt_tokens, request.output_tokens
        reason = self._never_fits(request)
        if reason is None and not self.chunked_prefill:
            reason = self.limits.step_tokens_reason(p)  # unchunked, a prompt runs in one pass
        if reason is None and self.pool.limited:
            # The longest the request's cache ever gets: the prompt plus all outputs but the last.
            need = self.pool.blocks_for(p + o - 1)
            if need > self.pool.total:
                reason = (
                    f"needs {need} KV blocks of {self.block_size} tokens, more than the "
                    f"{self.pool.total} in the budget"
                )
        if reason is not None:
            return reason
        self.waiting.append(Waiting(request.id, p, o, p))
        return None

    def counts(self) -> tuple[int, int]:
        return self.rows.n, len(self.waiting)

    def cancel(self, request_id: int) -> bool:
        """A waiting request leaves the queue; a running one leaves the batch and frees its blocks
        at once (vLLM's abort does the same), whatever it had produced or prefilled so far."""
        if self._pending is not None:
            raise RuntimeError("cancel must come between steps, not while a step runs")
        for w in self.waiting:
            if w.id == request_id:
                self.waiting.remove(w)
                return True
        rows = self.rows
        if request_id not in rows.id_list:
            return False
        kv = rows.take_out(request_id)
        self._take_blocks(-self.pool.blocks_for(kv))
        return True

    def next_action(self, now: float) -> Step | Wait:
        """Textbook: ``Continuous.next_step`` (its phases are the methods below), asked once for a
        run of identical decode passes that the textbook asks for pass by pass."""
        rows = self.rows
        waiting = self.waiting
        if not waiting and not rows.n:
            return Wait(None)
        limited = self.pool.total is not None
        if not limited and not rows.partial and rows.n and (not waiting or rows.n >= self.max_seqs):
            return self._decode_all()
        preempted: list[int] = []
        while True:
            # With no budget the step's KV in use still counts the blocks decoding rows grow into.
            need, free = self._make_room(preempted) if limited else (self.rows.block_need(), None)
            chunks: list[Chunk] = []
            chunk_rows: list[int] = []
            budget = self._budget
            n0 = rows.n
            # Rows decoding this step: all rows present now, unless chunked prefills are under way.
            # A slice when possible: cheaper than a boolean mask for every array it indexes.
            decoding: slice | np.ndarray = slice(0, n0)
            if rows.partial:
                decoding = rows.kv >= rows.target
                budget, free = self._continue_chunks(~decoding, budget, free, chunks, chunk_rows)
            if (not preempted or not rows.n) and self.waiting and rows.n < self.max_seqs:
                budget, free = self._admit(budget, free, chunks, chunk_rows)
            if isinstance(decoding, np.ndarray):
                decoding = np.concatenate([decoding, np.zeros(rows.n - n0, dtype=bool)])
                n_decode = int(np.count_nonzero(decoding))
            else:
                n_decode = n0
            if chunks or n_decode:
                break
            # Only stalled chunked prefills remain and no block is free: make room.
            preempted.append(self._preempt_newest())
        # Lockstep, the decoding rows' caches are read only where a kept figure is not known (None).
        kv = None if isinstance(decoding, slice) else rows.kv[decoding]
        horizon = self._repeat_horizon(decoding, kv, bool(chunks or preempted), n_decode)
        return self._emit(chunks, chunk_rows, decoding, kv, n_decode, preempted, need, horizon)

    def _decode_all(self) -> Step:
        """``next_action`` for the commonest decision: with no limit on KV blocks, no prefill under
        way and nobody to admit, every row decodes, repeated until the first finishes. The same
        step, and the same state kept for ``on_step_end``, as the phases and ``_emit`` make for it,
        without their lists and calls. Textbook: ``Continuous.next_step`` for a pass with no
        prefill."""
        rows = self.rows
        n = rows.n
        fill = rows.fill
        need = fill.full() if fill is not None else rows.block_need()
        every = slice(0, n)
        least = rows.least
        if least is None:
            least = rows.fewest_left(every, n)
        width = rows.kv_max
        if width is None:
            width = rows.decode_shape(every, None, n)[1]
        step = fast_step(
            (),
            tuple(rows.id_list),
            rows.kv_sum,
            width,
            least,
            not self.waiting and n < self.max_seqs,
            (),
            self.kv_in_use + self.block_size * need,
        )
        self._pending = (step, slice(0, n), n, [], least)
        return step

    def _emit(
        self,
        chunks: list[Chunk],
        chunk_rows: list[int],
        decoding,
        kv: np.ndarray | None,
        n_decode: int,
        preempted: list[int],
        need: int,
        horizon: tuple[int, bool, int],
    ) -> Step:
        """The Step this decision makes, remembered for ``on_step_end`` (every flavour ends here).
        Textbook: the ``Step(...)`` that ends ``next_step``."""
        repeat, interruptible, least_left = horizon
        lockstep = isinstance(decoding, slice)
        rows = self.rows
        kv_read, width = rows.decode_shape(decoding, kv, n_decode)
        step = fast_step(
            tuple(chunks),
            tuple(rows.id_list[decoding]) if lockstep else tuple(rows.ids[decoding].tolist()),
            # Only chunks that continue a cached context start past 0, and only rows part-way exist
            # then.
            kv_read + (sum(c.start for c in chunks) if rows.partial else 0),
            width,
            repeat,
            interruptible,
            tuple(preempted),
            self.kv_in_use + self.block_size * need,
        )
        self._pending = (step, decoding, n_decode, chunk_rows, least_left)
        return step

    # -- the four phases ----------------------------------------------------------------
    def _make_room(self, preempted: list[int]) -> tuple[int, int | None]:
        """Preempt the newest rows until every decoding row's next token has a block.

        Returns (blocks the decoding rows will take, blocks free after that).
        Textbook: ``next_step``, phase 1 (``need``, and ``preempt_newest`` while it falls short)."""
        need = self.rows.block_need()
        while self.rows.n and need > self.pool.free:
            preempted.append(self._preempt_newest())
            need = self.rows.block_need()
        return need, self.pool.free - need

    def _continue_chunks(
        self,
        under_way: np.ndarray,
        budget: int,
        free: int | None,
        chunks: list[Chunk],
        chunk_rows: list[int],
    ) -> tuple[int, int | None]:
        """Textbook: ``next_step``, phase 2 (``room``: ``pool.tokens_fitting``)."""
        rows, pool = self.rows, self.pool
        for i in np.flatnonzero(under_way).tolist():
            if budget <= 0:
                break
            kv, target = rows.kv.item(i), rows.target.item(i)
            held = pool.blocks_for(kv)
            n = min(budget, target - kv)
            if free is not None:
                n = min(n, pool.tokens_fitting(free, held, kv))
            if n <= 0:
                continue
            extra = max(0, pool.blocks_for(kv + n) - held)
            self._take_blocks(extra)
            if free is not None:
                free -= extra
            chunks.append(fast_chunk(rows.ids.item(i), kv, n, kv + n == target))
            chunk_rows.append(i)
            budget -= n
        return budget, free

    def _admit(
        self, budget: int, free: int | None, chunks: list[Chunk], chunk_rows: list[int]
    ) -> tuple[int, int | None]:
        """Textbook: ``Continuous.admit`` (phase 3); ``free`` None: no budget to check."""
        rows, pool, waiting = self.rows, self.pool, self.waiting
        while waiting and rows.n < self.max_seqs and budget > 0:
            w = waiting[0]
            n = w.target
            if n > budget:
                if self.chunked_prefill:
                    n = budget
                elif budget < self._budget:
                    break  # it waits for a step whose prompt budget is all its own
                # else: longer than the whole budget (or a recompute of prompt + tokens generated,
                # which only the prompt was checked against): it takes this step's prefill alone.
                # It never passes the server's hard limit per pass: a recompute that would is
                # chunked.
                elif self.limits.max_step_tokens is not None:
                    n = min(n, self.limits.max_step_tokens)
            nb = pool.blocks_for(n)
            if free is not None:
                # The chunk the token budget allows must fit in free blocks whole, as in vLLM's V1
                # scheduler; squeezing a fragment into the last free blocks would only have it
                # preempted at once, when the running rows grow into them.
                reserve = pool.watermark if rows.n else 0
                if self._admission_blocks(w, nb) + reserve > free:
                    break
                free -= nb
            waiting.popleft()
            rows.append(w.id, w.prompt, w.out, w.target, w.out - w.produced)
            self._take_blocks(nb)
            chunks.append(fast_chunk(w.id, 0, n, n == w.target))
            chunk_rows.append(rows.n - 1)
            budget -= n
        return budget, free

    def _admission_blocks(self, waiting: Waiting, chunk_blocks: int) -> int:
        """Free blocks a waiting request needs to board: its chunk's (``VLLMV1``: its whole
        context's)."""
        return chunk_blocks

    def _repeat_horizon(
        self, decoding, kv: np.ndarray | None, prefilling: bool, n_decode: int
    ) -> tuple[int, bool, int]:
        """(repeat, interruptible, fewest tokens a decoding row has left): decode-only steps repeat
        until the first row finishes. Textbook: none; it asks ``next_step`` every pass, getting
        this step again until a row finishes, phase 1 preempts or (interruptible) one arrives."""
        rows = self.rows
        least = rows.fewest_left(decoding, n_decode)
        if prefilling:
            return 1, False, least
        repeat = least
        if self.pool.total is not None and repeat > 1:
            # Not prefilling: nobody was admitted, so a lockstep step decodes every row.
            repeat = self._steps_blocks_allow(kv, repeat, isinstance(decoding, slice))
        return repeat, not self.waiting and rows.n < self.max_seqs, least

    # -- helpers ------------------------------------------------------------------------
    def _preempt_newest(self) -> int:
        """Textbook: ``Continuous.preempt_newest``."""
        rid, prompt, out, produced, kv = self.rows.pop_newest()
        self._take_blocks(-self.pool.blocks_for(kv))
        self.waiting.appendleft(Waiting(rid, prompt, out, prompt + produced, produced))
        self.preemptions += 1
        return rid

    def _steps_blocks_allow(self, kv: np.ndarray | None, upper: int, lockstep: bool) -> int:
        """Largest j <= upper such that j more tokens per row fit in the free blocks (at least 1).
        Textbook: phase 1 asked before each of j passes, finding blocks enough every time."""
        # need(1) fits: phase 1 made room. Lockstep, the decoding rows are the rows counted.
        fill = self.rows.fill
        if lockstep and fill is not None:
            need = fill.growth
        else:  # lockstep, every row decodes (``kv`` None: not read yet)
            need = growth_of(self.rows.kv if kv is None else kv, self.block_size)
        return most_steps(need, upper, self.pool.free)

    def on_step_end(self, step: Step, done: int, now: float) -> StepOutcome:
        """Textbook: ``Continuous.step_done``, for ``done`` passes at once."""
        pending = self._pending
        if pending is None or pending[0] is not step:
            raise RuntimeError("on_step_end must follow the next_action that returned this step")
        _, decoding, n_decode, chunk_rows, least_left = pending
        self._pending = None
        token_ids, counts, finished, grown, freed = self.rows.account(
            step.prefill, chunk_rows, decoding, n_decode, done, least_left, self._blocks
        )
        if grown:
            self._take_blocks(grown)
        if freed is not None:
            self._take_blocks(-freed)
        return StepOutcome(token_ids, counts, finished)
