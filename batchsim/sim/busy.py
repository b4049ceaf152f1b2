"""Load by how busy the server is, not by an arrival rate a student has to guess.

"70 % load" means the server is busy 70 % of the time. Which arrival rate does that takes
depends on the policy (a bus batches, so it does the same work in less time than a taxi)
and on the server's speed, so the rate is found by simulation: the workload's arrivals are
stretched or squeezed by a factor until the simulated busy fraction is the one asked for
(bisection on a log scale; the busy fraction grows with the rate, give or take the noise of
a finite run, which bisection tolerates).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np

from ..core.errors import ConfigError, show
from ..core.metrics import summarize
from ..core.workload import Workload
from .simulator import simulate

__all__ = ["scaled", "rate_factor_for_busy", "check_busy"]


def check_busy(busy) -> float:
    """A busy fraction a rate can reach: strictly between 0 and 1 (at 1 the queue grows without
    end)."""
    if (
        isinstance(busy, bool)
        or not isinstance(busy, (int, float))
        or not np.isfinite(busy)
        or not 0 < busy < 1
    ):
        raise ConfigError(
            f"busy must be a fraction of the time strictly between 0 and 1 (0.7 for 70 %), got "
            f"{show(busy)}"
        )
    return float(busy)


def scaled(wl: Workload, factor: float, description: str | None = None) -> Workload:
    """The workload with its arrivals ``factor`` times as frequent (the same requests, in the same
    order)."""
    return Workload.from_arrays(
        wl.arrivals / factor,
        wl.prompt_tokens,
        wl.output_tokens,
        description or f"{wl.description}, arrivals x {factor:.3g}",
    )


def rate_factor_for_busy(
    wl: Workload, policy, step_time, busy: float, limits=None, steps: int = 18
) -> float:
    """The factor on ``wl``'s arrival rate at which the simulated server is busy ``busy`` of the
    time.

    ``policy``: a policy object (copied for every trial run) or a function that makes a fresh
    one."""
    busy = check_busy(busy)
    if len(wl) < 2:
        raise ConfigError(
            f"busy needs a workload of at least 2 requests to set a rate from, got {len(wl)}"
        )
    fresh: Callable = (
        policy
        if callable(policy) and not hasattr(policy, "next_action")
        else (lambda: copy.deepcopy(policy))
    )

    def frac(f: float) -> float:
        return float(
            summarize(simulate(scaled(wl, f), fresh(), step_time, limits=limits))["busy_fraction"]
        )

    lo, hi = 1e-3, 1.0
    while frac(hi) < busy and hi < 1e6:
        lo, hi = hi, hi * 2
    while frac(lo) > busy and lo > 1e-9:
        lo, hi = lo / 4, lo
    for _ in range(steps):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if frac(mid) < busy else (lo, mid)
    return (lo * hi) ** 0.5
