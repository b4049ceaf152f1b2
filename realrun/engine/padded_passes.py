"""The engine's passes on a left-padded rectangle (``kvcache.KVBatch``): the layout the block pool
replaced, kept where the body cannot attend over blocks (a GPU, a model without a packed CPU body)
and for lesson 5's comparison (``realrun run --kv padded``).

The same interface as ``paged.passes.PagedPasses``, so the engine runs either without asking
which: ``prefill(chunks)`` (the completed rows, their first tokens, and what ``join`` takes after
the step's other passes), ``decode()``, ``join``, ``drop``, ``fill``, ``held``, ``nbytes``.

A prefill pass is a rectangle of its rows x its longest chunk, each chunk right-aligned (left
padding), attending to the cache kept from a chunk it continues; a decode pass is one column for
every row. ``partial`` holds requests part-way through a chunked prefill.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from batchsim.core.step import Chunk

from .kvcache import KVBatch

__all__ = ["PaddedPasses"]


class PaddedPasses:
    """Prefill and decode passes over a ``KVBatch``; ``next_tokens(**inputs)`` is the model's greedy
    step."""

    def __init__(
        self,
        next_tokens: Callable[..., torch.Tensor],
        shapes: list[tuple[int, int]],
        dtype,
        device,
        context: Callable[[int, int], list[int]],
        cache_kw: str,
        pad_token_id: int,
    ) -> None:
        self.next_tokens, self.shapes, self.dtype, self.device = next_tokens, shapes, dtype, device
        self.context, self.cache_kw, self.pad_token_id = context, cache_kw, pad_token_id
        self.reset()

    def reset(self, rows: int = 0, columns: int = 0, home: int = 0) -> None:
        """Empty buffers for a run (``rows`` x ``columns`` reserved ahead when given)."""
        self.batch = KVBatch(
            self.shapes, self.dtype, self.device, rows=rows, columns=columns, home=home
        )
        self.partial: dict[int, KVBatch] = {}
        self.peak_bytes = 0

    # -- looking -----------------------------------------------------------------------------
    @property
    def held(self) -> list[int]:
        """The rows that decode, in the rectangle's order."""
        return self.batch.ids

    @property
    def nbytes(self) -> int:
        """Bytes of the buffers now: the rectangle and the rows part-way through a chunked
        prefill."""
        return self.batch.nbytes + sum(p.nbytes for p in self.partial.values())

    def note_memory(self) -> None:
        self.peak_bytes = max(self.peak_bytes, self.nbytes)

    # -- passes -------------------------------------------------------------------------------
    def decode(self) -> tuple[list[int], list[int]]:
        b = self.batch
        n = b.n
        b.reserve(1)
        b.mask[:n, b.hi] = 1
        nxt = self.next_tokens(
            input_ids=b.live_last()[:, None],
            **{self.cache_kw: b.cache()},
            attention_mask=b.live_mask(1),
            position_ids=b.live_pos()[:, None],
            use_cache=True,
        )
        b.hi += 1
        b.pos[:n] += 1
        b.last[:n] = nxt
        return list(b.ids), nxt.tolist()

    def prefill(self, chunks: list[Chunk], pad_to: int = 0) -> tuple[list[int], list[int], list]:
        """One rectangle of the chunks (``pad_to`` is the rectangle's own: it pads to the longest
        anyway)."""
        n = len(chunks)
        L = max(c.length for c in chunks)
        pasts = [self._past(c) for c in chunks]
        tp = max((p.width for p in pasts if p is not None), default=0)
        block = KVBatch(self.shapes, self.dtype, self.device, rows=n, columns=tp + L)
        block.lo = block.hi = tp
        for c, past in zip(chunks, pasts):
            if past is not None:
                block.add(past)
            else:
                block.add_blank(c.request_id)
        tokens = np.full((n, L), self.pad_token_id, dtype=np.int64)
        positions = np.zeros((n, L), dtype=np.int64)
        new_mask = np.zeros((n, L), dtype=np.int64)
        for i, c in enumerate(chunks):
            ctx = self.context(c.request_id, c.start + c.length)
            tokens[i, L - c.length :] = ctx[c.start : c.start + c.length]
            positions[i, L - c.length :] = np.arange(c.start, c.start + c.length)
            new_mask[i, L - c.length :] = 1
        block.mask[:n, block.hi : block.hi + L] = torch.from_numpy(new_mask).to(self.device)
        nxt = self.next_tokens(
            input_ids=torch.from_numpy(tokens).to(self.device),
            **{self.cache_kw: block.cache()},
            attention_mask=block.live_mask(L),
            position_ids=torch.from_numpy(positions).to(self.device),
            use_cache=True,
        )
        block.hi += L
        block.pos[:n] = torch.tensor(
            [c.start + c.length for c in chunks], dtype=torch.long, device=self.device
        )
        block.last[:n] = nxt
        self.peak_bytes = max(self.peak_bytes, self.nbytes + block.nbytes)
        done = [i for i, c in enumerate(chunks) if c.completes]
        for i, c in enumerate(chunks):
            if not c.completes:
                self.partial[c.request_id] = block.row(i)
        if not done:
            return [], [], []
        last = nxt.tolist()
        ids, toks = [chunks[i].request_id for i in done], [last[i] for i in done]
        # A row that continued a chunk may have a gap between its old cache and its new tokens
        # (new tokens are right-aligned to the longest chunk): such rows join squeezed, one by one.
        holes = block.has_holes()
        if bool(holes[done].any()):
            return ids, toks, [(block.row(i), None) for i in done]
        return ids, toks, [(block, done)]

    def _past(self, c: Chunk) -> KVBatch | None:
        past = self.partial.pop(c.request_id, None)
        if c.start == 0:
            return None  # a fresh start (or a recompute after preemption) forgets any old rows
        if past is None or past.width != c.start:
            raise RuntimeError(
                f"request {c.request_id}: chunk starts at {c.start} but "
                f"{past.width if past else 0} tokens are cached"
            )
        return past

    def join(self, pending: list) -> None:
        for block, rows in pending:
            self.batch.add(block, rows)

    def drop(self, ids) -> None:
        gone = set(int(i) for i in ids)
        for rid in gone:
            self.partial.pop(rid, None)
        self.batch.remove(gone)

    def fill(self, ids: list[int], contexts: list[int], seed: int = 0) -> None:
        """Rows as if prefilled (random keys and values: the profiler times shapes, not values)."""
        w = max(contexts)
        block = KVBatch(self.shapes, self.dtype, self.device, rows=len(ids), columns=w)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        for buf in block.K + block.V:
            buf.normal_(generator=gen)  # finite everywhere; the mask hides the padding
        for i, c in enumerate(contexts):
            block.mask[i, w - c :] = 1
        block.pos[: len(ids)] = torch.tensor(contexts, dtype=torch.long, device=self.device)
        block.ids, block.n, block.lo, block.hi = list(ids), len(ids), 0, w
        self.batch.add(block)
