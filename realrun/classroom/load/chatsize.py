"""Chat prompts sized in tokens as the server counts them: after its chat template, with its
tokenizer.

A chat message is text, and ``--prompt-len N`` means N prompt tokens, but the server tokenises the
text with the model's tokenizer and adds its chat template first. Words that GPT-2 reads as one
token each are three to six tokens each to the default model's byte tokenizer, so a chat of "100
tokens" reached ``realrun serve`` as 367-375. Here the text is cut so that ``realrun serve``'s
template (``realrun.classroom.serve.protocol.chat_text``) around it encodes to exactly N tokens,
with the served model's tokenizer: the byte tokenizer for realrun's offline models, else the model's
own from the local cache. Where neither is at hand (or the server applies another template, as
``vllm serve`` does), the words are sent as before and the report's prompt lengths are the server's
own count (``usage``).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["chat_sizer"]


def _tokenizer(model: str):
    from ...engine.model import OFFLINE_MODELS, ByteTokenizer, load_tokenizer

    if model in OFFLINE_MODELS:
        return ByteTokenizer()
    return load_tokenizer(model)


def _template(content: str) -> str:
    from ..serve.protocol import chat_text

    return chat_text([{"role": "user", "content": content}])


def chat_sizer(model: str) -> Callable[[str, int], str] | None:
    """``size(words, n)``: a prefix of ``words`` whose templated chat is ``n`` tokens (or as near as
    the tokenizer allows, never over unless the template alone is); None without the model's
    tokenizer."""
    tok = _tokenizer(model)
    if tok is None:
        return None
    overhead = len(tok.encode(_template("")))

    def size(words: str, n: int) -> str:
        ids = tok.encode(words)
        k = max(1, n - overhead)
        while k > 1:
            text = tok.decode(ids[:k])
            got = len(tok.encode(_template(text)))
            if got <= n:
                return text
            k -= got - n  # a tokenizer that merges across the cut: take back what went over
        return tok.decode(ids[:1])

    return size
