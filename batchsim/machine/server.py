"""A simulated server: one GPU, one model, a data type and a price.

``Server`` ties the catalog entries to what the simulator needs: a step-time model
(``RooflineStepTime``), a KV budget in tokens (``KVBudget``) and dollars per hour.
The command line builds one from ``batchsim.machine.serverconfig.ServerConfig``; Python users
build one directly::

    srv = Server.named()                      # DEFAULT_GPU running DEFAULT_MODEL
    simulate(workload, policy, srv.step_time, kv_budget_tokens=srv.kv.tokens)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .catalog import DEFAULT_CATALOG, GPU, Catalog, Model
from .cost import check_price
from .memory import DEFAULT_MEM_UTIL, PROFILE_TOKENS, KVBudget, activation_bytes, kv_budget
from .roofline import DEFAULT_COMPUTE_EFF, DEFAULT_MEMORY_EFF, DEFAULT_OVERHEAD, RooflineStepTime

__all__ = ["Server", "DEFAULT_GPU", "DEFAULT_MODEL", "DEFAULT_SERVER"]

#: The one default server: what the scenarios run on unless they say otherwise, what your own
#: run uses without a step-time flag, and what ``roofline`` draws. A modern 8B model in fp16 on
#: one A100-80GB: what people serve on one GPU, and memory-bound at batch 1, as every LLM decode
#: is, which is the whole story of batching.
DEFAULT_GPU = "A100-80GB"
DEFAULT_MODEL = "llama-3-8b"
#: The same, as the scenario defaults spell it (flags override either key).
DEFAULT_SERVER = {"gpu": DEFAULT_GPU, "model": DEFAULT_MODEL}


@dataclass(frozen=True)
class Server:
    gpu: GPU
    model: Model
    dtype: str = "fp16"
    mem_util: float = DEFAULT_MEM_UTIL
    compute_eff: float = DEFAULT_COMPUTE_EFF
    memory_eff: float = DEFAULT_MEMORY_EFF
    overhead: float = DEFAULT_OVERHEAD
    price_per_hour: float | None = None  # None: the catalog's price for the GPU
    kv_tokens: int | None = None  # an explicit KV budget in tokens ...
    kv_bytes: float | None = None  # ... or in bytes; else derived from memory
    weights: str | None = None  # fp16, bf16, fp8 or int4 (None: ``dtype``)
    kv_dtype: str | None = None  # fp16, bf16 or fp8 (None: ``dtype``)
    tp: int = 1  # GPUs per replica, the model split over them
    max_batched_tokens: int = (
        PROFILE_TOKENS  # the profiling pass the activation reserve is sized for
    )
    engine: str = ""  # the --engine-profile its efficiencies came from ("": the defaults or flags)

    def __post_init__(self) -> None:
        if self.price_per_hour is not None:
            check_price(self.price_per_hour)
        self.step_time  # noqa: B018 - validates dtype and efficiencies now, not at first use
        self.kv  # noqa: B018 - raises if the model does not fit

    @classmethod
    def named(
        cls,
        gpu: str = DEFAULT_GPU,
        model: str = DEFAULT_MODEL,
        catalog: Catalog = DEFAULT_CATALOG,
        dtype: str | None = None,
        **kw,
    ) -> Server:
        g = catalog.gpu(gpu)
        return cls(g, catalog.model(model), dtype or g.default_dtype, **kw)

    @cached_property
    def step_time(self) -> RooflineStepTime:
        return RooflineStepTime(
            self.gpu,
            self.model,
            self.dtype,
            self.compute_eff,
            self.memory_eff,
            self.overhead,
            self.weights,
            self.kv_dtype,
            self.tp,
        )

    @cached_property
    def kv(self) -> KVBudget:
        return kv_budget(
            self.gpu,
            self.model,
            self.dtype,
            self.mem_util,
            self.kv_tokens,
            self.kv_bytes,
            weights=self.weights,
            kv_dtype=self.kv_dtype,
            tp=self.tp,
            max_batched_tokens=self.max_batched_tokens,
        )

    @property
    def gpu_price(self) -> float:
        """Dollars per hour of one GPU."""
        return self.gpu.price_per_hour if self.price_per_hour is None else self.price_per_hour

    @property
    def price(self) -> float:
        """Dollars per hour of the replica: every one of its ``tp`` GPUs is paid for."""
        return self.gpu_price * self.tp

    def describe(self) -> str:
        prec = (
            self.dtype
            if not self.weights or self.weights == self.dtype
            else f"{self.weights} weights"
        )
        prec += f", {self.kv_dtype} KV" if self.kv_dtype and self.kv_dtype != self.dtype else ""
        on = f"{self.tp} x {self.gpu.name} (tensor parallel)" if self.tp > 1 else self.gpu.name
        each = f" (${self.gpu_price:.2f} per GPU)" if self.tp > 1 else ""
        return f"{self.model.name} ({prec}) on {on}, ${self.price:.2f}/h{each}" + (
            "" if self.price_per_hour is not None else " (assumed on-demand price, 2026)"
        )

    def config(self) -> dict:
        """Plain data for reports and JSON."""
        return {
            "gpu": self.gpu.name,
            "model": self.model.name,
            "dtype": self.dtype,
            "mem_util": self.mem_util,
            "compute_eff": self.compute_eff,
            "memory_eff": self.memory_eff,
            "overhead_s": self.overhead,
            "price_per_hour": self.price,
            "kv_budget_tokens": self.kv.tokens,
            "kv_bytes_per_token": self.kv.bytes_per_token,
            "weight_bytes": self.model.weight_bytes(self.weights or self.dtype),
            "weights": self.weights or self.dtype,
            "kv_dtype": self.kv_dtype or self.dtype,
            "tp": self.tp,
            "gpus": self.tp,
            "gpu_price_per_hour": self.gpu_price,
            "kv_budget_bytes": self.kv.bytes,
            "activation_reserve_bytes": activation_bytes(
                self.model, self.max_batched_tokens, tp=self.tp
            ),
            "max_batched_tokens_profiled": self.max_batched_tokens,
            "engine_profile": self.engine or None,
        }
