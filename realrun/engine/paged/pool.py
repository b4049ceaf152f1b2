"""The KV cache as fixed-size blocks from one pool, sized once at start-up: what vLLM does, and
what batchsim's ``BlockPool`` counts.

A car park of numbered bays, each holding ``block_size`` tokens of one request; a request's
context is the list of its bays (its block table), wherever they lie. A new token goes into
the request's last bay, or into a fresh one taken from the free list when that is full; a
request that leaves hands its bays back. Nothing is padded to the longest request and nothing
is ever copied or grown: the pool's tensors are allocated once, and their bytes are exactly
blocks x block bytes, as the policy counts them.

``PagedPass`` is one forward pass over the pool: the rows it runs (each with the number of
new tokens it brings), where each new token's keys and values go, and the tensors the
attention kernel reads. It is handed to the model as its cache: transformers' attention
layer calls ``update(keys, values, layer)``, which writes the new tokens into their bays and
returns the pool; the attention function registered as ``ATTENTION`` then reads each row's
blocks in place (``attention.paged_attention``).
"""

from __future__ import annotations

import torch

from .attention import paged_attention

__all__ = ["KVPool", "PagedPass", "ATTENTION", "use_paged_attention", "PoolFull"]

#: The name the paged attention function is registered under in transformers.
ATTENTION = "realrun_paged"


class PoolFull(RuntimeError):
    """More blocks asked for than the pool holds: the policy and the pool disagree on the budget."""


