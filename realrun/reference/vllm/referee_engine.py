"""The referee's vLLM side: vLLM 0.32's own ``Scheduler`` fed a workload tick by tick, no model.

Built as vLLM's tests build one on a CPU (``tests/v1/core/utils.py``: ``create_scheduler``): a
``VllmConfig`` for a model folder that holds only a ``config.json`` (no weights are read), a
``KVCacheConfig`` of one full-attention group, and a ``StructuredOutputManager``. The model is
a stand-in: every scheduled request whose context is complete after the step samples one
token (token 1); a prompt part-way through chunked prefill samples none; ``max_tokens`` with
``ignore_eos`` ends each request at its output length, as ``realrun.reference.vllm`` runs ask vLLM
to.

The engine loop is the engine core's. Synchronous (``EngineCore.step``): at each tick, take
the last step's output, add the tick's arrivals, schedule. Async scheduling
(``EngineCore.step_with_batch_queue``, a batch queue of two): the step of tick ``t + 1`` is
scheduled at tick ``t``, just after the step of tick ``t`` is launched and before its output
is known; when that step turns out empty (nothing could run), the engine schedules afresh once
the running step's output is in, so nothing waits for an empty step.
"""

from __future__ import annotations

import copy
import functools
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

from batchsim.core.workload import Request as BatchsimRequest

from .referee_config import RefereeConfig, StepView

__all__ = ["vllm_schedule", "make_scheduler"]

_TOKEN = 1  # the stand-in model's every sampled token
# A config.json that vLLM's ModelConfig accepts; no weights are ever loaded.
_CONFIG = {
    "model_type": "gpt2",
    "architectures": ["GPT2LMHeadModel"],
    "n_embd": 64,
    "n_layer": 1,
    "n_head": 2,
    "vocab_size": 128,
    "bos_token_id": 0,
    "eos_token_id": 0,
}


@functools.lru_cache(maxsize=4)
def _base_config(context_len: int):
    """A VllmConfig (seconds to build: vLLM inspects the platform and the model's config), made
    once."""
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig

    folder = Path(tempfile.mkdtemp(prefix="batchsim-referee-"))
    (folder / "config.json").write_text(
        json.dumps(dict(_CONFIG, n_positions=max(context_len, 1024)))
    )
    model = ModelConfig(
        model=str(folder),
        skip_tokenizer_init=True,
        dtype="float32",
        seed=0,
        max_model_len=context_len,
    )
    sched = SchedulerConfig(
        max_num_seqs=8,
        max_num_batched_tokens=max(context_len, 2048),
        max_model_len=context_len,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
    )
    return VllmConfig(
        model_config=model,
        scheduler_config=sched,
        cache_config=CacheConfig(block_size=16, enable_prefix_caching=False),
    )


def make_scheduler(config: RefereeConfig, num_blocks: int):
    """vLLM's Scheduler (AsyncScheduler with async scheduling) for ``config``, with ``num_blocks``
    blocks."""
    import torch
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    base = _base_config(config.context_len)
    vc = copy.copy(base)
    # The scheduler reads these at every step, so each run gets configs of its own.
    vc.scheduler_config = sc = copy.copy(base.scheduler_config)
    sc.max_num_seqs, sc.max_num_batched_tokens = config.max_seqs, config.max_batched_tokens
    sc.enable_chunked_prefill, sc.async_scheduling = config.chunked_prefill, config.async_scheduling
    vc.cache_config = copy.copy(base.cache_config)
    vc.cache_config.block_size = config.block_size
    vc.cache_config.num_gpu_blocks = num_blocks
    vc.cache_config.enable_prefix_caching = (
        False  # vLLM's default is on: see the module ``referee``
    )
    kv = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer"],
                FullAttentionSpec(
                    block_size=config.block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
                ),
            )
        ],
    )
    cls = AsyncScheduler if config.async_scheduling else Scheduler
    return cls(
        vllm_config=vc,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vc),
        block_size=config.block_size,
        log_stats=False,
    )


def _request(r: BatchsimRequest):
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(
        max_tokens=r.output_tokens, min_tokens=r.output_tokens, ignore_eos=True, temperature=0.0
    )
    return Request(
        request_id=str(r.id),
        prompt_token_ids=[2] * r.prompt_tokens,
        sampling_params=params,
        pooling_params=None,
        arrival_time=float(r.arrival),
    )


