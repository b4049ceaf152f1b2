"""vLLM's own scheduler as the referee of batchsim's ``vllm-v1`` policy, step by step, with no
clock.

Timing on a shared machine is noisy; a schedule is not. vLLM's V1 ``Scheduler``
(``vllm/v1/core/sched/scheduler.py`` in vLLM 0.32) is a plain Python object: it takes
requests (``add_request``), says what the next forward pass computes (``schedule``)
and takes that pass's sampled tokens (``update_from_output``). So one workload is fed
to it and to batchsim's policy side by side, and at every step the two are held to
the same record, a ``StepView``: which requests run and how many tokens each is
given, who is preempted, who is admitted, and the KV blocks in use once the step is
scheduled.

There is no clock: a step lasts one tick, every scheduled row that completes its
context yields one token (a stand-in for the model, ``referee_engine``), a request
finishes at its output length, and a request arriving at tick ``t`` arrived during the
step before it (so vLLM sees it before it schedules the step of tick ``t``, and, with
async scheduling, after it scheduled that step: it joins at ``t + 1`` at the earliest).
A tick in which neither runs anything is idle on both sides.

Prefix caching is **off**. vLLM turns it on by default; our workloads' prompts are
token ids of no meaning, so a hit would be an accident of the stand-in, and batchsim
models no prefix cache (realrun's ``VLLMKnobs`` turns it off for every vLLM run too).

Usage (a notebook or a test, in the environment that has vLLM)::

    from realrun.reference.vllm.referee import RefereeConfig, referee
    verdict = referee(requests, RefereeConfig(max_seqs=8, max_batched_tokens=64, kv_blocks=40))
    verdict.agrees, verdict.first, print(verdict.report())

``requests`` are batchsim ``Request``s whose ``arrival`` is the tick they arrive at.
``policy="continuous"`` holds batchsim's textbook scheduler to the same referee
(``referee_table`` prints where and why it differs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from batchsim.core.errors import ConfigError, check_int_at_least, show
from batchsim.core.workload import Request

from .referee_config import RefereeConfig, StepView

__all__ = ["RefereeConfig", "StepView", "Difference", "Verdict", "referee", "POLICIES"]

#: The batchsim schedulers the referee can judge: the vLLM flavour, and the textbook one.
POLICIES = ("vllm-v1", "continuous")
#: The fields of a step that are compared, in the order a difference is reported.
FIELDS = ("tokens", "preempted", "admitted", "kv_blocks")


@dataclass(frozen=True)
class Difference:
    """A tick at which the two schedules differ: the fields that differ and both views (None:
    idle)."""

    step: int
    fields: tuple[str, ...]
    vllm: StepView | None
    batchsim: StepView | None

    def __str__(self) -> str:
        return (
            f"step {self.step} differs in {', '.join(self.fields)}:\n  vLLM:     "
            f"{self.vllm or 'idle'}\n  batchsim: {self.batchsim or 'idle'}"
        )


@dataclass(frozen=True)
class Verdict:
    """Both schedules of one workload and where they differ.

    ``last_token_preemptions``: (tick, id) of vLLM preemptions of a request whose last token
    was already in flight (async scheduling only): the request finishes when that token
    lands and never runs again, so nothing is recomputed; batchsim's request has finished
    by then, and its step lists no such preemption. They are kept out of ``vllm``'s views
    and reported here (see ``referee_engine``).
    """

    config: RefereeConfig
    policy: str
    vllm: tuple[StepView, ...]
    batchsim: tuple[StepView, ...]
    differences: tuple[Difference, ...]
    last_token_preemptions: tuple[tuple[int, int], ...] = field(default=())
    #: How many such preemptions batchsim's policy made in its decisions (it must make the same).
    batchsim_last_token_preemptions: int = 0

    @property
    def agrees(self) -> bool:
        return not self.differences

    @property
    def first(self) -> Difference | None:
        return self.differences[0] if self.differences else None

    def report(self) -> str:
        head = f"{self.policy} against vLLM's scheduler ({self.config.describe()}): "
        if self.agrees:
            return head + f"the same {len(self.vllm)} steps"
        return (
            head
            + f"{len(self.differences)} of {max(len(self.vllm), len(self.batchsim))} steps differ; "
            f"first:\n{self.first}"
        )


def compare(vllm: Sequence[StepView], batchsim: Sequence[StepView]) -> tuple[Difference, ...]:
    """The ticks at which the two schedules differ, in order."""
    a, b = {v.step: v for v in vllm}, {v.step: v for v in batchsim}
    out = []
    for step in sorted(set(a) | set(b)):
        va, vb = a.get(step), b.get(step)
        if va is None or vb is None:
            out.append(Difference(step, FIELDS, va, vb))
            continue
        fields_ = tuple(f for f in FIELDS if getattr(va, f) != getattr(vb, f))
        if fields_:
            out.append(Difference(step, fields_, va, vb))
    return tuple(out)


def check_requests(requests: Sequence[Request]) -> None:
    """Ids 0..n-1 and arrivals that are whole ticks in order: one line naming what is wrong."""
    last = 0
    for i, r in enumerate(requests):
        if r.id != i:
            raise ConfigError(f"request ids must be 0..n-1 in order, got id {r.id} at position {i}")
        if r.arrival != int(r.arrival) or r.arrival < last:
            raise ConfigError(
                f"arrival must be a whole tick >= the previous one, got {show(r.arrival)} for "
                f"request {i}"
            )
        last = r.arrival
        check_int_at_least("prompt_tokens", r.prompt_tokens, 1)
        check_int_at_least("output_tokens", r.output_tokens, 1)


def referee(requests: Sequence[Request], config: RefereeConfig, policy: str = "vllm-v1") -> Verdict:
    """Schedule ``requests`` with vLLM's scheduler and with batchsim's ``policy``; compare every
    step."""
    if policy not in POLICIES:
        raise ConfigError(f"policy must be one of {', '.join(POLICIES)}, got {show(policy)}")
    from .referee_engine import vllm_schedule
    from .referee_policy import batchsim_schedule

    check_requests(requests)
    # first: it refuses a request that can never run
    ours, our_late = batchsim_schedule(requests, config, policy)
    theirs, late = vllm_schedule(requests, config)
    return Verdict(config, policy, theirs, ours, compare(theirs, ours), late, our_late)
