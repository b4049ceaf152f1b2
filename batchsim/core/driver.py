"""The serving loop, on SimPy: one driver for both clocks.

A run is a few SimPy processes on one environment, exactly as in SimPy's gas-station or
bank examples:

- **arrivals**: for each request, at its time, the router picks a server and the request
  joins that server's queue (its policy); a sleeping server is woken, a server running a
  repeated step is interrupted there (``batchsim.core.server``);
- **one process per server**: ask the policy, run or price the step, report what came of
  it, or sleep until an arrival or the policy's deadline (``ServerProcess.serve``);
- **your own processes**, if you pass any (``processes=[f]``, each ``f(env, servers)`` a
  generator function): a maintenance outage, an autoscaler, a monitor. They run beside
  the others; the run ends when every request is accounted for, whatever they still wait on.

A fleet is several server processes behind the router; one server is a fleet of one. What
differs between the clocks is only the *executor* and the environment it brings
(``Executor.environment``): the simulator prices a step and SimPy's clock jumps
(``simpy.Environment``); realrun runs the step on a real model inside the server process,
then yields its measured end, which SimPy's real-time clock finds already reached
(``simpy.rt.RealtimeEnvironment``); a replay is the simulated clock fed measured times.
That is why the same workload and the same step times give the same records on both
clocks, to the last float.

Ctrl-C and the out-of-memory stop live here too, once: a run cut short keeps what it
measured and rejects every unfinished request with the reason.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import simpy

from .errors import ConfigError
from .executor import INTERRUPTED, Executor, StopRun
from .limits import ServerLimits, as_limits
from .policies.base import Policy
from .progress_lines import LineProgress
from .recorder import Recorder
from .router import Router
from .server import ARRIVAL, ServerProcess, guarded
from .wallclock import (
    WallExecutor,  # re-exported: realrun builds its runs from this module's two names
)
from .workload import Workload

__all__ = ["Executor", "StopRun", "Drive", "drive", "Run", "WallExecutor", "INTERRUPTED"]

#: A user's process: ``f(env, servers)`` returns a SimPy generator.
UserProcess = Callable[[simpy.Environment, Sequence[ServerProcess]], Iterable]


@dataclass
class Drive:
    """What ``drive`` hands back: the recorder, why it stopped early (None: it finished),
    how many requests arrived, and each step as (decided at, step, start, ends) when traced
    (a fleet's entries add the server that ran it)."""

    recorder: Recorder
    stopped: str | None
    arrived: int
    trace: list[tuple] | None = field(default=None, repr=False)
    replicas: int = 1
    servers: list[ServerProcess] = field(default_factory=list, repr=False)


class Run:
    """What the processes of one run share: the workload, the servers, the router, the records."""

    def __init__(
        self,
        env: simpy.Environment,
        workload: Workload,
        policies: list[Policy],
        executors: list[Executor],
        router: Router | None,
        recorder: Recorder,
        trace: bool,
        bar,
    ) -> None:
        self.env, self.workload, self.router, self.recorder, self.bar = (
            env,
            workload,
            router,
            recorder,
            bar,
        )
        self.servers = [
            ServerProcess(env, i, p, ex, self) for i, (p, ex) in enumerate(zip(policies, executors))
        ]
        self.policies = policies
        self.arrived = 0
        self.closed = False  # every request has arrived
        self.next_arrival = math.inf
        self.serving = len(self.servers)  # server processes not yet finished
        self.error: BaseException | None = None
        self.trace: list | None = [] if trace else None
        # what the router sees, refilled at each arrival
        self._outstanding = [0] * len(self.servers)
        self.fleet = router is not None  # a router picks each request's server only as it arrives
        self.pulls = False  # the lone server reads the arrivals itself (``pull_arrivals``)
        self.come = 0  # requests handed over so far, when it does

    def arrivals(self):
        """The arrivals process: each request at its own time, routed, handed to its server's
        policy. Textbook: ``serve``'s ``while come < len(requests) ...``: it reads them between
        passes.

        Requests of one instant are all handed over before any server hears of them (a server
        woken by the first must see the second too), so the process yields only between instants."""
        env, wl, hand_over = self.env, self.workload, self.hand_over
        # a float at a time: no list of a million
        request, arrival, n = (
            wl.request,
            wl.arrivals.item,
            len(wl),
        )
        self.next_arrival = arrival(0) if n else math.inf
        for i in range(n):
            a = self.next_arrival  # each arrival time read once: it is the next one until it comes
            if a > env.now:
                yield env.at(a, ARRIVAL)
            hand_over(request(i), a)
            self.next_arrival = arrival(i + 1) if i + 1 < n else math.inf
        self.close(arrival(n - 1) if n else 0.0)

    def pull_arrivals(self) -> None:
        """No arrivals process: the lone server reads the arrivals itself between its steps
        (``ServerProcess._take_arrivals``), as the textbook's server does. ``drive`` chooses it
        where nothing else shares the clock (no router, no process of the user's, a clock that
        jumps): then the only events would be the arrivals' and the steps' ends, and taking each
        arrival when the server next decides is what the arrivals process does, without an event
        (and a step's end that would wait for it) per request."""
        self.pulls = True
        n = len(self.workload)
        self.next_arrival = self.workload.arrivals.item(0) if n else math.inf
        if not n:
            self.close(0.0)

    def hand_over(self, request, now: float) -> str | None:
        """Request ``request.id`` has arrived at ``now``: the router picks its server, whose policy
        queues it (or says why it never can: the reason is returned, and recorded) and which wakes
        if asleep."""
        i, servers, rec, router = request.id, self.servers, self.recorder, self.router
        r = 0
        if router is not None:
            outstanding = self._outstanding
            for s in servers:
                outstanding[s.index] = s.outstanding
            r = router.choose(outstanding, self.policies)
            rec.route(i, r)
        server = servers[r]
        reason = server.policy.on_arrival(request, now)
        if reason is not None:
            rec.reject(i, reason)
            self.progress(1)
        else:
            server.outstanding += 1
        server.wake(now)
        self.arrived = i + 1
        return reason

    def close(self, t: float) -> None:
        """Nobody else is coming: every policy hears it, and every sleeping server decides again."""
        self.closed = True
        for s in self.servers:
            s.policy.close(t)
            if s.waiting:  # a server running a repeat goes on: it decides again when the step ends
                s.wake(t)

    def withdrew(self, request_id: int, reason: str) -> None:
        """A request its client withdrew (a live server): it ends here, rejected with the reason."""
        self.recorder.reject(request_id, reason)
        self.progress(1)

    def progress(self, k: int) -> None:
        if self.bar is not None:
            self.bar.update(k)

    def ended(self, error: BaseException | None) -> None:
        """A server's process has ended: with ``error``, the run ends with it."""
        self._failed(error)
        self.serving -= 1

    def guard(self, body: Iterable):
        """Run a process's body (the arrivals, a user's) with ``guarded``: an error ends the run. A
        server's process also counts itself out (``ServerProcess.process_body``, ``ended``)."""
        return guarded(body, self._failed)

    def _failed(self, error: BaseException | None) -> None:
        if error is not None:
            self.error = error


def check_processes(processes) -> None:
    """``processes`` must be generator functions ``f(env, servers)``: refuse anything else before
    the run."""
    if isinstance(processes, (str, bytes)) or not isinstance(processes, (list, tuple)):
        raise ConfigError(
            f"processes must be a list of functions f(env, servers), got {processes!r}"
        )
    for f in processes:
        if not callable(f):
            raise ConfigError(
                f"processes must be functions f(env, servers) that yield SimPy events, got {f!r}"
            )


def _start(run: Run, f: UserProcess):
    """Start a user's process: ``f(env, servers)`` must give a generator (a function with
    ``yield``)."""
    gen = f(run.env, run.servers)
    if not inspect.isgenerator(gen):
        raise ConfigError(
            f"process {getattr(f, '__name__', f)!r} must be a generator function f(env, servers) "
            f"that yields SimPy events (env.timeout(30), ...); it returned {gen!r}"
        )
    run.env.process(run.guard(gen))


def drive(
    workload: Workload,
    policy: Policy | Sequence[Policy],
    executor: Executor | Sequence[Executor],
    limits: ServerLimits | int | None = None,
    progress: bool | str = False,
    desc: str = "serving",
    trace: bool = False,
    router: Router | None = None,
    recorder: Recorder | None = None,
    processes: Sequence[UserProcess] = (),
    arrivals: Callable[[Run], Iterable] | None = None,
) -> Drive:
    """Serve ``workload`` with ``policy`` deciding and ``executor`` running (or pricing) each step.

    A fleet: a sequence of policies (one per server, each its own instance) and as many
    executors, with a ``router`` that picks a server for each request as it arrives. A
    single server is a fleet of one, run by the very same processes. ``processes``: your own
    SimPy processes, each ``f(env, servers)``, started after the arrivals and the servers.
    ``arrivals``: where requests come from, ``f(run)`` a generator that hands each to a server
    (default: the workload's own times, ``Run.arrivals``; a live server's come from the network,
    ``batchsim.core.live``).
    """
    policies = [policy] if isinstance(policy, Policy) else list(policy)
    executors = list(executor) if isinstance(executor, (list, tuple)) else [executor]
    n_rep = len(policies)
    if n_rep < 1 or len(executors) != n_rep:
        raise ValueError(
            f"a fleet needs one executor per policy, got {n_rep} policies and {len(executors)} "
            f"executors"
        )
    if len({id(p) for p in policies}) != n_rep:
        raise ValueError(
            "each server of a fleet needs its own policy instance (they hold a run's state)"
        )
    if n_rep > 1 and router is None:
        raise ValueError("a fleet of several servers needs a router")
    check_processes(processes)
    limits = as_limits(limits)
    rec = recorder if recorder is not None else Recorder(workload, replicas=n_rep)
    for p in policies:
        p.start(limits)
    if router is not None:
        router.start(n_rep)
    env = executors[0].environment()  # on the wall clock every executor shares one clock
    run = Run(env, workload, policies, executors, router if n_rep > 1 else None, rec, trace, None)
    if arrivals is None and not processes and not run.fleet and getattr(env, "jumps", False):
        run.pull_arrivals()
    else:
        env.process(run.guard(run.arrivals() if arrivals is None else arrivals(run)))
    for s in run.servers:
        s.process = env.process(s.process_body())
    for f in processes:
        _start(run, f)
    run.bar = _bar(
        progress, len(workload), f"{desc} {policies[0].name}" + (f" x{n_rep}" if n_rep > 1 else "")
    )
    stopped = _run_until_served(env, run)
    if stopped is not None:
        # Keep what was measured; every request not finished is accounted for, with the reason.
        rec.reject_unfinished(stopped, arrived=run.arrived)
    return Drive(rec, stopped, run.arrived, run.trace, n_rep, run.servers)


def _run_until_served(env: simpy.Environment, run: Run) -> str | None:
    """Step the environment until every server is done; why it stopped early, if it did."""
    step = env.step
    try:
        try:
            while run.serving and run.error is None:
                step()
        except simpy.core.EmptySchedule:
            down = [s.index for s in run.servers if s.down]
            raise RuntimeError(
                f"the run cannot finish: server(s) {down} went down and nothing brings them back"
                if down
                else "the run cannot finish: no event left, yet requests remain"
            ) from None
        if run.error is not None:
            raise run.error
    except KeyboardInterrupt:
        return INTERRUPTED
    except StopRun as e:
        return str(e)
    finally:
        if run.bar is not None:
            run.bar.close()
    return None


def _bar(progress: bool | str, n: int, desc: str):
    """True: a tqdm bar; "lines": a plain line now and then (a long run whose stderr is no
    terminal)."""
    if not progress or not n:
        return None
    if progress == "lines":
        return LineProgress(n, desc)
    from tqdm import tqdm

    return tqdm(total=n, desc=desc, unit="req", leave=False)
