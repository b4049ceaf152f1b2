"""The machines and the models: a small catalog of GPUs and transformer shapes.

A simulated server is a GPU running a model. From the GPU we need four numbers:
how fast it multiplies (peak FLOP/s), how fast it reads its memory (bandwidth),
how much memory it has, and what an hour of it costs. From the model we need
its shape: layers, hidden size, attention heads and KV heads, head size,
vocabulary, parameter count and longest context. Everything else derives:

- weight bytes = parameters x bytes per number (2 for fp16/bf16, 4 for fp32);
- KV-cache bytes per token = 2 (a key and a value) x layers x KV heads x head dim
  x bytes per number. Grouped-query attention (Llama-3, Mistral: 8 KV heads for
  32 query heads) is why their cache is 4x smaller than Llama-2's.

Figures carry their source in a comment. Prices are *assumptions*: typical
on-demand prices for one GPU as of early 2026, which vary between providers by
2-3x and fall every year; ``--gpu-price`` overrides them. Add your own GPUs and
models from a JSON or TOML file (``--catalog FILE``), in the units used below::

    {"gpus":   {"my-gpu":   {"tflops": 100, "bandwidth_gbs": 900, "memory_gb": 48, "price_per_hour": 1.2}},
     "models": {"my-model": {"layers": 24, "hidden": 2048, "heads": 16, "kv_heads": 16,
                             "head_dim": 128, "vocab": 32000, "params": 1.3e9, "max_context": 4096}}}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError, check_at_most, check_bool, check_int_at_least, check_nonneg, check_positive, show
from ..core.files import read_json, read_text

__all__ = ["GPU", "Model", "Catalog", "DTYPES", "dtype_bytes", "DEFAULT_CATALOG", "load_catalog"]

#: Bytes per number for the data types a server may run in.
DTYPES = {"fp32": 4, "fp16": 2, "bf16": 2}


def dtype_bytes(dtype: str) -> int:
    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def _check_text(field: str, value: Any, empty: bool = False) -> None:
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise ConfigError(f"{field} must be {'text' if empty else 'a non-empty name'}, got {show(value)}")


# Far past any model there is (the largest have ~2e12 parameters), and inside what int64 sums hold.
_MODEL_MAX = {"params": 1e14, "vocab": 1e8, "max_context": 1e8}


@dataclass(frozen=True)
class GPU:
    """One accelerator. ``tflops``: dense fp16/bf16 tensor-core peak (no 2:4 sparsity)."""

    name: str
    tflops: float
    bandwidth_gbs: float
    memory_gb: float
    price_per_hour: float
    tflops_fp32: float = 0.0  # 0: same as ``tflops`` (a CPU gains nothing from fp16)
    bf16: bool = True
    default_dtype: str = "fp16"
    source: str = ""

    def __post_init__(self) -> None:
        _check_text("gpu name", self.name)
        # Upper bounds a thousand times past today's largest parts: huge finite numbers would
        # pass every lower bound, then overflow into zero-second steps or infinite budgets.
        for f, most in (("tflops", 1e6), ("bandwidth_gbs", 1e7), ("memory_gb", 1e6)):
            check_positive(f"gpu {self.name}: {f}", getattr(self, f))
            check_at_most(f"gpu {self.name}: {f}", getattr(self, f), most)
        for f, most in (("price_per_hour", 1e6), ("tflops_fp32", 1e6)):
            check_nonneg(f"gpu {self.name}: {f}", getattr(self, f))
            check_at_most(f"gpu {self.name}: {f}", getattr(self, f), most)
        check_bool(f"gpu {self.name}: bf16", self.bf16)
        _check_text(f"gpu {self.name}: default_dtype", self.default_dtype)
        _check_text(f"gpu {self.name}: source", self.source, empty=True)
        try:
            dtype_bytes(self.default_dtype)
        except ConfigError as e:
            raise ConfigError(f"gpu {self.name}: default_{e}") from None

    def peak_flops(self, dtype: str) -> float:
        """Peak FLOP/s for matrix multiplies in ``dtype``."""
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
        return self.memory_gb * 1e9

    def ridge(self, dtype: str = "fp16") -> float:
        """FLOPs per byte at which the GPU turns from memory-bound to compute-bound."""
        return self.peak_flops(dtype) / self.bandwidth


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer's shape."""

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

    def __post_init__(self) -> None:
        _check_text("model name", self.name)
        _check_text(f"model {self.name}: source", self.source, empty=True)
        for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "vocab", "params", "max_context"):
            check_int_at_least(f"model {self.name}: {f}", getattr(self, f), 1)
            check_at_most(f"model {self.name}: {f}", getattr(self, f), _MODEL_MAX.get(f, 1e7))
        if self.heads % self.kv_heads:
            raise ConfigError(f"model {self.name}: heads must be a multiple of kv_heads, got {self.heads} and {self.kv_heads}")

    def weight_bytes(self, dtype: str = "fp16") -> int:
        return self.params * dtype_bytes(dtype)

    def kv_bytes_per_token(self, dtype: str = "fp16") -> int:
        """A key and a value per layer per KV head: 2 x layers x kv_heads x head_dim x bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes(dtype)

    def attention_flops_per_pair(self) -> int:
        """FLOPs for one query token attending to one context token, over all layers.

        Q.K^T and the weighted sum of V each cost 2 x head_dim per head; the
        projections are already in 2 x params.
        """
        return 4 * self.layers * self.heads * self.head_dim


# --- the built-in catalog -----------------------------------------------------------------
# Peak figures are NVIDIA's datasheet numbers for dense tensor-core fp16/bf16 (the
# "with sparsity" figures are twice these and do not apply to ordinary weights).
# Memory in decimal GB as on the datasheets (an "80 GB" A100 has 80 GiB = 85.9e9 bytes;
# the decimal figure is the conservative one, and --mem-util leaves headroom anyway).
# Prices: ASSUMED typical on-demand price for ONE GPU, early 2026, rounded; hyperscalers
# charge up to ~2-3x these, smaller GPU clouds less. They are for teaching arithmetic,
# not for budgeting: pass --gpu-price with your provider's figure.
_GPUS = (
    # NVIDIA T4 datasheet: 65 TFLOPS fp16 (mixed precision), 8.1 TFLOPS fp32, 16 GB GDDR6, 320 GB/s.
    # Turing has no bf16. Price: assumed ~$0.50/h (AWS g4dn.xlarge lists $0.526/h on demand).
    GPU("T4", 65, 320, 16, 0.50, tflops_fp32=8.1, bf16=False,
        source="NVIDIA T4 datasheet; price assumed (2026)"),
    # NVIDIA L4 datasheet: 242 TFLOPS fp16/bf16 *with sparsity* -> 121 dense; 30.3 fp32; 24 GB, 300 GB/s.
    GPU("L4", 121, 300, 24, 0.80, tflops_fp32=30.3,
        source="NVIDIA L4 datasheet; price assumed (2026)"),
    # A10G (AWS G5 only; NVIDIA publishes no datasheet): 24 GB GDDR6 at 600 GB/s like the A10, but
    # ~70 TFLOPS bf16 tensor instead of the A10's 125 (Baseten, "NVIDIA A10 vs A10G for ML model
    # inference"). fp32 31.2 TFLOPS. Price: assumed ~$1.00/h (AWS g5.xlarge lists $1.006/h).
    GPU("A10G", 70, 600, 24, 1.00, tflops_fp32=31.2,
        source="Baseten A10 vs A10G spec comparison; price assumed (2026)"),
    # NVIDIA A100 datasheet: 312 TFLOPS bf16/fp16 dense, 19.5 fp32 (non-tensor);
    # A100 40GB SXM: 1,555 GB/s; A100 80GB SXM: 2,039 GB/s.
    GPU("A100-40GB", 312, 1555, 40, 1.80, tflops_fp32=19.5,
        source="NVIDIA A100 datasheet (SXM); price assumed (2026)"),
    GPU("A100-80GB", 312, 2039, 80, 2.50, tflops_fp32=19.5,
        source="NVIDIA A100 datasheet (SXM); price assumed (2026)"),
    # NVIDIA H100 datasheet, SXM5: 1,979 TFLOPS bf16 with sparsity -> 989 dense; 67 fp32; 80 GB HBM3, 3.35 TB/s.
    GPU("H100-SXM", 989, 3350, 80, 3.50, tflops_fp32=67,
        source="NVIDIA H100 datasheet (SXM); price assumed (2026)"),
    # NVIDIA H200 datasheet, SXM: same compute as H100 SXM; 141 GB HBM3e, 4.8 TB/s.
    GPU("H200", 989, 4800, 141, 4.50, tflops_fp32=67,
        source="NVIDIA H200 datasheet (SXM); price assumed (2026)"),
    # A CPU is a placeholder meant to be *calibrated*: these are round figures for a small
    # cloud VM (2 AVX2 cores x 3 GHz x 32 fp32 FLOP/cycle ~ 0.2 TFLOP/s; ~20 GB/s DRAM).
    # Measure yours (python -m realrun profile), turn the fit into an entry with
    # batchsim.machine.roofline.calibrated_gpu, and put its figures in a --catalog file.
    GPU("cpu", 0.2, 20, 16, 0.10, tflops_fp32=0.2, default_dtype="fp32",
        source="round figures for a 2-core VM, to be calibrated; price assumed"),
)

# Shapes from each model's Hugging Face config.json; parameter counts as PyTorch counts them
# (tied embeddings once). GPT-2 family: OpenAI GPT-2 (Radford et al., 2019), 1,024 positions.
_MODELS = (
    Model("distilgpt2", 6, 768, 12, 12, 64, 50257, 81_912_576, 1024,
          source="huggingface.co/distilbert/distilgpt2 config.json"),
    Model("gpt2", 12, 768, 12, 12, 64, 50257, 124_439_808, 1024,
          source="huggingface.co/openai-community/gpt2 config.json"),
    Model("gpt2-medium", 24, 1024, 16, 16, 64, 50257, 354_823_168, 1024,
          source="huggingface.co/openai-community/gpt2-medium config.json"),
    Model("gpt2-large", 36, 1280, 20, 20, 64, 50257, 774_030_080, 1024,
          source="huggingface.co/openai-community/gpt2-large config.json"),
    Model("gpt2-xl", 48, 1600, 25, 25, 64, 50257, 1_557_611_200, 1024,
          source="huggingface.co/openai-community/gpt2-xl config.json"),
    # Llama 2 (Touvron et al., 2023): multi-head attention, so 32 KV heads; 4,096 context.
    Model("llama-2-7b", 32, 4096, 32, 32, 128, 32000, 6_738_415_616, 4096,
          source="huggingface.co/meta-llama/Llama-2-7b-hf config.json"),
    # Llama 3 8B (Meta, 2024): grouped-query attention with 8 KV heads, 128k vocabulary, 8,192 context.
    Model("llama-3-8b", 32, 4096, 32, 8, 128, 128256, 8_030_261_248, 8192,
          source="huggingface.co/meta-llama/Meta-Llama-3-8B config.json"),
    # Mistral 7B v0.1 (Jiang et al., 2023): GQA with 8 KV heads; 32,768 positions (4,096 sliding window,
    # which this model ignores: it caches every token, as v0.2+ do).
    Model("mistral-7b", 32, 4096, 32, 8, 128, 32000, 7_241_732_096, 32768,
          source="huggingface.co/mistralai/Mistral-7B-v0.1 config.json"),
)


def _lookup(kind: str, table: dict, name: str):
    if name in table:
        return table[name]
    folded = {k.lower(): v for k, v in table.items()}
    if name.lower() in folded:
        return folded[name.lower()]
    raise ConfigError(f"{kind} must be one of {', '.join(table)}, got {name!r}")


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GPU] = field(default_factory=lambda: {g.name: g for g in _GPUS})
    models: dict[str, Model] = field(default_factory=lambda: {m.name: m for m in _MODELS})
    source: str = "built-in"

    def gpu(self, name: str) -> GPU:
        return _lookup("gpu", self.gpus, name)

    def model(self, name: str) -> Model:
        return _lookup("model", self.models, name)

    def merged(self, other: "Catalog") -> "Catalog":
        return Catalog({**self.gpus, **other.gpus}, {**self.models, **other.models}, f"{self.source} + {other.source}")


DEFAULT_CATALOG = Catalog()


def _entries(kind: str, cls, raw: Any, path: str) -> dict:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"catalog {path!r}: {kind} must be a table of named entries")
    known = {f.name for f in fields(cls)} - {"name"}
    out = {}
    for name, spec in raw.items():
        if not name.strip():
            raise ConfigError(f"catalog {path!r}: {kind} names must not be empty")
        if not isinstance(spec, dict):
            raise ConfigError(f"catalog {path!r}: {kind}.{name} must be a table of fields")
        unknown = sorted(set(spec) - known)
        if unknown:
            raise ConfigError(f"catalog {path!r}: {kind}.{name} has unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")
        spec = dict(spec)
        if cls is Model:
            # Files may write 6.7e9 for a parameter count: accept integral floats.
            for k, v in spec.items():
                if isinstance(v, float) and k != "source" and math.isfinite(v) and v == int(v) and abs(v) < 2**63:
                    spec[k] = int(v)
        spec.setdefault("source", path)
        try:
            out[name] = cls(name=name, **spec)
        except TypeError as e:
            raise ConfigError(f"catalog {path!r}: {kind}.{name}: {e}") from None
        except ConfigError as e:
            raise ConfigError(f"catalog {path!r}: {e}") from None
    return out


def load_catalog(path: str | Path | None = None, base: Catalog = DEFAULT_CATALOG) -> Catalog:
    """The built-in catalog, with the entries of a JSON or TOML file added (same name: the file wins)."""
    if path is None:
        return base
    p = Path(path)
    if p.suffix.lower() == ".toml":
        text = read_text(p, "catalog")
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            raise ConfigError(f"catalog {str(p)!r}: TOML needs Python 3.11+ (tomllib); use JSON") from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"catalog {str(p)!r} is not valid TOML: {e}") from None
    else:
        data = read_json(p, "catalog")
    if not isinstance(data, dict) or not set(data) <= {"gpus", "models"}:
        raise ConfigError(f"catalog {str(p)!r} must hold 'gpus' and/or 'models' tables")
    extra = Catalog(_entries("gpus", GPU, data.get("gpus"), str(p)), _entries("models", Model, data.get("models"), str(p)), str(p))
    return base.merged(extra)
