"""Tokens to text as they come, so that a stream's pieces add up to the whole answer.

A token is not always a whole character: a byte-level tokenizer (the default model's, GPT-2's) may
split one accented letter or emoji over two to four tokens, and decoding each token alone prints
replacement characters, so the streamed text differed from the same request's whole text. Here each
piece is the new text of the tokens so far: new ids are decoded together with the previous piece's
ids (the context a tokenizer may need for spacing), and held while they end in an unfinished
character. The whole answer (``"stream": false``) is built from the same pieces, so the two are
equal by construction, and equal to ``tokenizer.decode(ids)`` for a byte-level tokenizer.
"""

from __future__ import annotations

__all__ = ["IncrementalText"]

#: UTF-8 spells a character in at most 4 bytes: ids held longer than this will never make one whole
#: (random weights print invalid bytes), and are sent as the replacement characters they decode to.
_MAX_HELD = 4
_PARTIAL = "\ufffd"


class IncrementalText:
    """``push(id)`` -> the text it completes (maybe ""); ``flush()`` -> what is held, at the end."""

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer
        self.context: list[int] = []  # the ids of the last piece sent
        self.held: list[int] = []  # ids not yet sent
        self.text = ""  # every piece so far: the whole answer

    def _piece(self, force: bool) -> str:
        before = self.tok.decode(self.context) if self.context else ""
        now = self.tok.decode(self.context + self.held)
        if not force and now.endswith(_PARTIAL) and len(self.held) < _MAX_HELD:
            return ""
        piece = now[len(before) :] if now.startswith(before) else self.tok.decode(self.held)
        self.context, self.held = self.held, []
        self.text += piece
        return piece

    def push(self, token: int) -> str:
        self.held.append(int(token))
        return self._piece(force=False)

    def flush(self) -> str:
        return self._piece(force=True) if self.held else ""
