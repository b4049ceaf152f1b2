"""Two baselines to hold our engine against, measured on the same workload in the same run.

- ``hf-generate``: the way most first servers are written, ``model.generate()`` on a
  padded batch. It plugs into the wall-clock runner as an engine for the padded policies
  (taxi, static, dynamic): when the policy starts a batch, ``generate()`` runs it to the
  longest output; a streamer stamps the end of every pass, and the policy's decode steps
  are then answered from those stamps. So the batches are formed by the same policy
  objects, and only the execution is Hugging Face's.
- ``hf-continuous``: transformers' own continuous batching (``init_continuous_batching``,
  the manager behind ``generate_batch``), with each request's own ``max_new_tokens``. It
  schedules by itself in a background thread, so no batchsim policy drives it;
  ``run_hf_continuous`` replays the arrivals into it open-loop and builds batchsim
  records from its per-token timestamps (the step log stays empty: its steps are not ours
  to see).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

import numpy as np
import torch

from batchsim.core.errors import ConfigError
from batchsim.core.recorder import Recorder
from batchsim.core.step import Step
from batchsim.core.workload import Workload
from batchsim.sim.simulator import RunResult

from ..clock.memory import memory_stats, reset_memory_stats
from ..clock.runner import context_reason
from ..engine.inputs import prompt_ids
from ..engine.model import LoadedModel

__all__ = [
    "HFGenerateEngine",
    "run_hf_continuous",
    "has_hf_continuous",
    "ENGINE_NAMES",
    "HF_MIN_BLOCK",
]

ENGINE_NAMES = ("ours", "hf-generate", "hf-continuous", "vllm")
#: transformers' smallest continuous-batching page (``BOUNDS["page_size"]`` in its
#: ``generation/continuous_batching/initialization.py``): a smaller block is its ValueError.
HF_MIN_BLOCK = 4


def has_hf_continuous(lm: LoadedModel) -> bool:
    return hasattr(lm.model, "init_continuous_batching")


class _Stamps:
    """A generate() streamer that notes the clock after every pass (the first put is the prompt)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.times: list[float] = []

    def put(self, value) -> None:
        value.cpu()  # on a GPU this waits for the pass, so the stamp measures it
        self.times.append(self.clock())

    def end(self) -> None:
        pass


class HFGenerateEngine:
    """Executes a padded-batch policy's steps with ``model.generate()``, one call per batch."""

    name = "hf-generate"

    def __init__(
        self,
        lm: LoadedModel,
        stop_on_eos: bool = False,
        prompt_seed: int = 0,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.lm, self.model = lm, lm.model
        self.stop_on_eos, self.prompt_seed, self.clock = stop_on_eos, prompt_seed, clock
        self.device = next(self.model.parameters()).device
        self.start(Workload(()))
        self._warm_up()

    def _warm_up(self) -> None:
        with torch.inference_mode():
            ids = torch.zeros(2, 8, dtype=torch.long)
            self._generate(ids, torch.ones_like(ids), 4)

    def start(self, workload: Workload) -> None:
        self.requests = {r.id: r for r in workload.requests}
        self.generated: dict[int, list[int]] = {r.id: [] for r in workload.requests}
        self.eos_at: dict[int, int] = {}
        self.eos_time: dict[int, float] = {}
        self._ends: deque[float] = deque()
        self._last = 0.0
        self.kv_peak_bytes = 0

    def outputs(self) -> dict[int, list[int]]:
        return self.generated

    def _config(self, max_new: int):
        from transformers import GenerationConfig

        eos = self.lm.eos_token_id if self.stop_on_eos else None
        return GenerationConfig(
            max_new_tokens=max_new,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=self.lm.pad_token_id,
        )

    def _generate(self, ids, mask, max_new: int, streamer=None):
        # generate() fills an unset eos_token_id from the model's own generation config, so the
        # only way to make it run each row to its length is to clear that default for the call.
        gc = self.model.generation_config
        saved = gc.eos_token_id
        if not self.stop_on_eos:
            gc.eos_token_id = None
        try:
            return self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                generation_config=self._config(max_new),
                streamer=streamer,
            )
        finally:
            gc.eos_token_id = saved

    @torch.inference_mode()
    def execute(self, step: Step, should_stop=None) -> tuple[float, list[float]]:
        if not step.prefill:
            # The batch already ran inside generate(); hand back the stamps of these passes.
            ends = [self._ends.popleft() if self._ends else self._last for _ in range(step.repeat)]
            start, self._last = self._last, ends[-1]
            return start, ends
        if step.decode or any(c.start or not c.completes for c in step.prefill):
            raise ConfigError(
                "engine hf-generate runs padded batches only: policy must be taxi, static or "
                "dynamic"
            )
        rows = [self.requests[c.request_id] for c in step.prefill]
        prompts = [
            prompt_ids(r, self.lm.vocab_size, self.lm.tokenizer, self.prompt_seed) for r in rows
        ]
        P = max(len(p) for p in prompts)
        ids = torch.full((len(rows), P), self.lm.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), P), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, P - len(p) :] = torch.tensor(p)
            mask[i, P - len(p) :] = 1
        longest = max(r.output_tokens for r in rows)
        stamps = _Stamps(self.clock)
        t_start = self.clock()
        out = self._generate(ids, mask, longest, stamps)
        self.lm.synchronize()
        times = stamps.times[1:]  # after each pass: the first token, then one per decode pass
        new = out[:, P:].tolist()
        eos = self.lm.eos_token_id
        for i, r in enumerate(rows):
            toks = new[i][: r.output_tokens]
            if self.stop_on_eos and eos in toks:
                k = toks.index(eos) + 1
                self.eos_at[r.id], self.eos_time[r.id] = k, times[k - 1]
                toks = toks[:k]
            self.generated[r.id] = toks
        first = times[0] if times else self.clock()
        self._ends = deque(times[1:])
        self._last = first
        return t_start, [first]

    def release(self, ids) -> None:
        pass


