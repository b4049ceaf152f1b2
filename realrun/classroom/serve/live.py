"""The engine side of ``realrun serve``: the one driver on the wall clock, fed from the network.

One thread runs ``batchsim.core.driver.drive`` exactly as a measured run does: the policy
decides, our engine runs each step, the records are kept. What differs is where requests
come from: an ``Inbox`` the HTTP side fills (``batchsim.core.live``), so the policy, the
driver and the records are the very objects a workload run uses. The HTTP side never
touches the engine or the policy; it reads counters, and hears of tokens through
``Stream`` queues, pushed into its event loop thread-safely as each pass produces them.

A step runs in this thread while the event loop goes on serving clients: a slow client
never stalls a step, and a step never stalls the event loop.

Two things cut any repeated step at its next pass boundary, whatever the policy planned: a
client that leaves (so its seat is free for the next step even when the batch is full, where
the policy marks the repeat uninterruptible) and the drain's end (``cut``), after which the
run stops (``StopRun``) and every request still open is recorded with the reason.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from batchsim.core.driver import drive
from batchsim.core.live import GrowingRecorder, LiveArrivals
from batchsim.core.workload import Request, Workload

from .metrics import ServerMetrics
from .seats import ServingExecutor, ServingInbox

__all__ = ["LiveServer", "Stream", "Admission"]


@dataclass
class Admission:
    """What the HTTP side hands the engine with a request: its prompt ids and how it streams."""

    prompt: list[int]
    stream: Stream


class Stream:
    """One request's tokens on their way to its client: ``(kind, value, t, last)`` items in an
    asyncio queue.

    kinds: ``token`` (an id; ``last``: its final one), ``end`` (a finish reason: length, stop),
    ``queued`` (the policy has it), ``rejected`` (the policy's reason: it can never run), ``error``
    (the engine stopped)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ignore_eos: bool, max_tokens: int) -> None:
        self.loop, self.ignore_eos, self.max_tokens = loop, ignore_eos, max_tokens
        self.queue: asyncio.Queue = asyncio.Queue()
        self.ended = False  # set in the engine thread: nothing more is pushed
        self.sent = 0
        self.stopped = False  # the model said EOS: the answer is complete, the row computes on

    def push(self, kind: str, value, t: float, last: bool = False) -> None:
        if self.ended:
            return
        if kind not in ("token", "queued"):
            self.ended = True
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, (kind, value, t, last))
        except RuntimeError:  # the event loop has closed (the server is gone): nobody is listening
            self.ended = True


