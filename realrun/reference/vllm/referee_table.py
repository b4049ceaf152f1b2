"""Where batchsim's textbook ``Continuous`` differs from vLLM's scheduler, and why:
``textbook_table``.

The referee finds the first step at which the textbook's schedule leaves vLLM's; ``why``
names the rule of vLLM's that decided it, from what differs in that step. After the first
difference the two runs hold different states, so only the first is explained. The rules
(vLLM 0.32, ``vllm/v1/core/sched/scheduler.py`` unless named):

- **budget**: one ``token_budget`` for every token, decodes included (``schedule()`` takes
  each running request's tokens from it before any waiting one's); the textbook gives
  ``max_batched_tokens`` to prompts alone;
- **async**: with async scheduling the step after next is chosen while a step runs
  (``EngineCore.step_with_batch_queue``), so a newcomer joins a step later, and a finishing
  request holds its row and blocks one step longer; the textbook decides at each step's end;
- **whole context**: a waiting request is admitted only if its whole context fits the free
  blocks (``allocate_slots(..., full_sequence_must_fit=True)``); the textbook asks for the chunk;
- **watermark**: the textbook keeps 1 % of the blocks free when admitting; vLLM 0.32 keeps none
  (``SchedulerConfig.watermark = 0.0``);
- **preemption**: vLLM preempts as its running loop meets a request that needs a block, chunks
  included, in admission order; the textbook makes room for the decodes first;
- **KV count**: with no KV limit the textbook's step records the blocks its decodes grow into
  only when the step ends (its step log's ``kv_in_use``, not a scheduling difference).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from batchsim.core.workload import Request

from .referee import Difference, RefereeConfig
from .referee_workloads import CONFIGURATIONS, random_workload

__all__ = ["REASONS", "why", "textbook_table", "markdown"]

#: Each reason's key and what vLLM does, as the table says it.
REASONS = {
    "budget": "decodes spend vLLM's token budget too",
    "async": "async scheduling: a newcomer joins a step later, a finished request leaves a step "
    "later",
    "whole context": "vLLM admits only when the whole context fits the free blocks",
    "watermark": "the textbook keeps 1 % of the blocks free; vLLM none",
    "preemption": "vLLM preempts in its running loop, in admission order",
    "KV count": "the textbook's step log counts a decode's new block at the step's end (no KV "
    "limit)",
    "other": "none of the above",
}


def why(d: Difference, config: RefereeConfig, requests: Sequence[Request]) -> str:
    """The key of ``REASONS`` that explains the first difference ``d`` (vLLM's view against the
    textbook's)."""
    a, b = d.vllm, d.batchsim
    if a is None or b is None:
        return "async" if config.async_scheduling else "other"
    ta, tb = dict(a.tokens), dict(b.tokens)
    decodes = any(n == 1 and r not in a.admitted for r, n in ta.items())
    if any(r in ta and tb[r] > ta[r] > 0 and tb[r] > 1 for r in tb) and decodes:
        return "budget"
    extra = [r for r in b.admitted if r not in a.admitted]
    if extra:
        if config.async_scheduling and any(requests[r].arrival == d.step for r in extra):
            return "async"
        if sum(ta.values()) + tb[extra[0]] > config.max_batched_tokens:
            return "budget"
        whole = -(-requests[extra[0]].prompt_tokens // config.block_size)
        if config.kv_blocks is not None and a.kv_blocks + whole > config.kv_blocks:
            return "whole context"
        return "async" if config.async_scheduling else "other"
    if [r for r in a.admitted if r not in b.admitted] and config.kv_blocks is not None:
        return "watermark"
    if a.preempted != b.preempted:
        return "preemption"
    if d.fields == ("kv_blocks",) and config.kv_blocks is None:
        return "KV count"
    return "async" if config.async_scheduling else "other"


def textbook_table(
    workloads: int = 10,
    max_requests: int = 200,
    configurations: dict[str, RefereeConfig] | None = None,
) -> dict[str, Counter]:
    """For each configuration, how many workloads' schedules first differ from vLLM's for each
    reason (``"same"``: the textbook scheduled that workload exactly as vLLM did)."""
    from .referee import referee

    out: dict[str, Counter] = {}
    for name, config in (configurations or CONFIGURATIONS).items():
        tally: Counter = Counter()
        for seed in range(workloads):
            requests = random_workload(seed, config, max_requests)
            v = referee(requests, config, policy="continuous")
            # With no KV limit, a step that differs only in its KV count changes nothing after it:
            # explain the first one that differs in what runs, if any.
            firsts = [
                d
                for d in v.differences
                if config.kv_blocks is not None or d.fields != ("kv_blocks",)
            ]
            first = firsts[0] if firsts else v.first
            tally["same" if v.agrees else why(first, config, requests)] += 1
        out[name] = tally
    return out


def markdown(table: dict[str, Counter]) -> str:
    """The table as Markdown: one row per configuration, one column per reason that occurs."""
    keys = [k for k in ("same", *REASONS) if any(t[k] for t in table.values())]
    lines = ["| configuration | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    lines += [
        f"| {name} | " + " | ".join(str(t[k]) for k in keys) + " |" for name, t in table.items()
    ]
    lines += ["", *(f"- **{k}**: {REASONS[k]}" for k in keys if k != "same")]
    return "\n".join(lines)
