"""The simulated server's knobs: how long a step takes, how much KV memory, what an hour costs.

``ServerConfig`` gathers them (from flags, a scenario's defaults, or Python) and checks
each once; ``build()`` turns them into what a run needs, a ``ServerSetup``: the
step-time model, the KV budget in tokens, the GPU-and-model ``Server`` (or None) and
the price per hour (or None). Which step-time model wins, first to last:

    --calibration FILE, --step-time S, a --gpu/--model given as a flag,
    the scenario's own model, the scenario's GPU and model, DEFAULT_STEP_TIME

A knob that tunes something the run does not have is refused, naming it: a
``--mem-util`` for a server with no memory (a constant ``--step-time``), a
``--kv-budget-bytes`` that holds no token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.config import MAX_SECONDS
from ..core.errors import (
    ConfigError,
    check_at_most,
    check_choice,
    check_int_at_least,
    check_kv_tokens,
    check_nonneg,
    check_positive,
    is_integer,
    show,
)
from ..core.flags import Flag, flag_name, resolve
from ..sim.sampled import NOISE_CHOICES, with_noise
from ..sim.steptime import ConstantStepTime, LinearStepTime, StepTimeModel, load_step_time
from .catalog import DEFAULT_CATALOG, load_catalog
from .cost import check_price
from .engines import ENGINE_NAMES, engine_profile
from .roofline import MIN_EFF
from .server import DEFAULT_GPU, DEFAULT_MODEL, Server
from .specs import check_kv_dtype, check_weights

__all__ = [
    "ServerConfig",
    "ServerSetup",
    "SERVER_FLAGS",
    "SERVER_KEYS",
    "DEFAULT_STEP_TIME",
    "parse_bytes",
]

#: An illustrative server when nothing else is given: 10 ms per pass plus small per-token costs,
#: roughly a small model on one GPU. ``--step-time``, ``--calibration`` or a GPU/model pick replace
#: it.
DEFAULT_STEP_TIME = LinearStepTime(
    c0=0.010, c1=2e-5, c2=5e-5, c3=1e-8, source="illustrative default"
)

SERVER_FLAGS = (
    Flag(
        "--step-time",
        "step_time",
        float,
        "constant seconds per step, whatever its size (a textbook server)",
    ),
    Flag(
        "--calibration",
        "calibration",
        str,
        "linear step-time model from a JSON file (python -m realrun profile writes one)",
    ),
    Flag(
        "--gpu",
        "gpu",
        str,
        f"simulate this GPU with a roofline model: {', '.join(DEFAULT_CATALOG.gpus)} (default "
        f"{DEFAULT_GPU})",
    ),
    Flag(
        "--model",
        "sim_model",
        str,
        f"the model it runs: {', '.join(DEFAULT_CATALOG.models)} (default {DEFAULT_MODEL})",
        metavar="MODEL",
    ),
    Flag("--dtype", "sim_dtype", str, "fp16 (default on GPUs), bf16 or fp32", metavar="DTYPE"),
    Flag(
        "--catalog",
        "catalog",
        str,
        "JSON or TOML file adding GPUs and models to the built-in catalog",
    ),
    Flag(
        "--gpu-price",
        "gpu_price",
        float,
        "dollars per GPU-hour (default: the catalog's assumed 2026 on-demand price)",
    ),
    Flag(
        "--mem-util",
        "mem_util",
        float,
        "share of GPU memory for weights + KV cache (default 0.9, as vLLM)",
    ),
    Flag(
        "--compute-eff", "compute_eff", float, "share of peak FLOP/s a step achieves (default 0.6)"
    ),
    Flag(
        "--memory-eff",
        "memory_eff",
        float,
        "share of peak memory bandwidth a step achieves (default 0.8)",
    ),
    Flag(
        "--step-overhead",
        "step_overhead",
        float,
        "fixed seconds per step: launches, sampling (default 0.0005)",
    ),
    Flag(
        "--kv-budget-tokens",
        "kv_budget_tokens",
        int,
        "KV-cache budget in tokens (default: unlimited, or from the GPU's memory)",
    ),
    Flag(
        "--kv-budget-bytes",
        "kv_budget_bytes",
        str,
        "KV-cache budget in bytes, e.g. 20e9 or 20GB (needs a --gpu/--model server)",
    ),
    Flag(
        "--weights",
        "weights",
        str,
        "how the weights are stored: fp16, bf16, fp8 (FP8 tensor cores where the GPU has them) or "
        "int4 (4-bit weight-only) (default: --dtype)",
        metavar="DTYPE",
    ),
    Flag(
        "--kv-dtype",
        "kv_dtype",
        str,
        "how the KV cache is stored: fp16, bf16 or fp8 (default: --dtype)",
        metavar="DTYPE",
    ),
    Flag(
        "--tp",
        "tp",
        int,
        "tensor parallelism: GPUs per replica, the model split over them (default 1)",
        metavar="N",
    ),
    Flag(
        "--engine-profile",
        "engine_profile",
        str,
        f"efficiencies and step overhead fitted to published measurements of an engine: "
        f"{', '.join(ENGINE_NAMES)} (--compute-eff, --memory-eff, --step-overhead override it)",
        metavar="ENGINE",
    ),
    Flag(
        "--step-noise",
        "step_noise",
        str,
        "none (default: every pass at its mean), profiled (each pass drawn from the spread the "
        "--calibration measured and the machine's slow drift, seeded by --seed) or passes (the "
        "passes' spread alone)",
    ),
)
#: Flag dest -> the key a scenario's defaults use for it.
SERVER_KEYS = {
    "step_time": "step_time",
    "calibration": "calibration",
    "gpu": "gpu",
    "sim_model": "model",
    "sim_dtype": "dtype",
    "catalog": "catalog",
    "gpu_price": "gpu_price",
    "mem_util": "mem_util",
    "compute_eff": "compute_eff",
    "memory_eff": "memory_eff",
    "step_overhead": "overhead",
    "kv_budget_tokens": "kv_budget_tokens",
    "kv_budget_bytes": "kv_budget_bytes",
    "step_noise": "step_noise",
    "weights": "weights",
    "kv_dtype": "kv_dtype",
    "tp": "tp",
    "engine_profile": "engine_profile",
}
# Knobs of a GPU-and-model server: meaningless, so refused as flags, when the run has none.
_NEEDS_SERVER = (
    "sim_dtype",
    "catalog",
    "mem_util",
    "compute_eff",
    "memory_eff",
    "step_overhead",
    "weights",
    "kv_dtype",
    "tp",
    "engine_profile",
)


def parse_bytes(text: Any, field: str = "bytes") -> float:
    """``20e9``, ``20GB``, ``20GiB``, ``512MB``: a byte count."""
    t = str(text).strip()
    units = {
        "kib": 2**10,
        "mib": 2**20,
        "gib": 2**30,
        "tib": 2**40,
        "kb": 1e3,
        "mb": 1e6,
        "gb": 1e9,
        "tb": 1e12,
        "b": 1,
    }
    scale = 1.0
    for u, f in units.items():
        if t.lower().endswith(u):
            t, scale = t[: -len(u)].strip(), float(f)
            break
    try:
        v = float(t) * scale
    except ValueError:
        raise ConfigError(
            f"{field} must be a number of bytes such as 20e9 or 20GB, got {show(text)}"
        ) from None
    check_positive(field, v)
    return v


@dataclass(frozen=True)
class ServerSetup:
    """What a run needs from its server, resolved once."""

    step_time: StepTimeModel
    kv_budget_tokens: int | None
    server: Server | None
    price: float | None


@dataclass(frozen=True)
class ServerConfig:
    step_time: float | None = None
    calibration: str | None = None
    gpu: str | None = None
    model: str | None = None
    dtype: str | None = None
    catalog: str | None = None
    gpu_price: float | None = None
    mem_util: float | None = None
    compute_eff: float | None = None
    memory_eff: float | None = None
    overhead: float | None = None
    kv_budget_tokens: int | None = None
    kv_budget_bytes: float | str | None = None
    step_noise: str | None = None  # "profiled": passes drawn from the calibration's spread
    weights: str | None = None
    kv_dtype: str | None = None
    tp: int | None = None
    engine_profile: str | None = None
    max_batched_tokens: int | None = (
        None  # the policy's, when given: what vLLM's profiling pass would use
    )
    noise_seed: int = 0
    step_time_model: StepTimeModel | None = None  # a scenario's own model (no flag sets it)
    named_by_flags: bool = False  # --gpu/--model given: they beat a scenario's own model
    flags: tuple[str, ...] = ()  # which knobs were given as flags, for the messages

    def __post_init__(self) -> None:
        if self.step_time is not None:
            check_positive("step-time", self.step_time)
            check_at_most("step-time", self.step_time, MAX_SECONDS, "seconds: a day per pass")
        if self.overhead is not None:
            check_nonneg("step-overhead", self.overhead)
            check_at_most("step-overhead", self.overhead, MAX_SECONDS, "seconds: a day per pass")
        if self.gpu_price is not None:
            check_price(self.gpu_price)
            check_at_most("gpu-price", self.gpu_price, 1e6, "dollars per hour")
        for k, least in (("mem_util", 0.0), ("compute_eff", MIN_EFF), ("memory_eff", MIN_EFF)):
            v = getattr(self, k)
            if v is not None:
                check_positive(k.replace("_", "-"), v)
                if not least <= v <= 1:
                    raise ConfigError(
                        f"{k.replace('_', '-')} must be in {'(0' if not least else f'[{least:g}'}, "
                        f"1], got {show(v)}"
                    )
        if self.kv_budget_tokens is not None:
            check_kv_tokens("kv-budget-tokens", self.kv_budget_tokens)
        if self.kv_budget_bytes is not None and not isinstance(self.kv_budget_bytes, float):
            object.__setattr__(
                self, "kv_budget_bytes", parse_bytes(self.kv_budget_bytes, "kv-budget-bytes")
            )
        if self.step_noise is not None:
            check_choice("step-noise", self.step_noise, NOISE_CHOICES)
        if self.weights is not None:
            check_weights(self.weights)
        if self.kv_dtype is not None:
            check_kv_dtype(self.kv_dtype)
        if self.tp is not None:
            check_int_at_least("tp", self.tp, 1)
            check_at_most("tp", self.tp, 1024, "GPUs")
        if self.engine_profile is not None:
            engine_profile(self.engine_profile)
        for k in ("calibration", "gpu", "model", "dtype", "catalog"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, str) or not v.strip()):
                raise ConfigError(f"{k} must be a name, got {show(v)}")

    @classmethod
    def from_flags(cls, flags: Mapping[str, Any], *layers: Mapping[str, Any]) -> ServerConfig:
        """Flags (by dest) over layers (by scenario key)."""
        kw = {}
        for dest, key in SERVER_KEYS.items():
            v = flags.get(dest)
            kw[key] = v if v is not None else resolve(key, {}, *layers)
        # A budget given as a flag replaces the scenario's, whichever unit each is in.
        if flags.get("kv_budget_bytes") is not None and flags.get("kv_budget_tokens") is None:
            kw["kv_budget_tokens"] = None
        seed = flags.get("seed")
        mbt = flags.get("max_batched_tokens")
        return cls(
            **kw,
            noise_seed=int(seed) if is_integer(seed) else 0,
            step_time_model=resolve("step_time_model", {}, *layers),
            max_batched_tokens=int(mbt) if is_integer(mbt) and mbt >= 1 else None,
            named_by_flags=flags.get("gpu") is not None or flags.get("sim_model") is not None,
            flags=tuple(d for d in SERVER_KEYS if flags.get(d) is not None),
        )

    @property
    def has_server(self) -> bool:
        return self.gpu is not None or self.model is not None

    def server(self) -> Server | None:
        """The GPU-and-model server named (only a GPU: the default model on it, and the other way
        round)."""
        if not self.has_server:
            return None
        kw: dict = (
            {**engine_profile(self.engine_profile).knobs, "engine": self.engine_profile.lower()}
            if self.engine_profile
            else {}
        )
        for key, arg in (
            ("mem_util", "mem_util"),
            ("compute_eff", "compute_eff"),
            ("memory_eff", "memory_eff"),
            ("overhead", "overhead"),
            ("gpu_price", "price_per_hour"),
            ("weights", "weights"),
            ("kv_dtype", "kv_dtype"),
            ("tp", "tp"),
            ("max_batched_tokens", "max_batched_tokens"),
        ):
            if getattr(self, key) is not None:
                kw[arg] = getattr(self, key)
        if self.kv_budget_tokens is not None:
            kw["kv_tokens"] = self.kv_budget_tokens
        elif self.kv_budget_bytes is not None:
            kw["kv_bytes"] = self.kv_budget_bytes
        return Server.named(
            self.gpu or DEFAULT_GPU,
            self.model or DEFAULT_MODEL,
            load_catalog(self.catalog),
            self.dtype,
            **kw,
        )

    def build(self) -> ServerSetup:
        if not self.has_server:
            for dest in _NEEDS_SERVER:
                if dest in self.flags:
                    what = (
                        "--step-time"
                        if self.step_time is not None
                        else "--calibration"
                        if self.calibration
                        else "this run"
                    )
                    raise ConfigError(
                        f"{flag_name(dest)} needs a GPU server (--gpu and/or --model): {what} has "
                        f"no GPU, memory or dtype to tune (got "
                        f"{show(getattr(self, SERVER_KEYS[dest]))})"
                    )
            if self.kv_budget_bytes is not None:
                raise ConfigError(
                    "kv-budget-bytes needs a server (--gpu and/or --model) to turn bytes into "
                    "tokens; "
                    f"got {show(self.kv_budget_bytes)} without one"
                )
        server = self.server()
        if self.calibration:
            step_time = load_step_time(self.calibration)
        elif self.step_time is not None:
            step_time = ConstantStepTime(float(self.step_time))
        elif server is not None and self.named_by_flags:
            step_time = server.step_time
        elif self.step_time_model is not None:
            step_time = self.step_time_model
        elif server is not None:
            step_time = server.step_time
        else:
            step_time = DEFAULT_STEP_TIME
        if self.step_noise in ("profiled", "passes"):
            step_time = with_noise(step_time, self.noise_seed, self.step_noise)
        kv = (
            server.kv.tokens
            if server is not None
            else (int(self.kv_budget_tokens) if self.kv_budget_tokens is not None else None)
        )
        price = (
            server.price
            if server is not None
            else (float(self.gpu_price) if self.gpu_price is not None else None)
        )
        return ServerSetup(step_time, kv, server, price)
