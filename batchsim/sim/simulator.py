"""The simulated server: the SimPy driver on a clock that jumps.

``simulate`` is ``batchsim.core.driver.drive`` with the simulator's executor
(``batchsim.sim.executors.SimExecutor``): it prices each step with a step-time model
instead of running it, and SimPy's clock jumps to the step's end instead of passing.
Pass ``processes=[f]`` to add your own SimPy processes to the run (``f(env, servers)``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from ..core.driver import UserProcess, check_processes, drive
from ..core.errors import check_choice
from ..core.fleet import check_replicas
from ..core.limits import ServerLimits
from ..core.policies import Policy
from ..core.recorder import Recorder
from ..core.result import RunResult, result_of
from ..core.router import Router, make_router
from ..core.workload import Workload
from .arguments import check_simulate_args
from .executors import ReplayDiverged, ReplayExecutor, SimExecutor
from .steptime import StepTimeModel

# SimExecutor, ReplayExecutor, ReplayDiverged and result_of are re-exported from where they now
# live.
__all__ = [
    "simulate",
    "RECORDS",
    "RunResult",
    "SimExecutor",
    "ReplayExecutor",
    "ReplayDiverged",
    "result_of",
]


#: How a run keeps its records: every request ("full") or only sums and sketches ("summary").
RECORDS = ("full", "summary")


def simulate(
    workload: Workload,
    policy: Policy,
    step_time: StepTimeModel,
    kv_budget_tokens: int | None = None,
    progress: bool | str = False,
    limits: ServerLimits | None = None,
    replicas: int = 1,
    router: Router | str = "round-robin",
    router_seed: int = 0,
    records: str = "full",
    slo=None,
    steps_path=None,
    processes: Sequence[UserProcess] = (),
) -> RunResult:
    """Run ``workload`` through ``policy`` on a server whose steps take ``step_time``.

    ``limits`` (KV budget, the model's context, tokens per pass) replaces ``kv_budget_tokens``.
    ``replicas`` > 1: a fleet of that many such servers, each with its own copy of ``policy``
    and its own KV budget, behind ``router`` (a name of ``ROUTER_NAMES`` or a ``Router``;
    ``router_seed`` seeds the random one). A fleet of one is exactly ``simulate`` of one server.
    ``records="summary"`` keeps sums and quantile sketches instead of every request (see
    ``batchsim.core.stream``); its goodput is counted for ``slo``, given now.
    ``steps_path``: also write the step log, as it goes, to this CSV file.
    ``progress``: True, a bar on stderr; "lines", a line every 30 s (for a log, not a terminal).
    ``processes``: your own SimPy processes, each a generator function ``f(env, servers)``
    started beside the arrivals and the servers (``servers``: the run's ``Server`` objects,
    each with its ``policy``); the run ends when every request is accounted for.
    """
    check_simulate_args(workload, policy, step_time)
    check_processes(processes)  # here too (drive checks again): before a step log file is opened
    if limits is None:
        limits = ServerLimits(kv_budget_tokens=kv_budget_tokens)
    elif kv_budget_tokens is not None and kv_budget_tokens != limits.kv_budget_tokens:
        raise ValueError("give the KV budget once: in limits or as kv_budget_tokens, not both")
    check_replicas(replicas)
    check_choice("records", records, RECORDS)
    step_time = step_time.for_policy(policy.name)
    # Copies made before the run starts: each server's policy holds only its own run's state.
    policies = [policy] + [copy.deepcopy(policy) for _ in range(replicas - 1)]
    # checked, even for one
    rt = router if isinstance(router, Router) else make_router(router, router_seed)
    if replicas == 1:
        rt = None
    if records == "summary":
        from ..core.metrics import streams_by_default
        from ..core.stream import StreamRecorder

        rec = StreamRecorder(
            workload,
            slo=slo,
            streaming=streams_by_default(policy.describe()),
            replicas=replicas,
            steps_path=steps_path,
        )
    else:
        rec = Recorder(workload, replicas=replicas, steps_path=steps_path)
    run = drive(
        workload,
        policies,
        [SimExecutor(step_time) for _ in policies],
        limits,
        progress=progress,
        desc="simulating",
        router=rt,
        recorder=rec,
        processes=processes,
    )
    if run.stopped is not None:  # Ctrl-C: the simulator has nothing to keep
        raise KeyboardInterrupt
    return result_of(run, policies, repr(step_time), limits, workload, router=rt)
