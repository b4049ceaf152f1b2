"""The engine's passes on the paged pool: a prefill of chunks and a decode of rows, each one
forward pass over exactly the tokens it brings, the rows laid end to end (no padding).

The engine (``realrun.engine.engine``) runs a Step's passes as batchsim's ``"paged"`` plan
prices them (every prefill chunk in one pass, then the decode); here each pass packs its rows' new
tokens into one sequence, gives the model their positions, and takes each row's greedy token at its
last new token. The KV stays in the pool's blocks (``pool.KVPool``); a row's blocks are taken as it
grows and given back when it leaves. ``running`` are the rows that decode (their prefill complete),
in the order they joined, with the token each feeds next.

The pool is sized once for a run (``size_for``); a pass that finds it full grows it (a copy of
every block), which a well-sized run never does and which ``regrown`` counts.

A padded batch (taxi, static, dynamic) computes its padding as ``generate()`` does: a prefill
given ``pad_to`` brings, beside each prompt shorter than that, a throwaway row of the missing
tokens, so the pass computes rows x ``pad_to`` tokens as the policy counts them; those rows'
blocks go back to the pool when the pass ends, and their tokens are never read.

The interface is the rectangle's (``realrun.engine.padded_passes.PaddedPasses``): the engine runs
either.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from batchsim.core.step import Chunk

from .pool import KVPool, use_paged_attention

__all__ = ["PagedPasses"]


class PagedPasses:
    """Prefill and decode passes of ``body`` (a model body that attends over the pool) and
    ``head``."""

    def __init__(
        self,
        body: torch.nn.Module,
        head: torch.nn.Module,
        shapes: list[tuple[int, int]],
        dtype,
        device,
        context: Callable[[int, int], list[int]],
        cache_kw: str,
        block_size: int = 16,
    ) -> None:
        if not use_paged_attention(body):
            raise RuntimeError(
                "this model body has no attention implementation to set: it cannot attend over "
                "blocks"
            )
        self.body, self.head, self.shapes, self.dtype, self.device = (
            body,
            head,
            shapes,
            dtype,
            device,
        )
        self.context, self.cache_kw = context, cache_kw
        self.pool = KVPool(shapes, 64, block_size, dtype, device)
        self.running: list[int] = []
        self.last: dict[int, int] = {}
        self.regrown = 0

    def reset(self) -> None:
        """Every row gone, this run's figures from zero (the pool itself is kept: ``size_for``
        resizes it)."""
        self.drop(list(self.pool.table))
        self.regrown = self.pool.peak_blocks = 0

    @property
    def held(self) -> list[int]:
        """The rows that decode, in the order they joined."""
        return self.running

    # -- the pool ----------------------------------------------------------------------
    def size_for(self, blocks: int, block_size: int) -> None:
        """A fresh pool of ``blocks`` blocks for the run about to start (the old one must be
        empty)."""
        if self.pool.table:
            raise RuntimeError(
                "the KV pool is resized only between runs, when no request holds a block"
            )
        self.pool = KVPool(
            self.shapes, max(1, int(blocks)), int(block_size), self.dtype, self.device
        )

    def _room(self, rows: list[int], new: list[int]) -> None:
        """Grow the pool if ``rows`` bringing ``new`` tokens each would not fit (the profiler's
        rows, or a run the pool was not sized for; a sized run never grows it, and ``regrown`` says
        so)."""
        pool = self.pool
        short = pool.blocks_wanted(rows, new) - (pool.blocks - pool.used_blocks)
        if short > 0:
            pool.enlarge(max(short, pool.blocks // 2))
            self.regrown += 1

    # -- passes ----------------------------------------------------------------------------
    def _forward(
        self, rows: list[int], tokens: list[int], positions: list[int], new: list[int]
    ) -> list[int]:
        self._room(rows, new)
        p = self.pool.plan(rows, new)  # fits: _room made sure
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        pos = torch.tensor([positions], dtype=torch.long, device=self.device)
        hidden = self.body(
            input_ids=ids, position_ids=pos, **{self.cache_kw: p}, use_cache=True, paged=p
        ).last_hidden_state[0]
        return self.head(hidden[p.last]).argmax(-1).tolist()

    def decode(self) -> tuple[list[int], list[int]]:
        """One token for every running row: (the rows, their tokens)."""
        rows, pool, last = self.running, self.pool, self.last
        positions = [pool.length[r] for r in rows]
        toks = self._forward(rows, [last[r] for r in rows], positions, [1] * len(rows))
        for r, t in zip(rows, toks):
            last[r] = t
        return list(rows), toks

    def prefill(
        self, chunks: list[Chunk], pad_to: int = 0
    ) -> tuple[list[int], list[int], list[int]]:
        """The chunks' tokens in one pass, each padded to ``pad_to`` tokens when given (see the
        module's docstring): (rows whose prefill completed, their first tokens, the rows for
        ``join``). They join ``running`` when the engine says, after the step's other passes."""
        pool = self.pool
        rows, tokens, positions, new = [], [], [], []
        for c in chunks:
            rid = c.request_id
            if c.start == 0:
                # a fresh start (or a recompute after preemption) forgets any old blocks
                pool.free(rid)
            elif pool.length.get(rid, 0) != c.start:
                raise RuntimeError(
                    f"request {rid}: chunk starts at {c.start} but {pool.length.get(rid, 0)} "
                    f"tokens are cached"
                )
            ctx = self.context(rid, c.start + c.length)
            rows.append(rid)
            tokens.extend(ctx[c.start : c.start + c.length])
            positions.extend(range(c.start, c.start + c.length))
            new.append(c.length)
        pads = [(-1 - i, pad_to - c.length) for i, c in enumerate(chunks) if c.length < pad_to]
        for (
            pid,
            n,
        ) in pads:  # ids below zero: no request's; any token will do (its output is never read)
            rows.append(pid)
            tokens.extend([0] * n)
            positions.extend(range(n))
            new.append(n)
        try:
            toks = self._forward(rows, tokens, positions, new)
        finally:
            for pid, _ in pads:
                pool.free(pid)
        done = [(c.request_id, t) for c, t in zip(chunks, toks) if c.completes]
        for rid, t in done:
            self.last[rid] = t
        ids = [r for r, _ in done]
        return ids, [t for _, t in done], ids

    def join(self, rids: list[int]) -> None:
        self.running.extend(rids)

    def drop(self, ids) -> None:
        gone = set(int(i) for i in ids)
        for rid in gone:
            self.pool.free(rid)
            self.last.pop(rid, None)
        self.running = [r for r in self.running if r not in gone]

    def fill(self, ids: list[int], contexts: list[int], seed: int = 0) -> None:
        """Rows as if prefilled (random keys and values: the profiler times shapes, not values)."""
        gen = torch.Generator(device=self.device).manual_seed(seed)
        for rid in ids:
            self.pool.free(rid)
        self._room(list(ids), list(contexts))
        for rid, c in zip(ids, contexts):
            self.pool.fill_random(rid, c, gen)
            self.last[rid] = 0
        self.running.extend(ids)

    # -- figures ---------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes of the pool: reserved once (blocks x block bytes)."""
        return self.pool.nbytes

    @property
    def peak_bytes(self) -> int:
        """The KV bytes the run holds at most: the pool, reserved whole."""
        return self.pool.nbytes

    def note_memory(self) -> None:
        pass  # the pool's bytes are fixed at its start (``regrown`` says if not)

    @property
    def peak_bytes_used(self) -> int:
        """Bytes of the most blocks held at once."""
        return self.pool.peak_blocks * self.pool.block_bytes
