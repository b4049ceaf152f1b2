"""Continuous batching (Orca's iteration-level scheduling, vLLM's scheduler).

A bus that never stops at a terminus: at every step (one forward pass) passengers
may board and alight. The scheduler keeps two queues, ``waiting`` and
``running``. Before each step it

1. makes room for the running rows' next token: a row whose last KV block is full
   needs a new block; if none is free, the most recently admitted request is
   *preempted* (its KV freed, back to the front of ``waiting``, to recompute its
   prefill over prompt + tokens already generated), as vLLM does by default;
2. continues any chunked prefill that is under way;
3. admits waiting requests in FIFO order while fewer than ``max_seqs`` run, the
   step's prompt tokens fit ``max_batched_tokens`` and free KV blocks allow. With
   ``chunked_prefill`` a long prompt is split across steps; without it, a prompt
   that does not fit the remaining token budget waits for the next step (and one
   longer than the whole budget is rejected on arrival).

A request leaves the batch the step its last token is produced, freeing its blocks.

KV memory is allocated in blocks of ``block_size`` tokens (vLLM's PagedAttention),
so waste is at most one partly filled block per request. ``watermark`` keeps a
small share of blocks free when admitting, so a request is not admitted only to be
preempted at once (vLLM keeps 1 %); it never stops admission into an empty batch.

For the simulator's speed, when no prefill is under way and nothing can be
admitted, the policy returns one decode step with ``repeat`` = the number of steps
until the first running request finishes (or KV blocks run out); the step is
``interruptible`` when an arrival could be admitted, so the driver cuts the run at
the first arrival and nothing differs from stepping one token at a time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError, check_int_at_least
from ..step import Chunk, Step, StepOutcome, Wait
from ..workload import Request
from .base import Policy

__all__ = ["Continuous"]


@dataclass(eq=False)
class _Waiting:
    req: Request
    target: int  # context to prefill: the prompt, or prompt + generated after a preemption
    produced: int = 0  # output tokens produced before a preemption (kept: they were delivered)


def _ceil_div(a, b):
    return -(-a // b)


class Continuous(Policy):
    name = "continuous"

    def __init__(
        self,
        max_seqs: int = 64,
        max_batched_tokens: int = 2048,
        block_size: int = 16,
        chunked_prefill: bool = False,
        watermark: float = 0.01,
    ) -> None:
        check_int_at_least("max_seqs", max_seqs, 1)
        check_int_at_least("max_batched_tokens", max_batched_tokens, 1)
        check_int_at_least("block_size", block_size, 1)
        if not (0 <= watermark < 1):
            raise ConfigError(f"watermark must be in [0, 1), got {watermark!r}")
        self.max_seqs = max_seqs
        self.max_batched_tokens = max_batched_tokens
        self.block_size = block_size
        self.chunked_prefill = bool(chunked_prefill)
        self.watermark = watermark

    @property
    def max_rows(self) -> int:  # type: ignore[override]
        return self.max_seqs

    def __repr__(self) -> str:
        return (
            f"Continuous(max_seqs={self.max_seqs}, max_batched_tokens={self.max_batched_tokens}, "
            f"block_size={self.block_size}, chunked_prefill={self.chunked_prefill})"
        )

    # -- state ------------------------------------------------------------------------
    # The running batch lives in parallel numpy arrays, one entry per row in admission
    # order (the last row is the newest, the first to be preempted), so a step over 200
    # rows costs a few array operations rather than 200 Python iterations.
    _COLS = ("ids", "prompt", "out", "target", "kv", "produced", "blocks")
    _BLOCKS = 6

    def start(self, kv_budget_tokens: int | None = None) -> None:
        super().start(kv_budget_tokens)
        self.total_blocks: int | None = None if kv_budget_tokens is None else kv_budget_tokens // self.block_size
        self.free_blocks = self.total_blocks if self.total_blocks is not None else 0
        self._watermark_blocks = int(self.watermark * self.total_blocks) if self.total_blocks else 0
        self.waiting: deque[_Waiting] = deque()
        self._table = np.zeros((len(self._COLS), self.max_seqs), dtype=np.int64)
        self._n = 0
        self._bind()
        self._pending: tuple | None = None
        self._partial = 0  # rows part-way through a chunked prefill
        self._requests: dict[int, Request] = {}

    def _bind(self) -> None:
        # Column views of the first n rows; rebound whenever n changes.
        for k, c in enumerate(self._COLS):
            setattr(self, "_" + c, self._table[k, : self._n])

    @property
    def n_running(self) -> int:
        return self._n

    @property
    def running_ids(self) -> tuple[int, ...]:
        return tuple(self._ids.tolist())

    @property
    def idle(self) -> bool:
        return not self.waiting and not self._n

    def _add_blocks(self, delta: int) -> None:
        if self.total_blocks is not None:
            self.free_blocks -= delta
            assert self.free_blocks >= 0, "KV blocks over-allocated"
        self._use_kv(delta * self.block_size)

    def _append(self, w: _Waiting, blocks: int) -> None:
        r = w.req
        self._table[:, self._n] = (r.id, r.prompt_tokens, r.output_tokens, w.target, 0, w.produced, blocks)
        self._n += 1
        self._bind()
        self._add_blocks(blocks)

    def _keep(self, mask: np.ndarray) -> None:
        """Keep the rows where mask is true (in order); free the blocks of the others."""
        kept = np.compress(mask, self._table[:, : self._n], axis=1)
        self._add_blocks(int(kept[self._BLOCKS].sum() - self._blocks.sum()))
        k = kept.shape[1]
        self._table[:, :k] = kept
        self._n = k
        self._bind()

    # -- the protocol -----------------------------------------------------------------
    def on_arrival(self, request: Request, now: float) -> str | None:
        p, o = request.prompt_tokens, request.output_tokens
        if not self.chunked_prefill and p > self.max_batched_tokens:
            return (
                f"prompt of {p} tokens exceeds max_batched_tokens={self.max_batched_tokens} "
                "(turn on chunked prefill or raise the budget)"
            )
        if self.total_blocks is not None:
            # The longest the request's cache ever gets: the prompt plus all outputs but the last.
            need = _ceil_div(p + o - 1, self.block_size)
            if need > self.total_blocks:
                return f"needs {need} KV blocks of {self.block_size} tokens, more than the {self.total_blocks} in the budget"
        self.waiting.append(_Waiting(request, target=p))
        return None

    def _preempt_newest(self) -> int:
        i = self._n - 1
        rid, produced = int(self._ids[i]), int(self._produced[i])
        req = self._requests.pop(rid)
        self._keep(np.arange(self._n) < i)
        self.waiting.appendleft(_Waiting(req, req.prompt_tokens + produced, produced))
        self.preemptions += 1
        return rid

    def _decode_block_need(self) -> int:
        """Decoding rows whose last block is full: each needs a new block for its next token."""
        if self.total_blocks is None:
            return 0
        kv = self._kv
        full = kv + 1 > self._blocks * self.block_size
        if self._partial:
            full &= kv >= self._target
        return int(np.count_nonzero(full))

    def next_action(self, now: float) -> Step | Wait:
        if self.idle:
            return Wait(None)
        bs = self.block_size
        preempted: list[int] = []
        while True:
            # 1. room for every decoding row's next token
            free = None
            need = 0
            if self.total_blocks is not None:
                need = self._decode_block_need()
                while self._n and need > self.free_blocks:
                    preempted.append(self._preempt_newest())
                    need = self._decode_block_need()
                free = self.free_blocks - need
            budget = self.max_batched_tokens
            chunks: list[Chunk] = []
            n0 = self._n
            # Rows decoding this step: all rows present now, unless chunked prefills are under way.
            # A slice when possible: cheaper than a boolean mask for every array it indexes.
            decoding: slice | np.ndarray = slice(0, n0)
            if self._partial:
                decoding = self._kv >= self._target
                # 2. chunked prefills under way
                blocks = self._blocks
                for i in np.flatnonzero(~decoding):
                    if budget <= 0:
                        break
                    kv, target = int(self._kv[i]), int(self._target[i])
                    n = min(budget, target - kv)
                    if free is not None:
                        n = min(n, free * bs + (int(blocks[i]) * bs - kv))
                    if n <= 0:
                        continue
                    extra = max(0, _ceil_div(kv + n, bs) - int(blocks[i]))
                    blocks[i] += extra
                    self._add_blocks(extra)
                    if free is not None:
                        free -= extra
                    chunks.append(Chunk(int(self._ids[i]), kv, n, kv + n == target))
                    budget -= n
            # 3. admissions, FIFO; none in a step that had to preempt (as vLLM's V1 scheduler does):
            # memory is short right now, and the request just preempted would board again at once.
            # An empty batch always admits, so the run can never stall.
            admit = not preempted or not self._n
            while admit and self.waiting and self._n < self.max_seqs and budget > 0:
                w = self.waiting[0]
                n = w.target
                if n > budget:
                    if self.chunked_prefill:
                        n = budget
                    elif not (w.produced and budget == self.max_batched_tokens):
                        break
                    # else: a recompute after preemption (prompt + tokens generated) may be longer
                    # than the whole token budget, which only the prompt was checked against; it
                    # takes a step's prefill to itself rather than wait at the head forever.
                if free is not None:
                    reserve = self._watermark_blocks if self._n else 0
                    if _ceil_div(n, bs) + reserve > free:
                        if not self.chunked_prefill:
                            break
                        n = min(n, (free - reserve) * bs)
                        if n <= 0:
                            break
                self.waiting.popleft()
                self._requests[w.req.id] = w.req
                nb = _ceil_div(n, bs)
                self._append(w, nb)
                if free is not None:
                    free -= nb
                chunks.append(Chunk(w.req.id, 0, n, n == w.target))
                budget -= n
            if isinstance(decoding, np.ndarray):
                decoding = np.concatenate([decoding, np.zeros(self._n - n0, dtype=bool)])
                n_decode = int(np.count_nonzero(decoding))
            else:
                n_decode = n0
            if chunks or n_decode:
                break
            # Only stalled chunked prefills remain and no block is free: make room.
            preempted.append(self._preempt_newest())
        kv = self._kv[decoding]
        kv_read = int(kv.sum()) + sum(c.start for c in chunks)
        repeat = 1
        interruptible = False
        if not chunks and not preempted:
            repeat = int((self._out[decoding] - self._produced[decoding]).min())
            if self.total_blocks is not None and repeat > 1:
                repeat = self._steps_blocks_allow(kv, self._blocks[decoding], repeat)
            interruptible = not self.waiting and self._n < self.max_seqs
        step = Step(
            prefill=tuple(chunks),
            decode=tuple(self._ids[decoding].tolist()),
            kv_read=kv_read,
            repeat=repeat,
            interruptible=interruptible,
            preempted=tuple(preempted),
            kv_in_use=self.kv_in_use + bs * need,
        )
        self._pending = (step, decoding, n_decode)
        return step

    def _steps_blocks_allow(self, kv: np.ndarray, held: np.ndarray, upper: int) -> int:
        """Largest j <= upper such that j more tokens per row fit in the free blocks (at least 1)."""
        bs = self.block_size

        def need(j: int) -> int:
            return int(np.maximum(0, _ceil_div(kv + j, bs) - held).sum())

        if need(upper) <= self.free_blocks:
            return upper
        lo, hi = 1, upper  # need(1) fits: step 1 made room
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if need(mid) <= self.free_blocks:
                lo = mid
            else:
                hi = mid
        return lo

    def on_step_end(self, step: Step, done: int, now: float) -> StepOutcome:
        if self._pending is None or self._pending[0] is not step:
            raise RuntimeError("on_step_end must follow the next_action that returned this step")
        _, decoding, n_decode = self._pending
        self._pending = None
        kv, produced = self._kv, self._produced  # views: updated in place
        prefilled: list[int] = []
        if step.prefill:
            tail = self._n - len(step.prefill)
            for j, c in enumerate(step.prefill):
                # Without chunking every chunk is an admission, appended in chunk order at the tail.
                i = tail + j if not self.chunked_prefill else int(np.flatnonzero(self._ids == c.request_id)[0])
                kv[i] += c.length
                if c.completes:
                    produced[i] += 1
                    prefilled.append(c.request_id)
        if n_decode:
            kv[decoding] += done
            produced[decoding] += done
        over = kv > self._blocks * self.block_size
        if over.any():
            need = -(-kv[over] // self.block_size)
            self._add_blocks(int((need - self._blocks[over]).sum()))
            self._blocks[over] = need
        if prefilled:
            token_ids = np.concatenate([np.asarray(prefilled, dtype=np.int64), self._ids[decoding]])
            counts = np.full(len(token_ids), done, dtype=np.int64)
            counts[: len(prefilled)] = 1
        else:
            # A copy: with a slice, self._ids[decoding] is a view that _keep below would overwrite.
            token_ids = self._ids[decoding].copy()
            counts = np.full(n_decode, done, dtype=np.int64)
        fin = produced >= self._out
        finished: tuple[int, ...] = ()
        if fin.any():
            finished = tuple(self._ids[fin].tolist())
            for rid in finished:
                del self._requests[rid]
            self._keep(~fin)
        if self.chunked_prefill:
            self._partial = int(np.count_nonzero(self._kv < self._target))
        return StepOutcome(token_ids, counts, finished)
