"""Engine presets: how far a named engine's passes sit from the roofline, as measured.

The roofline's efficiencies (share of peak FLOP/s, of peak bandwidth) and fixed cost per
pass are properties of an engine's kernels and its scheduler loop as much as of the GPU.
``engines.json`` keeps one set per engine, fitted to that engine's published measurements
(the points of ``published.json`` with the same engine), each with its sources beside it:
data, not code, so a new measurement changes a number and not a line of Python.
``--engine-profile vllm`` picks one; ``--compute-eff`` and the others still override it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..core.errors import ConfigError, check_nonneg, show

__all__ = ["EngineProfile", "engine_profile", "engine_profiles", "ENGINE_NAMES"]

_FILE = Path(__file__).with_name("engines.json")


@dataclass(frozen=True)
class EngineProfile:
    name: str
    compute_eff: float
    memory_eff: float
    overhead: float  # seconds per pass
    source: str
    fitted_on: str = ""  # which published points the numbers were fitted to
    held_out: str = ""  # published points of the engine kept out of the fit, to test it (ids)

    def __post_init__(self) -> None:
        for f in ("compute_eff", "memory_eff"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or not 0.001 <= v <= 1:
                raise ConfigError(
                    f"engine profile {self.name}: {f} must be in [0.001, 1], got {show(v)}"
                )
        check_nonneg(f"engine profile {self.name}: overhead", self.overhead)
        if not self.source.strip():
            raise ConfigError(
                f"engine profile {self.name}: source must name where its numbers come from"
            )

    @property
    def held_out_ids(self) -> tuple[str, ...]:
        return tuple(x.strip() for x in self.held_out.split(",") if x.strip())

    @property
    def knobs(self) -> dict:
        """The ``Server`` arguments it sets."""
        return {
            "compute_eff": self.compute_eff,
            "memory_eff": self.memory_eff,
            "overhead": self.overhead,
        }


@lru_cache(maxsize=1)
def engine_profiles() -> dict[str, EngineProfile]:
    raw = json.loads(_FILE.read_text(encoding="utf-8"))
    return {name: EngineProfile(name=name, **spec) for name, spec in raw["engines"].items()}


ENGINE_NAMES = tuple(engine_profiles())


def engine_profile(name: str) -> EngineProfile:
    table = engine_profiles()
    if not isinstance(name, str) or name.lower() not in table:
        raise ConfigError(f"engine-profile must be one of {', '.join(table)}, got {show(name)}")
    return table[name.lower()]
