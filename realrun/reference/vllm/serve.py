"""A workload served by vLLM, open-loop, into batchsim's records: ``run_vllm``.

Each request is handed to vLLM's ``AsyncLLM.generate`` at its arrival time (an asyncio
task per request, as vLLM's serving benchmark does), with its prompt as token ids
(``realrun.engine.inputs.prompt_ids``: the very prompt our engine feeds) and exactly its
output length (``min_tokens = max_tokens``, EOS ignored, greedy). What vLLM reports
becomes batchsim's ``Records``, so every metric, plot and cost applies unchanged:

- arrival: the workload's time (the run's clock starts at the first submission);
- first token, each token gap, finish: when the client received them (output kind
  DELTA: every streamed piece stamped as it arrives), which is what a user of vLLM
  sees. vLLM's own engine stamps (``RequestOutput.metrics``) are kept in the result's
  meta, and the gap between the two (delivery: engine to client) is reported;
- start: the engine's first scheduling of the request (``scheduled_ts``);
- preemptions: vLLM's own count per request;
- the step log: every step vLLM's scheduler ran, read from ``steplog`` (its rows, prompt
  tokens and decode rows, start and duration), so busy time and batch sizes are vLLM's.

A request the model cannot hold (prompt + output past its context) is rejected before
submission with batchsim's own reason, the words the simulator uses; a request vLLM
refuses is rejected with vLLM's message. Ctrl-C cancels what is in flight and keeps
what finished, every other request rejected with the reason.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import numpy as np

from batchsim.core.driver import INTERRUPTED
from batchsim.core.limits import ServerLimits
from batchsim.core.plan import plan_step
from batchsim.core.recorder import Recorder
from batchsim.core.result import RunResult
from batchsim.core.step import Chunk, Step, StepOutcome
from batchsim.core.workload import Workload

from ...engine.inputs import prompt_ids

__all__ = ["run_vllm", "steps_into", "idle_before", "VLLMRun"]

_RUNS = itertools.count()


class VLLMRun:
    """What one run collected per request, before it becomes records."""

    def __init__(self, n: int) -> None:
        self.stamps: list[list[float]] = [[] for _ in range(n)]
        self.counts: list[list[int]] = [[] for _ in range(n)]
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.metrics: list[object | None] = [None] * n
        self.submitted = np.full(n, np.nan)
        self.errors: dict[int, str] = {}


async def _one(
    engine, r, ids: list[int], tag: str, t0: float, run: VLLMRun, stop_on_eos: bool
) -> None:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    n = r.output_tokens
    sp = SamplingParams(
        max_tokens=n,
        min_tokens=0 if stop_on_eos else n,
        ignore_eos=not stop_on_eos,
        temperature=0.0,
        detokenize=False,
        output_kind=RequestOutputKind.DELTA,
    )
    run.submitted[r.id] = time.monotonic() - t0
    try:
        async for out in engine.generate(
            TokensPrompt(prompt_token_ids=ids), sp, request_id=f"{tag}q{r.id}"
        ):
            t = time.monotonic() - t0
            new = out.outputs[0].token_ids
            if new:
                run.stamps[r.id].append(t)
                run.counts[r.id].append(len(new))
                run.tokens[r.id].extend(new)
            if out.finished:
                run.metrics[r.id] = out.metrics
    except asyncio.CancelledError:
        raise
    except Exception as e:  # noqa: BLE001 - vLLM refused this request: it is rejected with vLLM's words
        run.errors[r.id] = (
            f"vllm: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        )


async def _serve(
    engine,
    workload: Workload,
    prompts: dict[int, list[int]],
    skip: set[int],
    run: VLLMRun,
    stop_on_eos: bool,
    bar,
) -> tuple[float, str | None]:
    tag = f"r{next(_RUNS)}"
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task] = []
    t0 = time.monotonic()
    stopped = None
    try:
        for r in workload.requests:
            if r.id in skip:
                continue
            delay = r.arrival - (time.monotonic() - t0)
            if delay > 0:
                # A thread's sleep, not asyncio's: the event loop rounds its timeouts up to whole
                # milliseconds, which would submit every request ~0.7 ms late.
                await loop.run_in_executor(None, time.sleep, delay)
            task = asyncio.create_task(_one(engine, r, prompts[r.id], tag, t0, run, stop_on_eos))
            if bar is not None:
                task.add_done_callback(lambda _: bar.update(1))
            tasks.append(task)
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        stopped = INTERRUPTED
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return t0, stopped


def run_vllm(
    workload: Workload,
    server,
    limits: ServerLimits,
    vocab_size: int,
    tokenizer=None,
    prompt_seed: int = 0,
    stop_on_eos: bool = False,
    progress: bool = False,
    model_note: str = "",
) -> RunResult:
    """Serve ``workload`` through ``server`` (a ``VLLMServer``); batchsim records of what vLLM
    did."""
    rec = Recorder(workload)
    skip: set[int] = set()
    for r in workload.requests:
        reason = limits.context_reason(r.prompt_tokens, r.output_tokens)
        if reason is not None:
            rec.reject(r.id, reason)
            skip.add(r.id)
    prompts = {
        r.id: prompt_ids(r, vocab_size, tokenizer, prompt_seed)
        for r in workload.requests
        if r.id not in skip
    }
    run = VLLMRun(len(workload))
    bar = None
    if progress and len(prompts):
        from tqdm import tqdm

        bar = tqdm(total=len(prompts), desc="measuring vllm", unit="req", leave=False)
    server.clear_steps()
    stopped = None
    try:
        t0, stopped = server.call(
            _serve, server.engine, workload, prompts, skip, run, stop_on_eos, bar
        )
    except KeyboardInterrupt:
        t0, stopped = float("nan"), INTERRUPTED
    finally:
        if bar is not None:
            bar.close()
    steps = server.read_steps()
    shapes = steps_into(rec, steps, t0) if np.isfinite(t0) else []
    idle = idle_before(steps) if shapes else []
    delivery = _fill(rec, run, t0 if np.isfinite(t0) else 0.0)
    if stopped is not None:
        rec.reject_unfinished(stopped)
    knobs = server.knobs
    meta = {
        "engine": "vllm",
        "vllm": server.version,
        "stopped": stopped,
        "outputs": run.tokens,
        "vllm_steps": len(steps),
        "step_shapes": shapes,
        "delivery_s": delivery,
        "engine_args": knobs.engine_args(),
        # Each step as the one fused pass the profile prices it as: the run's own level
        # (realrun.timing.pass_level).
        "passes": [(plan_step(step, "fused")[0], secs) for step, secs in shapes],
        # How long vLLM sat idle before each of those passes: a step after an idle is priced with
        # the profile's cold start (``wake_penalty``), as the simulator pays it and as our engine's
        # runs are priced, so a few cold prefills do not read as a slow machine.
        "pass_idle": idle,
        "submit_late_s": float(np.nanmean(run.submitted - workload.arrivals))
        if len(prompts)
        else 0.0,
    }
    return RunResult(
        records=rec.records(),
        policy=(
            f"vLLM {server.version} V1 scheduler (max_num_seqs={knobs.max_num_seqs}, "
            f"max_num_batched_tokens={knobs.max_num_batched_tokens}, "
            f"block_size={knobs.block_size}, chunked_prefill={knobs.enable_chunked_prefill})"
        ),
        step_time=f"measured: vLLM {server.version}{model_note}",
        kv_budget_tokens=knobs.kv_budget_tokens,
        kv_peak_tokens=int(rec.records().steps["kv_in_use"].max()) if steps else 0,
        preemptions=int(
            sum(getattr(m, "num_preemptions", 0) or 0 for m in run.metrics if m is not None)
        ),
        workload=workload.description,
        meta=meta,
    )


def _rid(vllm_id: str) -> int:
    """Our request id from vLLM's (``r3q12-1a2b3c4d``: run tag, id, vLLM's own suffix)."""
    return int(vllm_id.split("-", 1)[0].split("q", 1)[1])


def steps_into(rec: Recorder, steps: list[dict], t0: float) -> list[tuple[Step, float]]:
    """vLLM's logged steps as the records' step log: each a Step of the chunks and decode rows it
    ran.

    A row is a decode when it feeds one token past its prompt; anything else (a prompt chunk, or
    a preempted request's recompute of prompt + output) is a prefill chunk. The step's end is
    when vLLM had processed its outputs; with vLLM's async scheduling the next step is already
    scheduled by then, so a step is counted from the later of its scheduling and the previous end.
    Returns each step with its duration.
    """
    out: list[tuple[Step, float]] = []
    prev_end = -np.inf
    for s in steps:
        if s["end"] is None:
            continue
        chunks, decode, cached, held = [], [], 0, 0
        for vid, first, n, prompt in s["rows"]:
            rid, first, n = _rid(vid), int(first), int(n)
            if n == 1 and first >= prompt:
                decode.append(rid)
            else:
                chunks.append(Chunk(rid, first, n, True))
            cached += first
            held += first + n
        start = max(s["start"], prev_end) - t0
        prev_end = s["end"]
        step = Step(prefill=tuple(chunks), decode=tuple(decode), kv_read=cached, kv_in_use=held)
        rec.step(step, start, np.array([s["end"] - t0]), StepOutcome())
        out.append((step, s["end"] - t0 - start))
    return out


def idle_before(steps: list[dict]) -> list[float]:
    """For each logged step with an end (the steps ``steps_into`` keeps, in its order), the seconds
    vLLM sat idle before it: from the previous step's end to its scheduling, 0 where it was
    scheduled before that end (async scheduling) and for the first step, as our engine counts its
    passes' idle (``Engine.pass_idle``). Between two steps of a busy run this is a few hundredths of
    a millisecond, under ``pass_level.IDLE_MIN_S``; a longer one is the engine waiting for a
    request, and the step after it starts cold (the profile's ``wake_extra``)."""
    out: list[float] = []
    prev_end = None
    for s in steps:
        if s["end"] is None:
            continue
        out.append(0.0 if prev_end is None else max(0.0, s["start"] - prev_end))
        prev_end = s["end"]
    return out


def _fill(rec: Recorder, run: VLLMRun, t0: float) -> float | None:
    """Per-request times from the client's stamps; returns the mean delivery lag (engine to client),
    s."""
    lags = []
    for i, (stamps, counts) in enumerate(zip(run.stamps, run.counts)):
        if i in run.errors:
            rec.reject(i, run.errors[i])
            continue
        m = run.metrics[i]
        if not stamps or m is None:
            continue
        t = np.asarray(stamps)
        rec.first_token[i], rec.last_token[i], rec.finish[i] = t[0], t[-1], t[-1]
        rec.tokens[i] = int(sum(counts))
        rec.preemptions[i] = int(getattr(m, "num_preemptions", 0) or 0)
        if len(t) > 1:
            rec.itl_max[i] = float(np.diff(t).max())
        sched = getattr(m, "scheduled_ts", 0.0) or 0.0
        if sched and np.isnan(rec.start[i]):
            rec.start[i] = sched - t0
        last = getattr(m, "last_token_ts", 0.0) or 0.0
        if last:
            lags.append(t[-1] - (last - t0))
    return float(np.mean(lags)) if lags else None
