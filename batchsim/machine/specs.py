"""What a GPU and a model are to the simulator: a few datasheet numbers and a shape.

From the GPU: how fast it multiplies (peak FLOP/s, in 16-bit and, where it has the tensor
cores, in FP8), how fast it reads its memory, how much memory it has (in GiB for HBM cards,
whose "80 GB" is 80 x 2^30 bytes; in decimal GB for GDDR cards), how fast its GPUs talk to
each other (NVLink, Infinity Fabric or PCIe, for tensor parallelism) and what an hour costs.
From the model: its shape. Everything else derives:

- weight bytes = linear-layer parameters x bytes per weight (2 for fp16/bf16, 1 for fp8,
  about 0.52 for 4-bit with its scales) + embedding tables x 2 (quantized checkpoints keep
  the embeddings and the output head in 16-bit);
- KV-cache bytes per token = 2 (a key and a value) x layers x KV heads x head dim x bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import (
    ConfigError,
    check_at_most,
    check_bool,
    check_int_at_least,
    check_nonneg,
    check_positive,
    show,
)

__all__ = [
    "GPU",
    "Model",
    "DTYPES",
    "WEIGHT_DTYPES",
    "KV_DTYPES",
    "dtype_bytes",
    "weight_bytes_per_param",
    "check_weights",
    "check_kv_dtype",
]

#: Bytes per number for the data types a server computes in (activations, and weights by default).
DTYPES = {"fp32": 4, "fp16": 2, "bf16": 2}
#: Bytes per weight stored. int4 is weight-only (AWQ/GPTQ style): 4 bits plus one fp16 scale per
#: group of 128 weights, the group size those checkpoints use; the products run in 16-bit.
WEIGHT_DTYPES = {**DTYPES, "fp8": 1.0, "int4": 0.5 + 2 / 128}
#: Bytes per KV-cache number (vLLM's --kv-cache-dtype fp8 stores e4m3/e5m2: one byte).
KV_DTYPES = {**DTYPES, "fp8": 1}


def dtype_bytes(dtype: str) -> int:
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def check_weights(weights: str) -> None:
    if weights not in WEIGHT_DTYPES:
        raise ConfigError(f"weights must be one of {', '.join(WEIGHT_DTYPES)}, got {show(weights)}")


def check_kv_dtype(kv_dtype: str) -> None:
    if kv_dtype not in KV_DTYPES:
        raise ConfigError(f"kv-dtype must be one of {', '.join(KV_DTYPES)}, got {show(kv_dtype)}")


def weight_bytes_per_param(weights: str) -> float:
    check_weights(weights)
    return WEIGHT_DTYPES[weights]


def _check_text(field: str, value: Any, empty: bool = False) -> None:
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise ConfigError(
            f"{field} must be {'text' if empty else 'a non-empty name'}, got {show(value)}"
        )


# Far past any model there is (the largest have ~2e12 parameters), and inside what int64 sums hold.
_MODEL_MAX = {"params": 1e14, "vocab": 1e8, "max_context": 1e8}


@dataclass(frozen=True)
class GPU:
    """One accelerator. ``tflops``: dense fp16/bf16 tensor-core peak (no 2:4 sparsity).

    ``memory_gib``: ``memory_gb`` is in GiB (2^30 bytes), as an HBM card's datasheet figure is.
    ``tflops_fp8``: dense FP8 peak (0: no FP8 tensor cores; FP8 weights are then read as bytes
    and multiplied in 16-bit, as vLLM's weight-only FP8 kernels do). ``link_gbs``: the GPU-to-GPU
    bandwidth of one GPU, both directions together as datasheets quote it (0: tensor parallelism
    is refused); ``link_latency_us``: the fixed cost of one small all-reduce; ``max_tp``: GPUs in
    one node.
    """

    name: str
    tflops: float
    bandwidth_gbs: float
    memory_gb: float
    price_per_hour: float
    tflops_fp32: float = 0.0  # 0: same as ``tflops`` (a CPU gains nothing from fp16)
    bf16: bool = True
    default_dtype: str = "fp16"
    source: str = ""
    memory_gib: bool = False
    tflops_fp8: float = 0.0
    link: str = ""
    link_gbs: float = 0.0
    link_latency_us: float = 0.0
    max_tp: int = 1

    def __post_init__(self) -> None:
        _check_text("gpu name", self.name)
        # Upper bounds a thousand times past today's largest parts: huge finite numbers would
        # pass every lower bound, then overflow into zero-second steps or infinite budgets.
        for f, most in (("tflops", 1e6), ("bandwidth_gbs", 1e7), ("memory_gb", 1e6)):
            check_positive(f"gpu {self.name}: {f}", getattr(self, f))
            check_at_most(f"gpu {self.name}: {f}", getattr(self, f), most)
        for f, most in (
            ("price_per_hour", 1e6),
            ("tflops_fp32", 1e6),
            ("tflops_fp8", 1e6),
            ("link_gbs", 1e7),
            ("link_latency_us", 1e6),
        ):
            check_nonneg(f"gpu {self.name}: {f}", getattr(self, f))
            check_at_most(f"gpu {self.name}: {f}", getattr(self, f), most)
        check_int_at_least(f"gpu {self.name}: max_tp", self.max_tp, 1)
        check_at_most(f"gpu {self.name}: max_tp", self.max_tp, 1024)
        check_bool(f"gpu {self.name}: bf16", self.bf16)
        check_bool(f"gpu {self.name}: memory_gib", self.memory_gib)
        _check_text(f"gpu {self.name}: default_dtype", self.default_dtype)
        _check_text(f"gpu {self.name}: source", self.source, empty=True)
        _check_text(f"gpu {self.name}: link", self.link, empty=True)
        try:
            dtype_bytes(self.default_dtype)
        except ConfigError as e:
            raise ConfigError(f"gpu {self.name}: default_{e}") from None

    def peak_flops(self, dtype: str) -> float:
        """Peak FLOP/s for matrix multiplies in ``dtype`` (fp8: the FP8 roof where the card has
        one)."""
        if dtype == "fp8":
            return (self.tflops_fp8 or self.tflops) * 1e12
        self.check_dtype(dtype)
        if dtype == "fp32" and self.tflops_fp32 > 0:
            return self.tflops_fp32 * 1e12
        return self.tflops * 1e12

    def check_dtype(self, dtype: str) -> None:
        dtype_bytes(dtype)
        if dtype == "bf16" and not self.bf16:
            raise ConfigError(f"dtype bf16 is not supported by {self.name}; use fp16 or fp32")

    @property
    def bandwidth(self) -> float:
        """Memory bandwidth in bytes per second."""
        return self.bandwidth_gbs * 1e9

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * (2**30 if self.memory_gib else 1e9)

    @property
    def memory_label(self) -> str:
        return f"{self.memory_gb:g} {'GiB' if self.memory_gib else 'GB'}"

    def ridge(self, dtype: str = "fp16") -> float:
        """FLOPs per byte at which the GPU turns from memory-bound to compute-bound."""
        return self.peak_flops(dtype) / self.bandwidth


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer's shape. ``intermediate``: the MLP's width (0: 4 x hidden);
    ``tied``: the output head shares the input embedding's table (GPT-2)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    params: int
    max_context: int
    source: str = ""
    intermediate: int = 0
    tied: bool = False

    def __post_init__(self) -> None:
        _check_text("model name", self.name)
        _check_text(f"model {self.name}: source", self.source, empty=True)
        for f in (
            "layers",
            "hidden",
            "heads",
            "kv_heads",
            "head_dim",
            "vocab",
            "params",
            "max_context",
        ):
            check_int_at_least(f"model {self.name}: {f}", getattr(self, f), 1)
            check_at_most(f"model {self.name}: {f}", getattr(self, f), _MODEL_MAX.get(f, 1e7))
        check_int_at_least(f"model {self.name}: intermediate", self.intermediate, 0)
        check_at_most(f"model {self.name}: intermediate", self.intermediate, 1e7)
        check_bool(f"model {self.name}: tied", self.tied)
        if self.heads % self.kv_heads:
            raise ConfigError(
                f"model {self.name}: heads must be a multiple of kv_heads, got {self.heads} and "
                f"{self.kv_heads}"
            )

    @property
    def mlp_width(self) -> int:
        return self.intermediate or 4 * self.hidden

    @property
    def embedding_params(self) -> int:
        """Parameters in the embedding table and the output head (once if tied), at most all of
        them."""
        return min(self.params, self.vocab * self.hidden * (1 if self.tied else 2))

    def weight_bytes(self, dtype: str = "fp16") -> float:
        """Bytes of weights stored in ``dtype`` (fp16, bf16, fp32, fp8 or int4); an int for
        16/32-bit."""
        if dtype in DTYPES:
            return self.params * DTYPES[dtype]
        # Quantized checkpoints (FP8, AWQ/GPTQ int4) quantize the linear layers only: the
        # embedding table and the output head stay in 16-bit (vLLM loads them so).
        emb = self.embedding_params
        return (self.params - emb) * weight_bytes_per_param(dtype) + emb * 2

    def kv_bytes_per_token(self, dtype: str = "fp16") -> int:
        """A key and a value per layer per KV head: 2 x layers x kv_heads x head_dim x bytes."""
        check_kv_dtype(dtype)
        return 2 * self.layers * self.kv_heads * self.head_dim * KV_DTYPES[dtype]

    def attention_flops_per_pair(self) -> int:
        """FLOPs for one query token attending to one context token, over all layers.

        Q.K^T and the weighted sum of V each cost 2 x head_dim per head; the
        projections are already in 2 x params.
        """
        return 4 * self.layers * self.heads * self.head_dim
