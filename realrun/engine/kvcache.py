"""The batched KV cache: rows of requests in preallocated, left-padded buffers.

Picture a car park with one row of bays per request and one column per position. All
requests' tokens end at the same right-hand column, so one decode pass fills one new
column for every row at once; a shorter request leaves bays empty on its left (left
padding), and the attention mask says which bays hold a token. When a car leaves, the
last row's car moves into its row (one row copied, whatever the size of the park), and
columns that are now empty in every row are given up (shared left padding is trimmed).
A newcomer parks in the next free row, right-aligned with the others.

Why buffers and not plain ``DynamicCache`` layers: a ``DynamicCache`` concatenates the
whole cache with each new token (``torch.cat`` per layer per step), and dropping a row
copies every other row. Here each layer writes its new column into capacity reserved
ahead and hands attention a view, so a decode step writes only what is new, and rows
joining or leaving copy only themselves. When the window reaches the right end it
slides back to the left inside the same buffers; only when that does not fit do the
buffers double (so the buffers may hold up to twice the live KV, and reallocate rarely).

``KVBatch.cache()`` wraps the buffers as a transformers ``DynamicCache`` whose layers
write into them, so any model that calls ``cache.update(k, v, layer_idx)`` runs on it
unchanged. Positions are the caller's business: with left padding, ``position_ids``
must count only a row's real tokens (GPT-2 gives wrong tokens otherwise).

Invariant: for every live row, the mask is 0 in every column left of ``lo``, and the
buffers hold finite numbers in every column of the live window ``lo .. hi`` (a masked bay
still enters attention as weight 0 x value, and 0 x NaN would be NaN): a block is made
zeroed, and a batch's grown buffers are zeroed where a row's padding lands.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

__all__ = ["KVBatch", "BufferLayer", "BufferCache"]


class BufferLayer(DynamicLayer):
    """One layer's keys and values: views [rows, heads, capacity, head_dim], live columns lo..hi."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor, lo: int, hi: int) -> None:
        super().__init__()
        self.K, self.V, self.lo, self.hi = k, v, lo, hi
        self.is_initialized = True
        self.device, self.dtype = k.device, k.dtype
        self.keys, self.values = k[:, :, lo:hi], v[:, :, lo:hi]

    def update(self, key_states, value_states, *args, **kwargs):
        n = key_states.shape[-2]
        if self.hi + n > self.K.shape[2]:
            raise RuntimeError("KV buffer full: reserve() columns before the forward pass")
        self.K[:, :, self.hi : self.hi + n] = key_states
        self.V[:, :, self.hi : self.hi + n] = value_states
        self.hi += n
        self.keys, self.values = self.K[:, :, self.lo : self.hi], self.V[:, :, self.lo : self.hi]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.hi - self.lo


class BufferCache(DynamicCache):
    """A DynamicCache over buffer layers (DynamicCache's own constructor would build empty
    layers)."""

    def __init__(self, layers: list[BufferLayer]) -> None:
        Cache.__init__(self, layers=layers)


