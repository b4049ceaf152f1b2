"""The real engine: a policy's Steps executed as forward passes of a real model.

The policy (the same object batchsim simulates) decides what runs; the engine only
does it. A ``Step`` says which requests prefill which part of their context and which
requests decode one token; the engine turns that into tensors, runs the model, takes
the greedy token of every row and keeps the KV cache in fixed-size blocks of one pool, as
vLLM does and as the policy counts them (``paged``: each pass packs its rows' new tokens end
to end and attends over each row's own blocks). Where the model's body cannot attend over
blocks (not a CPU in fp32, or no attention implementation to swap), or with ``kv="padded"``,
the cache is a ``KVBatch`` of left-padded rows (``kvcache``): the rectangle lesson 5 compares.

One step, as executed, is batchsim's pass plan (``batchsim.core.plan``) for the engine's
layout, ``"paged"`` on the pool and ``"grouped"`` on the rectangle (``Engine.plan``): the very
passes the calibrated simulator prices. The passes themselves live with their layout
(``paged.passes.PagedPasses``, ``padded_passes.PaddedPasses``, one interface); here:

1. rows of preempted requests are dropped (their tokens so far are kept: when the
   policy lets them back in, their prefill recomputes prompt + generated tokens);
2. prefill chunks run over just those requests: on the pool as one pass, packed end to end; on
   the rectangle in passes of similar lengths (each chunk is a stretch of the request's
   context; a chunk that continues an earlier one attends to the cache kept from it); a chunk
   that completes produces the request's next token. A padded batch (taxi/static/dynamic)
   computes its prompts' padding, as ``generate()`` does, in either layout;
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
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import torch

from batchsim.core.errors import ConfigError, show
from batchsim.core.plan import Pass, plan_step
from batchsim.core.step import Chunk, Step
from batchsim.core.workload import Request, Workload

from .inputs import cache_argument, prompt_ids
from .model import LoadedModel
from .packed import packed_model, warm
from .padded_passes import PaddedPasses
from .paged.attention import kernel_available, kernel_problem
from .paged.passes import PagedPasses

__all__ = ["Engine", "PREALLOCATE_BYTES", "KV_LAYOUTS", "DEFAULT_BLOCK_SIZE"]

#: The pool's block size for a policy that counts no blocks (taxi, static, dynamic): vLLM's default.
DEFAULT_BLOCK_SIZE = 16

#: How the engine holds the KV cache: "auto" (paged where the body can attend over blocks), "paged",
#: "padded".
KV_LAYOUTS = ("auto", "paged", "padded")

#: The most KV buffer memory ``Engine.preallocate`` reserves up front (a classroom laptop has 8 GB).
PREALLOCATE_BYTES = 1 << 30


class Engine:
    """Runs Steps on ``lm`` with a batched KV cache (a block pool, or padded rows). One engine
    serves many runs."""

    name = "ours"

    def __init__(
        self,
        lm: LoadedModel,
        stop_on_eos: bool = False,
        prompt_seed: int = 0,
        clock: Callable[[], float] = time.perf_counter,
        kv: str = "auto",
    ) -> None:
        if not isinstance(lm, LoadedModel):
            raise ConfigError(
                f"lm must be a loaded model (realrun.engine.model.load_model('tiny-gpt2')), got "
                f"{show(lm)}"
            )
        if kv not in KV_LAYOUTS:
            raise ConfigError(f"kv must be one of {', '.join(KV_LAYOUTS)}, got {show(kv)}")
        self.lm = lm
        self.model = lm.model
        self.stop_on_eos = stop_on_eos
        self.prompt_seed = prompt_seed
        self.clock = clock
        self.device = next(self.model.parameters()).device
        self.dtype = next(self.model.parameters()).dtype
        self._cache_kw = cache_argument(self.model)
        # On a CPU, the products run with their weights packed for oneDNN (``packed``): a copy of
        # the model's body, then the output layer on each row's last position; else the model's own
        # forward.
        packed = packed_model(self.model) if self.device.type == "cpu" else None
        self._body, self.head = packed if packed is not None else (None, None)
        if packed is not None:
            warm([*self._body.modules(), self.head])
        self._shapes = self._warm_up()
        # The paged pool, where the body (our own copy of the model's) can be told to attend over
        # blocks.
        self.paged: PagedPasses | None = None
        self.kv_note = (
            "padded: asked for"
            if kv == "padded"
            else "padded: no packed CPU body to attend over blocks"
        )
        if kv != "padded" and self._body is not None:
            try:
                self.paged = PagedPasses(
                    self._body,
                    self.head,
                    self._shapes,
                    self.dtype,
                    self.device,
                    self._context,
                    self._cache_kw,
                )
                self.kv_note = (
                    "paged"
                    if kernel_available()
                    else (f"paged, attended by torch's slower reference path ({kernel_problem()})")
                )
            except RuntimeError as e:
                self.kv_note = f"padded: {e}"
        if kv == "paged" and self.paged is None:
            raise ValueError(f"kv='paged' is not possible with this model here ({self.kv_note})")
        #: The passes on the engine's KV layout (one interface: prefill, decode, join, drop, fill,
        #: held).
        self.kv: PagedPasses | PaddedPasses = (
            self.paged
            if self.paged is not None
            else PaddedPasses(
                self._next_tokens,
                self._shapes,
                self.dtype,
                self.device,
                self._context,
                self._cache_kw,
                lm.pad_token_id,
            )
        )
        self.start(Workload(()))
        if self.paged is not None:
            self._warm_paged()

    @property
    def kv_layout(self) -> str:
        return "paged" if self.paged is not None else "padded"

    @property
    def plan(self) -> str:
        """The pass plan this engine runs a step as (``batchsim.core.plan``), which its profile
        prices."""
        return "paged" if self.paged is not None else "grouped"

    # -- set-up -------------------------------------------------------------------------
    @torch.inference_mode()
    def _warm_up(self) -> list[tuple[int, int]]:
        """Learn each layer's (KV heads, head dim) and pay the first-call costs before any clock
        runs."""
        from transformers import DynamicCache

        ids = torch.zeros(4, 16, dtype=torch.long, device=self.device)
        mask = torch.ones_like(ids)
        cache = DynamicCache()
        self._next_tokens(
            input_ids=ids, **{self._cache_kw: cache}, attention_mask=mask, use_cache=True
        )
        for j in range(3):
            mask = torch.cat([mask, torch.ones(4, 1, dtype=torch.long, device=self.device)], 1)
            pos = torch.full((4, 1), 16 + j, device=self.device)
            out = self._next_tokens(
                input_ids=ids[:, :1],
                **{self._cache_kw: cache},
                attention_mask=mask,
                position_ids=pos,
                use_cache=True,
            )
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
        self.kv.reset()
        self.passes = 0
        self.pass_log: list[
            tuple[Pass, float]
        ] = []  # every pass run: its planned shape and seconds
        # In step with ``pass_log`` over a run (only a run reads it): the seconds between the
        # previous step's last pass and this step's start, on each step's first pass (0 on the
        # others). The simulator prices a step after the server sat idle with a cold-start extra
        # (``wake_penalty``), so the pass-by-pass referee (realrun.timing.pass_level) needs to know
        # which passes followed an idle.
        self.pass_idle: list[float] = []
        # ... and the repetition of its step each pass ran in (0: the step's first): a step's first
        # decode passes run slower than the repeated ones the profile's grid times
        # (``first_decode_extra``).
        self.pass_rep: list[int] = []
        self._last_end: float | None = None
        self.on_tokens: Callable[[list[int], list[int]], None] | None = (
            None  # a live server streams from here
        )

    def admit(self, request: Request, prompt: list[int] | None = None) -> None:
        """A request the run did not know at its start (a live server's), with its prompt ids if
        given (otherwise seeded from its id, as for a workload's)."""
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

    def preallocate(
        self, max_rows: int, block_size: int | None = None, kv_budget_tokens: int | None = None
    ) -> None:
        """Size the KV once for the run: ``max_rows`` rows of the workload's longest context.

        A cache that outgrows its memory mid-run copies all of itself into more, and on a CPU that
        costs a third of a second for half a gigabyte of a long-prompt batch: a handful of those
        make a short run's steps a third slower than their passes, at moments no cost model can
        foresee. The pool is sized as the policy counts blocks; the rectangle's buffers, allocated
        up front, only ever slide their window back (a copy, no allocation). Neither takes more than
        ``PREALLOCATE_BYTES``: beyond it the cache grows if it must."""
        if not self.requests:
            return
        ctx = min(
            self.lm.n_positions,
            max(r.prompt_tokens + r.output_tokens for r in self.requests.values()),
        )
        rows = min(int(max_rows), len(self.requests))
        if self.paged is not None:
            # The most the run can hold: every row at the longest context, or the policy's KV budget
            # if that is less. A policy that counts blocks (``block_size``) holds exactly its count.
            # One that counts rectangles (taxi, static, dynamic: rows x longest) holds a little more
            # in blocks: each row's context rounds up to a block, and a prefill holds each short
            # prompt's padding in blocks of its own for the pass; two blocks per row cover both.
            counted = block_size is not None
            bs = int(block_size or DEFAULT_BLOCK_SIZE)
            slack = 0 if counted else 2 * rows
            blocks = rows * -(-ctx // bs) + slack
            if kv_budget_tokens is not None:
                blocks = min(blocks, -(-int(kv_budget_tokens) // bs) + slack)
            cap = max(1, PREALLOCATE_BYTES // (bs * self.lm.kv_bytes_per_token))
            self.paged.size_for(min(blocks, cap), bs)
            return
        columns = 2 * ctx + 32  # room for the window to slide back into without overlapping itself
        if rows * columns * self.lm.kv_bytes_per_token <= PREALLOCATE_BYTES:
            self.kv.reset(rows=rows, columns=columns, home=ctx)

    @property
    def kv_peak_bytes(self) -> int:
        """The most KV bytes the run held: the pool (reserved whole at its start), or the
        rectangle's peak."""
        return self.kv.peak_bytes

    def kv_figures(self) -> dict:
        """The KV cache's layout and bytes for a run's record: the pool reserved (blocks x block
        bytes), the most blocks held at once, and whether the pool had to grow mid-run."""
        if self.paged is None:
            return {"kv_layout": "padded"}
        pool = self.paged.pool
        return {
            "kv_layout": "paged",
            "kv_block_size": pool.block_size,
            "kv_pool_blocks": pool.blocks,
            "kv_pool_bytes": pool.nbytes,
            "kv_peak_blocks": pool.peak_blocks,
            "kv_peak_bytes_used": self.paged.peak_bytes_used,
            "kv_pool_regrown": self.paged.regrown,
        }

    def prompt(self, rid: int) -> list[int]:
        p = self.prompts.get(rid)
        if p is None:
            p = self.prompts[rid] = prompt_ids(
                self.requests[rid], self.lm.vocab_size, self.lm.tokenizer, self.prompt_seed
            )
        return p

    def outputs(self) -> dict[int, list[int]]:
        """Generated token ids per request (at most its output length)."""
        return self.generated

    # -- the protocol the runner uses -----------------------------------------------------
    @torch.inference_mode()
    def execute(
        self, step: Step, should_stop: Callable[[], bool] | None = None
    ) -> tuple[float, list[float]]:
        """Run ``step``: up to ``step.repeat`` passes, fewer if it is interruptible and
        ``should_stop()`` turns true after a pass. Returns (start, end of each pass) on
        ``clock``."""
        t_start = self.clock()
        kv = self.kv
        if step.preempted:
            kv.drop(step.preempted)
        ends: list[float] = []
        if step.decode:
            self._check_decode_rows(step.decode)
        passes = plan_step(step, self.plan)
        log, clock, sync = self.pass_log, self.clock, self.lm.synchronize
        idle = [t_start - self._last_end if self._last_end is not None else 0.0]
        for j in range(step.repeat):
            joining: list = []
            t = clock() if j == 0 else ends[-1]
            for p in passes:
                if p.prefill_rows:
                    if j:
                        continue
                    # A padded batch's pass computes rows x its longest prompt (the plan counts the
                    # padding).
                    pad_to = p.query if p.prefill_tokens > sum(c.length for c in p.chunks) else 0
                    done, toks, pending = kv.prefill(list(p.chunks), pad_to)
                    joining.append(pending)
                    timed = p
                else:
                    done, toks = kv.decode()
                    timed = (
                        p
                        if not j
                        else replace(
                            p,
                            kv_read=p.kv_read + j * p.decode_rows,
                            attn_read=p.attn_read + j * p.decode_rows,
                        )
                    )
                self.passes += 1
                self._append(done, toks)
                sync()  # no-op on a CPU; on a GPU the pass's time is its own
                t1 = clock()
                log.append((timed, t1 - t))
                self.pass_idle.append(idle.pop() if idle else 0.0)
                self.pass_rep.append(j)
                t = t1
            for pending in joining:
                kv.join(pending)
            kv.note_memory()
            sync()
            ends.append(clock())
            if self._eos_new:
                self.eos_time.update((rid, ends[-1]) for rid in self._eos_new)
                self._eos_new.clear()
            if (
                step.interruptible
                and should_stop is not None
                and j + 1 < step.repeat
                and should_stop()
            ):
                break
        if ends:
            self._last_end = ends[-1]
        return t_start, ends

    @torch.inference_mode()
    def fill_rows(self, ids: list[int], contexts: list[int], seed: int = 0) -> None:
        """Rows as if these requests had prefilled ``contexts`` tokens, without running the model.

        For the profiler: a decode step's time depends on the shapes it reads, not on the values,
        so filling the cache with random numbers skips prefills that would cost more than the
        steps being measured. (The tokens such rows then produce mean nothing.)
        """
        self.kv.fill(list(ids), list(contexts), seed)

    @torch.inference_mode()
    def release(self, ids) -> None:
        """Finished requests leave: their rows are dropped (their tokens stay in ``outputs()``)."""
        if len(ids):
            self.kv.drop(ids)

    # -- helpers --------------------------------------------------------------------------------
    def _check_decode_rows(self, decode: tuple[int, ...]) -> None:
        held = self.kv.held
        if len(decode) != len(held) or set(decode) != set(held):
            raise RuntimeError(
                f"step decodes {len(decode)} rows {sorted(decode)[:8]} but the cache holds "
                f"{len(held)} rows {sorted(held)[:8]}: policy and engine disagree"
            )

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
            raise RuntimeError(
                f"request {rid}: a chunk reaches context position {upto}, but only {len(ctx)} "
                f"tokens exist"
            )
        return ctx

    def _append(self, ids: list[int], toks: list[int]) -> None:
        gen, out_len, eos = self.generated, self.out_len, self.lm.eos_token_id
        kept: list[int] | None = [] if self.on_tokens is not None else None
        for rid, t in zip(ids, toks):
            g = gen[rid]
            # a padded batch's finished rows compute on; their tokens are not kept
            if len(g) < out_len[rid]:
                g.append(t)
                if kept is not None:
                    kept.append(rid)
                if self.stop_on_eos and t == eos and rid not in self.eos_at:
                    self.eos_at[rid] = len(g)
                    self._eos_new.append(rid)
        if kept:
            # Told as each pass produces them (not at the step's end): a stream's inter-token gaps
            # are real.
            self.on_tokens(kept, [gen[r][-1] for r in kept])
