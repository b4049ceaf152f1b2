"""A step's pass plan: the forward passes that run it, each with its shape.

A policy decides *what* a step does (these chunks prefill, those rows decode); the
server decides *how*: in one forward pass or several. The plan is that "how", and it
lives here, in the shared core, so that the engine that runs a step and every cost
model that prices it see the very same passes.

Three ways of running a step, named by ``PLANS``:

- ``"fused"``: one pass for the whole step, every row's tokens flattened together and
  attention reading each row's real context (vLLM's kernels, ragged). The roofline GPU
  servers and the textbook models run this way.
- ``"grouped"``: realrun's engine, a left-padded rectangular cache in PyTorch. Prefill
  chunks run in passes of their own, grouped so that short prompts are not padded to
  long ones (chunks within a quarter of the group's longest share a pass); then the
  decoding rows run one pass of one token each. A rectangle reads ``rows x width``
  cached columns, where width is the longest row's context: padding is read too.
  realrun's engine runs this way where its KV is the rectangle (``--kv padded``, a GPU).
- ``"paged"``: realrun's engine on its block pool (the default on a CPU). The prefill chunks
  run as one pass, every row's tokens laid end to end (nothing padded, so nothing to
  group); then the decoding rows run one pass of one token each. Attention reads each
  row's own blocks (ragged) in both: ``attn_read`` is ``kv_read``, and a padded batch's rows
  read no padding (``Step.kv_padding`` is left out).

A padded batch (taxi, static, dynamic, ``generate()``) computes its padding under every
plan: its prefill is one pass of ``rows x longest prompt`` tokens, as its policy counts
them (the paged engine computes each short prompt's padding as a throwaway row beside it).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import check_choice
from .step import Chunk, Step

__all__ = ["Pass", "PLANS", "plan_step", "prefill_groups"]

PLANS = ("fused", "grouped", "paged")


@dataclass(frozen=True)
class Pass:
    """One forward pass.

    prefill_tokens: prompt tokens computed, padding included (rows x longest chunk in a
        rectangle); decode_rows: rows decoding one token each; prefill_rows: rows prefilling;
    query: the longest chunk (a rectangle pads every prefill row to it; 1 for decode);
    kv_read: real cached tokens the rows attend to (what a paged, ragged kernel reads);
    attn_read: cached tokens attention actually reads: ``rows x width`` in a rectangle,
        ``kv_read`` when ragged;
    chunks: the prefill chunks this pass runs (for the engine);
    ragged: attention reads each row's own context (paged kernels), not a rectangle.
    """

    prefill_tokens: int = 0
    decode_rows: int = 0
    prefill_rows: int = 0
    query: int = 1
    kv_read: int = 0
    attn_read: int = 0
    chunks: tuple[Chunk, ...] = ()
    ragged: bool = False

    @property
    def attn_pairs(self) -> float:
        """Query-key pairs the attention computes: each prompt token attends to the cached
        context and to the chunk's tokens before it; each decoding row to its context and itself."""
        if self.ragged:
            inner = sum(c.length * (c.start + (c.length + 1) / 2) for c in self.chunks)
            return inner + (self.kv_read - sum(c.start for c in self.chunks)) + self.decode_rows
        if self.prefill_rows:
            return self.prefill_rows * self.query * (self.past + (self.query + 1) / 2)
        return float(self.attn_read + self.decode_rows)

    @property
    def prefill_shape(self) -> tuple[float, float]:
        """``(rows, length)`` of equal chunks with this pass's prompt tokens and its chunks'
        attention pairs among themselves: rows = (sum l)^2 / sum l^2, length = sum l^2 / sum l over
        its pieces.

        A profile times equal chunks, whose cost is, to second order, ``rows x (a l + b l^2)``
        (per-token work and attention within a chunk); that shape keeps both sums, so the profiled
        table prices a ragged pass at the work it does. Its pieces are its chunks and, in a padded
        batch on the block pool, each short prompt's padding, which the engine computes as a
        throwaway row of its own (``realrun.engine.paged.passes``), so the padding attends to
        itself, not to the prompt: 8 prompts of 300-450 tokens padded to 433 do ~78 % of the
        attention of 8 x 433 (priced as that, the padded passes came out 14-17 % dear in
        bench/step_fidelity.py). The plain version is
        ``(prefill_rows, prefill_tokens / prefill_rows)``, the mean length, which equal chunks
        give."""
        lengths = [c.length for c in self.chunks]
        if not lengths or not self.prefill_rows:
            return float(max(self.prefill_rows, 1)), max(
                1.0, self.prefill_tokens / max(self.prefill_rows, 1)
            )
        # padded to ``query``: the padding is rows of its own
        if self.prefill_tokens > sum(lengths):
            lengths += [self.query - n for n in lengths if n < self.query]
        s1 = float(sum(lengths))
        s2 = float(sum(n * n for n in lengths))
        return s1 * s1 / s2, s2 / s1

    @property
    def kind(self) -> str:
        if self.prefill_rows and self.decode_rows:
            return "mixed"
        return "prefill" if self.prefill_rows else "decode"

    @property
    def rows(self) -> int:
        return self.prefill_rows + self.decode_rows

    @property
    def past(self) -> int:
        """Cached columns each row of the pass attends to (the rectangle's width before the
        pass)."""
        return self.attn_read // self.rows if self.rows else 0


