"""realrun: batchsim's batching policies driving a real PyTorch + transformers model.

The policies are batchsim's own objects; realrun only supplies a wall clock
(``run_real``) and an engine that executes their steps on a real model with a
batched KV cache (``Engine``). The records are batchsim's, so its metrics apply
unchanged, and ``profile`` fits batchsim's cost model to measured step times so that
``compare`` can hold the simulator's prediction against the measurement.

The offline models (``tiny-gpt2``, ``gpt2-random``, ``tiny-gpt2-50k``) have random weights:
the timing is real, the text is not. ``realrun.vllm`` serves the same workloads through vLLM,
the reference engine (``--engine vllm``), and profiles it for the simulator.
"""

from .baselines import ENGINE_NAMES, HFGenerateEngine, run_hf_continuous
from .compare import CompareReport, compare_policies, format_compare, plot_compare
from .engine import Engine, memory_stats, prompt_ids
from .kvcache import KVBatch
from .model import OFFLINE_MODELS, ByteTokenizer, LoadedModel, load_model
from .profile import (
    GRIDS,
    Grid,
    Profile,
    fit_linear,
    grid_for_workload,
    measure,
    profile,
)
from .runner import context_reason, run_real

__all__ = [
    "ENGINE_NAMES", "OFFLINE_MODELS", "ByteTokenizer", "CompareReport", "Engine", "GRIDS", "Grid", "HFGenerateEngine",
    "KVBatch", "LoadedModel", "Profile", "compare_policies", "context_reason", "fit_linear", "format_compare",
    "grid_for_workload", "load_model", "measure", "memory_stats", "plot_compare", "profile", "prompt_ids",
    "run_hf_continuous", "run_real",
]
