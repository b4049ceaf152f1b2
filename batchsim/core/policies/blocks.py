"""KV memory in blocks, as vLLM's PagedAttention keeps it, and the running batch's rows.

``BlockPool`` is the block manager: the cache is cut into blocks of ``block_size``
tokens and a request holds whole blocks, so its waste is at most one partly filled
block. Blocks are counted, not placed: which block holds which token does not change
any time the simulator or the engine reports. ``watermark`` is the share of blocks
kept free when admitting, so a request is not admitted only to be preempted at once
(vLLM keeps 1 %).

``RunningRows`` is the running batch as parallel integer arrays, one entry per row in
admission order (the last row is the newest: the first to be preempted), so a step
over 200 rows costs a few array operations rather than 200 Python iterations.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BlockPool", "RunningRows", "ceil_div"]


def ceil_div(a, b):
    """Ceiling division that works on ints and integer arrays alike."""
    return -(-a // b)


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
        """Tokens a row holding ``held_blocks`` blocks and ``kv`` tokens may add with ``free`` blocks."""
        return free * self.block_size + held_blocks * self.block_size - kv


class RunningRows:
    """The running batch: ids, prompt, out (output length), target (context to prefill),
    kv (tokens cached) and left (output tokens still to produce), per row.

    A row holds exactly the KV blocks its cached tokens fill (``ceil(kv / block_size)``)
    between steps, so the blocks are not stored: they follow from ``kv``.
    """

    _FIELDS = ("ids", "prompt", "out", "target", "kv", "left")

    def __init__(self, capacity: int) -> None:
        self._table = np.zeros((len(self._FIELDS), capacity), dtype=np.int64)
        self.n = 0
        self._views()

    def _views(self) -> None:
        # Views of the first n rows, rebuilt whenever n changes; writing into them writes the table.
        self.ids, self.prompt, self.out, self.target, self.kv, self.left = self._table[:, : self.n]

    @property
    def produced(self) -> np.ndarray:
        """Output tokens produced so far, per row (before a preemption included)."""
        return self.out - self.left

    def append(self, rid: int, prompt: int, out: int, target: int, left: int) -> None:
        self._table[:, self.n] = (rid, prompt, out, target, 0, left)
        self.n += 1
        self._views()

    def keep(self, mask: np.ndarray) -> None:
        """Keep the rows where mask is true, in order."""
        kept = np.compress(mask, self._table[:, : self.n], axis=1)
        k = kept.shape[1]
        self._table[:, :k] = kept
        self.n = k
        self._views()

    def drop(self, rows: np.ndarray) -> None:
        """Drop the rows at these (sorted) positions, keeping the others in order."""
        if len(rows) == 1:  # the common case: one request finished; shift the newer rows down
            i, n = int(rows[0]), self.n
            self._table[:, i : n - 1] = self._table[:, i + 1 : n]
            self.n = n - 1
            self._views()
            return
        mask = np.ones(self.n, dtype=bool)
        mask[rows] = False
        self.keep(mask)

    def pop(self) -> None:
        """Drop the newest row."""
        self.n -= 1
        self._views()

    def index_of(self, rid: int) -> int:
        return int(np.flatnonzero(self.ids == rid)[0])
