"""The machines and the models: a small catalog of GPUs and transformer shapes.

A simulated server is a GPU running a model. What a GPU and a model are, and the bytes
that derive from them, is ``batchsim.machine.specs``; the built-in entries, each with its
datasheet or model card, are ``batchsim.machine.builtin``. Here: the catalog that names them.

Figures carry their source in a comment. Prices are *assumptions*: typical
on-demand prices for one GPU as of early 2026, which vary between providers by
2-3x and fall every year; ``--gpu-price`` overrides them. Add your own GPUs and
models from a JSON or TOML file (``--catalog FILE``), in the units used below::

    {"gpus":   {"my-gpu":   {"tflops": 100, "bandwidth_gbs": 900, "memory_gb": 48,
                             "price_per_hour": 1.2}},
     "models": {"my-model": {"layers": 24, "hidden": 2048, "heads": 16, "kv_heads": 16,
                             "head_dim": 128, "vocab": 32000, "params": 1.3e9,
                             "max_context": 4096}}}

A GPU may add ``memory_gib`` (true: memory_gb is GiB), ``tflops_fp8``, ``link``, ``link_gbs``,
``link_latency_us`` and ``max_tp``; a model ``intermediate`` and ``tied`` (see ``specs``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.files import read_json, read_text
from .builtin import GPUS, MODELS
from .specs import DTYPES, GPU, KV_DTYPES, WEIGHT_DTYPES, Model, dtype_bytes

__all__ = [
    "GPU",
    "Model",
    "Catalog",
    "DTYPES",
    "WEIGHT_DTYPES",
    "KV_DTYPES",
    "dtype_bytes",
    "DEFAULT_CATALOG",
    "load_catalog",
]


def _lookup(kind: str, table: dict, name: str):
    if name in table:
        return table[name]
    folded = {k.lower(): v for k, v in table.items()}
    if name.lower() in folded:
        return folded[name.lower()]
    raise ConfigError(f"{kind} must be one of {', '.join(table)}, got {name!r}")


@dataclass(frozen=True)
class Catalog:
    gpus: dict[str, GPU] = field(default_factory=lambda: {g.name: g for g in GPUS})
    models: dict[str, Model] = field(default_factory=lambda: {m.name: m for m in MODELS})
    source: str = "built-in"

    def gpu(self, name: str) -> GPU:
        return _lookup("gpu", self.gpus, name)

    def model(self, name: str) -> Model:
        return _lookup("model", self.models, name)

    def merged(self, other: Catalog) -> Catalog:
        return Catalog(
            {**self.gpus, **other.gpus},
            {**self.models, **other.models},
            f"{self.source} + {other.source}",
        )


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
            raise ConfigError(
                f"catalog {path!r}: {kind}.{name} has unknown field {unknown[0]!r} (known: "
                f"{', '.join(sorted(known))})"
            )
        spec = dict(spec)
        if cls is Model:
            # Files may write 6.7e9 for a parameter count: accept integral floats.
            for k, v in spec.items():
                if (
                    isinstance(v, float)
                    and k != "source"
                    and math.isfinite(v)
                    and v == int(v)
                    and abs(v) < 2**63
                ):
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
    """The built-in catalog, with the entries of a JSON or TOML file added (same name: the file
    wins)."""
    if path is None:
        return base
    p = Path(path)
    if p.suffix.lower() == ".toml":
        text = read_text(p, "catalog")
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            raise ConfigError(
                f"catalog {str(p)!r}: TOML needs Python 3.11+ (tomllib); use JSON"
            ) from None
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"catalog {str(p)!r} is not valid TOML: {e}") from None
    else:
        data = read_json(p, "catalog")
    if not isinstance(data, dict) or not set(data) <= {"gpus", "models"}:
        raise ConfigError(f"catalog {str(p)!r} must hold 'gpus' and/or 'models' tables")
    extra = Catalog(
        _entries("gpus", GPU, data.get("gpus"), str(p)),
        _entries("models", Model, data.get("models"), str(p)),
        str(p),
    )
    return base.merged(extra)
