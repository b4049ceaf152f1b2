"""Continuous batching: the bus that never stops (Orca's iteration-level scheduling, vLLM's).

Two queues: ``waiting`` (first come, first served) and ``running`` (in boarding order: the
last is the newest). Before every pass the scheduler goes through three phases:

1. **make room**: a running request whose prefill is done decodes a token this pass, and
   needs a new KV block if its last one is full. While the free blocks fall short, the
   newest running request is *preempted*: its blocks are freed and it goes back to the front
   of ``waiting``, to compute its prompt and the tokens it had made again (vLLM's recompute);
2. **continue chunks**: a prompt too long for one pass goes on, as far as the pass's token
   budget and the free blocks allow;
3. **admit**: waiting requests board in order while fewer than ``max_seqs`` run, the pass's
   prompt tokens stay within ``max_batched_tokens`` and free blocks hold what they bring.
   With ``chunked_prefill`` a long prompt boards in pieces; without, it waits for a pass
   with room for all of it (one longer than the whole budget takes a pass to itself).

After the pass each request that decoded or computed its last prompt token gets a token; one
with nothing left to make leaves, freeing its blocks. KV memory is counted in blocks of
``block_size`` tokens (vLLM's PagedAttention): a request holds ``ceil(kv / block_size)``.
``watermark`` keeps a share of blocks free when a request boards beside others (vLLM: 1 %).
"""

import math
from collections import deque

from ..core.errors import check_fraction
from ..core.knobs import ContinuousKnobs as Knobs
from ..core.limits import ServerLimits
from ..core.step import Chunk, Step
from .request import Request


