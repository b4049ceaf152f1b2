"""Tensor parallelism: one model split over several GPUs of one node.

Each GPU holds 1/tp of every weight matrix and of every token's KV heads, so a pass reads
1/tp of the bytes and does 1/tp of the FLOPs on each GPU, at once. The price is talk: after
the attention and after the MLP of every layer, the GPUs add up their partial results (an
all-reduce) before the next layer can start. On NVLink that costs a few microseconds per
all-reduce; over PCIe, tens, and large prefills move real data. ``RooflineStepTime.allreduce_s``
prices it from the catalogue's link; here are the rules a split must obey.
"""

from __future__ import annotations

from ..core.errors import ConfigError, check_int_at_least, show
from .specs import GPU, Model

__all__ = ["LINK_EFF", "check_tp", "TP_CHOICES"]

#: The share of a link's one-way bandwidth a ring all-reduce reaches: NCCL's all_reduce_perf
#: reports a bus bandwidth of roughly 80 % of NVLink's. ASSUMED for every link.
LINK_EFF = 0.8
#: The splits ``plan`` tries: the power-of-two degrees vLLM and TensorRT-LLM deploy.
TP_CHOICES = (1, 2, 4, 8)


def check_tp(gpu: GPU, tp: int, model: Model | None = None) -> None:
    """A split the hardware and the model allow, or a ConfigError naming --tp and why not."""
    check_int_at_least("tp", tp, 1)
    if tp == 1:
        return
    if gpu.link_gbs <= 0:
        raise ConfigError(
            f"tp {show(tp)}: gpu {gpu.name} has no GPU-to-GPU link in the catalogue (link_gbs 0); "
            "use --tp 1 or a GPU with NVLink or PCIe figures"
        )
    if tp > gpu.max_tp:
        raise ConfigError(
            f"tp must be at most {gpu.max_tp} for {gpu.name} (the GPUs of one node), got {show(tp)}"
        )
    if model is not None and model.heads % tp:
        raise ConfigError(
            f"tp {show(tp)} does not divide {model.name}'s {model.heads} attention heads"
        )
