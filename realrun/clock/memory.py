"""The memory a run actually took: CUDA's peak allocation on a GPU, the process's peak RSS
always."""

from __future__ import annotations

import torch

from ..engine.model import LoadedModel

__all__ = ["memory_stats", "reset_memory_stats"]


def reset_memory_stats(lm: LoadedModel) -> None:
    if lm.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def memory_stats(lm: LoadedModel) -> dict:
    """Actual memory: CUDA's peak allocation on a GPU; the process's peak RSS always."""
    import resource

    # Linux reports KiB
    out = {"peak_rss_bytes": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024}
    if lm.device.startswith("cuda"):
        out["cuda_max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
    return out
