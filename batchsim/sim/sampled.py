"""Step times drawn from the profile's spread instead of priced at its mean.

``SampledStepTime(inner, spread, rng)`` wraps a mean model (a ``ProfiledStepTime``, or one
scaled to the machine's speed of now) and prices each pass at ``mean x ratio``, the ratio
drawn from the spread the profile measured at that pass's shape (``batchsim.sim.spread``).
Everything else (the fixed work around a step, the gap between steps, the cold start after
idling) is the inner model's, unchanged: the profile measured those as medians of clock
differences and kept no spread for them.

When the spread carries the machine's slow drift (``batchsim.sim.slowdrift``) and ``slow`` is on
(``--step-noise profiled``), each pass is also multiplied by the drift's factor of the moment: one
state per step, moved on by the seconds the step takes at that speed, and by the idle seconds
when the server slept (``wake_penalty`` is the one call told how long that was).

It is an ordinary step-time model: ``simulate`` takes it as it takes any other, so noise needs
no change in the simulator or the driver. Its randomness is its own ``numpy.random.Generator``,
passed in; the same seed gives the same step times, run after run. A copy made by
``for_policy`` shares the generator (one server, one stream of luck).

``with_noise(model, seed)`` finds the spread a model carries (``None`` when it has none, as a
linear or an older profiled calibration) and wraps it.
"""

from __future__ import annotations

import math

import numpy as np

from ..core.errors import ConfigError
from ..core.plan import Pass, plan_step
from ..core.step import Step
from .spread import StepSpread
from .steptime import ScaledStepTime, StepTimeModel

__all__ = ["SampledStepTime", "with_noise", "spread_of", "NOISE_CHOICES"]

#: ``--step-noise``: ``profiled`` samples from everything the calibration measured (each pass's
#: spread and the machine's slow drift), ``passes`` from the passes' spread alone, ``none`` prices
#: the mean.
NOISE_CHOICES = ("profiled", "passes", "none")
_BLOCK = 64


def _phi(z: np.ndarray) -> np.ndarray:
    """The standard normal CDF (Abramowitz and Stegun 7.1.26, error under 1.5e-7: no scipy
    needed)."""
    x = np.abs(z) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = 1.0 - poly * np.exp(-x * x)
    return 0.5 * (1.0 + np.sign(z) * erf)


def _ar1(rng: np.random.Generator, n: int, rho: float, state: list) -> np.ndarray:
    """n unit-normal scores of an AR(1) with correlation ``rho``, continuing from ``state[0]``
    (updated)."""
    s = math.sqrt(max(0.0, 1.0 - rho * rho))
    e = rng.standard_normal(n)
    z = np.empty(n)
    k = np.arange(_BLOCK)
    # Within a block of L passes z_t = rho^(t+1) z_prev + s * sum_{u<=t} rho^(t-u) e_u: one
    # lower-triangular product per block instead of a Python loop per pass.
    power = np.tril(rho ** np.maximum(k[:, None] - k[None, :], 0))
    for a in range(0, n, _BLOCK):
        b = min(n, a + _BLOCK)
        L = b - a
        z[a:b] = rho ** (k[:L] + 1) * state[0] + s * (power[:L, :L] @ e[a:b])
        state[0] = float(z[b - 1])
    return z


def spread_of(model: StepTimeModel) -> StepSpread | None:
    """The spread a model carries, looking through a speed scaling or level (which move the means;
    the spread is a ratio to them)."""
    # a LevelStepTime is a ScaledStepTime
    while isinstance(model, (ScaledStepTime, SampledStepTime)):
        model = model.inner
    return getattr(model, "spread", None)


