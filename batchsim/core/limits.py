"""What the server can hold: the limits every policy obeys on both clocks.

A server, simulated or real, has three hard limits:

- ``kv_budget_tokens``: how many tokens of KV cache fit in its memory;
- ``context_len``: how many positions the model has (GPT-2's ``n_positions`` is 1,024).
  A request is fed ``prompt + output - 1`` tokens (its last token is never fed back), so
  that must fit. In a padded batch every row decodes until the batch's *longest* output
  is done, so the batch's longest prompt plus its longest output must fit, even when
  each request fits alone;
- ``max_step_tokens``: the most tokens one forward pass may compute (activation memory).
  A padded batch computes rows x longest prompt in its prefill, padding included.

The policies are handed these limits by ``Policy.start`` and enforce them themselves:
a request that can never run is rejected on arrival with a reason from this module,
and a padded batch is cut to the rows that fit, as it is cut for KV memory. Because
the simulator and the real run call the same policy with the same limits, they reject
the same requests with the same words.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError, check_kv_tokens, is_integer, show

__all__ = ["ServerLimits", "as_limits"]


def _check_limit(field: str, value) -> None:
    if value is None:
        return
    if field == "kv_budget_tokens":
        check_kv_tokens(field, value)
    elif not is_integer(value) or value < 1:
        raise ConfigError(
            f"{field} must be an integer >= 1 (or None for no limit), got {show(value)}"
        )


@dataclass(frozen=True)
class ServerLimits:
    """The server's hard limits; None means no limit of that kind."""

    kv_budget_tokens: int | None = None
    context_len: int | None = None
    max_step_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("kv_budget_tokens", "context_len", "max_step_tokens"):
            v = getattr(self, name)
            _check_limit(name, v)
            if v is not None:
                object.__setattr__(self, name, int(v))  # numpy integers in, plain ints out

    # -- one request ------------------------------------------------------------------------
    def context_reason(self, prompt: int, output: int) -> str | None:
        """Why a request cannot run within the model's context (None if it can)."""
        if self.context_len is not None and prompt + output - 1 > self.context_len:
            return (
                f"prompt of {prompt} tokens + output of {output} exceeds the model's context of "
                f"{self.context_len} positions"
            )
        return None

    def step_tokens_reason(self, tokens: int, what: str = "prompt") -> str | None:
        """Why a pass of ``tokens`` tokens cannot run (None if it can)."""
        if self.max_step_tokens is not None and tokens > self.max_step_tokens:
            return (
                f"{what} of {tokens} tokens exceeds the server's "
                f"max_step_tokens={self.max_step_tokens}"
            )
        return None

    # -- a padded batch ---------------------------------------------------------------------
    def padded_batch_fits(self, rows: int, longest_prompt: int, longest_output: int) -> bool:
        """Whether a padded batch of this shape fits: KV reserved, positions used, prefill size."""
        if (
            self.kv_budget_tokens is not None
            and rows * (longest_prompt + longest_output) > self.kv_budget_tokens
        ):
            return False
        if self.context_len is not None and longest_prompt + longest_output - 1 > self.context_len:
            return False
        if self.max_step_tokens is not None and rows * longest_prompt > self.max_step_tokens:
            return False
        return True

    def describe(self) -> str:
        parts = []
        if self.kv_budget_tokens is not None:
            parts.append(f"KV budget {self.kv_budget_tokens:,} tokens")
        if self.context_len is not None:
            parts.append(f"context {self.context_len:,} positions")
        if self.max_step_tokens is not None:
            parts.append(f"at most {self.max_step_tokens:,} tokens per pass")
        return ", ".join(parts) or "no limits"


def as_limits(limits: ServerLimits | int | None) -> ServerLimits:
    """A ServerLimits from itself, a KV budget in tokens (the older spelling), or None."""
    if isinstance(limits, ServerLimits):
        return limits
    return ServerLimits(kv_budget_tokens=limits)
