"""The machine's slow drift: a speed that wanders over seconds, shared by every pass.

A pass's spread (``batchsim.sim.spread``) is what one grid point's consecutive timings show
in a second or two. A shared machine has a second kind of noise besides: its speed wanders
over seconds as other processes come and go on the cores, the caches and the memory bus.
Measured here (gpt2-6l, one thread, 2-core VM): the log time of the very same decode pass
stays correlated 0.4-0.8 twenty passes later and 0.2 at fifty, where the profile's lag-one
figure (0.24-0.29) would have it gone after three. A queue feels this far more than
independent noise: a slow second makes every request behind it wait, and a step of many
passes does not average it out.

``SlowDrift(sd, tau_s)`` models it as a speed factor ``exp(sd * s(t) + sd**2 / 2)`` on every
pass, where ``s`` is a stationary Ornstein-Uhlenbeck process in real time (unit variance, time
constant ``tau_s`` seconds): after ``dt`` seconds its correlation with itself is
``exp(-dt / tau_s)``. The clock it runs on is the wall's, so a slow spell lasts its seconds
however few passes fit in it, and the server sleeps through some of it when it is idle.
A server that is never idle then runs ``1 / E[1 / factor]`` of the mean per pass on average,
and the ``+ sd**2 / 2`` makes that exactly 1: the profile measured its means that way (pass
after pass), so sampling keeps the profiled mean and only adds the wander. A server that
queues work in slow spells and idles in fast ones is busier than that, as a real one is.
(With the state moved on by each pass's mean time instead, slow spells would last longer
than their seconds, and a loaded server would come out 3 % busier than the mean model at
sd 0.3 even with no queue: measured over 40 seeds before this was put right.) ``fit_slow_drift``
estimates it from a long run of identical passes (the profile's slow probe): the autocorrelation of
their log times at lags of two passes and more (lag one also holds the pass-to-pass luck the spread
models), fitted as ``w * a**lag``; the slow part's variance is ``w`` of the total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError, show

__all__ = ["SlowDrift", "fit_slow_drift"]

#: The fewest passes a probe needs before its autocorrelation says anything (1/sqrt(n) noise).
MIN_PASSES = 60


def _number(name: str, v, lo: float, hi: float, lo_open: bool) -> float:
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or not math.isfinite(v)
        or v > hi
        or v < lo
        or (lo_open and v == lo)
    ):
        bracket = "(" if lo_open else "["
        raise ConfigError(
            f"slow drift {name} must be a number in {bracket}{lo:g}, {hi:g}], got {show(v)}"
        )
    return float(v)


@dataclass(frozen=True)
class SlowDrift:
    """``sd``: the standard deviation of the log speed factor; ``tau_s``: its time constant,
    seconds."""

    sd: float
    tau_s: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "sd", _number("sd", self.sd, 0.0, 2.0, False))
        object.__setattr__(self, "tau_s", _number("tau_s", self.tau_s, 0.0, 3600.0, True))

    def keep(self, dt: float) -> float:
        """How much of the drift's state is left after ``dt`` seconds (its autocorrelation)."""
        return math.exp(-max(dt, 0.0) / self.tau_s)

    def factor(self, s):
        """The speed factor for state(s) ``s`` (unit normal scores): 1 per pass, on average, pass
        after pass."""
        return np.exp(self.sd * np.asarray(s) + 0.5 * self.sd * self.sd)

    def as_dict(self) -> dict:
        return {"sd": round(self.sd, 5), "tau_s": round(self.tau_s, 5)}

    @classmethod
    def from_dict(cls, d, where: str) -> SlowDrift:
        if not isinstance(d, dict):
            raise ConfigError(
                f"{where}: slow drift must be a table with sd and tau_s, got {show(d)}"
            )
        try:
            return cls(d.get("sd"), d.get("tau_s"))
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None

    def text(self) -> str:
        return f"the machine's speed wanders by {self.sd:.0%} (sd) over {self.tau_s:.2f} s"


def fit_slow_drift(seconds) -> SlowDrift | None:
    """The slow drift in a run of consecutive passes of one shape (their seconds), or None when the
    run is too short or shows none (no lag of two or more passes correlated by 0.1 or more)."""
    t = np.asarray(seconds, dtype=np.float64)
    t = t[np.isfinite(t) & (t > 0)]
    if len(t) < MIN_PASSES:
        return None
    # as the profile's mean and spread: a pass that lost its core is not a pass
    t = t[t <= 2 * np.median(t)]
    x = np.log(t)
    x = x - x.mean()
    var = float(x.var())
    if var <= 0:
        return None
    lags = np.arange(2, max(3, len(x) // 5))
    acf = np.array([float(np.mean(x[:-k] * x[k:])) / var for k in lags])
    if acf[:3].mean() < 0.1:  # nothing a lag or two on: no drift this run can tell from noise
        return None
    # acf(k) = w * a**k over every lag up to a fifth of the run, by least squares: a grid over the
    # decay a (w then has a closed form). A log-linear fit of the first lags alone was thrown off by
    # the noise of each lag's estimate (tried on simulated drifts of known time constant).
    best = (math.inf, 0.0, 0.0)
    for a in 1.0 - np.geomspace(1e-4, 0.7, 200):
        g = a**lags
        w = float(np.clip((g @ acf) / (g @ g), 0.0, 1.0))
        sse = float(((acf - w * g) ** 2).sum())
        if sse < best[0]:
            best = (sse, float(a), w)
    _, a, w = best
    pass_s = float(np.median(t))
    tau = min(3600.0, -pass_s / math.log(a))
    return SlowDrift(min(2.0, math.sqrt(w * var)), tau)