class KVPool:
    """``blocks`` blocks of ``block_size`` tokens for every layer of ``shapes`` ((KV heads, head
    dim) per layer)."""

    def __init__(
        self,
        shapes: list[tuple[int, int]],
        blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device,
    ) -> None:
        if blocks < 1 or block_size < 1:
            raise ValueError(
                f"a KV pool needs at least one block of at least one token, got {blocks} x "
                f"{block_size}"
            )
        self.shapes, self.blocks, self.block_size, self.dtype, self.device = (
            shapes,
            blocks,
            block_size,
            dtype,
            device,
        )
        # Zeroed once: a bay is always written before it is read, but a NaN left in memory must
        # never reach a product (the kernel reads only written bays; the reference path reads whole
        # blocks).
        self.K = [
            torch.zeros(blocks, h, block_size, d, dtype=dtype, device=device) for h, d in shapes
        ]
        self.V = [
            torch.zeros(blocks, h, block_size, d, dtype=dtype, device=device) for h, d in shapes
        ]
        self._free = list(range(blocks - 1, -1, -1))  # a stack: the lowest numbers first
        self.table: dict[int, list[int]] = {}  # request -> its blocks, in order
        self.length: dict[int, int] = {}  # request -> tokens cached
        self.peak_blocks = 0

    # -- looking -----------------------------------------------------------------------
    @property
    def block_bytes(self) -> int:
        """Bytes of one block, keys and values of every layer."""
        return (
            2
            * self.block_size
            * sum(h * d for h, d in self.shapes)
            * torch.tensor([], dtype=self.dtype).element_size()
        )

    @property
    def nbytes(self) -> int:
        """Bytes reserved: the whole pool, allocated at start-up."""
        return self.blocks * self.block_bytes

    @property
    def used_blocks(self) -> int:
        return self.blocks - len(self._free)

    def __contains__(self, rid: int) -> bool:
        return rid in self.table

    # -- requests ------------------------------------------------------------------------
    def grow(self, rid: int, n: int) -> list[int]:
        """Room for ``n`` more tokens of ``rid`` (a new request starts at 0): the slots
        (block x block_size + offset) its new tokens go to."""
        table = self.table.setdefault(rid, [])
        start = self.length.get(rid, 0)
        end = start + n
        bs = self.block_size
        need = -(-end // bs) - len(table)
        if need > len(self._free):
            raise PoolFull(
                f"request {rid} needs {need} more KV blocks, {len(self._free)} of {self.blocks} "
                f"are free"
            )
        for _ in range(need):
            table.append(self._free.pop())
        self.length[rid] = end
        self.peak_blocks = max(self.peak_blocks, self.used_blocks)
        return [table[p // bs] * bs + p % bs for p in range(start, end)]

    def free(self, rid: int) -> None:
        """``rid`` leaves (finished, preempted or cancelled): its blocks go back to the pool."""
        self._free.extend(reversed(self.table.pop(rid, [])))
        self.length.pop(rid, None)

    def fill_random(self, rid: int, n: int, gen: torch.Generator) -> None:
        """``n`` tokens of random keys and values for ``rid`` (the profiler's rows: shapes, not
        values)."""
        slots = torch.tensor(self.grow(rid, n), dtype=torch.long, device=self.device)
        blk, off = slots // self.block_size, slots % self.block_size
        for K, V in zip(self.K, self.V):
            K[blk, :, off] = torch.randn(
                n, K.shape[1], K.shape[3], generator=gen, dtype=self.dtype, device=self.device
            )
            V[blk, :, off] = torch.randn(
                n, V.shape[1], V.shape[3], generator=gen, dtype=self.dtype, device=self.device
            )

    def blocks_wanted(self, rows: list[int], new: list[int]) -> int:
        """Blocks more that ``rows``, bringing ``new`` tokens each, would take."""
        bs, table, length = self.block_size, self.table, self.length
        return sum(
            -(-(length.get(r, 0) + n) // bs) - len(table.get(r, ())) for r, n in zip(rows, new)
        )

    def enlarge(self, extra: int) -> None:
        """``extra`` blocks more, every block kept where it is (a copy of the whole pool: never in a
        sized run)."""
        K, V, old = self.K, self.V, self.blocks
        self.blocks = old + int(extra)
        self.K = [
            torch.zeros(self.blocks, *k.shape[1:], dtype=self.dtype, device=self.device) for k in K
        ]
        self.V = [
            torch.zeros(self.blocks, *v.shape[1:], dtype=self.dtype, device=self.device) for v in V
        ]
        for new, was in zip(self.K + self.V, K + V):
            new[:old] = was
        self._free = list(range(self.blocks - 1, old - 1, -1)) + self._free

    # -- a pass ----------------------------------------------------------------------------
    def plan(self, rows: list[int], new: list[int]) -> PagedPass:
        """A pass over ``rows``, row i bringing ``new[i]`` tokens (taken room for here)."""
        slots: list[int] = []
        for rid, n in zip(rows, new):
            slots.extend(self.grow(rid, n))
        return PagedPass(self, rows, new, slots)


class PagedPass:
    """One forward pass over the pool; passed to the model as its cache (see the module's
    docstring)."""

    is_compileable = False

    def __init__(self, pool: KVPool, rows: list[int], new: list[int], slots: list[int]) -> None:
        dev, bs = pool.device, pool.block_size
        self.pool = pool
        s = torch.tensor(slots, dtype=torch.long, device=dev)
        self.block, self.offset = s // bs, s % bs
        tables = [pool.table[r] for r in rows]
        widest = max(len(t) for t in tables)
        self.table = torch.tensor(
            [t + [0] * (widest - len(t)) for t in tables], dtype=torch.long, device=dev
        )
        self.ctx = torch.tensor([pool.length[r] for r in rows], dtype=torch.long, device=dev)
        starts = [0]
        for n in new:
            starts.append(starts[-1] + n)
        self.q_start = torch.tensor(starts, dtype=torch.long, device=dev)
        # each row's last new token: where its next token is read
        self.last = [e - 1 for e in starts[1:]]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
    ):
        """The new tokens' keys and values ([1, heads, tokens, head dim]) into their bays; the
        layer's pool back."""
        K, V = self.pool.K[layer_idx], self.pool.V[layer_idx]
        K[self.block, :, self.offset] = key_states[0].transpose(0, 1)
        V[self.block, :, self.offset] = value_states[0].transpose(0, 1)
        return K, V

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0  # positions are given explicitly: nothing reads this


def _paged_attention_forward(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, paged=None, **kwargs
):
    """transformers' attention interface: query [1, heads, tokens, head dim]; key and value the
    layer's pool."""
    if paged is None:
        raise RuntimeError(
            "the paged attention needs the pass (paged=...) among the forward's arguments"
        )
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = paged_attention(
        query[0].transpose(0, 1), key, value, paged.table, paged.ctx, paged.q_start, scale
    )
    return out[None], None


def use_paged_attention(module: torch.nn.Module) -> bool:
    """Make ``module`` (a model body of its own, as ``packed_model`` copies it) attend over the
    pool. False where its config has no attention implementation to set (it keeps its own)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, _paged_attention_forward)
    cfg = getattr(module, "config", None)
    if cfg is None or not hasattr(cfg, "_attn_implementation_internal"):
        return False
    cfg._attn_implementation_internal = ATTENTION
    return True
