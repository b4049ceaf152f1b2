"""batchsim: a discrete-event simulator of an inference server, to see why batching pays.

The taxi serves one request at a time; the bus carries many for the price of one
trip. ``simulate`` runs a ``Workload`` through a batching ``Policy`` on a server
whose steps take a ``StepTimeModel``; ``summarize`` turns the records into the
figures people quote (throughput, TTFT, TPOT, E2E, goodput, utilisation, memory).
``simulate(..., replicas=N, router=...)`` runs a fleet of such servers behind a router
(``fleet_summaries`` gives the fleet's figures and each server's), and
``records="summary"`` keeps sums and quantile sketches instead of every request.

The run itself is SimPy processes (``batchsim.core.driver``): the arrivals, one
``ServerProcess`` per server, and any of your own (``simulate(..., processes=[f])``).

A newcomer's map. Start with the textbook (``batchsim/textbook/``): the same server and the
same four policies in plain Python, the state on each request, a decision before every pass.
One continuous pass, from arrival to record, is three files::

    textbook/request.py      a request: what it asked for, where it stands, its record
    textbook/server.py       serve: the arrivals join, ask the policy, price the pass, wait, record
    textbook/continuous.py   next_step: make room, continue chunks, admit; step_done after it

(``textbook/padded.py`` holds the taxi and the buses; ``textbook.simulate`` runs either.)

Then ``simulate``, the fast path: the same, made fast. ``tests/test_textbook.py`` holds its
records equal to the textbook's over 500 seeded workloads per policy, and each speed trick's
docstring names the textbook line it stands for. It decides once for a run of identical decode
passes, keeps the running rows as arrays, prices a run in one call and jumps the clock to its end.
One simulated step of the continuous policy, in the order it runs (``sim/simulator.py`` and
``core/driver.py`` set the run up and start the processes)::

    core/server.py               ServerProcess.serve: ask the policy, run the step, yield its end
                                 (env.at, or none where the clock jumps), report it
    core/policies/continuous.py  next_action: make room, continue chunks, admit, repeat horizon
    core/policies/rows.py        the running rows as arrays, and what a step's shape needs
    core/policies/blocks.py      KV blocks: the pool (the KV in use), and rows by the fill of their last block
    core/step.py                 the Step it returns (chunks, decoding rows, repeat)
    sim/executors.py             SimExecutor.run: price the step's passes; SimClock.jump to its end
    sim/steptime.py              the step-time model's durations
    core/policies/continuous.py  on_step_end -> rows.account: tokens, finished rows, blocks
    core/recorder.py             Recorder.step: the step's row, first starts, finishes, and its
                                 token events, folded into per-request times 65,536 rows at a time

Eight files (the driver starts the processes and hands each arrival over; it takes no part in a
step); ``tests/test_layering.py`` holds the layers they sit in (core < sim < machine
< teach < cli).

What the fast path buys, measured with ``python bench/textbook_speed.py`` (10,000 requests per
policy at ``bench/sim_speed.py``'s loads, median of 3, textbook then fast, on a shared 2-CPU host
whose yardstick, ``bench/host.py``'s 10M-iteration loop, took 0.20-0.27 s): taxi 10.3 s and
0.31 s (33x), static 3.27 s and 0.22 s (15x), dynamic 4.28 s and 0.22 s (19x), continuous 1.22 s
and 0.51 s (2.4x: at 20 requests a second an arrival comes every few passes, so the fast path
decides 1.9 passes at a time on average).
"""

from .core.arrivals import Constant, Gamma, Poisson, RushHour, parse_arrival
from .machine.catalog import DEFAULT_CATALOG, GPU, Catalog, Model, load_catalog
from .machine.cost import cost_summary, implied_price_per_hour, required_throughput
from .core.errors import ConfigError
from .core.notes import BatchsimNote
from .core.lengths import Empirical, Fixed, LogNormal, Uniform, parse_length
from .machine.memory import KVBudget, kv_budget
from .core.metrics import SLO, format_table, summarize
from .core.policies import (
    POLICY_NAMES,
    Continuous,
    Dynamic,
    Policy,
    Static,
    Taxi,
    make_policy,
)
from .core.fleet import fleet_summaries, replica_result
from .core.recorder import Recorder
from .core.records import Records
from .core.router import ROUTER_NAMES, Router, make_router
from .core.sketch import QuantileSketch
from .machine.roofline import RooflineStepTime
from .machine.server import Server
from .sim.simulator import SimResult, simulate
from .core.driver import Drive, drive
from .core.executor import Executor, StopRun
from .core.limits import ServerLimits
from .core.policies import VLLMV1
from .core.result import RunResult, result_of
from .core.server import ServerProcess
from .core.wallclock import WallClock, WallExecutor
from .sim.executors import ReplayDiverged, ReplayExecutor, SimClock, SimExecutor
from .core.step import Chunk, Step, StepOutcome, Wait
from .sim.steptime import (
    ConstantStepTime,
    ExponentialStepTime,
    LinearStepTime,
    StepTimeModel,
    load_step_time,
)
from .sim.theory import MD1, MG1, MM1, BulkService, bus_fill_wait
from .core.traces import Trace, read_trace
from .core.workload import Request, Workload, make_workload, trace_workload

__version__ = "0.1.0"

__all__ = [
    "BulkService", "Catalog", "DEFAULT_CATALOG", "GPU", "KVBudget", "MD1", "MG1", "MM1", "Model",
    "RooflineStepTime", "Server", "bus_fill_wait", "cost_summary", "implied_price_per_hour", "kv_budget",
    "load_catalog", "required_throughput",
    "BatchsimNote", "Chunk", "ConfigError", "Constant", "ConstantStepTime", "Continuous", "Dynamic", "Empirical",
    "ExponentialStepTime", "Fixed", "Gamma", "LinearStepTime", "LogNormal", "POLICY_NAMES", "Poisson",
    "Policy", "Recorder", "Records", "Request", "RushHour", "SLO", "SimResult", "Static", "Step",
    "StepOutcome", "StepTimeModel", "Taxi", "Trace", "Uniform", "Wait", "Workload", "format_table",
    "load_step_time", "make_policy", "make_workload", "parse_arrival", "parse_length", "read_trace",
    "simulate", "summarize", "trace_workload", "fleet_summaries", "replica_result", "ROUTER_NAMES", "Router",
    "make_router", "QuantileSketch",
    # Driving a run yourself: the SimPy driver, its clocks, the servers' processes, the executors.
    "drive", "Drive", "ServerProcess", "SimClock", "WallClock", "Executor", "StopRun", "ServerLimits",
    "SimExecutor", "ReplayExecutor", "ReplayDiverged", "WallExecutor", "RunResult", "result_of", "VLLMV1",
]