def _grow(n: int) -> int:
    # Half again (at least 32): amortised O(1) copies per appended column or row.
    return n + max(32, n // 2)


class KVBatch:
    """Live rows 0..n-1 of buffers with spare rows and columns.

    ``ids[i]`` owns row i; ``pos[i]`` is its next position id (its real tokens so far);
    ``last[i]`` is the token it feeds to the next decode pass. Live columns: ``lo .. hi``.
    """

    def __init__(
        self,
        shapes: list[tuple[int, int]],
        dtype: torch.dtype,
        device,
        rows: int = 0,
        columns: int = 0,
        home: int = 0,
    ) -> None:
        self.shapes, self.dtype, self.device = shapes, dtype, device
        self.ids: list[int] = []
        self.n = self.lo = self.hi = 0
        # Where an empty batch's window ends: far enough right that any row the run can hold fits to
        # its left (0: at the newcomer's own width).
        self.home = home
        self._alloc(rows, columns)

    def _alloc(self, rows: int, columns: int, zero: bool = True) -> None:
        new = torch.zeros if zero else torch.empty
        self.K = [
            new(rows, h, columns, d, dtype=self.dtype, device=self.device) for h, d in self.shapes
        ]
        self.V = [
            new(rows, h, columns, d, dtype=self.dtype, device=self.device) for h, d in self.shapes
        ]
        self.mask = torch.zeros(rows, columns, dtype=torch.long, device=self.device)
        self.pos = torch.zeros(rows, dtype=torch.long, device=self.device)
        self.last = torch.zeros(rows, dtype=torch.long, device=self.device)

    # -- looking -----------------------------------------------------------------------
    def __len__(self) -> int:
        return self.n

    @property
    def width(self) -> int:
        return self.hi - self.lo

    @property
    def row_capacity(self) -> int:
        return self.mask.shape[0]

    @property
    def capacity(self) -> int:
        return self.mask.shape[1]

    @property
    def nbytes(self) -> int:
        return 2 * sum(k.numel() * k.element_size() for k in self.K)

    def cache(self) -> BufferCache:
        n = self.n
        return BufferCache(
            [BufferLayer(k[:n], v[:n], self.lo, self.hi) for k, v in zip(self.K, self.V)]
        )

    def live_mask(self, extra: int = 0) -> torch.Tensor:
        """The attention mask over the cached columns plus ``extra`` new ones (set by the
        caller)."""
        return self.mask[: self.n, self.lo : self.hi + extra]

    def live_pos(self) -> torch.Tensor:
        return self.pos[: self.n]

    def live_last(self) -> torch.Tensor:
        return self.last[: self.n]

    # -- capacity ------------------------------------------------------------------------
    def _rebuild(self, rows: int, columns: int, right: int) -> None:
        """New buffers of the given capacity; the live window moves to end at column ``right``."""
        n, lo, hi, w = self.n, self.lo, self.hi, self.width
        K, V, mask, pos, last = self.K, self.V, self.mask, self.pos, self.last
        # Not zeroed: zeroing a batch's buffers (GPT-2's shape: gigabytes) cost more than the steps
        # around it. The live window is copied whole; columns right of it are written before they
        # are read; what a joining row leaves on its left, ``add`` zeroes (the invariant above).
        self._alloc(rows, columns, zero=False)
        for k_old, k_new in zip(K, self.K):
            k_new[:n, :, right - w : right] = k_old[:n, :, lo:hi]
        for v_old, v_new in zip(V, self.V):
            v_new[:n, :, right - w : right] = v_old[:n, :, lo:hi]
        self.mask[:n, right - w : right] = mask[:n, lo:hi]
        self.pos[:n], self.last[:n] = pos[:n], last[:n]
        self.lo, self.hi = right - w, right

    def reserve(self, columns: int) -> None:
        """Make sure ``columns`` more columns fit right of the live window.

        The window creeps right by a column per decode pass. When it reaches the end, it slides
        back to column 0 inside the same buffers if the room on the left does not overlap it (no
        new memory: fresh allocations cost page faults); otherwise the buffers double.
        """
        if self.hi + columns <= self.capacity:
            return
        w, n = self.width, self.n
        if self.lo >= w and w + columns <= self.capacity:
            for buf in self.K + self.V:
                buf[:n, :, :w] = buf[:n, :, self.lo : self.hi]
            self.mask[:n, :w] = self.mask[:n, self.lo : self.hi]
            self.mask[:n, w:] = 0
            self.lo, self.hi = 0, w
            return
        self._rebuild(self.row_capacity, 2 * (w + columns) + 32, w)

    def _shift(self, right: int) -> None:
        """Move the live window to end at column ``right`` (> hi) in the same buffers."""
        n, lo, hi, w = self.n, self.lo, self.hi, self.width
        for buf in self.K + self.V:
            buf[:n, :, right - w : right] = buf[:n, :, lo:hi].clone()
        mask = self.mask[:n, lo:hi].clone()
        self.mask[:n] = 0
        self.mask[:n, right - w : right] = mask
        self.lo, self.hi = right - w, right

    # -- rows leaving -------------------------------------------------------------------------
    def _move(self, src: int, dst: int) -> None:
        lo, hi = self.lo, self.hi
        for k in self.K:
            k[dst, :, lo:hi] = k[src, :, lo:hi]
        for v in self.V:
            v[dst, :, lo:hi] = v[src, :, lo:hi]
        self.mask[dst] = self.mask[src]
        self.pos[dst], self.last[dst] = self.pos[src], self.last[src]
        self.ids[dst] = self.ids[src]

    def remove(self, ids) -> None:
        """Drop the rows of these request ids: the last row moves into each hole, padding is
        trimmed."""
        gone = set(ids)
        holes = sorted((i for i, rid in enumerate(self.ids) if rid in gone), reverse=True)
        if not holes:
            return
        for i in holes:  # from the end: every row after i is live when i is filled
            last = self.n - 1
            if i != last:
                self._move(last, i)
            self.ids.pop()
            self.n -= 1
        self._trim()

    def _trim(self) -> None:
        if self.n == 0:
            self.lo = self.hi
            return
        used = torch.nonzero(self.mask[: self.n, self.lo : self.hi].any(0))
        if len(used):
            self.lo += int(used[0])

    # -- rows joining -------------------------------------------------------------------------
    def add(self, other: KVBatch, rows: list[int] | None = None) -> None:
        """Append ``other``'s rows (all, or those at ``rows``), right-aligned at this batch's last
        column."""
        rows = list(range(other.n)) if rows is None else rows
        k = len(rows)
        if not k:
            return
        w = other.width
        if self.n == 0:
            # An empty park: start at the left (or at home), leaving the most room to grow.
            self.lo = self.hi = max(w, min(self.home, self.capacity))
        need_rows = self.n + k
        if need_rows <= self.row_capacity and self.hi < w <= self.capacity:
            # a wider newcomer: slide the window right inside the buffers, no new memory
            self._shift(w)
        if need_rows > self.row_capacity or self.hi - w < 0 or self.hi > self.capacity:
            right = max(self.width, w)
            self._rebuild(
                max(
                    need_rows,
                    _grow(self.row_capacity)
                    if need_rows > self.row_capacity
                    else self.row_capacity,
                ),
                max(self.capacity, 2 * right + 32),
                right,
            )
        lo_before = self.lo
        self.lo = min(self.lo, self.hi - w)
        idx = torch.tensor(rows, dtype=torch.long, device=self.device)
        r0, r1, c0, c1 = self.n, self.n + k, self.hi - w, self.hi
        # the window widens left: the rows already here are padded there
        if self.lo < lo_before and r0:
            for buf in self.K + self.V:
                buf[:r0, :, self.lo : lo_before] = 0
        if self.lo < c0:  # the newcomers' own left padding
            for buf in self.K + self.V:
                buf[r0:r1, :, self.lo : c0] = 0
        for mine, theirs in zip(self.K, other.K):
            mine[r0:r1, :, c0:c1] = theirs[idx, :, other.lo : other.hi]
        for mine, theirs in zip(self.V, other.V):
            mine[r0:r1, :, c0:c1] = theirs[idx, :, other.lo : other.hi]
        self.mask[r0:r1] = 0
        self.mask[r0:r1, c0:c1] = other.mask[idx, other.lo : other.hi]
        self.pos[r0:r1], self.last[r0:r1] = other.pos[idx], other.last[idx]
        self.ids.extend(other.ids[i] for i in rows)
        self.n = r1

    def add_blank(self, rid: int) -> None:
        """A row with no tokens yet (a request starting its prefill)."""
        if self.n + 1 > self.row_capacity:
            self._rebuild(_grow(self.row_capacity), self.capacity, self.hi)
        for buf in self.K + self.V:  # a grown buffer's new row is not zeroed (see ``_rebuild``)
            buf[self.n, :, self.lo : self.hi] = 0
        self.mask[self.n] = 0
        self.pos[self.n] = 0
        self.ids.append(rid)
        self.n += 1

    # -- holes -----------------------------------------------------------------------------------
    def has_holes(self) -> torch.Tensor:
        """Per live row: is there an empty column after the row's first token? (Left padding is not
        a hole.)"""
        m = self.live_mask()
        from_first = (m.cumsum(1) > 0).sum(1)  # columns from the row's first token to the end
        return m.sum(1) != from_first

    def row(self, i: int) -> KVBatch:
        """Row i alone, holes squeezed out: its real tokens, contiguous, ending at the last
        column."""
        cols = torch.nonzero(self.mask[i, self.lo : self.hi]).flatten() + self.lo
        w = len(cols)
        one = KVBatch(self.shapes, self.dtype, self.device, rows=1, columns=w)
        for mine, theirs in zip(one.K, self.K):
            mine[0] = theirs[i][:, cols]
        for mine, theirs in zip(one.V, self.V):
            mine[0] = theirs[i][:, cols]
        one.mask[0] = 1
        one.pos[0], one.last[0] = self.pos[i], self.last[i]
        one.ids, one.n, one.lo, one.hi = [self.ids[i]], 1, 0, w
        return one