class Continuous:
    name = "continuous"
    streams = True  # each token is delivered as it is made

    def __init__(
        self,
        max_seqs: int = Knobs.max_seqs,
        max_batched_tokens: int = Knobs.max_batched_tokens,
        block_size: int = Knobs.block_size,
        chunked_prefill: bool = Knobs.chunked_prefill,
        watermark: float = 0.01,
    ) -> None:
        Knobs(max_seqs, max_batched_tokens, block_size, chunked_prefill)  # each checks itself
        self.max_seqs, self.max_batched_tokens = int(max_seqs), int(max_batched_tokens)
        self.block_size, self.chunked_prefill = int(block_size), bool(chunked_prefill)
        self.watermark = check_fraction("watermark", watermark)

    def __repr__(self) -> str:
        knobs = ("max_seqs", "max_batched_tokens", "block_size", "chunked_prefill")
        return f"Continuous({', '.join(f'{k}={getattr(self, k)}' for k in knobs)})"

    def start(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        kv = limits.kv_budget_tokens
        self.total_blocks = None if kv is None else kv // self.block_size
        # With no KV budget every check of free blocks passes: infinitely many are free.
        self.free_blocks = math.inf if kv is None else self.total_blocks
        self.watermark_blocks = int(self.watermark * self.total_blocks) if self.total_blocks else 0
        self.used_blocks = self.kv_peak = self.preemptions = 0
        hard = limits.max_step_tokens  # the server's limit on a pass caps the policy's budget
        self.budget = min(self.max_batched_tokens, math.inf if hard is None else hard)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def deadline(self) -> float | None:
        return None  # it never waits for company

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)  # ceiling division

    def take(self, r: Request, blocks: int) -> None:
        """``r`` takes ``blocks`` more KV blocks (gives them back when negative)."""
        r.blocks += blocks
        self.used_blocks += blocks
        self.free_blocks -= blocks
        assert self.free_blocks >= 0, "more KV blocks handed out than the budget holds"
        self.kv_peak = max(self.kv_peak, self.used_blocks * self.block_size)

    def arrive(self, r: Request) -> str | None:
        reason = self.limits.context_reason(r.prompt, r.output)
        if reason is None and not self.chunked_prefill:
            reason = self.limits.step_tokens_reason(r.prompt)  # its prompt must fit one pass
        if reason is None and self.total_blocks is not None:
            need = self.blocks_for(r.prompt + r.output - 1)  # its longest cache: all but its last
            if need > self.total_blocks:
                reason = (
                    f"needs {need} KV blocks of {self.block_size} tokens, more than the "
                    f"{self.total_blocks} in the budget"
                )
        if reason is None:
            self.waiting.append(r)
        return reason

    def next_step(self, now: float, everyone_in: bool) -> Step | None:
        if self.idle:
            return None
        preempted: list[int] = []
        while True:
            # 1. Make room: each decoding request whose last block is full needs one more.
            while True:
                decoding = [r for r in self.running if r.kv >= r.target]
                need = sum(1 for r in decoding if r.kv % self.block_size == 0)
                if need <= self.free_blocks or not self.running:
                    break
                preempted.append(self.preempt_newest())
            spare = self.free_blocks - need  # blocks this pass may give to prompts
            # 2. Continue the prefills under way, oldest first.
            prefill: list[tuple[Request, Chunk]] = []
            budget = self.budget
            for r in [r for r in self.running if r.kv < r.target]:  # still prefilling
                if budget <= 0:
                    break
                room = (spare + r.blocks) * self.block_size - r.kv  # tokens its blocks could hold
                n = min(budget, r.target - r.kv, room)
                if n <= 0:
                    continue
                extra = self.blocks_for(r.kv + n) - r.blocks
                self.take(r, extra)
                spare -= extra
                prefill.append((r, Chunk(r.id, r.kv, n, r.kv + n == r.target)))
                budget -= n
            # 3. Admit. Nobody boards in a pass that had to preempt (memory is short, and the
            # request just preempted would board again at once), unless nobody is left running.
            if not preempted or not self.running:
                self.admit(budget, spare, prefill)
            if prefill or decoding:
                break
            # Only stalled prefills are left and no block is free for them: make room.
            preempted.append(self.preempt_newest())
        self.prefilling, self.decoding = prefill, decoding
        return Step(
            prefill=tuple(c for _, c in prefill),
            decode=tuple(r.id for r in decoding),
            kv_read=sum(r.kv for r in decoding) + sum(c.start for _, c in prefill),
            decode_width=max((r.kv for r in decoding), default=0),
            preempted=tuple(preempted),
            kv_in_use=(self.used_blocks + need) * self.block_size,
        )

    def admit(self, budget: int, spare: float, prefill: list[tuple[Request, Chunk]]) -> None:
        while self.waiting and len(self.running) < self.max_seqs and budget > 0:
            r = self.waiting[0]
            n = r.target
            if n > budget:
                if self.chunked_prefill:
                    n = budget
                elif budget < self.budget:
                    break  # it waits for a pass whose prompt budget is all its own
                elif self.limits.max_step_tokens is not None:
                    # Longer than the budget, it takes this pass alone. A recompute (prompt and the
                    # tokens made: only the prompt was checked on arrival) may pass the server's
                    # limit on a pass, and is then chunked, even without chunked prefill.
                    n = min(n, self.limits.max_step_tokens)
            blocks = self.blocks_for(n)
            # The chunk must fit whole (vLLM V1's rule): a fragment squeezed into the last blocks
            # would be preempted at once, as the running requests grow into them.
            if blocks + (self.watermark_blocks if self.running else 0) > spare:
                break
            spare -= blocks
            self.running.append(self.waiting.popleft())
            self.take(r, blocks)
            prefill.append((r, Chunk(r.id, 0, n, n == r.target)))
            budget -= n

    def preempt_newest(self) -> int:
        r = self.running.pop()
        self.take(r, -r.blocks)
        r.target = r.prompt + (r.output - r.left)  # compute its prompt and its tokens again
        r.kv = 0
        r.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(r)
        return r.id

    def step_done(self, step: Step) -> tuple[list[Request], list[Request]]:
        made = []
        for r, c in self.prefilling:
            r.kv += c.length
            if c.completes:  # the pass over the last prompt token makes the next token
                r.left -= 1
                made.append(r)
        for r in self.decoding:
            r.kv += 1
            r.left -= 1
            made.append(r)
        for r in self.running:  # a decoding request may have grown into a new block
            self.take(r, self.blocks_for(r.kv) - r.blocks)
        finished = [r for r in self.running if r.left <= 0]
        for r in finished:
            self.take(r, -r.blocks)
        self.running = [r for r in self.running if r.left > 0]
        return made, finished
