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
    core/policies/blocks.py      KV blocks: the pool (the KV in use), and rows by the fill of
                                 their last block
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

# The public face: what a student or an engineer needs to run a scenario from Python, about thirty
# names. Everything else is imported from its module (``batchsim.core.step.Step``,
# ``batchsim.core.driver.drive``, ``batchsim.machine.catalog.DEFAULT_CATALOG``, ...): the layers
# are the reference, this is the front door. ``tests/test_public_api.py`` holds it to 32 names.

# Workloads: who arrives when, asking for how much.
from .core.arrivals import Gamma, Poisson

# Running: the simulator, and what it says when an input is wrong or a result is doubtful.
from .core.errors import ConfigError

# Results: the figures people quote, for one server or a fleet.
from .core.fleet import fleet_summaries
from .core.lengths import Fixed, LogNormal, Uniform
from .core.metrics import SLO, format_table, summarize
from .core.notes import BatchsimNote

# Policies: the taxi, the bus that waits to fill, the bus that also leaves on a timer, and the
# continuous batch (``make_policy`` builds any of them, and vLLM's flavour, by name).
from .core.policies import Continuous, Dynamic, Static, Taxi, make_policy
from .core.traces import read_trace
from .core.workload import Request, Workload, make_workload, trace_workload

# Step times: how long one pass takes (a constant, a line fitted to a profile, a GPU's roofline).
from .machine.server import Server
from .sim.simulator import simulate
from .sim.steptime import ConstantStepTime, LinearStepTime, load_step_time

# Theory: the closed-form waits the simulator is held to.
from .sim.theory import MD1, MG1, MM1, BulkService, bus_fill_wait

__version__ = "0.1.0"

__all__ = [
    # workloads
    "Poisson",
    "Gamma",
    "Fixed",
    "Uniform",
    "LogNormal",
    "Request",
    "Workload",
    "make_workload",
    "read_trace",
    "trace_workload",
    # policies
    "Taxi",
    "Static",
    "Dynamic",
    "Continuous",
    "make_policy",
    # step times
    "ConstantStepTime",
    "LinearStepTime",
    "load_step_time",
    "Server",
    # running
    "simulate",
    "ConfigError",
    "BatchsimNote",
    # results
    "summarize",
    "SLO",
    "format_table",
    "fleet_summaries",
    # theory
    "MM1",
    "MD1",
    "MG1",
    "BulkService",
    "bus_fill_wait",
]
