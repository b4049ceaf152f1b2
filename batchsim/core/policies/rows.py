"""The passengers of a continuous batch: the running rows, the figures kept about them, and the
queue.

``RunningRows`` is the textbook's ``running`` list of ``Request``s
(``batchsim/textbook/continuous.py``) as parallel integer arrays, one per attribute and one
entry per row in admission order (the last row is the newest: the first to be preempted), so
a step over 200 rows costs a few array operations rather than 200 Python iterations.

What a step's shape needs (the tokens every row has cached, the longest context, the fewest
tokens left, the rows by fill of their last block: the sums, maxima and minima the textbook's
``next_step`` takes over ``running`` every pass) is kept as the rows change instead of
scanned for every step: the scans are numpy calls on a few dozen rows, whose overhead is
most of a decode step's cost. The last three hold only while every row decodes in lockstep
(no prefill part-way, every row in every step); None means not known, scanned when next
needed. ``account`` applies what a step did to the rows and keeps the figures. All of it is
there for speed alone. ``Waiting`` is a request in the queue (the textbook's ``waiting``).
"""

from __future__ import annotations

import numpy as np

from .blocks import BlockFill

__all__ = ["RunningRows", "Waiting"]

# ``a.min()`` and ``a.max()`` reach these through Python wrappers that cost more than a batch's
# scan.
_min_of, _max_of = np.minimum.reduce, np.maximum.reduce


class Waiting:
    """A request in the queue: its id and lengths, the context to prefill (the prompt, or prompt +
    generated after a preemption) and the output tokens produced before a preemption (kept: they
    were delivered). Textbook: a ``Request`` in ``waiting``, its ``target`` and ``left``."""

    __slots__ = ("id", "prompt", "out", "target", "produced")

    def __init__(self, rid: int, prompt: int, out: int, target: int, produced: int = 0) -> None:
        self.id, self.prompt, self.out, self.target, self.produced = (
            rid,
            prompt,
            out,
            target,
            produced,
        )


