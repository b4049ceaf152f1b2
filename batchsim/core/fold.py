"""Token events folded into per-request times, a chunk at a time, all in numpy.

A step tells the recorder which requests produced how many tokens; keeping a timestamp
per token would cost 8 bytes a token, so the recorder buffers these events and folds
them, every few tens of thousands of rows, into each request's first token, last token,
token count and longest gap between two tokens. Folding in chunks gives, to the bit,
what one fold at the end gives (see ``fold_events``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["fold_events"]


def fold_events(events: list, first_token: np.ndarray, last_token: np.ndarray, itl_max: np.ndarray,
                tokens: np.ndarray, slot=None) -> None:
    """Fold buffered token events into per-request arrays, all in numpy.

    Each event is (ids, counts, ends, t_start): row ``id`` produced ``c`` tokens, one at the
    end of each of the first c repetitions of a run that began at t_start and whose
    repetitions ended at ``ends``. So its first token is at ends[0], its last at ends[c-1],
    and the gaps inside the run are the step durations 2..c. The gap before its first token
    is the distance from the same request's previous event. Events are in time order, so a
    stable sort by id keeps each request's in order; a request's last token from an earlier
    fold is in ``last_token``, which is why folding in chunks gives, bit for bit, what one
    fold at the end gives. ``slot(ids)`` maps ids to array positions (a ring of live
    requests in a summary-only run); None: ids are positions.
    """
    if not events:
        return
    id_list = [e[0] for e in events]
    end_list = [e[2] for e in events]
    ne = len(events)
    ids = np.concatenate(id_list)
    counts = np.concatenate([e[1] for e in events])
    lens = np.fromiter(map(len, id_list), dtype=np.int64, count=ne)
    m = np.fromiter(map(len, end_list), dtype=np.int64, count=ne)
    ends = np.concatenate(end_list).astype(np.float64, copy=False)
    estart = np.cumsum(m)
    estart -= m
    off = np.repeat(estart, lens)
    first = ends[off]
    off += counts
    off -= 1
    last = ends[off]
    inner = None
    if len(ends) > ne:  # some event ran several repetitions: rows with c > 1 have gaps inside it
        multi = np.flatnonzero(counts > 1)
        if len(multi):
            prev_end = np.empty_like(ends)
            prev_end[1:] = ends[:-1]
            prev_end[estart] = np.fromiter((e[3] for e in events), dtype=np.float64, count=ne)
            durs = ends - prev_end
            durs = np.append(durs, np.nan)
            hi = off[multi] + 1          # one past the row's last repetition
            lo = hi - counts[multi] + 1  # the row's second repetition
            inner = np.full(len(ids), np.nan)
            inner[multi] = np.maximum.reduceat(durs, np.column_stack([lo, hi]).ravel())[::2]
    # A stable sort keeps each request's events in time order; on 32-bit keys it is twice as fast.
    key = ids.astype(np.int32) if len(ids) and ids.max() < 2**31 else ids
    order = np.argsort(key, kind="stable")
    ids = ids[order]
    first = first[order]
    last = last[order]
    counts = counts[order]
    # Each request's events form one group: reduce each group, then update that request once.
    new = np.empty(len(ids), dtype=bool)
    new[0] = True
    np.not_equal(ids[1:], ids[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    u = ids[starts]
    pos = u if slot is None else slot(u)
    prev_last = np.empty_like(last)
    prev_last[1:] = last[:-1]
    prev_last[starts] = last_token[pos]
    gap = first - prev_last  # NaN where no earlier token
    if inner is not None:
        gap = np.fmax(gap, inner[order])
    gmax = np.fmax.reduceat(gap, starts)
    itl_max[pos] = np.fmax(itl_max[pos], gmax)
    first_token[pos] = np.fmin(first_token[pos], first[starts])
    ends_idx = np.empty_like(starts)
    ends_idx[:-1] = starts[1:] - 1
    ends_idx[-1] = len(ids) - 1
    last_token[pos] = np.fmax(last_token[pos], last[ends_idx])
    tokens[pos] += np.add.reduceat(counts, starts)
