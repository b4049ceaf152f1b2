"""What a policy tells a server to do next, and what came of it.

A server, simulated or real, asks its policy one question over and over:
*what do I run now?* The answer is either a ``Step`` (one forward pass of the
model, possibly repeated) or a ``Wait`` (nothing to run until some time, or
until the next arrival). After running it the server reports back how many of
the step's repetitions it actually ran, and the policy answers with a
``StepOutcome``: who produced tokens, who finished.

The same objects drive the simulated clock (``batchsim.sim.simulator``) and the
wall clock of a real model (``realrun``), through one driver loop
(``batchsim.core.driver``): that is what makes predicted and measured comparable.
How a step is executed, as one or several forward passes, is its *pass plan*
(``batchsim.core.plan``).

``repeat`` is the simulator's shortcut. Between arrivals and completions a
continuous batch runs decode steps of one shape over and over; the policy says
so once (``repeat=k``) and the simulator advances through all k steps in one
event, while a real engine still runs them one by one. Only decode-only steps
repeat, and each repetition grows every row's context by one token.
Textbook (``batchsim/textbook/server.py``): no repeat; ``serve`` asks ``next_step`` for every
pass, and gets the same decode step k times over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Chunk", "Step", "Wait", "StepOutcome", "fast_chunk", "fast_step"]


@dataclass(frozen=True)
class Chunk:
    """Part of a request's prefill: context tokens ``start .. start+length``.

    The context is the prompt, or after a preemption the prompt plus the tokens
    already generated (they are recomputed). ``completes`` is true when this
    chunk reaches the end of the context: that step produces the next token.
    """

    request_id: int
    start: int
    length: int
    completes: bool = True


@dataclass(frozen=True)
class Step:
    """One forward pass, repeated ``repeat`` times.

    prefill: chunks of context being processed (each produces a token if it completes).
    decode: ids of the rows that decode one token each, *including* padded rows of a
        padded batch, which are finished but still computed (Hugging Face ``generate()``).
    padded_rows: how many of ``decode`` are finished rows that produce nothing.
    prefill_padding: padding tokens computed in the prefill (a padded batch is padded
        to its longest prompt; padding costs compute like any token).
    kv_read: KV-cache tokens read by the first repetition (sum of the context already
        cached for each row, and of each chunk's ``start``); every further repetition reads
        ``len(decode)`` more. A padded batch's rows count their prompt's left padding too, as
        a rectangle holds it (``kv_padding`` says how much of ``kv_read`` that is).
    kv_padding: of ``kv_read``, the prompt padding a padded batch's decode rows carry
        (``rows x longest prompt - sum of prompts``). A left-padded rectangle reads it; a block
        pool holds none (the padding's throwaway rows are dropped after the prefill), so a
        paged plan reads ``kv_read - kv_padding``.
    decode_width: the longest context among the decoding rows at the first repetition. A
        left-padded rectangular cache (``generate()``, realrun's engine) reads this many
        columns for *every* row, padding included; ``kv_read - kv_padding`` counts only real tokens.
        Left at 0, it is taken as the mean context (rows of equal length).
    repeat: how many identical decode steps this stands for (decode-only steps only).
    interruptible: the server may stop the repetition early when a request arrives,
        because the policy could admit it at the next step boundary.
    preempted: requests whose KV was freed just before this step (a real engine drops
        their cache rows); they wait again and will recompute.
    kv_in_use: KV tokens held after the step's first repetition (for the step log).
    """

    prefill: tuple[Chunk, ...] = ()
    decode: tuple[int, ...] = ()
    padded_rows: int = 0
    prefill_padding: int = 0
    kv_read: int = 0
    kv_padding: int = 0
    decode_width: int = 0
    repeat: int = 1
    interruptible: bool = False
    preempted: tuple[int, ...] = ()
    kv_in_use: int = 0

    def __post_init__(self) -> None:
        if self.repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {self.repeat}")
        if not 0 <= self.kv_padding <= self.kv_read:
            raise ValueError(
                f"kv_padding must be in [0, kv_read={self.kv_read}], got {self.kv_padding}"
            )
        if self.repeat > 1 and self.prefill:
            raise ValueError("only decode-only steps repeat")
        if not self.prefill and not self.decode:
            raise ValueError("a step must prefill or decode something")
        if self.decode and not self.decode_width:
            # Not given (a step made by hand): rows of equal length, the mean context each.
            kv = self.kv_read - sum(c.start for c in self.prefill)
            object.__setattr__(self, "decode_width", -(-kv // len(self.decode)))

    @property
    def prefill_tokens(self) -> int:
        """Prompt tokens computed by this step, padding included."""
        return sum(c.length for c in self.prefill) + self.prefill_padding

    @property
    def batch_size(self) -> int:
        """Rows in the forward pass: decoding rows plus requests being prefilled."""
        return len(self.decode) + len(self.prefill)

    def shape_arrays(self, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-repetition (prefill_tokens, decode_rows, kv_read) for the first m repetitions."""
        j = np.arange(m, dtype=np.float64)
        rows = float(len(self.decode))
        prefill = np.zeros(m)
        prefill[0] = self.prefill_tokens
        return prefill, np.full(m, rows), self.kv_read + j * rows


def fast_chunk(request_id: int, start: int, length: int, completes: bool) -> Chunk:
    """``Chunk(request_id, start, length, completes)``, built faster, for a policy's hot path.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; here the
    fields go straight into the instance's ``__dict__``. The object is the same in every respect
    (fields, equality, hash, repr); a Chunk has nothing to check. Textbook: ``Chunk(...)``."""
    c = _new(Chunk)
    c.__dict__.update(request_id=request_id, start=start, length=length, completes=completes)
    return c


def fast_step(
    prefill: tuple[Chunk, ...],
    decode: tuple[int, ...],
    kv_read: int,
    decode_width: int,
    repeat: int,
    interruptible: bool,
    preempted: tuple[int, ...],
    kv_in_use: int,
    padded_rows: int = 0,
    prefill_padding: int = 0,
    kv_padding: int = 0,
) -> Step:
    """``Step(...)`` with these fields, built faster: for the policies, which decide a step every
    few tens of microseconds, and for which building the frozen dataclass was the largest single
    cost of a decision. The same checks, inline; a step they would refuse or complete (no
    ``decode_width`` given) goes through ``Step`` itself, so the result is always what ``Step``
    gives. Textbook: ``Step(...)`` at the end of ``next_step`` (``batchsim/textbook/continuous.py``,
    ``padded.py``)."""
    if (
        repeat < 1
        or (repeat > 1 and prefill)
        or not (prefill or decode)
        or (decode and not decode_width)
        or not 0 <= kv_padding <= kv_read
    ):
        return Step(
            prefill=prefill,
            decode=decode,
            padded_rows=padded_rows,
            prefill_padding=prefill_padding,
            kv_read=kv_read,
            kv_padding=kv_padding,
            decode_width=decode_width,
            repeat=repeat,
            interruptible=interruptible,
            preempted=preempted,
            kv_in_use=kv_in_use,
        )
    s = _new(Step)
    s.__dict__.update(
        prefill=prefill,
        decode=decode,
        padded_rows=padded_rows,
        prefill_padding=prefill_padding,
        kv_read=kv_read,
        kv_padding=kv_padding,
        decode_width=decode_width,
        repeat=repeat,
        interruptible=interruptible,
        preempted=preempted,
        kv_in_use=kv_in_use,
    )
    return s


_new = object.__new__


@dataclass(frozen=True)
class Wait:
    """Nothing to run. ``until``: wake at this time even without an arrival (None: only an arrival
    wakes)."""

    until: float | None = None


@dataclass
class StepOutcome:
    """What a (possibly repeated) step produced, relative to its first repetition.

    token_ids[i] produced token_counts[i] tokens, one at the end of each of the run's
    first token_counts[i] repetitions. ``finished`` requests are complete, delivered at
    the end of the run. When a request started (its first step) is not told here: the
    records take it from the first step that prefills it (``Recorder.step``).
    """

    token_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    token_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    finished: tuple[int, ...] = ()
