"""The referee's workloads and configurations: seeded, random, and shaped to make every rule bite.

Each configuration of ``CONFIGURATIONS`` makes one part of vLLM's scheduler decide
(the rows, the token budget, the KV cache, unchunked prompts), each with async
scheduling on and off. Each workload (``random_workload``) mixes short prompts with long
ones (several steps' budget, so chunked prefill splits them), outputs of 1 to 64 tokens,
and arrivals in bursts and lulls (several at one tick, then none for a while), so the
batch fills, drains and refills. Every request fits the configuration alone (its context
and, with a KV limit, its blocks), so both schedulers must serve all of them.
"""

from __future__ import annotations

import numpy as np

from batchsim.core.workload import Request

from .referee import RefereeConfig

__all__ = ["CONFIGURATIONS", "random_workload"]


def _both(name: str, **knobs) -> dict[str, RefereeConfig]:
    return {
        f"{name}, sync": RefereeConfig(**knobs),
        f"{name}, async": RefereeConfig(**knobs, async_scheduling=True),
    }


#: Named configurations: what binds in each, with async scheduling off and on.
CONFIGURATIONS: dict[str, RefereeConfig] = {
    # Nothing binds much: rows join and leave, long prompts are chunked.
    **_both("roomy", max_seqs=32, max_batched_tokens=256, context_len=512),
    # max_seqs binds: the queue waits for a row to leave.
    **_both("max_seqs binds", max_seqs=4, max_batched_tokens=512, context_len=512),
    # max_batched_tokens binds: more rows decode than the budget holds, prompts are cut small.
    **_both("max_batched_tokens binds", max_seqs=48, max_batched_tokens=12, context_len=512),
    # The KV cache binds: rows are preempted and recomputed.
    **_both(
        "KV forces preemption", max_seqs=16, max_batched_tokens=128, kv_blocks=40, context_len=512
    ),
    # The KV cache binds and the budget never does (it holds every request's whole context at once):
    # what is left of vLLM's admission and preemption rules, alone.
    **_both("KV binds alone", max_seqs=16, max_batched_tokens=8192, kv_blocks=40, context_len=512),
    # Unchunked prefill (vLLM then requires a budget of the whole context), with a tight cache too.
    **_both(
        "chunked prefill off",
        max_seqs=16,
        max_batched_tokens=256,
        chunked_prefill=False,
        kv_blocks=48,
        context_len=256,
    ),
}


def random_workload(
    seed: int, config: RefereeConfig, max_requests: int = 200
) -> tuple[Request, ...]:
    """A seeded workload of 1 to ``max_requests`` requests that ``config`` can serve (arrival =
    tick)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, max_requests + 1))
    # Bursts and lulls: the gap to the next arrival is 0 (same tick) half the time, else up to 12
    # ticks.
    gaps = np.where(rng.random(n) < 0.5, 0, rng.integers(1, 13, n))
    gaps[0] = int(rng.integers(0, 3))
    arrivals = np.cumsum(gaps)
    longest = config.context_len
    if config.kv_blocks is not None:
        longest = min(longest, config.kv_blocks * config.block_size)
    out = []
    for i in range(n):
        output = int(rng.integers(1, 65))
        # A fifth are long: up to the most the request's context (and cache) allows. vLLM ends a
        # request once its tokens reach max_model_len (``check_stop``), one position sooner than
        # batchsim's limit (prompt + output - 1 fed tokens): so prompt + output <= context_len here,
        # and tests/test_vllm_referee.py shows the edge.
        room = longest - output
        if rng.random() < 0.2 and room > 32:
            prompt = int(rng.integers(32, room + 1))
        else:
            prompt = int(rng.integers(1, min(32, room) + 1))
        out.append(Request(i, float(arrivals[i]), prompt, output))
    return tuple(out)
