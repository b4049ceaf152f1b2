"""What queueing theory predicts: closed-form waits to hold the simulator to.

A server that takes one request at a time is the textbook single-server queue;
a bus that waits for company is a *bulk-service* queue; a continuous batch is a
server whose capacity is the work a full batch can do per second. For each, a
formula gives the mean time a request waits before its service starts, and the
simulator must reproduce it (``python -m batchsim theory`` prints both side by
side; ``tests/test_theory.py`` holds them within stated tolerances).

"Wait" here always means *queue wait*: from a request's arrival to the start of
the first step that serves it (``start - arrival`` in the records), which is the
W_q of the textbooks, not the time in system.

- ``MM1``, ``MD1``, ``MG1``: one server, Poisson arrivals, exponential /
  deterministic / general service (Pollaczek-Khinchine).
- ``bus_fill_wait``: the bus that leaves only when its N seats are taken, when the
  ride itself is short: the mean wait is the time for the seats to fill.
- ``BulkService``: Neuts' general bulk-service rule M/M^(a,b)/1 (leave with up to b
  when at least a are waiting), solved by the root of its characteristic equation;
  ``GeneralBulkPolicy`` is the batcher that behaves exactly so, for simulation.
- ``ContinuousCapacity``: the most requests per second a continuous batch of
  ``max_seqs`` rows can serve under a linear step-time model; a load is stable
  when it stays below that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError, check_int_at_least, check_nonneg, check_positive
from ..core.policies.padded import PaddedBatchPolicy
from .steptime import ConstantStepTime, LinearStepTime, StepTimeModel

__all__ = [
    "MM1",
    "MD1",
    "MG1",
    "bus_fill_wait",
    "BusFill",
    "BulkService",
    "GeneralBulkPolicy",
    "ContinuousCapacity",
    "request_work",
    "relative_error",
]


def _check_stable(rho: float, what: str) -> None:
    if not rho < 1:
        raise ConfigError(f"{what}: utilisation must be < 1 for a steady state, got {rho:.4g}")


# -- one server, one request at a time -------------------------------------------------
# Sources: L. Kleinrock, Queueing Systems, Vol. 1: Theory (Wiley, 1975), sec. 3.2 (M/M/1)
# and sec. 5.6-5.7 (M/G/1, the Pollaczek-Khinchine mean-value formula); the same results
# are in M. Harchol-Balter, Performance Modeling and Design of Computer Systems
# (Cambridge, 2013), ch. 13 and ch. 23.


@dataclass(frozen=True)
class MG1:
    """Poisson arrivals, one server, service times with mean E[S] and second moment E[S^2].

    Pollaczek-Khinchine: W_q = lambda * E[S^2] / (2 * (1 - rho)), rho = lambda * E[S].
    The wait grows with the *variability* of service, not just its mean: that is why a
    mix of short and long answers queues worse than answers all of one length.
    """

    arrival_rate: float
    mean_service: float
    service_second_moment: float

    def __post_init__(self) -> None:
        check_positive("arrival_rate", self.arrival_rate)
        check_positive("mean_service", self.mean_service)
        check_positive("service_second_moment", self.service_second_moment)
        if self.service_second_moment < self.mean_service**2 * (1 - 1e-12):
            raise ConfigError(
                f"service_second_moment must be >= mean_service^2 = {self.mean_service**2:.6g}, "
                f"got {self.service_second_moment!r}"
            )
        _check_stable(self.rho, "M/G/1")

    @property
    def rho(self) -> float:
        return self.arrival_rate * self.mean_service

    @property
    def mean_wait(self) -> float:
        return self.arrival_rate * self.service_second_moment / (2 * (1 - self.rho))

    @property
    def mean_sojourn(self) -> float:
        return self.mean_wait + self.mean_service

    @classmethod
    def steps_of(
        cls, arrival_rate: float, step_seconds: float, tokens: np.ndarray | list[int]
    ) -> MG1:
        """A taxi on a constant step time: a request of k output tokens takes k steps.

        ``tokens`` is the output-length distribution given by its values (all equally
        likely), e.g. ``range(lo, hi + 1)`` for ``Uniform(lo, hi)``.
        """
        k = np.asarray(tokens, dtype=np.float64)
        if not len(k) or k.min() < 1:
            raise ConfigError("tokens must be a non-empty list of counts >= 1")
        return cls(
            arrival_rate, step_seconds * float(k.mean()), step_seconds**2 * float((k * k).mean())
        )


@dataclass(frozen=True)
class MM1:
    """Poisson arrivals, exponential service at rate mu: W_q = rho / (mu - lambda)."""

    arrival_rate: float
    service_rate: float

    def __post_init__(self) -> None:
        check_positive("arrival_rate", self.arrival_rate)
        check_positive("service_rate", self.service_rate)
        _check_stable(self.rho, "M/M/1")

    @property
    def rho(self) -> float:
        return self.arrival_rate / self.service_rate

    @property
    def mean_wait(self) -> float:
        return self.rho / (self.service_rate - self.arrival_rate)

    @property
    def mean_queue_length(self) -> float:
        return self.rho**2 / (1 - self.rho)


@dataclass(frozen=True)
class MD1:
    """Poisson arrivals, every service exactly S long: W_q = rho * S / (2 * (1 - rho)).

    Half the M/M/1 wait at the same load: randomness in service costs as much waiting
    as the service itself.
    """

    arrival_rate: float
    service_time: float

    def __post_init__(self) -> None:
        check_positive("arrival_rate", self.arrival_rate)
        check_positive("service_time", self.service_time)
        _check_stable(self.rho, "M/D/1")

    @property
    def rho(self) -> float:
        return self.arrival_rate * self.service_time

    @property
    def mean_wait(self) -> float:
        return self.rho * self.service_time / (2 * (1 - self.rho))


# -- the bus that waits for N ------------------------------------------------------------


def bus_fill_wait(batch: int, arrival_rate: float) -> float:
    """Mean wait for a bus of ``batch`` seats to fill, with Poisson arrivals and a short ride.

    The i-th passenger of a bus (i = 1..N) waits for the N - i passengers after them,
    N - i exponential gaps of mean 1/lambda; averaged over the seats that is
    (N - 1) / (2 * lambda). It holds when the ride is short against the time to fill
    a bus (N / lambda), so that the bus is back before the next one is full.
    """
    check_int_at_least("batch", batch, 1)
    check_positive("arrival_rate", arrival_rate)
    return (batch - 1) / (2 * arrival_rate)


@dataclass(frozen=True)
class BusFill:
    """``bus_fill_wait`` as an object, for tables: N seats, Poisson arrivals at ``arrival_rate``."""

    batch: int
    arrival_rate: float

    def __post_init__(self) -> None:
        check_int_at_least("batch", self.batch, 1)
        check_positive("arrival_rate", self.arrival_rate)

    @property
    def mean_wait(self) -> float:
        return bus_fill_wait(self.batch, self.arrival_rate)


# -- bulk service: leave with up to b once at least a are waiting -------------------------
# M/M^(a,b)/1 under the general bulk-service rule of M. F. Neuts, "A general class of bulk
# queues with Poisson input", Ann. Math. Statist. 38 (1967) 759-770; the exponential case is
# worked in J. Medhi, Stochastic Models in Queueing Theory, 2nd ed. (Academic Press, 2003),
# ch. 6 (bulk queues). We restate the derivation so it can be checked line by line.
#
# State: (n, 0) the server idle with n < a waiting, or (n, 1) the server busy with n waiting.
# Balance (lambda = arrival rate, mu = batch service rate):
#   (0,0):            lambda p(0,0) = mu p(0,1)
#   (n,0), 0<n<a:     lambda p(n,0) = lambda p(n-1,0) + mu p(n,1)
#   (0,1):   (lambda+mu) p(0,1) = mu sum_{n=a..b} p(n,1) + lambda p(a-1,0)
#   (n,1), n>=1: (lambda+mu) p(n,1) = lambda p(n-1,1) + mu p(n+b,1)
# Trying p(n,1) = C r^n in the last line gives the characteristic equation
#   mu z^(b+1) - (lambda + mu) z + lambda = 0,
# which has exactly one root r in (0, 1) when lambda < b mu (f(0) = lambda > 0, f(1) = 0,
# f'(1) = b mu - lambda > 0, f convex). The idle states follow by summing the first two
# lines: p(n,0) = (mu/lambda) C (1 - r^(n+1)) / (1 - r); the (0,1) line then holds because
# mu (1 - r^(b+1)) = (lambda + mu)(1 - r) is the characteristic equation again.
# Normalising fixes C; the mean number waiting L_q = sum n p(n,.) gives W_q = L_q / lambda
# (Little's law applied to the waiting room, idle-and-filling states included).


@dataclass(frozen=True)
class BulkService:
    """M/M^(a,b)/1: Poisson arrivals at ``arrival_rate``; when the server is free and at least
    ``a`` are waiting it takes min(waiting, ``b``) as one batch, served in an exponential time
    of rate ``service_rate`` whatever the batch size. a = b = N is the bus that waits for N;
    a = 1 is a batcher that goes at once with whatever is there (at most b)."""

    arrival_rate: float
    service_rate: float
    a: int
    b: int

    def __post_init__(self) -> None:
        check_positive("arrival_rate", self.arrival_rate)
        check_positive("service_rate", self.service_rate)
        check_int_at_least("a", self.a, 1)
        check_int_at_least("b", self.b, self.a)
        _check_stable(self.rho, "M/M^(a,b)/1")

    @property
    def rho(self) -> float:
        """Load against a server that always carries full batches of b."""
        return self.arrival_rate / (self.b * self.service_rate)

    @property
    def root(self) -> float:
        """The root r in (0, 1) of mu z^(b+1) - (lambda + mu) z + lambda = 0."""
        lam, mu, b = self.arrival_rate, self.service_rate, self.b
        f = lambda z: mu * z ** (b + 1) - (lam + mu) * z + lam  # noqa: E731
        # f is convex with its minimum at z*; the root lies in (0, z*) where f changes sign.
        hi = ((lam + mu) / (mu * (b + 1))) ** (1.0 / b)
        lo = 0.0
        for _ in range(200):  # bisection: robust, and 200 halvings reach machine precision
            mid = 0.5 * (lo + hi)
            if f(mid) > 0:
                lo = mid
            else:
                hi = mid
            if hi - lo < 1e-16:
                break
        return 0.5 * (lo + hi)

    def _parts(self) -> tuple[float, float]:
        """(C, r): p(n,1) = C r^n."""
        lam, mu, a = self.arrival_rate, self.service_rate, self.a
        r = self.root
        idle_mass = (mu / lam) / (1 - r) * (a - r * (1 - r**a) / (1 - r))
        c = 1.0 / (1.0 / (1 - r) + idle_mass)
        return c, r

    def idle_probabilities(self) -> np.ndarray:
        """p(n, 0) for n = 0..a-1: the server idle with n waiting."""
        c, r = self._parts()
        n = np.arange(self.a)
        return (self.service_rate / self.arrival_rate) * c * (1 - r ** (n + 1)) / (1 - r)

    @property
    def prob_busy(self) -> float:
        c, r = self._parts()
        return c / (1 - r)

    @property
    def mean_queue_length(self) -> float:
        c, r = self._parts()
        n = np.arange(self.a)
        return c * r / (1 - r) ** 2 + float((n * self.idle_probabilities()).sum())

    @property
    def mean_wait(self) -> float:
        return self.mean_queue_length / self.arrival_rate

    @property
    def mean_batch_size(self) -> float:
        """Requests per batch: arrivals per second over batches started per second (mu *
        P(busy))."""
        return self.arrival_rate / (self.service_rate * self.prob_busy)


class GeneralBulkPolicy(PaddedBatchPolicy):
    """The batcher of Neuts' rule: go when at least ``min_batch`` wait, take at most ``max_batch``.

    With output_tokens = 1 every batch is a single prefill step, so an exponential step
    time makes this server exactly M/M^(a,b)/1. ``Static(N)`` is the case a = b = N and
    ``Dynamic(b, max_wait=0)`` the case a = 1. After ``close`` a partial batch still goes,
    as the bus does, so that no request is stranded.
    """

    name = "bulk"

    def __init__(self, min_batch: int, max_batch: int) -> None:
        check_int_at_least("min_batch", min_batch, 1)
        check_int_at_least("max_batch", max_batch, min_batch)
        self.min_batch = min_batch
        self.max_batch = max_batch

    def _ready(self, now: float) -> bool:
        return len(self.queue) >= self.min_batch or self.closed

    def __repr__(self) -> str:
        return f"GeneralBulkPolicy(min_batch={self.min_batch}, max_batch={self.max_batch})"


# -- continuous batching: how much load a full batch can carry ----------------------------
# Our own derivation under the linear step-time model t = c0 + c1*p + c2*d + c3*k
# (p prompt tokens computed, d decoding rows, k KV tokens read). Without preemptions or
# chunked prefill, a request with prompt P and output O is a row of O steps: one prefill
# step (which makes its first token) and O - 1 decode steps, the j-th of which reads
# P + j - 1 cached tokens. Apart from the fixed c0 of each step, it adds to the steps it
# rides in
#   w = c1 P + c2 (O - 1) + c3 [ (O - 1) P + (O - 1)(O - 2) / 2 ]      (seconds)
# and c0 is shared by the rows of a step, at most B = max_seqs of them. Over a long busy
# period serving N requests the server needs at least sum(O)/B steps, so
#   time >= c0 * N E[O] / B + N E[w],  i.e.  throughput <= mu* = 1 / (c0 E[O] / B + E[w]).
# When a backlog waits, every finished row is replaced at the next step, so every step is
# full and throughput equals mu*: mu* is the capacity of a full batch, and the load is
# stable exactly when lambda < mu*, i.e. lambda (c0 E[O] / B + E[w]) < 1. This assumes the
# KV budget holds B requests at once (else B is what fits) and that admissions fit the
# per-step token budget (B E[P] / E[O] well under max_batched_tokens).


def request_work(step_time: LinearStepTime, prompt: np.ndarray, output: np.ndarray) -> np.ndarray:
    """w above for each (prompt, output) pair: a request's seconds of work beyond the shared c0."""
    p = np.asarray(prompt, dtype=np.float64)
    o = np.asarray(output, dtype=np.float64)
    return (
        step_time.c1 * p
        + step_time.c2 * (o - 1)
        + step_time.c3 * ((o - 1) * p + (o - 1) * (o - 2) / 2)
    )


