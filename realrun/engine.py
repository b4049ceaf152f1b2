"""The real engine: a policy's Steps executed as forward passes of a real model.

The policy (the same object batchsim simulates) decides what runs; the engine only
does it. A ``Step`` says which requests prefill which part of their context and which
requests decode one token; the engine turns that into tensors, runs the model, takes
the greedy token of every row and keeps the KV cache in fixed-size blocks of one pool, as
vLLM does and as the policy counts them (``paged``: each pass packs its rows' new tokens end
to end and attends over each row's own blocks). Where the model's body cannot attend over
blocks (not a CPU in fp32, or no attention implementation to swap), or with ``kv="padded"``,
the cache is a ``KVBatch`` of left-padded rows (``kvcache``): the rectangle lesson 5 compares.

One step, as executed, is batchsim's ``"grouped"`` pass plan (``batchsim.core.plan``),
the very passes the calibrated simulator prices:

1. rows of preempted requests are dropped (their tokens so far are kept: when the
   policy lets them back in, their prefill recomputes prompt + generated tokens);
2. prefill chunks run in passes of similar lengths over just those requests (each chunk
   is a stretch of the request's context; a chunk that continues an earlier one attends
   to the cache kept from it); a chunk that completes produces the request's next token;
3. decoding rows run as one forward pass of one token each. In a padded batch
   (taxi/static/dynamic) finished rows keep computing, as ``generate()`` does; their
   extra tokens are thrown away;
4. requests whose prefill completed join the decoding batch for the next step.

So a step that both admits and decodes costs two passes (as in TGI, which also
prefills new requests in a batch of their own): packing both into one rectangular
tensor would pad every decoding row to the prompt's length. Every pass is timed into
``pass_log`` (its shape and seconds), so ``realrun compare`` can hold the cost model's
price of each pass against its measurement. Finished requests leave
when the driver calls ``release`` after the policy says so. Rows are never dropped
just for being absent from a step: a request part-way through a chunked prefill sits
out a step whenever the step's token budget is spent, and keeps its cache.

The correctness bar, checked by the tests: whatever the policy, each request's greedy
tokens equal those of running it alone, token for token.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from batchsim.core.plan import Pass, plan_step
from batchsim.core.step import Chunk, Step
from batchsim.core.workload import Request, Workload, seeded_prompt

from .packed import packed_model, warm
from .kvcache import KVBatch
from .model import LoadedModel
from .paged.attention import kernel_available, kernel_problem
from .paged.passes import PagedPasses

__all__ = ["Engine", "prompt_ids", "memory_stats", "reset_memory_stats", "cache_argument", "PREALLOCATE_BYTES",
           "KV_LAYOUTS"]

#: The pool's block size for a policy that counts no blocks (taxi, static, dynamic): vLLM's default.
DEFAULT_BLOCK_SIZE = 16

#: How the engine holds the KV cache: "auto" (paged where the body can attend over blocks), "paged", "padded".
KV_LAYOUTS = ("auto", "paged", "padded")

#: The most KV buffer memory ``Engine.preallocate`` reserves up front (a classroom laptop has 8 GB).
PREALLOCATE_BYTES = 1 << 30


def prompt_ids(req: Request, vocab: int, tokenizer=None, seed: int = 0) -> list[int]:
    """The request's prompt as exactly ``prompt_tokens`` ids.

    From ``req.text`` when given (encoded, then cut or cycled to the workload's length, because
    the policy schedules by that length and a trace's token counts come from another
    tokenizer); otherwise seeded from (seed, request id), so every engine and every policy
    sees the same prompt for the same request.
    """
    n = req.prompt_tokens
    if req.text and tokenizer is not None:
        # A folder's tokenizer may know more ids than its model has rows (a resized vocabulary):
        # an id past the last row is an IndexError in the embedding, so it is left out.
        ids = [i for i in tokenizer.encode(req.text) if 0 <= i < vocab]
        if ids:
            return (ids * (n // len(ids) + 1))[:n]
    return seeded_prompt(seed, req.id, n, vocab)


def cache_argument(model) -> str:
    """The forward argument that takes the KV cache: ``cache`` in recent transformers, ``past_key_values``
    before. A model that silently swallowed the wrong name would decode with no context at all (the
    transformers 5.19 that vLLM pins knows only ``past_key_values``)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def reset_memory_stats(lm: LoadedModel) -> None:
    if lm.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def memory_stats(lm: LoadedModel) -> dict:
    """Actual memory: CUDA's peak allocation on a GPU; the process's peak RSS always."""
    import resource

    out = {"peak_rss_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024}  # Linux reports KiB
    if lm.device.startswith("cuda"):
        out["cuda_max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
    return out


class Engine:
    """Runs Steps on ``lm`` with a batched, buffer-backed KV cache. One engine serves many runs."""

    name = "ours"

    def __init__(self, lm: LoadedModel, stop_on_eos: bool = False, prompt_seed: int = 0,
                 clock: Callable[[], float] = time.perf_counter, kv: str = "auto") -> None:
        if kv not in KV_LAYOUTS:
            raise ValueError(f"kv must be one of {', '.join(KV_LAYOUTS)}, got {kv!r}")
        self.lm = lm
        self.model = lm.model
        self.stop_on_eos = stop_on_eos
        self.prompt_seed = prompt_seed
        self.clock = clock
        self.device = next(self.model.parameters()).device
        self.dtype = next(self.model.parameters()).dtype
        self._cache_kw = cache_argument(self.model)
        # On a CPU, the products run with their weights packed for oneDNN (``packed``): a copy of the
        # model's body, then the output layer on each row's last position; else the model's own forward.
        packed = packed_model(self.model) if self.device.type == "cpu" else None
        self._body, self.head = packed if packed is not None else (None, None)
        if packed is not None:
            warm([*self._body.modules(), self.head])
        self._shapes = self._warm_up()
        # The paged pool, where the body (our own copy of the model's) can be told to attend over blocks.
        self.paged: PagedPasses | None = None
        self.kv_note = "padded: asked for" if kv == "padded" else "padded: no packed CPU body to attend over blocks"
        if kv != "padded" and self._body is not None:
            try:
                self.paged = PagedPasses(self._body, self.head, self._shapes, self.dtype, self.device, self._context,
                                         self._cache_kw)
                self.kv_note = "paged" if kernel_available() else (
                    f"paged, attended by torch's slower reference path ({kernel_problem()})")
            except RuntimeError as e:
                self.kv_note = f"padded: {e}"
        if kv == "paged" and self.paged is None:
            raise ValueError(f"kv='paged' is not possible with this model here ({self.kv_note})")
        self.start(Workload(()))
        if self.paged is not None:
            self._warm_paged()

    @property
    def kv_layout(self) -> str:
        return "paged" if self.paged is not None else "padded"

    # -- set-up -------------------------------------------------------------------------
    @torch.inference_mode()
    def _warm_up(self) -> list[tuple[int, int]]:
        """Learn each layer's (KV heads, head dim) and pay the first-call costs before any clock runs."""
        from transformers import DynamicCache

        ids = torch.zeros(4, 16, dtype=torch.long, device=self.device)
        mask = torch.ones_like(ids)
        cache = DynamicCache()
        self._next_tokens(input_ids=ids, **{self._cache_kw: cache}, attention_mask=mask, use_cache=True)
        for j in range(3):
            mask = torch.cat([mask, torch.ones(4, 1, dtype=torch.long, device=self.device)], 1)
            pos = torch.full((4, 1), 16 + j, device=self.device)
            out = self._next_tokens(input_ids=ids[:, :1], **{self._cache_kw: cache}, attention_mask=mask, position_ids=pos,
                                    use_cache=True)
        self.lm.synchronize()
        del out
        return [(layer.keys.shape[1], layer.keys.shape[3]) for layer in cache.layers]

    def start(self, workload: Workload) -> None:
        """Fresh state for a run over ``workload``."""
        self.requests = {r.id: r for r in workload.requests}
        self.out_len = {r.id: r.output_tokens for r in workload.requests}
        self.prompts: dict[int, list[int]] = {}
        self.generated: dict[int, list[int]] = {r.id: [] for r in workload.requests}
        self.eos_at: dict[int, int] = {}  # --stop-on-eos: tokens up to and including the first EOS
        self.eos_time: dict[int, float] = {}  # ... and the clock when that pass ended
        self._eos_new: list[int] = []
        self.batch = KVBatch(self._shapes, self.dtype, self.device)
        if self.paged is not None:
            self.paged.drop(list(self.paged.pool.table))
            self.paged.regrown = self.paged.pool.peak_blocks = 0  # this run's figures, from here
        self.partial: dict[int, KVBatch] = {}  # requests part-way through a chunked prefill
        self.kv_peak_bytes = 0
        self.passes = 0
        self.pass_log: list[tuple[Pass, float]] = []  # every pass run: its planned shape and seconds
        self.on_tokens: Callable[[list[int], list[int]], None] | None = None  # a live server streams from here

    def admit(self, request: Request, prompt: list[int] | None = None) -> None:
        """A request the run did not know at its start (a live server's), with its prompt ids if given
        (otherwise seeded from its id, as for a workload's)."""
        rid = request.id
        self.requests[rid] = request
        self.out_len[rid] = request.output_tokens
        self.generated[rid] = []
        if prompt is not None:
            self.prompts[rid] = list(prompt)

    @torch.inference_mode()
    def _warm_paged(self) -> None:
        """A prefill and a decode on the pool before any clock runs (the first builds the attention
        kernel: half a minute the first time on a machine, a moment after)."""
        self.start(Workload.from_arrays(np.zeros(2), np.array([8, 3]), np.array([4, 4]), "warm-up"))
        self.execute(Step(prefill=(Chunk(0, 0, 8, True), Chunk(1, 0, 3, True))))
        self.execute(Step(decode=(0, 1), repeat=2))
        self.release((0, 1))
        self.start(Workload(()))

    def preallocate(self, max_rows: int, block_size: int | None = None, kv_budget_tokens: int | None = None) -> None:
        """Size the batch's buffers once for the run: ``max_rows`` rows of the workload's longest context.

        A batch that outgrows its buffers copies all of itself into bigger ones, and on a CPU that
        costs a third of a second for half a gigabyte of a long-prompt batch: a handful of those
        make a short run's steps a third slower than their passes, at moments no cost model can
        foresee. Allocated up front, the buffers only ever slide their window back (a copy, no
        allocation). Skipped when that would take more than ``PREALLOCATE_BYTES``."""
        if not self.requests:
            return
        ctx = min(self.lm.n_positions, max(r.prompt_tokens + r.output_tokens for r in self.requests.values()))
        rows = min(int(max_rows), len(self.requests))
        if self.paged is not None:
            # The most the run can hold: every row at the longest context (a padded batch's finished rows
            # compute on, but never past its longest), or the policy's KV budget if that is less.
            bs = int(block_size or DEFAULT_BLOCK_SIZE)
            blocks = rows * -(-ctx // bs)
            if kv_budget_tokens is not None:
                # A padded policy counts its budget in rectangles (rows x longest): their rows' own blocks
                # round up by less than a block each, hence the one block per row beyond the budget.
                blocks = min(blocks, -(-int(kv_budget_tokens) // bs) + rows)
            cap = max(1, PREALLOCATE_BYTES // (bs * self.lm.kv_bytes_per_token))  # beyond it the pool grows if it must
            self.paged.size_for(min(blocks, cap), bs)
            return
        columns = 2 * ctx + 32  # room for the window to slide back into without overlapping itself
        if rows * columns * self.lm.kv_bytes_per_token <= PREALLOCATE_BYTES:
            self.batch = KVBatch(self._shapes, self.dtype, self.device, rows=rows, columns=columns, home=ctx)

    def kv_figures(self) -> dict:
        """The KV cache's layout and bytes for a run's record: the pool reserved (blocks x block bytes),
        the most blocks held at once, and whether the pool had to grow mid-run."""
        if self.paged is None:
            return {"kv_layout": "padded"}
        pool = self.paged.pool
        return {"kv_layout": "paged", "kv_block_size": pool.block_size, "kv_pool_blocks": pool.blocks,
                "kv_pool_bytes": pool.nbytes, "kv_peak_blocks": pool.peak_blocks,
                "kv_peak_bytes_used": self.paged.peak_bytes_used, "kv_pool_regrown": self.paged.regrown}

    def prompt(self, rid: int) -> list[int]:
        p = self.prompts.get(rid)
        if p is None:
            p = self.prompts[rid] = prompt_ids(self.requests[rid], self.lm.vocab_size, self.lm.tokenizer, self.prompt_seed)
        return p

    def outputs(self) -> dict[int, list[int]]:
        """Generated token ids per request (at most its output length)."""
        return self.generated

    # -- the protocol the runner uses -----------------------------------------------------
    @torch.inference_mode()
    def execute(self, step: Step, should_stop: Callable[[], bool] | None = None) -> tuple[float, list[float]]:
        """Run ``step``: up to ``step.repeat`` passes, fewer if it is interruptible and ``should_stop()``
        turns true after a pass. Returns (start, end of each pass) on ``clock``."""
        t_start = self.clock()
        if step.preempted:
            self._drop(step.preempted)
        ends: list[float] = []
        if step.decode:
            self._check_decode_rows(step.decode)
        passes = plan_step(step, "grouped")
        log, clock, sync = self.pass_log, self.clock, self.lm.synchronize
        for j in range(step.repeat):
            joining: list[tuple[KVBatch, list[int] | None]] = []
            t = clock() if j == 0 else ends[-1]
            for p in passes:
                if p.prefill_rows:
                    if j:
                        continue
                    joining.extend(self._prefill_pass(list(p.chunks)) if self.paged is None
                                   else [self._prefill_paged(list(p.chunks))])
                    timed = p
                else:
                    self._decode()
                    timed = p if not j else Pass(decode_rows=p.decode_rows, kv_read=p.kv_read + j * p.decode_rows,
                                                 attn_read=p.attn_read + j * p.decode_rows)
                sync()  # no-op on a CPU; on a GPU the pass's time is its own
                t1 = clock()
                log.append((timed, t1 - t))
                t = t1
            for block, rows in joining:
                if self.paged is not None:
                    self.paged.join(block)
                else:
                    self.batch.add(block, rows)
            self._note_memory()
            sync()
            ends.append(clock())
            if self._eos_new:
                self.eos_time.update((rid, ends[-1]) for rid in self._eos_new)
                self._eos_new.clear()
            if step.interruptible and should_stop is not None and j + 1 < step.repeat and should_stop():
                break
        return t_start, ends

    @torch.inference_mode()
    def fill_rows(self, ids: list[int], contexts: list[int], seed: int = 0) -> None:
        """Rows as if these requests had prefilled ``contexts`` tokens, without running the model.

        For the profiler: a decode step's time depends on the shapes it reads, not on the values,
        so filling the cache with random numbers skips prefills that would cost more than the
        steps being measured. (The tokens such rows then produce mean nothing.)
        """
        if self.paged is not None:
            self.paged.fill(list(ids), list(contexts), seed)
            return
        w = max(contexts)
        block = KVBatch(self._shapes, self.dtype, self.device, rows=len(ids), columns=w)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        for buf in block.K + block.V:
            buf.normal_(generator=gen)  # finite everywhere; the mask hides the padding
        for i, c in enumerate(contexts):
            block.mask[i, w - c :] = 1
        block.pos[: len(ids)] = torch.tensor(contexts, dtype=torch.long, device=self.device)
        block.ids, block.n, block.lo, block.hi = list(ids), len(ids), 0, w
        self.batch.add(block)

    @torch.inference_mode()
    def release(self, ids) -> None:
        """Finished requests leave: their rows are dropped (their tokens stay in ``outputs()``)."""
        if len(ids):
            self._drop(ids)

    # -- the passes -------------------------------------------------------------------------
    def _check_decode_rows(self, decode: tuple[int, ...]) -> None:
        held = self.paged.running if self.paged is not None else self.batch.ids
        if len(decode) != len(held) or set(decode) != set(held):
            raise RuntimeError(
                f"step decodes {len(decode)} rows {sorted(decode)[:8]} but the cache holds "
                f"{len(held)} rows {sorted(held)[:8]}: policy and engine disagree"
            )

    def _decode(self) -> None:
        if self.paged is not None:
            rows, toks = self.paged.decode()
            self.passes += 1
            self._append(rows, toks)
            return
        b = self.batch
        n = b.n
        b.reserve(1)
        b.mask[:n, b.hi] = 1
        nxt = self._next_tokens(
            input_ids=b.live_last()[:, None], **{self._cache_kw: b.cache()}, attention_mask=b.live_mask(1),
            position_ids=b.live_pos()[:, None], use_cache=True,
        )
        b.hi += 1
        b.pos[:n] += 1
        b.last[:n] = nxt
        self.passes += 1
        self._append(b.ids, nxt.tolist())

    def _next_tokens(self, **inputs) -> torch.Tensor:
        """The greedy next token of every row: logits of each row's last position only."""
        if self.head is not None:
            hidden = self._body(**inputs).last_hidden_state[:, -1]
            return self.head(hidden).argmax(-1)
        return self.model(**inputs, logits_to_keep=1).logits[:, -1].argmax(-1)

    def _context(self, rid: int, upto: int) -> list[int]:
        p = self.prompt(rid)
        if upto <= len(p):
            return p
        ctx = p + self.generated[rid]
        if upto > len(ctx):
            raise RuntimeError(f"request {rid}: a chunk reaches context position {upto}, but only {len(ctx)} tokens exist")
        return ctx

    def _prefill_paged(self, chunks: list[Chunk]) -> tuple[list[int], None]:
        done, toks = self.paged.prefill(chunks)
        self.passes += 1
        self._append(done, toks)
        return done, None

    def _prefill_pass(self, chunks: list[Chunk]) -> list[tuple[KVBatch, list[int]]]:
        n = len(chunks)
        L = max(c.length for c in chunks)
        pasts: list[KVBatch | None] = []
        for c in chunks:
            past = self.partial.pop(c.request_id, None)
            if c.start == 0:
                past = None  # a fresh start (or a recompute after preemption) forgets any old rows
            elif past is None or past.width != c.start:
                raise RuntimeError(f"request {c.request_id}: chunk starts at {c.start} but {past.width if past else 0} tokens are cached")
            pasts.append(past)
        tp = max((p.width for p in pasts if p is not None), default=0)
        block = KVBatch(self._shapes, self.dtype, self.device, rows=n, columns=tp + L)
        block.lo = block.hi = tp
        for c, past in zip(chunks, pasts):
            if past is not None:
                block.add(past)
            else:
                block.add_blank(c.request_id)
        tokens = np.full((n, L), self.lm.pad_token_id, dtype=np.int64)
        positions = np.zeros((n, L), dtype=np.int64)
        new_mask = np.zeros((n, L), dtype=np.int64)
        for i, c in enumerate(chunks):
            ctx = self._context(c.request_id, c.start + c.length)
            tokens[i, L - c.length :] = ctx[c.start : c.start + c.length]
            positions[i, L - c.length :] = np.arange(c.start, c.start + c.length)
            new_mask[i, L - c.length :] = 1
        block.mask[:n, block.hi : block.hi + L] = torch.from_numpy(new_mask).to(self.device)
        nxt = self._next_tokens(
            input_ids=torch.from_numpy(tokens).to(self.device), **{self._cache_kw: block.cache()},
            attention_mask=block.live_mask(L), position_ids=torch.from_numpy(positions).to(self.device),
            use_cache=True,
        )
        block.hi += L
        block.pos[:n] = torch.tensor([c.start + c.length for c in chunks], dtype=torch.long, device=self.device)
        block.last[:n] = nxt
        self.passes += 1
        self.kv_peak_bytes = max(self.kv_peak_bytes, self._kv_bytes() + block.nbytes)
        done = [i for i, c in enumerate(chunks) if c.completes]
        for i, c in enumerate(chunks):
            if not c.completes:
                self.partial[c.request_id] = block.row(i)
        if not done:
            return []
        last = nxt.tolist()
        self._append([chunks[i].request_id for i in done], [last[i] for i in done])
        # A row that continued a chunk may have a gap between its old cache and its new tokens
        # (new tokens are right-aligned to the longest chunk): such rows join squeezed, one by one.
        holes = block.has_holes()
        if bool(holes[done].any()):
            return [(block.row(i), None) for i in done]
        return [(block, done)]

    def _append(self, ids: list[int], toks: list[int]) -> None:
        gen, out_len, eos = self.generated, self.out_len, self.lm.eos_token_id
        kept: list[int] | None = [] if self.on_tokens is not None else None
        for rid, t in zip(ids, toks):
            g = gen[rid]
            if len(g) < out_len[rid]:  # a padded batch's finished rows compute on; their tokens are not kept
                g.append(t)
                if kept is not None:
                    kept.append(rid)
                if self.stop_on_eos and t == eos and rid not in self.eos_at:
                    self.eos_at[rid] = len(g)
                    self._eos_new.append(rid)
        if kept:
            # Told as each pass produces them (not at the step's end): a stream's inter-token gaps are real.
            self.on_tokens(kept, [gen[r][-1] for r in kept])

    def _drop(self, ids) -> None:
        gone = set(int(i) for i in ids)
        if self.paged is not None:
            self.paged.drop(gone)
            return
        for rid in gone:
            self.partial.pop(rid, None)
        self.batch.remove(gone)

    def _kv_bytes(self) -> int:
        if self.paged is not None:
            return self.paged.nbytes  # the pool, reserved whole at the run's start
        return self.batch.nbytes + sum(p.nbytes for p in self.partial.values())

    def _note_memory(self) -> None:
        self.kv_peak_bytes = max(self.kv_peak_bytes, self._kv_bytes())
