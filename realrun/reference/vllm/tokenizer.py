"""realrun's byte tokenizer, written as a Hugging Face tokenizer, so that vLLM can read text.

tiny-gpt2 (and gpt2-6l) read bytes: ids 0..255 are the UTF-8 bytes of the text, 256 is BOS,
257 EOS and 258 PAD (``realrun.engine.model.ByteTokenizer``). There is no file for that tokenizer,
so ``vllm serve`` on the saved model folder would need ``--skip-tokenizer-init`` and token-id
prompts, and ``vllm bench serve``'s random dataset, which draws token ids and decodes them to text
with the model's tokenizer, would have none to draw with. ``save_tokenizer`` writes the same
tokenizer in the ``tokenizers`` library's format: GPT-2's byte-level alphabet (each byte shown as
one printable character), a vocabulary in which each byte's character has the byte's own value as
id, no merges, and the three special tokens at 256, 257 and 258. Special tokens are not looked for
in text (``split_special_tokens``): a prompt that says ``<|endoftext|>`` is those 13 bytes, as
``ByteTokenizer`` reads it. So any text encodes to its UTF-8 bytes here, in vLLM and in
``vllm bench``, and bytes decode back with the same replacement characters for broken UTF-8. The one
difference: a special id decodes to its name (``<|endoftext|>``), or to nothing where the caller
skips special tokens, as vLLM does, where ``ByteTokenizer`` shows a dot.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from batchsim.core.errors import ConfigError

__all__ = ["SPECIALS", "byte_tokenizer", "save_tokenizer", "save_served_model"]

#: The special tokens, in id order from 256, as ``ByteTokenizer`` numbers them.
SPECIALS = ("<|bos|>", "<|endoftext|>", "<|pad|>")
_BYTE_MODELS = ("tiny-gpt2", "gpt2-6l")


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's ``bytes_to_unicode``: the printable bytes stand for themselves, the rest move past
    255."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    shown, moved = dict(zip(keep, map(chr, keep))), 0
    for b in range(256):
        if b not in shown:
            shown[b] = chr(256 + moved)
            moved += 1
    return shown


def byte_tokenizer(model_max_length: int = 1024):
    """A ``transformers`` fast tokenizer that encodes and decodes as ``ByteTokenizer`` does."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: b for b, ch in _byte_alphabet().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    # No regex split and no prefix space: the whole text is one word of byte characters, and with
    # no merges each character is one token, its byte.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    bos, eos, pad = SPECIALS
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad,
        model_max_length=model_max_length,
        split_special_tokens=True,
    )
    ids = fast.convert_tokens_to_ids(list(SPECIALS))
    # the ids the model's config names; a tokenizers change must not move them
    if ids != [
        256,
        257,
        258,
    ]:
        raise RuntimeError(f"byte tokenizer: special ids came out as {ids}, not [256, 257, 258]")
    return fast


def save_tokenizer(folder: str | Path, model_max_length: int = 1024) -> Path:
    """Write the byte tokenizer's files into ``folder`` (a saved model) unless they are there;
    returns it.

    The files are written to a temporary folder beside it and moved in one by one, the
    ``tokenizer.json`` last, so a reader never finds a config without its tokenizer.
    """
    folder = Path(folder)
    if (folder / "tokenizer.json").is_file():
        return folder
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-tok-") as tmp:
        byte_tokenizer(model_max_length).save_pretrained(tmp)
        names = sorted(os.listdir(tmp), key=lambda n: n == "tokenizer.json")
        for name in names:
            os.replace(Path(tmp) / name, folder / name)
    return folder


def save_served_model(
    name: str = "tiny-gpt2", folder: str | Path | None = None, seed: int = 0
) -> Path:
    """``realrun.reference.vllm.save_model`` plus the byte tokenizer: a folder ``vllm serve`` serves
    text from."""
    from .server import save_model

    if name not in _BYTE_MODELS:
        raise ConfigError(
            f"model to save with a byte tokenizer must be one of {', '.join(_BYTE_MODELS)}, got "
            f"{name!r}"
        )
    return save_tokenizer(save_model(name, folder, seed))