def _as_linear(step_time: StepTimeModel) -> LinearStepTime:
    if isinstance(step_time, LinearStepTime):
        return step_time
    if isinstance(step_time, ConstantStepTime):
        return LinearStepTime(step_time.seconds)
    raise ConfigError(
        f"step_time must be a constant or linear model for the capacity formula, got {step_time!r}"
    )


@dataclass(frozen=True)
class ContinuousCapacity:
    """Saturation throughput of continuous batching with ``max_seqs`` rows on a linear server.

    The length moments: E[P], E[O], ``mean_output_sq`` = E[O^2] (default E[O]^2, a fixed
    length) and ``mean_prompt_output`` = E[P O] (default E[P] E[O], independent lengths).
    ``from_samples`` takes them from observed lengths, such as a workload's or a trace's.
    """

    step_time: LinearStepTime
    max_seqs: int
    mean_prompt: float
    mean_output: float
    mean_output_sq: float | None = None
    mean_prompt_output: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "step_time", _as_linear(self.step_time))
        check_int_at_least("max_seqs", self.max_seqs, 1)
        check_nonneg("mean_prompt", self.mean_prompt)
        if not (isinstance(self.mean_output, (int, float)) and self.mean_output >= 1):
            raise ConfigError(f"mean_output must be >= 1, got {self.mean_output!r}")
        if self.mean_output_sq is None:
            object.__setattr__(self, "mean_output_sq", float(self.mean_output) ** 2)
        elif self.mean_output_sq < self.mean_output**2 * (1 - 1e-12):
            raise ConfigError(
                f"mean_output_sq must be >= mean_output^2, got {self.mean_output_sq!r}"
            )
        if self.mean_prompt_output is None:
            object.__setattr__(
                self, "mean_prompt_output", float(self.mean_prompt) * float(self.mean_output)
            )
        else:
            check_nonneg("mean_prompt_output", self.mean_prompt_output)

    @classmethod
    def from_samples(
        cls, step_time: StepTimeModel, max_seqs: int, prompts, outputs
    ) -> ContinuousCapacity:
        p = np.asarray(prompts, dtype=np.float64)
        o = np.asarray(outputs, dtype=np.float64)
        if not len(o) or len(p) != len(o):
            raise ConfigError("prompts and outputs must be non-empty and of equal length")
        return cls(
            _as_linear(step_time),
            max_seqs,
            float(p.mean()),
            float(o.mean()),
            float((o * o).mean()),
            float((p * o).mean()),
        )

    @property
    def mean_work(self) -> float:
        """E[w]: seconds each request adds beyond the shared per-step cost c0."""
        c = self.step_time
        P, O, O2, PO = (
            self.mean_prompt,
            self.mean_output,
            self.mean_output_sq,
            self.mean_prompt_output,
        )
        assert O2 is not None and PO is not None
        # E[(O-1)P] = E[PO] - E[P];  E[(O-1)(O-2)/2] = (E[O^2] - 3E[O] + 2) / 2
        return c.c1 * P + c.c2 * (O - 1) + c.c3 * ((PO - P) + (O2 - 3 * O + 2) / 2)

    @property
    def seconds_per_request(self) -> float:
        """Server time per request when every step is full: c0 E[O] / B + E[w]."""
        return self.step_time.c0 * self.mean_output / self.max_seqs + self.mean_work

    @property
    def max_rate(self) -> float:
        """mu*: the most requests per second the full batch serves."""
        return 1.0 / self.seconds_per_request

    def utilisation(self, arrival_rate: float) -> float:
        check_positive("arrival_rate", arrival_rate)
        return arrival_rate * self.seconds_per_request

    def stable(self, arrival_rate: float) -> bool:
        return self.utilisation(arrival_rate) < 1


def relative_error(simulated: float, theory: float) -> float:
    """(simulated - theory) / theory, the figure the tables print as a percentage."""
    if theory == 0:
        return math.inf if simulated else 0.0
    return (simulated - theory) / theory