def prefill_groups(chunks: tuple[Chunk, ...], padded: bool) -> list[tuple[Chunk, ...]]:
    """Split a prefill into passes of similar lengths (realrun's engine), longest first.

    A padded batch pays for its padding by definition (``generate()`` runs one pass), so it
    stays whole. Otherwise a chunk joins the current pass when it is at least three quarters
    as long as the pass's longest: a pass costs a fixed few milliseconds, padding costs per
    token, and that split keeps the padding under a quarter of any pass.
    """
    if padded or len(chunks) == 1:
        return [tuple(chunks)]
    out: list[list[Chunk]] = []
    for c in sorted(chunks, key=lambda c: -c.length):
        if out and c.length >= 0.75 * out[-1][0].length:
            out[-1].append(c)
        else:
            out.append([c])
    return [tuple(g) for g in out]


def _rect_prefill(group: tuple[Chunk, ...]) -> Pass:
    n = len(group)
    longest = max(c.length for c in group)
    past = max(c.start for c in group)
    return Pass(
        prefill_tokens=n * longest,
        prefill_rows=n,
        query=longest,
        kv_read=sum(c.start for c in group),
        attn_read=n * past,
        chunks=group,
    )


def _paged(step: Step, rows: int) -> list[Pass]:
    """The block pool's two passes: every chunk packed into one prefill (a padded batch's padding
    computed with it: ``prefill_tokens`` counts it), then the decode; both ragged."""
    passes = []
    if step.prefill:
        past = sum(c.start for c in step.prefill)
        passes.append(
            Pass(
                prefill_tokens=step.prefill_tokens,
                prefill_rows=len(step.prefill),
                query=max(c.length for c in step.prefill),
                kv_read=past,
                attn_read=past,
                chunks=step.prefill,
                ragged=True,
            )
        )
    if rows:
        # A padded batch's rows hold no padding in the pool: their own prompts and tokens only.
        kv = step.kv_read - step.kv_padding - sum(c.start for c in step.prefill)
        passes.append(Pass(decode_rows=rows, kv_read=kv, attn_read=kv, ragged=True))
    return passes


def plan_step(step: Step, plan: str = "fused") -> list[Pass]:
    """The passes that run the first repetition of ``step``.

    Every further repetition of a decode-only step is the same decode pass with each row one
    token longer: ``kv_read`` and ``attn_read`` grow by ``decode_rows`` per repetition.
    """
    rows = len(step.decode)
    padded = step.prefill_padding > 0
    if plan == "fused" and not padded:
        return [
            Pass(
                prefill_tokens=step.prefill_tokens,
                decode_rows=rows,
                prefill_rows=len(step.prefill),
                query=max((c.length for c in step.prefill), default=1),
                kv_read=step.kv_read,
                attn_read=step.kv_read,
                chunks=step.prefill,
                ragged=True,
            )
        ]
    if plan not in PLANS:
        check_choice("plan", plan, PLANS)
    if plan == "paged":
        return _paged(step, rows)
    passes = []
    if step.prefill:
        if padded:
            # One rectangle of rows x longest prompt: exactly the tokens the policy counted.
            n = len(step.prefill)
            passes.append(
                Pass(
                    prefill_tokens=step.prefill_tokens,
                    prefill_rows=n,
                    query=step.prefill_tokens // n,
                    chunks=step.prefill,
                )
            )
        else:
            passes.extend(_rect_prefill(g) for g in prefill_groups(step.prefill, padded=False))
    if rows:
        kv = step.kv_read - sum(c.start for c in step.prefill)
        passes.append(Pass(decode_rows=rows, kv_read=kv, attn_read=rows * step.decode_width))
    return passes
