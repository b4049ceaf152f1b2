"""batchsim's continuous-batching knobs, said in vLLM's words.

The policy is vLLM's own scheduler, so only batchsim's ``Continuous`` knobs have a
meaning there, and each maps onto one engine argument:

=====================  ===============================  ========================================
batchsim               vLLM engine argument             note
=====================  ===============================  ========================================
max_seqs               max_num_seqs                     rows in a step
max_batched_tokens     max_num_batched_tokens           tokens in a step (vLLM counts decodes too)
block_size             block_size                       a multiple of 32 on vLLM's CPU kernels
chunked_prefill        enable_chunked_prefill
KV budget (tokens)     num_gpu_blocks_override          budget // block_size whole blocks
the model's context    max_model_len                    n_positions
(always)               enable_prefix_caching=False      else a run reuses the last run's cache
(always)               enforce_eager=True               no compilation: minutes on 2 cores
=====================  ===============================  ========================================

With no KV budget, vLLM sizes its cache from ``VLLM_CPU_KVCACHE_SPACE`` (GiB, CPU) or
its memory share (GPU); we cap the CPU's at 1 GiB, which holds every workload a 2-core
machine serves in minutes (131,072 tokens of tiny-gpt2), instead of its default share
of the machine's memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchsim.core.errors import ConfigError, check_bool, check_int_at_least, check_kv_tokens, show

__all__ = ["VLLMKnobs", "knobs_for", "CPU_BLOCK_MULTIPLE", "DEFAULT_CPU_KV_GIB"]

#: vLLM's CPU attention kernels take blocks of a multiple of 32 tokens (it refuses 16 at start-up).
CPU_BLOCK_MULTIPLE = 32
#: The CPU KV cache, in GiB, when no budget is given.
DEFAULT_CPU_KV_GIB = 1


@dataclass(frozen=True)
class VLLMKnobs:
    """vLLM's engine arguments for one serving configuration, checked before vLLM starts."""

    model: str  # a local folder holding the model (``save_model`` writes one)
    max_model_len: int
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    block_size: int = 32
    enable_chunked_prefill: bool = True
    kv_budget_tokens: int | None = None
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size"):
            check_int_at_least(name, getattr(self, name), 1)
        check_bool("chunked_prefill", self.enable_chunked_prefill)
        if self.device == "cpu" and self.block_size % CPU_BLOCK_MULTIPLE:
            raise ConfigError(
                f"block-size must be a multiple of {CPU_BLOCK_MULTIPLE} for vLLM on the CPU (its "
                f"attention kernels), got {show(self.block_size)}"
            )
        if self.kv_budget_tokens is not None:
            check_kv_tokens("kv-budget-tokens", self.kv_budget_tokens)
            # vLLM refuses to start with a cache that cannot hold one request of the model's whole
            # context (plus the block it keeps in hand): it checks this at start-up, we before
            # loading.
            least = (-(-self.max_model_len // self.block_size) + 1) * self.block_size
            if self.kv_budget_tokens < least:
                raise ConfigError(
                    f"kv-budget-tokens must hold one request of the model's whole context for vLLM "
                    f"(at least {least:,} tokens with blocks of {self.block_size}), got "
                    f"{show(self.kv_budget_tokens)}"
                )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            # vLLM's own rule: unchunked, any prompt the model takes must fit one step.
            raise ConfigError(
                f"max-batched-tokens must be at least the model's context ({self.max_model_len}) "
                f"for vLLM without chunked prefill, got {show(self.max_num_batched_tokens)}"
            )

    @property
    def async_scheduling(self) -> bool:
        """Whether vLLM schedules step k+1 while step k runs. Not on the CPU: vLLM 0.32's CPU
        platform turns it off whatever it is asked (``platforms/cpu.py``: "async scheduling is not
        required on CPU"), and its step log agrees: over 60 steps, each was scheduled 0.08 ms after
        the one before had its output processed, none before. On a GPU it is vLLM's default."""
        return self.device != "cpu"

    @property
    def num_blocks(self) -> int | None:
        return None if self.kv_budget_tokens is None else self.kv_budget_tokens // self.block_size

    def engine_args(self) -> dict:
        """Keyword arguments for ``vllm.engine.arg_utils.AsyncEngineArgs``."""
        return {
            "model": self.model,
            "skip_tokenizer_init": True,
            "dtype": self.dtype,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "block_size": self.block_size,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "num_gpu_blocks_override": self.num_blocks,
            "enable_prefix_caching": False,
            "enforce_eager": True,
            "seed": self.seed,
            "disable_log_stats": False,
        }

    def env(self) -> dict[str, str]:
        """Environment for vLLM's processes: the CPU cache's size in GiB (vLLM reads it at
        start-up)."""
        if self.device != "cpu":
            return {}
        gib = DEFAULT_CPU_KV_GIB
        return {"VLLM_CPU_KVCACHE_SPACE": str(gib)}

    def mapping(self, policy=None) -> list[str]:
        """The lines that say how each batchsim knob became a vLLM argument (printed by every vLLM
        run)."""
        kv = (
            "no budget: vLLM's cache of "
            + (f"{DEFAULT_CPU_KV_GIB} GiB" if self.device == "cpu" else "its memory share")
            if self.kv_budget_tokens is None
            else f"{self.kv_budget_tokens:,} tokens -> num_gpu_blocks_override={self.num_blocks} "
            f"blocks of {self.block_size}"
        )
        return [
            "vLLM engine arguments (batchsim knob -> vLLM):",
            f"  max_seqs {self.max_num_seqs} -> max_num_seqs={self.max_num_seqs}",
            f"  max_batched_tokens {self.max_num_batched_tokens} -> "
            f"max_num_batched_tokens={self.max_num_batched_tokens} "
            "(vLLM counts decode tokens in it too)",
            f"  block_size {self.block_size} -> block_size={self.block_size}",
            f"  chunked_prefill {self.enable_chunked_prefill} -> "
            f"enable_chunked_prefill={self.enable_chunked_prefill}",
            f"  KV budget: {kv}",
            f"  context {self.max_model_len} -> max_model_len={self.max_model_len}",
            "  always: enable_prefix_caching=False, enforce_eager=True, temperature 0, ignore_eos, "
            "min_tokens = max_tokens",
        ]


def knobs_for(
    policy,
    model_path: str,
    context_len: int,
    kv_budget_tokens: int | None = None,
    device: str = "cpu",
    dtype: str = "fp32",
    seed: int = 0,
) -> VLLMKnobs:
    """The engine arguments that serve as ``policy`` (a batchsim ``Continuous``) would."""
    if not hasattr(policy, "max_batched_tokens"):
        raise ConfigError(
            f"engine vllm is vLLM's own continuous batching: policy must be continuous, got "
            f"{policy.name}"
        )
    dtypes = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
    return VLLMKnobs(
        model=str(model_path),
        max_model_len=int(context_len),
        max_num_seqs=policy.max_seqs,
        max_num_batched_tokens=policy.max_batched_tokens,
        block_size=policy.block_size,
        enable_chunked_prefill=policy.chunked_prefill,
        kv_budget_tokens=kv_budget_tokens,
        dtype=dtypes.get(dtype, dtype),
        device="cpu" if device == "cpu" else "cuda",
        seed=seed,
    )
