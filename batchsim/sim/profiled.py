"""A step-time model read off measurements: passes timed on a grid, interpolated between.

``LinearStepTime`` is the textbook model: one formula for every pass. A real engine's
curve has a shape of its own (a fixed cost that a few rows share for free, a prompt
whose attention costs more per token the longer it is), so ``realrun profile`` times
the engine's passes on a grid of shapes and this model looks the answer up:

- a **decode** pass of ``rows`` rows over a rectangle ``width`` columns wide costs
  ``decode(rows, width)``, interpolated bilinearly between the measured grid points;
- a **prefill** pass of ``rows`` chunks of ``query`` tokens costs ``prefill(rows, query)``,
  likewise, plus ``past_cost`` seconds for every pair of (new token, cached token) its
  attention computes when the chunks continue an earlier one;
- a fused pass (plan ``"fused"``, vLLM's ragged batches) prices its prefill and its decode
  rows on the two grids and pays the fixed cost both include once: ``fused_shared``, the
  measured difference between a mixed pass and its two halves timed apart;
- every step also costs ``step_extra`` (the engine's work around its passes: dropping
  and joining rows) plus ``join_cost`` per token joining the batch, and the server spends
  ``step_gap`` between two steps (the driver's own Python: the policy's decision, the
  records). Both are measured by the profile;
- a step's first decode pass costs ``first_decode_extra`` more than the grid's price, its second
  ``second_decode_extra`` more: the grid times passes repeated back to back (from the third on),
  while a server's step begins after the driver's own Python has run, and its first passes run
  slower (most likely for what that work pushed out of the caches: timed alone, a pass after 32 MB
  of memory traffic, or after a 10 ms sleep, cost 13-14 % more). Measured inside serving runs here
  (one thread), against the passes of the same steps from the third on and of the same row counts:
  gpt2-6l's first decode pass +4 to +8 %, its second +3 %; tiny-gpt2's first +12 to +18 %, its
  second +4 to +13 %. The profile reads both off the bursts it runs through the real driver (which,
  so far, read less than the serving runs show: ``realrun.timing.cold`` says how much);
- a step after the server sat idle starts late (its sleep overshoots) and runs its first
  passes cold (caches and clock speed recover over a few passes): ``wake_late`` seconds,
  plus ``wake_extra`` interpolated in the idle time's logarithm over ``wake_idle``. On the
  CPU these machines have, a 1-row decode pass takes about 1 ms warm and 1 ms more after
  50 ms asleep, so at light load this is most of the gap between a linear model and the
  wall clock.

Bilinear interpolation is exact on costs of the form a + b*rows + c*width + d*rows*width,
which is what a decode pass costs to first order (a fixed cost, per-row compute, per-column
attention); between grid points of a curved cost it is off by at most the curvature over
one grid cell, so the profile spaces points by factors of two. The grid's measurements are
made monotone in every axis first (a larger pass never costs less; noise may say
otherwise), which keeps the interpolation monotone. Beyond the grid, the last cell's slope
carries on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError, check_at_most, check_choice, check_nonneg, is_number, show
from ..core.plan import PLANS, Pass
from .grid2d import MAX_PASS_SECONDS, Grid2D, plain_numbers
from .spread import StepSpread
from .stepmodel import StepTimeModel

__all__ = ["Grid2D", "ProfiledStepTime", "PROFILE_VERSION"]

#: The calibration format this module reads and writes; a file of another version is refused.
PROFILE_VERSION = 2
_NUMBERS = (
    "past_cost",
    "step_extra",
    "join_cost",
    "step_gap",
    "repeat_extra",
    "wake_late",
    "fused_shared",
    "first_decode_extra",
    "second_decode_extra",
)


@dataclass(frozen=True, eq=False)
class ProfiledStepTime(StepTimeModel):
    """Step times looked up in measured grids (``realrun profile`` makes them)."""

    decode: Grid2D  # rows x width -> seconds
    prefill: Grid2D  # rows x query -> seconds (no cached context)
    past_cost: float = 0.0  # seconds per (new token, cached token) pair of a continued chunk
    step_extra: float = 0.0  # seconds per step around its passes
    join_cost: float = 0.0  # seconds per token of rows joining the batch
    step_gap: float = 0.0  # seconds between two steps (the driver)
    repeat_extra: float = 0.0  # seconds per further repetition of a repeated step, around its pass
    wake_late: float = 0.0  # seconds a sleep overshoots
    fused_shared: float = (
        0.0  # seconds a fused pass's prefill and decode share (counted once, not twice)
    )
    first_decode_extra: float = (
        0.0  # seconds a step's first decode pass costs beyond a repeated one
    )
    second_decode_extra: float = 0.0  # ... and its second (the grid times a step's third pass on)
    wake_idle: tuple = ()  # idle seconds at which the cold start was timed ...
    wake_extra: tuple = ()  # ... and the extra seconds of work it cost
    plan: str = "grouped"
    source: str = ""
    policy_gaps: dict = field(default_factory=dict)  # step_gap measured per policy name
    context_len: int | None = None  # positions of the model it was measured on (the server's limit)
    extra: dict = field(default_factory=dict)
    spread: StepSpread | None = (
        None  # each grid point's spread around its mean (None: an older profile)
    )

    def __post_init__(self) -> None:
        for name in _NUMBERS:
            check_nonneg(name, getattr(self, name))
            check_at_most(name, getattr(self, name), MAX_PASS_SECONDS, "seconds")
        check_choice("plan", self.plan, PLANS)
        idle, extra = (
            np.asarray(self.wake_idle, dtype=float),
            np.asarray(self.wake_extra, dtype=float),
        )
        if (
            idle.shape != extra.shape
            or idle.ndim != 1
            or np.any(idle <= 0)
            or np.any(np.diff(idle) <= 0)
            or not np.all(np.isfinite(idle))
            or not np.all(np.isfinite(extra))
            or np.any(extra < 0)
            or np.any(extra > MAX_PASS_SECONDS)
        ):
            raise ConfigError(
                f"wake_idle must be increasing seconds > 0 and wake_extra as many seconds in [0, "
                f"{MAX_PASS_SECONDS:g}], got {show(plain_numbers(idle))} and "
                f"{show(plain_numbers(extra))}"
            )
        for part in ("decode", "prefill"):
            own, spread = getattr(self, part), getattr(self.spread, part, None)
            if spread is not None and (
                spread.q.shape[:2] != own.z.shape
                or not np.array_equal(spread.x, own.x)
                or not np.array_equal(spread.y, own.y)
            ):
                raise ConfigError(
                    f"spread {part} must have one quantile list per {part} grid point "
                    f"({own.z.shape[0]} x {own.z.shape[1]}), got {spread.q.shape[0]} x "
                    f"{spread.q.shape[1]}"
                )
        object.__setattr__(self, "wake_idle", tuple(idle.tolist()))
        object.__setattr__(self, "wake_extra", tuple(extra.tolist()))

    def __repr__(self) -> str:
        return f"ProfiledStepTime({self.source or 'measured grid'}, plan={self.plan})"

    def for_policy(self, name: str) -> ProfiledStepTime:
        """This model with the gap between steps measured for that policy (its decisions cost more
        or less)."""
        from dataclasses import replace

        gap = self.policy_gaps.get(name)
        return self if gap is None or gap == self.step_gap else replace(self, step_gap=float(gap))

    # -- pricing -------------------------------------------------------------------------------
    def wake_penalty(self, idle: float) -> tuple[float, float]:
        if not self.wake_idle:
            return self.wake_late, 0.0
        x = np.log(self.wake_idle)
        extra = float(np.interp(np.log(max(idle, 1e-9)), x, self.wake_extra, left=0.0))
        if idle < self.wake_idle[0]:  # shorter than any timed idle: scale down towards none
            extra = self.wake_extra[0] * idle / self.wake_idle[0]
        return self.wake_late, extra

    def times(self, prefill_tokens, decode_rows, kv_read):
        """Bare shapes (no chunk detail): a prefill of one row, or a decode pass of equal rows."""
        p = np.asarray(prefill_tokens, dtype=np.float64)
        d = np.asarray(decode_rows, dtype=np.float64)
        kv = np.asarray(kv_read, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            width = np.where(d > 0, kv / np.maximum(d, 1), 0.0)
        dec = np.where(d > 0, self.decode(np.maximum(d, 1), width), 0.0)
        pre = np.where(p > 0, self.prefill(np.ones_like(p), np.maximum(p, 1)), 0.0)
        return dec + pre

    def pass_time(self, p: Pass) -> float:
        if p.ragged:
            return self._fused_time(p)
        if p.prefill_rows:
            t = float(self.prefill(p.prefill_rows, p.query)[0])
            t += self.past_cost * p.prefill_rows * p.query * p.past
            if p.decode_rows:  # a fused pass: price its decode rows as their own pass would cost
                t += float(
                    self.decode(
                        p.decode_rows,
                        max(1, (p.attn_read - p.prefill_rows * p.past) / p.decode_rows),
                    )[0]
                )
            return t
        return float(self.decode(p.decode_rows, p.past)[0])

    def _fused_time(self, p: Pass) -> float:
        """One ragged pass (plan "fused", vLLM's; or one of plan "paged"'s): its prefill priced as
        equal chunks with the same tokens and attention (``Pass.prefill_shape``), each chunk's
        attention to its own cached past, and its decode rows at their mean context; the fixed cost
        both grids include is paid once (``fused_shared``)."""
        t = 0.0
        if p.prefill_rows:
            t += float(self.prefill(*p.prefill_shape)[0])
            t += self.past_cost * sum(c.length * c.start for c in p.chunks)
        if p.decode_rows:
            past = p.kv_read - sum(c.start for c in p.chunks)
            t += float(self.decode(p.decode_rows, max(1.0, past / p.decode_rows))[0])
            if p.prefill_rows:
                t = max(t - self.fused_shared, 0.5 * t)
        return t

    def _decode_times(self, d: Pass, attn_read: np.ndarray) -> np.ndarray:
        return self.decode(np.full(len(attn_read), float(d.decode_rows)), attn_read / d.decode_rows)

    def durations(self, step, m: int) -> np.ndarray:
        d = super().durations(step, m)
        d[0] += self.step_extra + self.join_cost * sum(
            c.length + c.start for c in step.prefill if c.completes
        )
        if step.decode:
            d[0] += self.first_decode_extra
            if m > 1:
                d[1] += self.second_decode_extra
        if m > 1:
            d[1:] += self.repeat_extra
        return d

    def cold_extra(self, p: Pass, rep: int) -> float:
        if not p.decode_rows or rep > 1:
            return 0.0
        return self.second_decode_extra if rep else self.first_decode_extra

    # -- files -----------------------------------------------------------------------------------
    def as_dict(self) -> dict:
        return {
            "model": "profiled",
            "version": PROFILE_VERSION,
            "plan": self.plan,
            "source": self.source,
            "decode": self.decode.as_dict(),
            "prefill": self.prefill.as_dict(),
            "past_cost": self.past_cost,
            **{k: getattr(self, k) for k in _NUMBERS if k != "past_cost"},
            "policy_gaps": dict(self.policy_gaps),
            "wake_idle": list(self.wake_idle),
            "wake_extra": list(self.wake_extra),
            "n_positions": self.context_len,
            **({"spread": self.spread.as_dict()} if self.spread is not None else {}),
            **self.extra,
        }

    def to_json(self, path: str | Path, **more) -> None:
        Path(path).write_text(json.dumps({**self.as_dict(), **more}, indent=2) + "\n")

    @classmethod
    def from_dict(cls, data: dict, where: str = "calibration") -> ProfiledStepTime:
        if data.get("version") != PROFILE_VERSION:
            raise ConfigError(
                f"{where}: version must be {PROFILE_VERSION} (re-run python -m realrun profile), "
                f"got {data.get('version')!r}"
            )
        plan = data.get("plan", "grouped")
        if plan not in PLANS:
            raise ConfigError(f"{where}: plan must be one of {', '.join(PLANS)}, got {plan!r}")
        nums = {}
        for k in _NUMBERS:
            v = data.get(k, 0.0)
            if (
                isinstance(v, bool)
                or not isinstance(v, (int, float))
                or not np.isfinite(v)
                or v < 0
                or v > MAX_PASS_SECONDS
            ):
                raise ConfigError(
                    f"{where}: {k} must be a number of seconds in [0, {MAX_PASS_SECONDS:g}], got "
                    f"{show(v)}"
                )
            nums[k] = float(v)
        ctx = data.get("n_positions")
        if ctx is not None and (isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < 1):
            raise ConfigError(f"{where}: n_positions must be a whole number >= 1, got {ctx!r}")
        gaps = data.get("policy_gaps", {})
        if not isinstance(gaps, dict) or not all(
            is_number(v) and np.isfinite(v) and 0 <= v <= MAX_PASS_SECONDS for v in gaps.values()
        ):
            raise ConfigError(
                f"{where}: policy_gaps must map policy names to seconds in [0, "
                f"{MAX_PASS_SECONDS:g}], got {show(gaps)}"
            )
        for part in ("decode", "prefill"):
            if not isinstance(data.get(part), dict):
                raise ConfigError(f"{where}: needs a {part} grid (rows, columns, seconds)")
        decode = Grid2D.from_dict(data["decode"], f"{where}: decode")
        prefill = Grid2D.from_dict(data["prefill"], f"{where}: prefill")
        extra = {}
        # realrun's canary at the end of the profile (its reference)
        if data.get("canary") is not None:
            c = data["canary"]
            if not isinstance(c, dict) or not all(
                is_number(c.get(k)) and np.isfinite(c.get(k)) and 0 < c.get(k) <= 100
                for k in ("prefill", "decode")
            ):
                raise ConfigError(
                    f"{where}: canary must hold prefill and decode ratios in (0, 100], got "
                    f"{show(c)}"
                )
            extra["canary"] = {"prefill": float(c["prefill"]), "decode": float(c["decode"])}
        spread = None
        if data.get("spread") is not None:  # older profiles kept only the means
            spread = StepSpread.from_dict(
                data["spread"], (decode.x, decode.y), (prefill.x, prefill.y), where
            )
        try:
            return cls(
                decode,
                prefill,
                plan=plan,
                source=str(data.get("source", "")),
                policy_gaps={str(k): float(v) for k, v in gaps.items()},
                wake_idle=_seconds_list(data, "wake_idle", where),
                wake_extra=_seconds_list(data, "wake_extra", where),
                context_len=ctx,
                spread=spread,
                extra=extra,
                **nums,
            )
        except (
            ConfigError
        ) as e:  # a check of the model itself (wake_extra against wake_idle): name the file
            msg = str(e)
            raise ConfigError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def _seconds_list(data: dict, key: str, where: str) -> tuple:
    v = data.get(key, [])
    if not isinstance(v, list) or not all(is_number(x) for x in v):
        raise ConfigError(f"{where}: {key} must be a list of seconds, got {show(v)}")
    return tuple(float(x) for x in v)