def run_hf_continuous(
    workload: Workload,
    lm: LoadedModel,
    max_seqs: int = 64,
    max_batched_tokens: int = 2048,
    block_size: int = 16,
    kv_budget_tokens: int | None = None,
    stop_on_eos: bool = False,
    prompt_seed: int = 0,
    progress: bool = False,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[RunResult, dict[int, list[int]]]:
    """Replay ``workload`` into transformers' continuous-batching manager; records + generated
    tokens."""
    if not has_hf_continuous(lm):
        import transformers

        raise ConfigError(
            f"engine hf-continuous needs transformers' continuous batching, absent from "
            f"transformers {transformers.__version__}"
        )
    if block_size < HF_MIN_BLOCK:
        raise ConfigError(
            f"block_size must be at least {HF_MIN_BLOCK} for engine hf-continuous (transformers' "
            f"smallest page), got {block_size}"
        )
    reqs = workload.requests
    n = len(reqs)
    rec = Recorder(workload)
    outputs: dict[int, list[int]] = {r.id: [] for r in reqs}
    # Its logger reports, at ERROR level, that it cannot size memory without psutil: we size it.
    log = logging.getLogger("ContinuousBatchingLogger")
    old_level = log.level
    log.setLevel(logging.CRITICAL)
    reset_memory_stats(lm)
    mgr = _hf_manager(
        lm, reqs, max_seqs, max_batched_tokens, block_size, kv_budget_tokens, stop_on_eos
    )
    bar = None
    if progress and n:
        from tqdm import tqdm

        bar = tqdm(total=n, desc="measuring hf-continuous", unit="req", leave=False)
    stopped = None
    try:
        if not getattr(mgr, "warmed_up", True):
            mgr.warmup()  # as generate_batch does: on a GPU, capture graphs before the clock starts
        mgr.start()
        stopped = _replay(mgr, rec, outputs, reqs, lm, prompt_seed, stop_on_eos, clock, bar)
    except KeyboardInterrupt:
        stopped = "interrupted (Ctrl-C) before it finished"
    finally:
        mgr.stop(block=True, timeout=10)
        log.setLevel(old_level)
        if bar is not None:
            bar.close()
    if stopped is not None:
        rec.reject_unfinished(stopped)
    return _hf_result(
        rec, workload, lm, max_seqs, max_batched_tokens, block_size, kv_budget_tokens, stopped
    ), outputs


def _replay(
    mgr,
    rec: Recorder,
    outputs: dict,
    reqs,
    lm: LoadedModel,
    prompt_seed: int,
    stop_on_eos: bool,
    clock: Callable[[], float],
    bar,
) -> str | None:
    """Hand each request over at its arrival and record each as it finishes, until all are accounted
    for; returns why the run stopped early (None: it did not)."""
    n, done, nxt = len(reqs), 0, 0
    t0 = clock()
    while done < n:
        nxt, rejected = _hand_over(mgr, rec, reqs, nxt, clock() - t0, lm, prompt_seed)
        done += rejected
        wait = (reqs[nxt].arrival - (clock() - t0)) if nxt < n else 1.0
        res = mgr.get_result(timeout=max(0.0005, min(wait, 1.0)))
        if res is None:
            if not mgr.is_running():
                return "stopped: transformers' continuous-batching thread ended unexpectedly"
            continue
        if not res.is_finished():
            continue
        rid = int(res.request_id)
        done += 1
        if bar is not None:
            bar.update(1)
        if res.error is not None:
            rec.reject(rid, f"hf-continuous: {res.error}")
            continue
        _record_finished(rec, outputs, res, t0, lm.eos_token_id, stop_on_eos)
    return None


def _hand_over(
    mgr, rec: Recorder, reqs, nxt: int, t: float, lm: LoadedModel, prompt_seed: int
) -> tuple[int, int]:
    """Hand the manager every request due by ``t`` from ``reqs[nxt]`` on; one too long for the
    model's context is rejected with its reason instead. Returns (the next request not yet due, how
    many rejected)."""
    rejected = 0
    while nxt < len(reqs) and reqs[nxt].arrival <= t:
        r = reqs[nxt]
        reason = context_reason(r.prompt_tokens, r.output_tokens, lm.n_positions)
        if reason is not None:
            rec.reject(r.id, reason)
            rejected += 1
        else:
            mgr.add_request(
                prompt_ids(r, lm.vocab_size, lm.tokenizer, prompt_seed),
                request_id=str(r.id),
                max_new_tokens=r.output_tokens,
                record_timestamps=True,
            )
        nxt += 1
    return nxt, rejected


def _hf_manager(
    lm: LoadedModel,
    reqs,
    max_seqs: int,
    max_batched_tokens: int,
    block_size: int,
    kv_budget_tokens: int | None,
    stop_on_eos: bool,
):
    """transformers' continuous-batching manager, sized for the workload (blocks for every request
    at once when no KV budget is given: the manager never has to turn one away)."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    if kv_budget_tokens is not None:
        num_blocks = max(1, kv_budget_tokens // block_size)
    else:
        num_blocks = (
            int(sum(-(-(r.prompt_tokens + r.output_tokens) // block_size) for r in reqs)) + 8
        )
    longest = max((r.output_tokens for r in reqs), default=1)
    gen_cfg = GenerationConfig(
        max_new_tokens=longest,
        do_sample=False,
        pad_token_id=lm.pad_token_id,
        eos_token_id=lm.eos_token_id if stop_on_eos else None,
    )
    cb_cfg = ContinuousBatchingConfig(
        page_size=block_size,
        num_blocks=num_blocks,
        max_batch_tokens=max_batched_tokens,
        max_requests_per_batch=max_seqs,
    )
    return lm.model.init_continuous_batching(
        generation_config=gen_cfg, continuous_batching_config=cb_cfg
    )


def _record_finished(
    rec: Recorder, outputs: dict[int, list[int]], res, t0: float, eos: int | None, stop_on_eos: bool
) -> None:
    """A finished request's tokens and times, from the manager's own timestamps (--stop-on-eos: cut
    at EOS)."""
    rid = int(res.request_id)
    toks = list(res.generated_tokens)
    stamps = np.asarray(res.timestamps or [res.lifespan[1]], dtype=np.float64) - t0
    if stop_on_eos and eos in toks:
        toks = toks[: toks.index(eos) + 1]
        stamps = stamps[: len(toks)]
    outputs[rid] = toks
    rec.start[rid] = res.lifespan[0] - t0
    rec.first_token[rid] = stamps[0]
    rec.last_token[rid] = stamps[-1]
    rec.finish[rid] = max(res.lifespan[1] - t0, stamps[-1]) if not stop_on_eos else stamps[-1]
    rec.tokens[rid] = len(toks)
    rec.itl_max[rid] = float(np.diff(stamps).max()) if len(stamps) > 1 else np.nan


def _hf_result(
    rec: Recorder,
    workload: Workload,
    lm: LoadedModel,
    max_seqs: int,
    max_batched_tokens: int,
    block_size: int,
    kv_budget_tokens: int | None,
    stopped: str | None,
) -> RunResult:
    """The measured run: the records, and what served them."""
    meta = {
        "engine": "hf-continuous",
        "model": lm.name,
        "model_source": lm.source,
        "random_weights": lm.random_weights,
        "device": lm.device,
        "dtype": lm.dtype,
        "threads": lm.threads,
        "kv_bytes_per_token": lm.kv_bytes_per_token,
        "stopped": stopped,
        **memory_stats(lm),
    }
    return RunResult(
        records=rec.records(),
        policy=f"transformers continuous batching (max_requests_per_batch={max_seqs}, "
        f"max_batch_tokens={max_batched_tokens}, page_size={block_size})",
        step_time=f"measured: {lm.name} on {lm.device} ({lm.dtype}, {lm.threads} threads), engine "
        f"hf-continuous",
        kv_budget_tokens=kv_budget_tokens,
        kv_peak_tokens=0,
        preemptions=0,
        workload=workload.description,
        meta=meta,
    )
