"""KV memory in blocks, as vLLM's PagedAttention keeps it, and the running batch's rows.

``BlockPool`` is the block manager: the cache is cut into blocks of ``block_size``
tokens and a request holds whole blocks, so its waste is at most one partly filled
block. Blocks are counted, not placed: which block holds which token does not change
any time the simulator or the engine reports. ``watermark`` is the share of blocks
kept free when admitting, so a request is not admitted only to be preempted at once
(vLLM keeps 1 %).

``BlockFill`` counts the rows by how full their last block is, while every row decodes in
lockstep, so the blocks a decode step grows into are a few list lookups, not a scan of the rows.

``RunningRows`` is the running batch as parallel integer arrays, one entry per row in
admission order (the last row is the newest: the first to be preempted), so a step
over 200 rows costs a few array operations rather than 200 Python iterations.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BlockPool", "BlockFill", "RunningRows", "ceil_div", "growth_of", "most_steps", "moved"]


def ceil_div(a, b):
    """Ceiling division that works on ints and integer arrays alike."""
    return -(-a // b)


def growth_of(kv: np.ndarray, block_size: int):
    """``need(j)``: the blocks rows with these caches take if each adds j tokens (a scan of the rows)."""
    held = ceil_div(kv, block_size)

    def need(j: int) -> int:
        return int(np.maximum(0, ceil_div(kv + j, block_size) - held).sum())

    return need


def most_steps(need, upper: int, free: int) -> int:
    """Largest j <= upper with need(j) <= free, by bisection (need grows with j; need(1) must fit)."""
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


def moved(kept: int | None, n_old: int, shift: int, new: int | None, pick) -> int | None:
    """A kept max (or min) over the rows after a lockstep step: the old rows' moved by ``shift``
    (each decoded that many tokens), picked against the figure of the rows that joined (None: none)."""
    if not n_old:
        return new
    if kept is None:
        return None
    kept += shift
    return kept if new is None else pick(kept, new)


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


class BlockFill:
    """How many rows have each fill of their last block, for rows that all decode in lockstep.

    A row with ``kv`` cached tokens needs a new block for each token that lands at a position
    ``t`` with ``t % block_size == 0``. When every row adds the same number of tokens, that
    depends only on ``kv % block_size``: so the rows are counted by that residue, and a step of
    ``j`` tokens moves them all at once by adding ``j`` to ``shift`` rather than to each count.
    (Exact integer counting: the same blocks a scan of every row finds.)
    """

    def __init__(self, kv: np.ndarray, block_size: int) -> None:
        self.size = block_size
        self.counts: list[int] = np.bincount(kv % block_size, minlength=block_size).tolist()
        self.n = len(kv)
        self.shift = 0  # tokens every counted row added since: a row's residue is (key + shift) % size

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
        """Rows whose last block is full (or who hold none): each needs a block for its next token."""
        return self.counts[-self.shift % self.size]

    def growth(self, tokens: int) -> int:
        """Blocks the rows take if each adds ``tokens`` tokens: ``q`` per row for each whole block of
        them (q, s = divmod(tokens, size)), and one more for a row whose last block has fewer than
        ``s`` free places (residue 0, or above size - s)."""
        size, counts, shift = self.size, self.counts, self.shift
        q, s = divmod(tokens, size)
        if s <= 1:  # the common step: one token, a new block for each full row
            return q * self.n + (counts[-shift % size] if s else 0)
        return q * self.n + sum([counts[(r - shift) % size] for r in range(size - s + 1, size + 1)])


class RunningRows:
    """The running batch: ids, prompt, out (output length), target (context to prefill),
    kv (tokens cached) and left (output tokens still to produce), per row.

    A row holds exactly the KV blocks its cached tokens fill (``ceil(kv / block_size)``)
    between steps, so the blocks are not stored: they follow from ``kv``.

    ``id_list`` is ``ids`` as a Python list, kept beside the array: a step's tuple of decoding
    ids and its finished ids are read from it, which costs less than ``tolist()`` every step.
    """

    _FIELDS = ("ids", "prompt", "out", "target", "kv", "left")

    def __init__(self, capacity: int) -> None:
        self._table = np.zeros((len(self._FIELDS), capacity), dtype=np.int64)
        # One view per field over the whole capacity, made once: slicing six 1-D views is cheaper
        # than unpacking a 2-D slice, and it happens whenever a row joins or leaves.
        self._full = tuple(self._table)
        self.n = 0
        self.id_list: list[int] = []
        self._views()

    def _views(self) -> None:
        # Views of the first n rows, rebuilt whenever n changes; writing into them writes the table.
        n, (ids, prompt, out, target, kv, left) = self.n, self._full
        self.ids, self.prompt, self.out, self.target, self.kv, self.left = (
            ids[:n], prompt[:n], out[:n], target[:n], kv[:n], left[:n])

    @property
    def produced(self) -> np.ndarray:
        """Output tokens produced so far, per row (before a preemption included)."""
        return self.out - self.left

    def append(self, rid: int, prompt: int, out: int, target: int, left: int) -> None:
        n = self.n
        for field, value in zip(self._full, (rid, prompt, out, target, 0, left)):
            field[n] = value  # cheaper than a tuple turned into a column
        self.n = n + 1
        self.id_list.append(rid)
        self._views()

    def keep(self, mask: np.ndarray) -> None:
        """Keep the rows where mask is true, in order."""
        kept = np.compress(mask, self._table[:, : self.n], axis=1)
        k = kept.shape[1]
        self._table[:, :k] = kept
        self.n = k
        self.id_list = kept[0].tolist()
        self._views()

    def drop(self, rows) -> None:
        """Drop the rows at these (sorted) positions, keeping the others in order."""
        if len(rows) <= 4:  # the common case: a request or two finished; shift the newer rows down
            table, n = self._table, self.n
            for i in reversed(rows):
                i = int(i)
                table[:, i : n - 1] = table[:, i + 1 : n]
                n -= 1
                del self.id_list[i]
            self.n = n
            self._views()
            return
        mask = np.ones(self.n, dtype=bool)
        mask[rows] = False
        self.keep(mask)

    def pop(self) -> None:
        """Drop the newest row."""
        self.n -= 1
        self.id_list.pop()
        self._views()

    def index_of(self, rid: int) -> int:
        return self.id_list.index(rid)
