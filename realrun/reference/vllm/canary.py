"""vLLM's canary: a few fixed steps timed around every measured run, against the profile's own
price.

The same idea as our engine's (``realrun.timing.canary``, whose docstring gives the reasons and the
figures): the machine's level moves between the profile and the runs, and a reading of passes
whose price the profile knows tells by how much, prefill and decode apart. Here the passes are
vLLM's steps, made as the profile makes them (``realrun.reference.vllm.probe``): one row decoding at
the grid's middle width (its first steps let by), and one-row prefills at the grid's middle length,
each step held up to the profile's price of its shape. Readings are taken against the canary's own
reading at the profile's end (``reference``, kept in the calibration), so whatever the canary's
steps cost beyond the grid's, they cost at the profile too.

More steps than our engine's canary takes (48 decode steps, 6 prefills, against 16 and 4): with
16, one row's decode steps read from 0.51x to 1.12x of the reference around the runs of one
session (the long shape of ``bench/vllm_fidelity.py``), each step carrying vLLM's hops between
processes, and a median of three times as many steps is steadier by about the square root.
"""

from __future__ import annotations

import numpy as np

from ...timing.canary import Canary, CanaryReading, grid_middle
from .probe import SETTLE, Prober, decode_times, prefill_times

__all__ = ["VLLMCanary"]


class VLLMCanary(Canary):
    """``VLLMCanary(server, model, vocab)()`` -> a ``CanaryReading`` of ``prefills`` one-row prefill
    steps and ``decodes`` one-row decode steps on vLLM, each against ``model``'s price of its shape.
    Reading against the reference and taking it are ``Canary``'s own; only the steps (``raw``) are
    vLLM's."""

    def __init__(self, server, model, vocab: int, prefills: int = 6, decodes: int = 48) -> None:  # noqa: D107
        # (Canary's own __init__ takes an engine of ours; everything it sets is set here.)
        self.server, self.model, self.vocab = server, model, int(vocab)
        ref = (getattr(model, "extra", None) or {}).get("canary")
        #: The canary's own (prefill, decode) at the end of the profile; None: held up to the price
        #: alone.
        self.reference: tuple[float, float] | None = (
            (float(ref["prefill"]), float(ref["decode"])) if ref else None
        )
        self.prefills, self.decodes = int(prefills), int(decodes)
        room = max(16, server.knobs.max_model_len // 2)
        self.length = max(
            1, min(room, grid_middle(model.prefill.y), server.knobs.max_num_batched_tokens)
        )
        self.width = max(1, min(room, grid_middle(model.decode.y)))

    async def _read(self, pr: Prober) -> tuple[list[float], list[float]]:
        steps = await pr.batch([self.width], self.decodes + SETTLE + 2)
        dec = decode_times(steps, 1)[SETTLE:]
        # Each decode step attends to the prompt and the tokens made so far: priced at its own
        # width.
        dec = [
            t / float(self.model.decode(1, self.width + SETTLE + 1 + k)[0])
            for k, t in enumerate(dec)
        ]
        pre = []
        for _ in range(self.prefills):
            steps = await pr.batch([self.length], 1)
            pre += [
                t / float(self.model.prefill(1, self.length)[0]) for t in prefill_times(steps, 1)
            ]
        return pre, dec

    def raw(self) -> CanaryReading | None:
        """One reading against the model's price alone; None when three tries saw no clean step of
        the canary's shapes (vLLM scheduled them otherwise): a run without its canary, not a stopped
        session."""
        import time

        t0 = time.perf_counter()
        for _ in range(3):
            pre, dec = self.server.call(self._read, Prober(self.server, self.vocab))
            if pre and dec:
                return CanaryReading(
                    float(np.median(pre)), float(np.median(dec)), time.perf_counter() - t0
                )
        return None
