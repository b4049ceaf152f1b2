"""realrun: batchsim's batching policies driving a real PyTorch + transformers model.

The policies are batchsim's own objects; realrun only supplies a wall clock
(``run_real``) and an engine that executes their steps on a real model with its KV
cache in fixed-size blocks of one pool (``Engine``, ``KVPool``), as the policies count them. The
records are batchsim's, so its metrics apply unchanged, and ``profile`` fits batchsim's cost model
to measured step times so that ``compare`` can hold the simulator's prediction against the
measurement.

The offline models (``tiny-gpt2``, ``gpt2-random``, ``tiny-gpt2-50k``, ``gpt2-6l``, ``gpt2-8l-32k``)
have random weights: the timing is real, the text is not. ``realrun.reference.vllm`` serves the same
workloads through vLLM, the reference engine (``--engine vllm``), and profiles it for the simulator.

Importing ``realrun`` loads nothing heavy: each name below is imported from its module when it
is first used, so ``python -m realrun load`` (a load generator, no model) starts without torch.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "reference.baselines": ("ENGINE_NAMES", "HFGenerateEngine", "run_hf_continuous"),
    "judge.compare": ("CompareReport", "compare_policies", "format_compare", "plot_compare"),
    "engine.engine": ("Engine",),
    "engine.inputs": ("prompt_ids",),
    "clock.memory": ("memory_stats",),
    "engine.kvcache": ("KVBatch",),
    "engine.paged.pool": ("KVPool",),
    "engine.paged.attention": ("paged_attention",),
    "engine.model": ("OFFLINE_MODELS", "ByteTokenizer", "LoadedModel", "load_model"),
    "timing.profile": (
        "GRIDS",
        "Grid",
        "Profile",
        "fit_linear",
        "grid_for_workload",
        "measure",
        "profile",
    ),
    "clock.runner": ("context_reason", "run_real"),
}
_MODULE_OF = {name: mod for mod, names in _WHERE.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    mod = _MODULE_OF.get(name)
    if mod is None:
        raise AttributeError(f"module 'realrun' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value  # once imported, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
