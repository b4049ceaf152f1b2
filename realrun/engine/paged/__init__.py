"""The engine's KV cache as fixed-size blocks of one pool: the pool (``pool``), the attention that
reads each row's blocks in place (``attention``), and the passes over them (``passes``)."""

from .attention import attention_reference, kernel_available, paged_attention
from .pool import KVPool, PagedPass, PoolFull

__all__ = [
    "KVPool",
    "PagedPass",
    "PoolFull",
    "paged_attention",
    "attention_reference",
    "kernel_available",
]
