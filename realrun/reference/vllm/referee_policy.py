"""The referee's batchsim side: a policy driven tick by tick, as ``batchsim.core.driver`` drives it.

Step ``t`` starts at time ``t + 1`` and ends at ``t + 2``; a request of tick ``t`` arrives at
``t + 0.5``, during the step before (so the ``vllm-v1`` flavour's async scheduling sees it
as arrived after that step was chosen, as vLLM does; the clock starts at 1 as arrivals are >= 0).
Every step runs once (``on_step_end(step, 1, ...)``), whatever ``repeat`` it offers: a repeat stands
for the same steps one at a time, which is what is compared.
"""

from __future__ import annotations

from collections.abc import Sequence

from batchsim.core.errors import ConfigError
from batchsim.core.limits import ServerLimits
from batchsim.core.policies import VLLMV1, Continuous
from batchsim.core.step import Step
from batchsim.core.workload import Request

from .referee_config import RefereeConfig, StepView

__all__ = ["make_referee_policy", "batchsim_schedule"]


def make_referee_policy(config: RefereeConfig, policy: str = "vllm-v1") -> Continuous:
    """The batchsim policy the configuration describes (``vllm-v1`` or the textbook
    ``continuous``)."""
    knobs = (config.max_seqs, config.max_batched_tokens, config.block_size, config.chunked_prefill)
    if policy == "vllm-v1":
        return VLLMV1(*knobs, async_scheduling=config.async_scheduling)
    # the textbook scheduler knows no async scheduling: it decides at each step's end
    return Continuous(*knobs)


def limits_of(config: RefereeConfig) -> ServerLimits:
    kv = None if config.kv_blocks is None else config.kv_blocks * config.block_size
    return ServerLimits(kv_budget_tokens=kv, context_len=config.context_len)


def view_of(t: int, step: Step, block_size: int) -> StepView:
    tokens = {rid: 1 for rid in step.decode}
    for c in step.prefill:
        tokens[c.request_id] = c.length
    return StepView(
        t,
        tuple(sorted(tokens.items())),
        tuple(sorted(step.preempted)),
        tuple(sorted(c.request_id for c in step.prefill if c.start == 0)),
        step.kv_in_use // block_size,
    )


def batchsim_schedule(
    requests: Sequence[Request], config: RefereeConfig, policy: str = "vllm-v1"
) -> tuple[tuple[StepView, ...], int]:
    """The steps batchsim's ``policy`` schedules for ``requests`` (arrival = tick), one view per
    busy tick, and the requests it saw vLLM preempt while their last token was in flight
    (``VLLMV1``, async)."""
    pol = make_referee_policy(config, policy)
    pol.start(limits_of(config))
    views: list[StepView] = []
    i, n, t = 0, len(requests), 0
    # A watchdog, not a measure: every request runs within its own prefill and decodes, many times
    # over.
    limit = (
        int(max((r.arrival for r in requests), default=0))
        + 64 * sum(r.prompt_tokens + r.output_tokens for r in requests)
        + 64
    )
    while i < n or not pol.idle:
        while i < n and requests[i].arrival <= t:
            r = requests[i]
            reason = pol.on_arrival(
                Request(r.id, t + 0.5, r.prompt_tokens, r.output_tokens), t + 0.5
            )
            if reason is not None:
                raise ConfigError(
                    f"request {r.id} can never run under {config.describe()}: {reason}"
                )
            i += 1
        if i == n:
            pol.close(t + 1.0)
        if not pol.idle:
            action = pol.next_action(t + 1.0)
            if isinstance(action, Step):
                views.append(view_of(t, action, config.block_size))
                pol.on_step_end(action, 1, t + 2.0)
        t += 1
        if t > limit:
            raise RuntimeError(f"batchsim's {policy} did not finish {n} requests in {limit} ticks")
    return tuple(views), getattr(pol, "last_token_preemptions", 0)
