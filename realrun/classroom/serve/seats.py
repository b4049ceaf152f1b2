"""The engine thread's side of a room: a leaving client's seat is free at the next step, and a stop
is a stop.

The policy plans a repeated decode step (hundreds of passes) as uninterruptible when no arrival
could join it (a full batch) or nobody else can come (the run closed by a stop). A real room needs
two more cuts, at the next pass boundary, whatever the plan: a client that left
(``ServingInbox.leaving``), so the policy frees its row and blocks before the next step, and the
drain's end (``LiveServer.cut``), after which the run stops (``StopRun``) and what is unfinished is
recorded with the reason. Cutting a repeat changes nothing in the policy's books: it accounts for
however many passes ran.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from batchsim.core.executor import StopRun
from batchsim.core.live import Inbox, LiveExecutor

__all__ = ["ServingInbox", "ServingExecutor"]


class ServingInbox(Inbox):
    """An inbox that also counts the withdrawals not yet taken by the run: what cuts a repeat that
    an arrival would not (a full batch's), because a leaving client's seat must be free at the next
    step."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self._lock = threading.Lock()
        self.leaving = 0

    def withdraw(self, request_id: int, reason: str) -> None:
        # counted before it is queued, so a take() that sees it also sees the count
        with self._lock:
            self.leaving += 1
        super().withdraw(request_id, reason)

    def take(self) -> list[tuple]:
        items = super().take()
        gone = sum(1 for it in items if it[0] == "withdraw")
        if gone:
            with self._lock:
                self.leaving -= gone
        return items


class ServingExecutor(LiveExecutor):
    """A live executor that also tells the server of each step (metrics) and each release (streams),
    cuts every repeat for a leaving client or the drain's end, and stops the run after that end."""

    def __init__(self, server: Any, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.server = server
        self._after_step = (
            False  # the next release is the step's own (finished requests), not a withdrawal
        )

    def should_stop(self, stop_at: float | None) -> Callable[[], bool]:
        server, inbox = self.server, self.inbox
        if stop_at is None:  # a repeat no arrival may cut (a full batch, or the run closed)
            return lambda: inbox.leaving > 0 or server.cut_reason is not None
        return lambda: inbox.pending or server.cut_reason is not None

    def run(self, step, now, stop_at):
        if self.server.cut_reason is not None:
            # the drain is over: what is left is recorded as cut
            raise StopRun(self.server.cut_reason)
        # The engine honours should_stop only on an interruptible step; the policy accounts for
        # however many passes ran (on_step_end's ``done``), so the engine's copy may say so without
        # changing the plan.
        ran = step if step.interruptible or step.repeat == 1 else replace(step, interruptible=True)
        start, ends = super().run(ran, now, stop_at)
        self.server._stepped(step, start, ends)
        self._after_step = True
        return start, ends

    def release(self, finished) -> None:
        # The driver releases a step's finished requests once, right after the step; any other
        # release is a withdrawal the policy granted (ServerProcess._withdraw_now, before the next
        # decision).
        natural, self._after_step = self._after_step, False
        super().release(finished)
        self.server._released(finished, natural)
