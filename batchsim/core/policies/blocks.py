"""KV memory in blocks, as vLLM's PagedAttention keeps it.

``BlockPool`` is the block manager: the cache is cut into blocks of ``block_size``
tokens and a request holds whole blocks, so its waste is at most one partly filled
block. Blocks are counted, not placed: which block holds which token does not change
any time the simulator or the engine reports. ``watermark`` is the share of blocks
kept free when admitting, so a request is not admitted only to be preempted at once
(vLLM keeps 1 %).

``BlockFill`` counts the rows by how full their last block is, while every row decodes in
lockstep, so the blocks a decode step grows into are a few list lookups, not a scan of the rows.

Textbook (``batchsim/textbook/continuous.py``): the pool is its ``total_blocks``, ``free_blocks``
and ``take``; ``BlockFill`` and ``most_steps`` are there only for speed (see each).

The running batch's rows, ``RunningRows``, are in ``rows``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BlockPool", "BlockFill", "ceil_div", "growth_of", "most_steps"]


def ceil_div(a, b):
    """Ceiling division that works on ints and integer arrays alike."""
    return -(-a // b)


def growth_of(kv: np.ndarray, block_size: int):
    """``need(j)``: the blocks rows with these caches take if each adds j tokens (a scan of the
    rows)."""
    held = ceil_div(kv, block_size)

    def need(j: int) -> int:
        return int(np.maximum(0, ceil_div(kv + j, block_size) - held).sum())

    return need


def most_steps(need, upper: int, free: int) -> int:
    """Largest j <= upper with need(j) <= free, by bisection (need grows with j; need(1) must fit).
    Textbook: phase 1 of ``next_step`` passing, without a preemption, before each of j passes."""
    if need(upper) <= free:
        return upper
    lo, hi = 1, upper
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if need(mid) <= free:
            lo = mid
        else:
            hi = mid
    return lo


class BlockPool:
    """A pool of ``total`` KV blocks of ``block_size`` tokens (None: unlimited)."""

    def __init__(self, total: int | None, block_size: int, watermark: float = 0.0) -> None:
        self.total = total
        self.block_size = block_size
        self.free = total if total is not None else 0
        self.watermark = int(watermark * total) if total else 0

    @property
    def limited(self) -> bool:
        return self.total is not None

    def blocks_for(self, tokens):
        """Blocks that hold ``tokens`` tokens (an int or an array)."""
        return ceil_div(tokens, self.block_size)

    def take(self, blocks: int) -> None:
        """Hand out (or, negative, take back) blocks."""
        if self.total is not None:
            self.free -= blocks
            if self.free < 0 or self.free > self.total:
                raise AssertionError(f"KV blocks miscounted: {self.free} free of {self.total}")

    def tokens_fitting(self, free: int, held_blocks: int, kv: int) -> int:
        """Tokens a row holding ``held_blocks`` blocks and ``kv`` tokens may add with ``free``
        blocks."""
        return free * self.block_size + held_blocks * self.block_size - kv


class BlockFill:
    """How many rows have each fill of their last block, for rows that all decode in lockstep.

    A row with ``kv`` cached tokens needs a new block for each token that lands at a position
    ``t`` with ``t % block_size == 0``. When every row adds the same number of tokens, that
    depends only on ``kv % block_size``: so the rows are counted by that residue, and a step of
    ``j`` tokens moves them all at once by adding ``j`` to ``shift`` rather than to each count.
    (Exact integer counting: the same blocks a scan of every row finds.)

    Textbook: ``need = sum(1 for r in decoding if r.kv % block_size == 0)`` in ``next_step``
    (``full``), and the blocks ``step_done``'s ``take`` adds over j passes (``growth``).
    """

    def __init__(self, kv: np.ndarray, block_size: int) -> None:
        self.size = block_size
        self.counts: list[int] = np.bincount(kv % block_size, minlength=block_size).tolist()
        self.n = len(kv)
        self.shift = (
            0  # tokens every counted row added since: a row's residue is (key + shift) % size
        )

    def add(self, kv: int) -> None:
        self.counts[(kv - self.shift) % self.size] += 1
        self.n += 1

    def remove(self, kv: int) -> None:
        self.counts[(kv - self.shift) % self.size] -= 1
        self.n -= 1

    def advance(self, tokens: int) -> None:
        """Every counted row added ``tokens`` tokens."""
        self.shift += tokens

    def full(self) -> int:
        """Rows whose last block is full (or who hold none): each needs a block for its next
        token."""
        return self.counts[-self.shift % self.size]

    def growth(self, tokens: int) -> int:
        """Blocks the rows take if each adds ``tokens`` tokens: ``q`` per row for each whole block
        of them (q, s = divmod(tokens, size)), and one more for a row whose last block has fewer
        than ``s`` free places (residue 0, or above size - s)."""
        size, counts, shift = self.size, self.counts, self.shift
        q, s = divmod(tokens, size)
        if s <= 1:  # the common step: one token, a new block for each full row
            return q * self.n + (counts[-shift % size] if s else 0)
        return q * self.n + sum([counts[(r - shift) % size] for r in range(size - s + 1, size + 1)])
