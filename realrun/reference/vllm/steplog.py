"""vLLM's scheduler, unchanged, writing down every step it schedules: the one window into its steps.

vLLM runs its scheduler and model in processes of their own, and reports per request
only (arrival, first token, last token, preemptions). To see its *steps* (how many
there were, which requests each one prefilled or decoded, when each began and ended)
``VLLMServer`` hands vLLM a subclass of its own scheduler as ``scheduler_cls``. It decides nothing:
it calls vLLM's own ``schedule`` and ``update_from_output`` and appends one JSON line per event to
the file named by ``BATCHSIM_VLLM_STEPLOG``:

    {"s": k, "t": <monotonic s>, "rows": [[request id, first token, tokens, prompt tokens], ...]}
    {"e": k, "t": <monotonic s>}

``s`` is step k's scheduling (just before vLLM's ``schedule`` ran), ``e`` its outputs
being processed (just after ``update_from_output``). The clock is ``time.monotonic``,
shared by every process on the machine, so the client can put the steps on its own
timeline. Writing a line costs a few microseconds per step.
"""

from __future__ import annotations

import json
import os
import time

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

__all__ = ["StepLogScheduler", "StepLogSyncScheduler", "ENV"]

ENV = "BATCHSIM_VLLM_STEPLOG"


class _StepLog:
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        path = os.environ.get(ENV)
        self._steplog = open(path, "a", buffering=1) if path else None
        self._step_ids: dict[int, int] = {}
        self._k = 0

    def schedule(self, *args, **kwargs):
        t = time.monotonic()
        out = super().schedule(*args, **kwargs)
        if self._steplog is not None and out.total_num_scheduled_tokens:
            self._k += 1
            self._step_ids[id(out)] = self._k
            rows = []
            for rid, n in out.num_scheduled_tokens.items():
                r = self.requests[rid]
                # vLLM has already advanced num_computed_tokens past this step's tokens.
                rows.append([rid, r.num_computed_tokens - n, n, r.num_prompt_tokens])
            self._steplog.write(json.dumps({"s": self._k, "t": t, "rows": rows}) + "\n")
        return out

    def update_from_output(self, scheduler_output, *args, **kwargs):
        out = super().update_from_output(scheduler_output, *args, **kwargs)
        k = self._step_ids.pop(id(scheduler_output), None)
        if k is not None:
            self._steplog.write(json.dumps({"e": k, "t": time.monotonic()}) + "\n")
        return out


class StepLogScheduler(_StepLog, AsyncScheduler):
    """vLLM's default on these machines: async scheduling (step k+1 is scheduled while step k runs).

    vLLM turns async scheduling off for a custom scheduler that is not an ``AsyncScheduler``,
    so the log subclasses the one vLLM would have used, to leave its behaviour as it was."""


class StepLogSyncScheduler(_StepLog, Scheduler):
    """The same log over vLLM's synchronous scheduler (``async_scheduling=False``)."""