class _Engine:
    """The engine core's loop around one Scheduler, with the stand-in model."""

    def __init__(self, config: RefereeConfig, requests: Sequence[BatchsimRequest]) -> None:
        bs = config.block_size
        # No limit: more blocks than every request at its longest, all at once (and the null block).
        usable = (
            config.kv_blocks
            if config.kv_blocks is not None
            else sum(-(-(r.prompt_tokens + r.output_tokens) // bs) for r in requests) + 1
        )
        self.usable = usable
        self.sched = make_scheduler(config, usable + 1)
        self.pool = self.sched.kv_cache_manager.block_pool
        self.views: list[StepView] = []
        self.preempted_at: list[tuple[int, int]] = []  # (tick, id) of every preemption
        self.last_run: dict[int, int] = {}  # id -> last tick it was scheduled

    def schedule(self, t: int):
        """One call of ``Scheduler.schedule()`` for the step of tick ``t``: (its output, who samples
        a token)."""
        from vllm.v1.request import RequestStatus

        sched = self.sched
        queued = {rid for rid, r in sched.requests.items() if r.status != RequestStatus.RUNNING}
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        samples = [not sched.requests[rid].is_prefill_chunk for rid in ids]
        tokens = tuple(sorted((int(rid), n) for rid, n in out.num_scheduled_tokens.items()))
        preempted = tuple(sorted(int(rid) for rid in out.preempted_req_ids))
        self.preempted_at += [(t, p) for p in preempted]
        for rid, _ in tokens:
            self.last_run[rid] = t
        if tokens or preempted:
            admitted = tuple(sorted(int(rid) for rid in ids if rid in queued))
            used = self.usable - self.pool.get_num_free_blocks() - self._in_flight_last(out)
            if self.views and self.views[-1].step == t:
                # An empty step chosen ahead that preempted, then the fresh one: one step, both its
                # preemptions.
                preempted = tuple(sorted(self.views.pop().preempted + preempted))
            self.views.append(StepView(t, tokens, preempted, admitted, used))
        return out, ids, samples

    def _in_flight_last(self, out) -> int:
        """Blocks of the requests whose last token is in flight (async only): vLLM frees them when
        it lands, at the start of the step just scheduled, so they are not counted as that
        step's."""
        from vllm.v1.request import RequestStatus

        bs, blocks = self.sched.block_size, 0
        for rid, r in self.sched.requests.items():
            if (
                r.status == RequestStatus.RUNNING
                and r.num_output_placeholders
                and rid not in out.num_scheduled_tokens
                and r.num_output_tokens + r.num_output_placeholders >= r.max_tokens
            ):
                blocks += -(-r.num_computed_tokens // bs)
        return blocks

    def finish(self, step) -> None:
        """The stand-in model's output for a scheduled step, given back to the scheduler."""
        from vllm.v1.outputs import ModelRunnerOutput

        out, ids, samples = step
        self.sched.update_from_output(
            out,
            ModelRunnerOutput(
                req_ids=ids,
                req_id_to_index={rid: i for i, rid in enumerate(ids)},
                sampled_token_ids=[[_TOKEN] if s else [] for s in samples],
            ),
        )


def vllm_schedule(requests: Sequence[BatchsimRequest], config: RefereeConfig):
    """vLLM's schedule of ``requests`` (arrival = tick): (one view per busy tick, last-token
    preemptions)."""
    eng = _Engine(config, requests)
    sched = eng.sched
    i, n, t = 0, len(requests), 0
    running = None  # the step of the tick now ending, whose output comes in at the tick's end
    ahead = None  # async: the step already scheduled for the next tick
    limit = (
        int(max((r.arrival for r in requests), default=0))
        + 64 * sum(r.prompt_tokens + r.output_tokens for r in requests)
        + 64
    )
    while i < n or sched.has_unfinished_requests() or ahead is not None:
        if running is not None:
            eng.finish(running)
            running = None
        while i < n and requests[i].arrival <= t:
            sched.add_request(_request(requests[i]))
            i += 1
        if config.async_scheduling:
            step, ahead = ahead, None
            if step is None or not step[1]:
                # Nothing scheduled ahead, or an empty step: schedule afresh now, with everything
                # known.
                if step is not None:
                    eng.finish(step)
                step = eng.schedule(t) if sched.has_requests() else None
            if step is not None and step[1] and sched.has_requests():
                ahead = eng.schedule(t + 1)  # launched with this one, before its output is known
        else:
            step = eng.schedule(t) if sched.has_requests() else None
        if step is not None and step[1]:
            running = step
        elif step is not None:
            eng.finish(step)
        t += 1
        if t > limit:
            raise RuntimeError(f"vLLM's scheduler did not finish {n} requests in {limit} ticks")
    # A preemption after which the request never ran again: its last token was in flight.
    late = tuple((tick, rid) for tick, rid in eng.preempted_at if eng.last_run.get(rid, -1) < tick)
    drop = set(late)
    views = tuple(
        StepView(
            v.step,
            v.tokens,
            tuple(p for p in v.preempted if (v.step, p) not in drop),
            v.admitted,
            v.kv_blocks,
        )
        for v in eng.views
    )
    return tuple(v for v in views if v.tokens or v.preempted), late