class RunningRows:
    """The running batch: ids, prompt, out (output length), target (context to prefill),
    kv (tokens cached) and left (output tokens still to produce), per row.

    A row holds exactly the KV blocks its cached tokens fill (``ceil(kv / block_size)``)
    between steps, so the blocks are not stored: they follow from ``kv``.

    ``id_list`` is ``ids`` as a Python list, kept beside the array: a step's tuple of decoding
    ids and its finished ids are read from it, which costs less than ``tolist()`` every step.

    ``kv`` and ``left`` are read through properties: a run of passes by every row adds to one lag
    (``_lag``) instead of to both columns, and reading either brings them up to date. The fast paths
    read the columns as they stand and add the lag themselves.

    Kept figures: ``kv_sum`` (tokens cached, always), ``partial`` (rows part-way through a
    chunked prefill, as of the last step: a preemption may leave it high until the next), and,
    in lockstep, ``kv_max``, ``least`` (fewest tokens left) and ``fill`` (a ``BlockFill``).
    """

    _FIELDS = ("ids", "prompt", "out", "target", "kv", "left")

    def __init__(self, capacity: int, block_size: int = 16) -> None:
        self._table = np.zeros((len(self._FIELDS), capacity), dtype=np.int64)
        # One view per field over the whole capacity, made once: slicing six 1-D views is cheaper
        # than unpacking a 2-D slice, and it happens whenever a row joins or leaves.
        self._full = tuple(self._table)
        self.n = 0
        self.id_list: list[int] = []
        self.block_size = block_size
        self.kv_sum = 0
        self.partial = 0
        self.kv_max: int | None = None
        self.least: int | None = None
        self.fill: BlockFill | None = None
        # Tokens every row has decoded that the kv and left columns do not show yet: a row's cache
        # is its kv entry + lag, its tokens left its left entry - lag. A run of passes by every row
        # then moves one number, not two arrays; ``kv`` and ``left`` bring the columns up to date.
        self._lag = 0
        self._views()

    @property
    def kv(self) -> np.ndarray:
        """Tokens cached, per row: a view of the table, up to date (writing into it writes the
        table)."""
        if self._lag:
            self._catch_up()
        return self._kv

    @property
    def left(self) -> np.ndarray:
        """Output tokens still to produce, per row: a view of the table, up to date."""
        if self._lag:
            self._catch_up()
        return self._left

    def _catch_up(self) -> None:
        lag, self._lag = self._lag, 0
        kv, left = self._kv, self._left
        kv += lag
        left -= lag

    def _views(self) -> None:
        # Views of the first n rows, rebuilt whenever n changes; writing into them writes the table.
        n, (ids, prompt, out, target, kv, left) = self.n, self._full
        self.ids, self.prompt, self.out, self.target, self._kv, self._left = (
            ids[:n],
            prompt[:n],
            out[:n],
            target[:n],
            kv[:n],
            left[:n],
        )

    # -- rows joining and leaving ------------------------------------------------------------
    def append(self, rid: int, prompt: int, out: int, target: int, left: int) -> None:
        """A row joins, with nothing cached yet (so ``kv_sum`` holds)."""
        n = self.n
        # field by field: cheaper than a tuple turned into a column
        ids_, prompt_, out_, target_, kv_, left_ = self._full
        ids_[n] = rid
        prompt_[n] = prompt
        out_[n] = out
        target_[n] = target
        lag = self._lag  # stored relative to it (see ``_lag``)
        kv_[n] = -lag
        left_[n] = left + lag
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

    def drop_one(self, i: int) -> None:
        """Drop the row at position ``i``, keeping the others in order (``drop([i])``, for one
        row)."""
        n = self.n - 1
        if i < n:  # shift the newer rows down
            self._table[:, i:n] = self._table[:, i + 1 : n + 1]
        del self.id_list[i]
        self.n = n
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

    def forget(self) -> None:
        """The lockstep figures no longer hold: scan them afresh when next needed."""
        self.kv_max = self.least = self.fill = None

    def take_out(self, rid: int) -> int:
        """Request ``rid``'s row leaves (a cancelled request): its cached tokens, whose blocks are
        now free."""
        i = self.id_list.index(rid)
        kv = self.kv.item(i)
        self.drop([i])
        self.kv_sum -= kv
        self.forget()
        self.partial = int(np.count_nonzero(self.kv < self.target))
        return kv

    def pop_newest(self) -> tuple[int, int, int, int, int]:
        """The newest row leaves (preempted): (id, prompt, out, produced, tokens it had cached)."""
        i = self.n - 1
        rid, prompt, out, kv = (
            self.ids.item(i),
            self.prompt.item(i),
            self.out.item(i),
            self.kv.item(i),
        )
        produced = out - self.left.item(i)
        self.pop()
        self.kv_sum -= kv
        self.forget()
        return rid, prompt, out, produced, kv

    # -- what the next step needs --------------------------------------------------------------
    def block_need(self) -> int:
        """Decoding rows whose last block is full: each needs a new block for its next token."""
        if self.fill is not None:  # lockstep: no row is part-way
            return self.fill.full()
        kv = self.kv
        # a row holds ceil(kv / block_size) blocks: full when kv is a multiple
        full = kv % self.block_size == 0
        if self.partial:
            full &= kv >= self.target
        return int(np.count_nonzero(full))

    def decode_shape(self, decoding, kv: np.ndarray | None, n_decode: int) -> tuple[int, int]:
        """(tokens the decoding rows have cached, the longest of their contexts); ``kv``: theirs."""
        if not n_decode:
            return 0, 0
        # lockstep: every row present before this step's admissions decodes
        if isinstance(decoding, slice):
            # Rows admitted this step hold no cache yet, so the sum over all rows is the decoding
            # rows'.
            if self.kv_max is None:  # the columns as they stand, and the lag (``kv`` unused)
                self.kv_max = int(_max_of(self._kv[decoding])) + self._lag
            return self.kv_sum, self.kv_max
        return int(np.add.reduce(kv)), int(_max_of(kv))

    def fewest_left(self, decoding, n_decode: int) -> int:
        """The fewest output tokens a decoding row has left (0: none decodes)."""
        if not n_decode:
            return 0
        if isinstance(decoding, slice):  # lockstep: the kept figure holds
            if self.least is None:
                self.least = int(_min_of(self._left[decoding])) - self._lag
            return self.least
        return int(_min_of(self._left[decoding])) - self._lag

    # -- what a step did -------------------------------------------------------------------------
    def account(
        self,
        prefill,
        chunk_rows: list[int],
        decoding,
        n_decode: int,
        done: int,
        least_left: int,
        held: int,
    ) -> tuple[np.ndarray, np.ndarray, tuple[int, ...], int, int | None]:
        """Apply ``done`` repetitions of a step: its chunks (``prefill``, at rows ``chunk_rows``)
        and the rows ``decoding`` (a slice when every row present before the step decodes:
        lockstep). The rows that finished leave. ``held``: the blocks the rows held before the step.

        Returns (token ids, their counts, finished ids, blocks the rows grew into, blocks freed by
        the finished rows: None when no row could have finished).
        Textbook: ``Continuous.step_done``, ``done`` times over, for every row at once."""
        # Lockstep: every row present before the step decoded, so the kept longest context and
        # fewest tokens left move by ``done``; rows whose prefill completed join them with their own
        # figures.
        lockstep = isinstance(decoding, slice)
        if lockstep and not prefill and decoding.stop == self.n and not self.partial:
            return self._decode_run(done, least_left, held)
        prefilled, joined_kv, joined_left, ending, under_way = self._prefilled(prefill, chunk_rows)
        if n_decode:
            self._decoded(decoding, n_decode, done, lockstep)
        if lockstep:
            self._move_kept(joined_kv, joined_left, n_decode, done)
        grown = self._grown(joined_kv, n_decode, done, held, lockstep)
        token_ids, counts = self._tokens(prefilled, decoding, n_decode, done)
        finished: tuple[int, ...] = ()
        freed = None
        # Nobody finishes unless a decoding row had no more than ``done`` tokens left, or a prefill
        # produced a request's only token.
        if ending or (n_decode and done >= least_left):
            finished, freed = self._finish()
        if under_way or self.partial:
            self.partial = int(np.count_nonzero(self.kv < self.target))
        if self.partial or not lockstep:
            # Rows part-way through a prefill do not decode (and vLLM V1's budget may leave rows
            # out): not every row moved by ``done``, so the kept figures are scanned afresh when
            # needed.
            self.forget()
        elif self.fill is None:
            # every row decodes next: count them once
            self.fill = BlockFill(self.kv, self.block_size)
        return token_ids, counts, finished, grown, freed

    def _decode_run(self, done: int, least_left: int, held: int):
        """``account`` for the commonest step: a run of decode passes by every row, nothing
        prefilled. The same updates in the same order as the general path (``_decoded``,
        ``_move_kept``, ``_grown``, ``_tokens``, ``_finish``), each reduced to what such a step
        needs. Textbook: ``Continuous.step_done`` for a pass with no prefill, ``done`` times
        over."""
        n = self.n
        self._lag += done  # every row: kv + done, left - done
        self.kv_sum += done * n
        if self.kv_max is not None:
            self.kv_max += done
        if self.least is not None:
            self.least -= done
        fill = self.fill
        if fill is not None:
            grown = fill.growth(done)
            fill.advance(done)
        else:
            bs = self.block_size
            grown = int(np.add.reduce((self.kv + (bs - 1)) // bs)) - held
        counts = np.empty(n, dtype=np.int64)
        counts.fill(done)
        token_ids = self.ids.copy()  # drop() below would overwrite the view
        finished, freed = self._finish() if done >= least_left else ((), None)
        if self.fill is None:
            # every row decodes next: count them once
            self.fill = BlockFill(self.kv, self.block_size)
        return token_ids, counts, finished, grown, freed

    def _prefilled(
        self, prefill, chunk_rows: list[int]
    ) -> tuple[list[int], list[int], list[int], bool, bool]:
        """Apply the step's chunks: (ids whose prefill completed, and the cache and tokens left of
        each, whether one of them produced its request's last token, whether a chunk stopped
        part-way)."""
        kv, left, lag = self._kv, self._left, self._lag  # views: updated in place, relative to lag
        prefilled: list[int] = []
        joined_kv: list[int] = []
        joined_left: list[int] = []
        ending = under_way = False
        for c, i in zip(prefill, chunk_rows):
            # Python ints in and out: cheaper than numpy's scalars
            kv[i] = k = kv.item(i) + c.length
            self.kv_sum += c.length
            if c.completes:
                left[i] = n_left = left.item(i) - 1
                n_left -= lag
                prefilled.append(c.request_id)
                ending = ending or n_left <= 0
                joined_kv.append(k + lag)
                joined_left.append(n_left)
            else:
                under_way = True
        return prefilled, joined_kv, joined_left, ending, under_way

    def _decoded(self, decoding, n_decode: int, done: int, lockstep: bool) -> None:
        """The decoding rows each cached ``done`` more tokens and have ``done`` fewer to produce."""
        if lockstep:
            # Every row but those admitted this step (after ``decoding.stop``; it starts at 0): the
            # lag moves, and the rows that sat out move back, a few Python ints against two array
            # passes.
            self._lag += done
            kv, left = self._kv, self._left
            for j in range(decoding.stop, self.n):
                kv[j] = kv.item(j) - done
                left[j] = left.item(j) + done
        else:
            self.kv[decoding] += done
            self.left[decoding] -= done
        self.kv_sum += done * n_decode

    def _move_kept(
        self, joined_kv: list[int], joined_left: list[int], n_decode: int, done: int
    ) -> None:
        """Lockstep: the old rows' kept figures moved by ``done``, against those of the rows that
        joined."""
        new_max, new_least = max(joined_kv, default=None), min(joined_left, default=None)
        if not n_decode:
            self.kv_max, self.least = new_max, new_least
            return
        if self.kv_max is not None:
            m = self.kv_max + done
            self.kv_max = m if new_max is None else max(m, new_max)
        if self.least is not None:
            m = self.least - done
            self.least = m if new_least is None else min(m, new_least)

    def _grown(
        self, joined_kv: list[int], n_decode: int, done: int, held: int, lockstep: bool
    ) -> int:
        """Blocks the rows grew into this step."""
        fill, bs = self.fill, self.block_size
        if lockstep and fill is not None:
            # The decoding rows grew by ``done`` tokens each; the rows that joined took their blocks
            # when admitted, so only the decoding rows can have grown into new blocks.
            grown = fill.growth(done) if n_decode else 0
            fill.advance(done)
            for k in joined_kv:
                fill.add(k)
            return grown
        # Every row now holds the blocks its cache fills: those the step grew into.
        return int(np.add.reduce((self.kv + (bs - 1)) // bs)) - held

    def _tokens(
        self, prefilled: list[int], decoding, n_decode: int, done: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The step's token events: each row's id and the tokens it produced (1 for a prefill)."""
        if prefilled:
            token_ids = np.concatenate((prefilled, self.ids[decoding]))  # int64, as the ids
            counts = np.empty(len(token_ids), dtype=np.int64)
            counts.fill(done)
            counts[: len(prefilled)] = 1
            return token_ids, counts
        # A copy: with a slice, ids[decoding] is a view that drop() would overwrite.
        counts = np.empty(n_decode, dtype=np.int64)
        counts.fill(done)
        return self.ids[decoding].copy(), counts

    def _finish(self) -> tuple[tuple[int, ...], int]:
        """The rows with nothing left to produce leave: (their ids, the blocks they held)."""
        lag = self._lag
        fin = (self._left <= lag).nonzero()[0].tolist()  # left - lag <= 0
        if len(fin) == 1:
            # The common case, a lone request finished: the same updates below, for one row.
            i = fin[0]
            k = self._kv.item(i) + lag
            finished = (self.id_list[i],)
            self.drop_one(i)
            if self.fill is not None:
                self.fill.remove(k)
            self.kv_sum -= k
            self.least = None
            if self.kv_max is not None and k >= self.kv_max:
                self.kv_max = None
            return finished, -(-k // self.block_size)
        ids = self.id_list
        finished = tuple([ids[i] for i in fin])
        kv = self._kv
        gone = [kv.item(i) + lag for i in fin]
        self.drop(fin)
        if self.fill is not None:
            for k in gone:
                self.fill.remove(k)
        self.kv_sum -= sum(gone)
        bs = self.block_size
        self.least = None  # the fewest left was theirs (0): the next is unknown
        if self.kv_max is not None and max(gone, default=-1) >= self.kv_max:
            self.kv_max = None
        return finished, sum(-(-k // bs) for k in gone)
