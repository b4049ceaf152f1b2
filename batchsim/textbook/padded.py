"""The taxi, the bus and the bus with a timetable: batches padded as ``generate()`` pads them.

A padded batch is one rectangle: its prompts are padded to the longest and prefilled in one
pass; then every row decodes, a token a pass, until the *longest* output is done (a row whose
answer is complete rides along as padding), and every answer comes back when the batch ends.
Each row reserves KV memory for the whole rectangle row (longest prompt + longest output) up
front; the batch is cut to the first requests in the queue that the server's limits hold.

The three policies differ only in when the bus leaves (``ready``): the taxi at once, with one
passenger; ``Static`` when ``max_batch`` wait or nobody else is coming; ``Dynamic`` when
``max_batch`` wait or the first has waited ``max_wait`` seconds (the server sleeps until that
``deadline``; with nobody else coming it still waits for it).
"""

from __future__ import annotations

from collections import deque

from ..core.errors import check_knob
from ..core.knobs import DynamicKnobs, StaticKnobs
from ..core.limits import ServerLimits
from ..core.step import Chunk, Step
from .request import Request

# A deadline is met a nanosecond early: the fast path allows a timer that fires an ulp before its
# time that slack, and the textbook keeps it so that the two decide alike.
EPS = 1e-9


class PaddedBatch:
    name = "padded"
    streams = False  # answers come back when the batch ends
    max_batch = 1

    def start(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.queue: deque[Request] = deque()
        self.batch: list[Request] = []
        self.passes = 0  # passes the batch has run; 0: its prefill comes next
        self.kv_in_use = self.kv_peak = self.preemptions = 0

    @property
    def idle(self) -> bool:
        return not self.queue and not self.batch

    def deadline(self) -> float | None:
        return None

    def arrive(self, r: Request) -> str | None:
        limits, kv = self.limits, self.limits.kv_budget_tokens
        reason = limits.context_reason(r.prompt, r.output) or limits.step_tokens_reason(r.prompt)
        if reason is None and kv is not None and r.prompt + r.output > kv:
            reason = (
                f"needs {r.prompt + r.output} KV tokens (prompt + output), more than the whole "
                f"budget of {kv}"
            )
        if reason is None:
            self.queue.append(r)
        return reason

    def form_batch(self) -> None:
        batch: list[Request] = []
        prompt = output = 0  # the rectangle: longest prompt, longest output
        for r in self.queue:
            if len(batch) == self.max_batch:
                break
            p, o = max(prompt, r.prompt), max(output, r.output)
            if not self.limits.padded_batch_fits(len(batch) + 1, p, o):
                break  # too big together with the others: it waits for the next bus
            batch.append(r)
            prompt, output = p, o
        for _ in batch:
            self.queue.popleft()
        self.batch, self.width, self.longest, self.passes = batch, prompt, output, 0
        self.padding = len(batch) * prompt - sum(r.prompt for r in batch)
        self.kv_in_use = len(batch) * (prompt + output)  # reserved for the batch's whole life
        self.kv_peak = max(self.kv_peak, self.kv_in_use)

    def next_step(self, now: float, everyone_in: bool) -> Step | None:
        if not self.batch:
            if not self.queue or not self.ready(now, everyone_in):
                return None
            self.form_batch()
        if self.passes == 0:  # the prefill: every prompt, padded to the longest
            chunks = tuple(Chunk(r.id, 0, r.prompt) for r in self.batch)
            return Step(prefill=chunks, prefill_padding=self.padding, kv_in_use=self.kv_in_use)
        width = self.width + self.passes - 1  # every row, done or not, reads this much cache
        return Step(
            decode=tuple(r.id for r in self.batch),
            padded_rows=sum(1 for r in self.batch if r.output <= self.passes),
            kv_read=len(self.batch) * width,
            kv_padding=self.padding,
            decode_width=width,
            kv_in_use=self.kv_in_use,
        )

    def step_done(self, step: Step) -> tuple[list[Request], list[Request]]:
        made = [r for r in self.batch if r.output > self.passes]
        self.passes += 1
        if self.passes < self.longest:
            return made, []
        finished, self.batch = self.batch, []  # every answer is delivered as the batch ends
        self.kv_in_use = 0
        return made, finished


class Taxi(PaddedBatch):
    name = "taxi"

    def ready(self, now: float, everyone_in: bool) -> bool:
        return True

    def __repr__(self) -> str:
        return "Taxi()"


class Static(PaddedBatch):
    name = "static"

    def __init__(self, max_batch: int = StaticKnobs.max_batch) -> None:
        check_knob("max_batch", max_batch)
        self.max_batch = int(max_batch)

    def ready(self, now: float, everyone_in: bool) -> bool:
        return len(self.queue) >= self.max_batch or everyone_in

    def __repr__(self) -> str:
        return f"Static(max_batch={self.max_batch})"


class Dynamic(PaddedBatch):
    name = "dynamic"

    def __init__(
        self, max_batch: int = DynamicKnobs.max_batch, max_wait: float = DynamicKnobs.max_wait
    ) -> None:
        check_knob("max_batch", max_batch)
        check_knob("max_wait", max_wait)
        self.max_batch, self.max_wait = int(max_batch), float(max_wait)

    def deadline(self) -> float | None:
        return self.queue[0].arrival + self.max_wait if self.queue else None

    def ready(self, now: float, everyone_in: bool) -> bool:
        return len(self.queue) >= self.max_batch or now + EPS >= self.deadline()

    def __repr__(self) -> str:
        return f"Dynamic(max_batch={self.max_batch}, max_wait={self.max_wait:g})"
