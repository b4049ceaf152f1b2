"""What the engines feed the model: a request's prompt as token ids, and the name of the forward's
cache argument.

Shared by every engine (ours, the Hugging Face baselines, vLLM's client), so that the same request
gets the same prompt whichever engine serves it.
"""

from __future__ import annotations

from batchsim.core.errors import ConfigError, check_int_at_least, show
from batchsim.core.workload import Request, seeded_prompt

__all__ = ["prompt_ids", "cache_argument"]


def prompt_ids(req: Request, vocab: int, tokenizer=None, seed: int = 0) -> list[int]:
    """The request's prompt as exactly ``prompt_tokens`` ids.

    From ``req.text`` when given (encoded, then cut or cycled to the workload's length, because
    the policy schedules by that length and a trace's token counts come from another
    tokenizer); otherwise seeded from (seed, request id), so every engine and every policy
    sees the same prompt for the same request.
    """
    if not isinstance(req, Request):
        raise ConfigError(f"req must be a Request (workload.request(i)), got {show(req)}")
    check_int_at_least("vocab", vocab, 1)
    check_int_at_least("seed", seed, 0)
    n = req.prompt_tokens
    if req.text and tokenizer is not None:
        # A folder's tokenizer may know more ids than its model has rows (a resized vocabulary):
        # an id past the last row is an IndexError in the embedding, so it is left out.
        ids = [i for i in tokenizer.encode(req.text) if 0 <= i < vocab]
        if ids:
            return (ids * (n // len(ids) + 1))[:n]
    return seeded_prompt(seed, req.id, n, vocab)


def cache_argument(model) -> str:
    """The forward argument that takes the KV cache: ``cache`` in recent transformers,
    ``past_key_values`` before. A model that silently swallowed the wrong name would decode with no
    context at all (the transformers 5.19 that vLLM pins knows only ``past_key_values``)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"
