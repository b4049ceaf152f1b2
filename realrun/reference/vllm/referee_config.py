"""What the referee compares, apart from how (``realrun.reference.vllm.referee``): one serving
configuration in batchsim's words, and one step as either scheduler made it. Both sides import
these; the referee imports both sides."""

from __future__ import annotations

from dataclasses import dataclass

from batchsim.core.errors import ConfigError, check_bool, check_int_at_least, show

__all__ = ["RefereeConfig", "StepView"]


@dataclass(frozen=True)
class RefereeConfig:
    """One serving configuration, in batchsim's words (each maps onto one vLLM argument).

    ``kv_blocks``: the KV blocks requests may hold (None: more than any workload needs);
    batchsim's budget is ``kv_blocks * block_size`` tokens, and vLLM is given one block
    more, the null block its ``BlockPool`` keeps for itself (``block_pool.py``:
    ``self.null_block = self.free_block_queue.popleft()``). ``context_len`` is vLLM's
    ``max_model_len``; unchunked, vLLM requires ``max_batched_tokens >= context_len``.
    """

    max_seqs: int = 8
    max_batched_tokens: int = 64
    block_size: int = 16
    chunked_prefill: bool = True
    kv_blocks: int | None = None
    async_scheduling: bool = False
    context_len: int = 1024

    def __post_init__(self) -> None:
        for name in ("max_seqs", "max_batched_tokens", "block_size", "context_len"):
            check_int_at_least(name, getattr(self, name), 1)
        if self.kv_blocks is not None:
            check_int_at_least("kv_blocks", self.kv_blocks, 1)
        check_bool("chunked_prefill", self.chunked_prefill)
        check_bool("async_scheduling", self.async_scheduling)
        if not self.chunked_prefill and self.max_batched_tokens < self.context_len:
            raise ConfigError(
                f"max_batched_tokens must be >= context_len ({self.context_len}) without chunked "
                f"prefill, as vLLM requires, got {show(self.max_batched_tokens)}"
            )

    def describe(self) -> str:
        kv = "no KV limit" if self.kv_blocks is None else f"{self.kv_blocks} KV blocks"
        return (
            f"max_seqs={self.max_seqs}, max_batched_tokens={self.max_batched_tokens}, "
            f"block_size={self.block_size}, "
            f"chunked_prefill={'on' if self.chunked_prefill else 'off'}, {kv}, "
            f"async_scheduling={'on' if self.async_scheduling else 'off'}"
        )


@dataclass(frozen=True)
class StepView:
    """One tick's step, as either side scheduled it (an idle tick has no view).

    tokens: (request id, tokens computed for it this step), by id;
    preempted: requests preempted to make room for this step, by id;
    admitted: requests taken from the queue into this step (new, or resumed after a preemption), by
    id; kv_blocks: KV blocks held once the step is scheduled (its new tokens' blocks included).
    """

    step: int
    tokens: tuple[tuple[int, int], ...] = ()
    preempted: tuple[int, ...] = ()
    admitted: tuple[int, ...] = ()
    kv_blocks: int = 0

    def __str__(self) -> str:
        run = " ".join(f"{r}:{n}" for r, n in self.tokens)
        return (
            f"run [{run}] preempted {list(self.preempted)} admitted {list(self.admitted)} "
            f"kv_blocks {self.kv_blocks}"
        )
