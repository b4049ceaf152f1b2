"""Controlled batches submitted to vLLM, and the steps they made, read back from its step log.

vLLM's scheduler decides its own steps, so whatever times vLLM from outside (the profile,
``realrun.reference.vllm.profile``; the canary, ``realrun.reference.vllm.canary``; the drift
recheck) submits batches whose steps vLLM cannot schedule any other way and reads each step's shape
and duration from vLLM's step log (``steplog``). A step's time is its cycle: from the later of its
scheduling and the previous step's end.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

__all__ = ["Prober", "durations", "is_decode", "decode_times", "prefill_times", "SETTLE"]

#: Decode steps let by before timing: the first steps after a batch's prefill still overlap its
#: output's processing (async scheduling) and read slow against a served run's steady steps.
SETTLE = 2


class Prober:
    """Submits controlled batches to the engine and reads back the steps they made."""

    def __init__(self, server, vocab: int) -> None:
        self.server, self.engine, self.vocab = server, server.engine, vocab
        self.k = 0
        self.rng = np.random.default_rng(0)
        self.delivery: list[float] = []  # seconds from a step's end to its output reaching us

    def _prompt(self, n: int) -> list[int]:
        return self.rng.integers(0, min(256, self.vocab), n).tolist()

    async def _one(self, tag: str, n_prompt: int, n_out: int) -> None:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        sp = SamplingParams(
            max_tokens=n_out,
            min_tokens=n_out,
            ignore_eos=True,
            temperature=0.0,
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        async for _ in self.engine.generate(
            TokensPrompt(prompt_token_ids=self._prompt(n_prompt)), sp, request_id=tag
        ):
            pass

    async def prefill(self, n_prompt: int) -> None:
        """One prompt of ``n_prompt`` tokens and one output token: alone on the engine, a step of
        exactly that many tokens (``n_prompt`` within the step's budget)."""
        await self._one(f"{self._tag()}w", n_prompt, 1)

    def _tag(self) -> str:
        self.k += 1
        return f"p{self.k}"

    async def batch(self, prompts: list[int], n_out: int) -> list[dict]:
        """Submit these prompts at once and wait for them: the steps they made."""
        self.server.clear_steps()
        # Paused, vLLM queues what arrives; resumed, it sees the whole batch at its next step, so
        # the batch is not split by the microseconds between our submissions.
        await self.engine.pause_generation(mode="keep", clear_cache=False)
        tasks = [
            asyncio.create_task(self._one(f"{self._tag()}q{i}", p, n_out))
            for i, p in enumerate(prompts)
        ]
        deadline = time.monotonic() + 10.0
        while self.engine.get_num_unfinished_requests() < len(prompts):
            if any(t.done() for t in tasks) or time.monotonic() > deadline:
                # a request vLLM refused (its error is raised below), or one that never arrives
                break
            await asyncio.sleep(0.0005)
        await asyncio.sleep(0.002)  # the last request's way to the engine's process
        await self.engine.resume_generation()
        await asyncio.gather(*tasks)
        return self.server.read_steps()

    async def join(self, rows: int, width: int, n_prompt: int, n_out: int) -> list[dict]:
        """``rows`` requests decoding, then one prompt of ``n_prompt``: the steps, the newcomer's id
        last."""
        self.server.clear_steps()
        tag = self._tag()
        running = [asyncio.create_task(self._one(f"{tag}q{i}", width, n_out)) for i in range(rows)]
        while sum(1 for s in self.server.read_steps() if s["end"] is not None) < 3:
            await asyncio.sleep(0.0005)
        await self._one(f"{tag}q{rows}", n_prompt, 1)
        await asyncio.gather(*running)
        return self.server.read_steps()

    async def after_idle(
        self, idle: float, n_prompt: int, n_out: int
    ) -> tuple[float, float, float]:
        """(late, cold seconds, warm seconds): a request after ``idle`` asleep, then the same at
        once; the seconds are each one's first step (its cycle), where the simulator puts a cold
        start's extra (``wake_penalty`` lengthens the first pass after an idle). Timed over the
        whole request instead, the later steps' own small extras (0.1-0.4 ms each here) were charged
        to the first as well: the first step of a request after 5, 20 and 100 ms asleep ran 0.6,
        1.9 and 1.8 ms slower than at once again, its whole request 1.1, 2.9 and 2.3 ms, and a
        served run's prefills after an idle were priced 25 % above what they took."""
        self.server.clear_steps()
        # Late is counted from when the request was due, as a served request's TTFT is: the client's
        # own sleep overshoots too.
        due = time.monotonic() + idle
        # as run_vllm submits
        await asyncio.get_running_loop().run_in_executor(None, time.sleep, idle)
        await self._one(f"{self._tag()}q0", n_prompt, n_out)
        received = time.monotonic()
        cold = self.server.read_steps()
        self.server.clear_steps()
        await self._one(f"{self._tag()}q0", n_prompt, n_out)
        warm = self.server.read_steps()
        late = cold[0]["start"] - due if cold else 0.0
        ends = [x["end"] for x in cold if x["end"] is not None]
        self.delivery.append(received - max(ends) if ends else 0.0)
        return late, _first(cold), _first(warm)


def durations(steps: list[dict]) -> list[tuple[dict, float]]:
    """Each step with its cycle time: from the later of its scheduling and the previous step's
    end."""
    out, prev = [], -np.inf
    for s in steps:
        if s["end"] is None:
            continue
        out.append((s, s["end"] - max(s["start"], prev)))
        prev = s["end"]
    return out


def _first(steps: list[dict]) -> float:
    """The first step's cycle (0 where none ended)."""
    got = durations(steps)
    return got[0][1] if got else 0.0


def is_decode(row) -> bool:
    _, first, n, prompt = row
    return n == 1 and first >= prompt


def decode_times(steps: list[dict], rows: int) -> list[float]:
    """The cycle times of the steps that decode exactly ``rows`` rows and nothing else, in order."""
    return [
        t
        for s, t in durations(steps)
        if len(s["rows"]) == rows and all(is_decode(x) for x in s["rows"])
    ]


def prefill_times(steps: list[dict], rows: int) -> list[float]:
    """The cycle times of the steps that prefill exactly ``rows`` rows, none of them decoding, in
    order."""
    return [
        t
        for s, t in durations(steps)
        if len(s["rows"]) == rows and not any(is_decode(x) for x in s["rows"])
    ]
