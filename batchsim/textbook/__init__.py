"""The textbook server: the simulator written to be read, held identical to the fast one.

``batchsim.simulate`` is built for speed (arrays, runs of decode passes priced at once, a
clock that jumps). This is the same server and the same four policies in plain Python: the
state lives on each request, the scheduler keeps two queues, the server decides before every
pass, and nothing is there for speed. ``tests/test_textbook.py`` holds the two to the same
records, to the last float, over 500 seeded workloads under every policy.

Read it in this order (one continuous pass, arrival to record, is the first three files)::

    request.py     a request: what it asked for, where it stands, its record
    server.py      the server, one SimPy process: take arrivals, decide, price, wait, record
    continuous.py  continuous batching: two queues, KV blocks, chunks, preemption
    padded.py      the taxi, the bus and the bus with a timetable (padded, like generate())
    run.py         simulate(): checks its arguments, runs the process, hands back Records

    >>> from batchsim import ConstantStepTime, Fixed, Poisson, make_workload, summarize
    >>> from batchsim import textbook
    >>> wl = make_workload(Poisson(5.0), Fixed(64), Fixed(16), n=50, seed=1)
    >>> res = textbook.simulate(wl, "continuous", ConstantStepTime(0.02), max_seqs=8)
    >>> summarize(res)["completed"]
    50

A pass is priced by the fast path's step-time model (``durations`` of a ``Step``). A model
that charges for a *decision* rather than a pass's shape (a ``step_gap``; a profile's
``step_extra`` apart from its ``repeat_extra``) is paid every pass here, where the server
decides every pass, and once per run of passes in the fast path, which decides them together
(as realrun's engine does): there the two differ, by design. A random model that draws a
number a pass (``ExponentialStepTime``) gives the same records: the fast path puts back the
draws of passes an arrival cut off. One that draws a run's luck as one correlated path
(``SampledStepTime``) does not: its times follow how passes were grouped, from one distribution.
A process of your own runs beside the server (``processes=[f]``; lab 6's outage takes it down
with ``servers[0].go_down()``, and back with ``come_back()``). Left out: fleets (one server here:
the fast path's ``replicas`` and ``router``), summary-only records, vLLM V1's order, Ctrl-C.
"""

from __future__ import annotations

from .continuous import Continuous
from .padded import Dynamic, Static, Taxi
from .run import POLICIES, make_policy, simulate

__all__ = ["simulate", "make_policy", "POLICIES", "Taxi", "Static", "Dynamic", "Continuous"]