class LiveServer:
    """The engine thread: ``start()``, then ``submit`` from any thread; ``shutdown()`` drains and
    joins."""

    def __init__(
        self,
        engine,
        policy,
        limits,
        clock: Callable[[], float] = time.perf_counter,
        stop_errors: tuple = (),
        explain=None,
    ) -> None:
        self.engine, self.policy, self.limits, self.clock = engine, policy, limits, clock
        self.lm = engine.lm
        self.t0 = clock()
        self.inbox = ServingInbox(clock, self.t0)
        self.recorder = GrowingRecorder()
        self.streams: dict[int, Stream] = {}
        self.metrics = ServerMetrics()
        # The last steps, for the live view: (start, seconds, passes, rows, prompt tokens, tokens
        # made).
        self.recent_steps: deque = deque(maxlen=600)
        self.tokens_total = 0
        self.prompt_tokens_total = 0
        self.finished = 0
        self.result = None  # the Drive, once the run has ended
        self.error: BaseException | None = None
        engine.start(Workload(()))
        engine.on_tokens = self._tokens
        self.executor = ServingExecutor(
            self, engine, self.inbox, clock, stop_errors=stop_errors, explain=explain
        )
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self.closing = False  # shutting down: nothing new is admitted
        self.cut_reason: str | None = (
            None  # the drain is over: every repeat stops and the run with it
        )
        self.clients: dict[
            int, str
        ] = {}  # request id -> its client's short id (``clients.client_id``)
        self._open: dict[
            str, list[Stream]
        ] = {}  # client -> its streams (ended ones pruned as read)
        self.refused: list[
            tuple
        ] = []  # (arrival s, prompt tokens, max tokens, reason): 503s, for the record
        self._reasons: dict[
            int, str
        ] = {}  # why each withdrawn request left, for its stream's last word

    # -- the engine thread ------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        arrivals = LiveArrivals(self.inbox, on_admit=self._admit, on_decided=self._decided)
        try:
            self.result = drive(
                Workload(()),
                self.policy,
                self.executor,
                self.limits,
                arrivals=arrivals,
                recorder=self.recorder,
            )
        except BaseException as e:  # noqa: BLE001 - every stream hears of it; shutdown re-raises it
            self.error = e
            for s in list(self.streams.values()):
                s.push("error", f"the engine stopped: {e}", self.clock())
        if self.result is not None and self.result.stopped:
            for _rid, s in list(self.streams.items()):
                s.push("error", self.result.stopped, self.clock())

    def _admit(self, request: Request, admission: Admission) -> None:
        self.engine.admit(request, admission.prompt)
        self.streams[request.id] = admission.stream
        self.prompt_tokens_total += request.prompt_tokens

    def _decided(self, rid: int, reason: str | None) -> None:
        if reason is None:
            s = self.streams.get(rid)
            if s is not None:
                s.push("queued", None, self.clock())
            return
        s = self.streams.pop(rid, None)
        if s is not None:
            s.push("rejected", reason, self.clock())

    def _tokens(self, ids: list[int], toks: list[int]) -> None:
        t = self.clock()
        self.tokens_total += len(ids)
        streams, eos = self.streams, self.lm.eos_token_id
        for rid, tok in zip(ids, toks):
            s = streams.get(rid)
            if s is None or s.ended or s.stopped:
                continue
            if s.sent == 0:
                self.metrics.ttft.observe(t - self.t0 - float(self.recorder.arrival[rid]))
            s.sent += 1
            stop = not s.ignore_eos and tok == eos
            # The last token goes with its finish reason, when the policy delivers the request (at
            # once for continuous batching; at the batch's end for a padded batch, as generate()
            # returns).
            s.push("token", tok, t, last=stop or s.sent >= s.max_tokens)
            if stop:
                # The client has its answer; the row computes on to the length the policy scheduled
                # (as `realrun run --stop-on-eos`), so the record and a replay agree on the work
                # done.
                s.stopped = True
                s.push("end", "stop", t)

    def _stepped(self, step, start: float, ends) -> None:
        n = len(ends)
        self.metrics.step.observe(float(ends[-1] - start) / n)
        made = (len(step.decode) - step.padded_rows) * n + sum(
            1 for c in step.prefill if c.completes
        )
        self.recent_steps.append(
            (float(start), float(ends[-1] - start), n, step.batch_size, step.prefill_tokens, made)
        )

    def _released(self, finished, natural: bool) -> None:
        t = self.clock()
        for rid in finished:
            s = self.streams.pop(int(rid), None)
            if natural:
                self.finished += 1
                if s is not None:
                    s.push("end", "length", t)
            elif s is not None:  # withdrawn: a client still listening (the drain's cut) hears why
                s.push("error", self._reasons.get(int(rid), "the request was withdrawn"), t)

    # -- any thread ---------------------------------------------------------------------------
    def submit(self, prompt: list[int], max_tokens: int, stream: Stream, client: str = "") -> int:
        """Hand a request to the engine (from the event loop's thread only: ids and ``clients``
        agree)."""
        rid = self.inbox.submit(len(prompt), max_tokens, Admission(prompt, stream))
        self.clients[rid] = client
        self._open.setdefault(client, []).append(stream)
        return rid

    def waiting_of(self, client: str) -> int:
        """``client``'s requests not yet started (no token yet), the ones that ended forgotten on
        the way."""
        mine = [s for s in self._open.get(client, ()) if not s.ended]
        self._open[client] = mine
        return sum(1 for s in mine if s.sent == 0)

    def by_client(self) -> dict[str, dict]:
        """Each client's requests now: waiting (no token yet) and running, for the live view."""
        out = {}
        for c, streams in list(self._open.items()):
            live = [s for s in streams if not s.ended]
            if live:
                waiting = sum(1 for s in live if s.sent == 0)
                out[c] = {"waiting": waiting, "running": len(live) - waiting}
        return out

    def withdraw(self, rid: int, reason: str) -> None:
        self._reasons[rid] = reason
        self.inbox.withdraw(rid, reason)

    def refuse(self, prompt_tokens: int, max_tokens: int, reason: str, client: str = "") -> None:
        """A request turned away at the door (503): the record keeps it, with the reason
        (``record``)."""
        self.refused.append((self.now(), prompt_tokens, max_tokens, reason, client))

    def cut(self, reason: str) -> None:
        """The drain is over: every request still open is withdrawn with ``reason`` (a policy that
        can free its row does so at once), the step running stops at its next pass, and the run
        stops before another (``StopRun``), recording what is left unfinished with ``reason``."""
        self.cut_reason = reason
        for rid in list(self.streams):
            self.withdraw(rid, reason)
        # wakes an engine asleep (a policy waiting for company, or for its deadline)
        self.inbox.close()

    def counts(self) -> tuple[int, int]:
        """(running, waiting), the waiting including what the inbox holds for the next decision."""
        try:
            running, waiting = self.policy.counts()
        # a deque changed size while read from this thread: read again next time
        except RuntimeError:
            return 0, 0
        return running, waiting + self.inbox.arrivals_pending()

    def kv(self) -> tuple[int, int | None]:
        """(KV blocks in use, blocks in the budget or None when unlimited), in blocks of the
        policy's size (a padded policy's KV, counted in tokens, is shown in blocks of 16)."""
        p = self.policy
        bs = getattr(p, "block_size", 16)
        total = getattr(p, "total_blocks", None)
        if total is not None:
            return total - p.free_blocks, total
        used = -(-int(p.kv_in_use) // bs)
        return used, (None if p.kv_budget is None else p.kv_budget // bs)

    def tokens_per_s(self, window: float = 2.0) -> float:
        since = self.now() - window
        made = sum(s[5] for s in list(self.recent_steps) if s[0] + s[1] >= since)
        return made / window

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def state(self, model: str) -> dict:
        """What the live view draws: the queues, KV blocks, tokens/s and the last steps."""
        running, waiting = self.counts()
        used, total = self.kv()
        return {
            "t": self.now(),
            "model": model,
            "policy": self.policy.describe(),
            "running": running,
            "waiting": waiting,
            "kv_blocks_used": used,
            "kv_blocks_total": total,
            "tokens_total": self.tokens_total,
            "tokens_per_s": self.tokens_per_s(),
            "finished": self.finished,
            "admitted": self.inbox.submitted,
            "max_rows": self.policy.max_rows,
            "clients": self.by_client(),
            # (start s, seconds, passes, rows, prompt tokens, tokens made), the last 200 steps
            "steps": [list(x) for x in list(self.recent_steps)[-200:]],
        }

    def shutdown(self, timeout: float | None = None) -> bool:
        """No more requests; wait up to ``timeout`` s for what runs to finish. True if it did."""
        self.closing = True
        self.inbox.close()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def records(self):
        """The run's logbook, once it has ended (``shutdown``); None before, or if the engine
        failed."""
        return None if self.result is None else self.result.recorder.records()

    def now(self) -> float:
        return self.clock() - self.t0
