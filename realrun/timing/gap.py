"""The server's own time between two steps: the driver's Python, each policy's decision, the
records.

It is no pass, so no grid point holds it; each policy runs a short burst through the real driver
(``realrun.clock.runner.run_real``) and the trace's gaps between a step's decision and the next
step's start are averaged. A policy that decides more (continuous) pays more. The burst's decode
passes, each with the repetition of its step it ran in, come back too: what a step's first passes
cost beyond repeated ones is read off them (``cold.decode_cold``).
"""

from __future__ import annotations

import copy

from batchsim.core.plan import Pass

from .cold import burst_passes
from .grid import Grid
from .samples import robust_mean

__all__ = ["step_gap"]


def step_gap(
    engine, name: str, policy, grid: Grid, bar
) -> tuple[float, list[tuple[Pass, float, int]]]:
    """Mean seconds between a step's end and the next one's start, over a short burst through the
    driver; and the burst's decode passes (pass, seconds, repetition of its step)."""
    from batchsim.core.arrivals import Poisson
    from batchsim.core.lengths import Uniform
    from batchsim.core.policies import make_policy
    from batchsim.core.workload import make_workload

    from ..clock.runner import run_real

    p_hi = max(8, min(64, grid.prefill_lengths[-1]))
    wl = make_workload(Poisson(400.0), Uniform(8, p_hi), Uniform(4, 24), n=24, seed=grid.seed)
    pol = make_policy(name, max_batch=8, max_seqs=16) if policy is None else copy.deepcopy(policy)
    res = run_real(wl, pol, engine, trace=True)
    gaps = [t_start - decided for decided, _, t_start, _ in res.meta["trace"]]
    if bar is not None:
        bar.update(1)
    return (robust_mean(gaps) if gaps else 0.0), burst_passes(res)