class SampledStepTime(StepTimeModel):
    """``inner``'s passes, each at its mean times a ratio drawn from ``spread`` (see the module's
    docstring)."""

    def __init__(
        self,
        inner: StepTimeModel,
        spread: StepSpread,
        rng: np.random.Generator,
        seed: int | None = None,
        slow: bool = True,
    ) -> None:
        if not isinstance(spread, StepSpread):
            raise ConfigError(f"spread must be a StepSpread, got {type(spread).__name__}")
        if not isinstance(rng, np.random.Generator):
            raise ConfigError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        self.inner, self.spread, self.rng, self.seed = inner, spread, rng, seed
        self.plan = inner.plan
        self.step_gap = inner.step_gap
        # the last pass's luck (a list: for_policy's twin shares it)
        self._z = [float(rng.standard_normal())]
        # The machine's slow drift, unless asked for the passes' own spread alone
        # (``--step-noise passes``); its state starts where a stationary drift would be, at a random
        # point of its own spread.
        self.slow = spread.slow if slow else None
        self._s = [float(rng.standard_normal())] if self.slow is not None else [0.0]

    def __repr__(self) -> str:
        seed = "" if self.seed is None else f", seed {self.seed}"
        slow = (
            ""
            if self.slow is None
            else f", slow drift sd {self.slow.sd:.3f} over {self.slow.tau_s:.2f} s"
        )
        return (
            f"{self.inner!r}, sampled from its profiled spread (lag1 "
            f"{self.spread.lag1:.2f}{slow}{seed})"
        )

    # -- the draws ---------------------------------------------------------------------------------
    def _levels(self, n: int) -> np.ndarray:
        """n quantile levels in (0, 1), consecutive ones correlated by ``lag1`` (an AR(1) in normal
        scores)."""
        rho = self.spread.lag1
        if rho <= 0.0:
            return self.rng.random(n)
        s = math.sqrt(1.0 - rho * rho)
        if n == 1:  # one pass, the simulator's commonest call: plain floats
            z1 = rho * self._z[0] + s * float(self.rng.standard_normal())
            self._z[0] = z1
            return np.array([0.5 * (1.0 + math.erf(z1 / math.sqrt(2.0)))])
        return _phi(_ar1(self.rng, n, rho, self._z))

    def _slow_one(self, dt: float) -> float:
        """The slow drift's speed factor for work of ``dt`` seconds at the mean: the state's of now,
        which then moves on by the seconds that work takes at that speed (the drift runs on the
        wall)."""
        f = self._factor_now()
        self._move(dt * f)
        return f

    def _factor_now(self) -> float:
        sd = self.slow.sd
        return math.exp(sd * self._s[0] + 0.5 * sd * sd)

    def _move(self, seconds: float) -> None:
        a = self.slow.keep(seconds)
        self._s[0] = a * self._s[0] + math.sqrt(max(0.0, 1.0 - a * a)) * float(
            self.rng.standard_normal()
        )

    def _slow_path(self, n: int, dt: float) -> np.ndarray:
        """The factors for n consecutive passes of about ``dt`` seconds each at the mean: the first
        at the state of now; the path steps by dt at the first pass's speed (a repeated step is
        short next to the drift's time constant, so its speed hardly moves the pace)."""
        slow = self.slow
        f0 = self._factor_now()
        start = self._s[0]
        # z[0] is one step on: shift to start at now
        z = _ar1(self.rng, n, slow.keep(dt * f0), self._s)
        out = np.empty(n)
        out[0] = start
        out[1:] = z[:-1]
        return slow.factor(out)

    def _ratios(self, passes: list[Pass], u: np.ndarray) -> list[float]:
        out = []
        for p, level in zip(passes, u.tolist()):
            if p.prefill_rows:
                rows, q = p.prefill_shape if p.ragged else (p.prefill_rows, p.query)
                out.append(self.spread.prefill.ratio(rows, q, level))
            else:
                out.append(
                    self.spread.decode.ratio(
                        p.decode_rows, max(1.0, p.attn_read / max(p.decode_rows, 1)), level
                    )
                )
        return out

    # -- pricing -----------------------------------------------------------------------------------
    def times(self, prefill_tokens, decode_rows, kv_read):
        mean = np.asarray(self.inner.times(prefill_tokens, decode_rows, kv_read), dtype=np.float64)
        d = np.asarray(decode_rows, dtype=np.float64)
        p = np.asarray(prefill_tokens, dtype=np.float64)
        u = self._levels(mean.size).reshape(mean.shape)
        width = np.where(d > 0, np.asarray(kv_read, dtype=np.float64) / np.maximum(d, 1), 1.0)
        r = np.where(
            d > 0,
            self.spread.decode.ratios(np.maximum(d, 1), width, u),
            self.spread.prefill.ratios(np.ones_like(p), np.maximum(p, 1), u),
        )
        if self.slow is not None and mean.size:
            r = r * self._slow_path(mean.size, float(mean.mean())).reshape(mean.shape)
        return mean * r

    def pass_time(self, p: Pass) -> float:
        mean = self.inner.pass_time(p)
        r = self._ratios([p], self._levels(1))[0]
        return mean * r * (self._slow_one(mean) if self.slow is not None else 1.0)

    def durations(self, step: Step, m: int) -> np.ndarray:
        # The inner model's step (its passes and the work around them), plus each pass's drawn
        # deviation from its mean: (ratio - 1) x the pass's mean time.
        d = np.array(self.inner.durations(step, m), dtype=np.float64)
        passes = plan_step(step, self.plan)
        if m == 1:
            ratios = self._ratios(passes, self._levels(len(passes)))
            if self.slow is None:
                d[0] += sum((r - 1.0) * self.inner.pass_time(p) for p, r in zip(passes, ratios))
                return d
            means = [self.inner.pass_time(p) for p in passes]
            # one state for a step's passes: the drift moves over seconds
            f = self._slow_one(sum(means))
            d[0] += sum((r * f - 1.0) * t for t, r in zip(means, ratios))
            return d
        (p,) = passes  # a repeated step is one decode pass, a column wider each time
        attn = p.attn_read + np.arange(m, dtype=np.float64) * p.decode_rows
        means = np.asarray(self.inner._decode_times(p, attn), dtype=np.float64)
        r = self.spread.decode.ratios(
            float(p.decode_rows), attn / max(p.decode_rows, 1), self._levels(m)
        )
        if self.slow is not None:
            r = r * self._slow_path(m, float(means.mean()))
        return d + (r - 1.0) * means

    def cold_extra(self, p: Pass, rep: int) -> float:
        return self.inner.cold_extra(p, rep)

    def wake_penalty(self, idle: float) -> tuple[float, float]:
        # The one call that says how long the server slept: the machine's drift moves on meanwhile.
        if self.slow is not None:
            self._move(idle)
        return self.inner.wake_penalty(idle)

    def for_policy(self, name: str) -> StepTimeModel:
        inner = self.inner.for_policy(name)
        if inner is self.inner:
            return self
        twin = SampledStepTime.__new__(SampledStepTime)
        twin.__dict__.update(self.__dict__)  # the same generator and the same last luck: one stream
        twin.inner, twin.plan, twin.step_gap = inner, inner.plan, inner.step_gap
        return twin


def with_noise(
    model: StepTimeModel, seed: int | np.random.Generator | None, noise: str = "profiled"
) -> StepTimeModel:
    """``model`` with its passes sampled from its spread (``noise="profiled"``), or as it is
    (``"none"``).

    Raises ``ConfigError`` when noise is asked for and the model carries no spread."""
    if noise not in NOISE_CHOICES:
        raise ConfigError(f"step-noise must be one of {', '.join(NOISE_CHOICES)}, got {noise!r}")
    if noise == "none":
        return model
    spread = spread_of(model)
    if spread is None:
        raise ConfigError(
            f"step-noise profiled needs a calibration that kept each shape's spread (realrun "
            f"profile writes one); {model!r} has none: re-profile, or use --step-noise none"
        )
    slow = noise == "profiled"
    if isinstance(seed, np.random.Generator):
        return SampledStepTime(model, spread, seed, slow=slow)
    s = 0 if seed is None else int(seed)
    # Its own stream, apart from the workload's (which uses the same user seed directly).
    return SampledStepTime(
        model,
        spread,
        np.random.default_rng(np.random.SeedSequence([s, 0x5717E])),
        seed=s,
        slow=slow,
    )
