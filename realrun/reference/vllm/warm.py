"""Every step size a workload will make vLLM run, run once before anything is timed.

vLLM's CPU build runs its linear layers through oneDNN, which builds a kernel for each new number of
rows (tokens in the step) the first time it meets one, and keeps it. A decode step has as many
tokens as rows: a few dozen sizes, met in a run's first seconds. A prefill or mixed step has as many
as its chunks and decode rows together, so a run of a few hundred requests meets a new size in most
of its prefill steps, and each pays the kernel's build.

Measured here (tiny-gpt2, vLLM 0.32, one thread; 60 requests at 4.8/s, prompts of 16-128 tokens,
45-47 distinct sizes of prefill step a run; measured against the profile's prices):

- on a server just started: prefill steps 2.71x, decode steps 1.17x; the same run again 1.35x and
  1.12x; a third time 1.17x and 1.22x; the steps that prefill were priced right only once their
  sizes had run before;
- after one step of every size from 1 to 180 tokens (10.8 s): the first run 1.20x and 1.28x, a
  run of other prompts 1.19x and 1.28x.

The profile prices a server that has met its sizes, as one that has served for a while has, so the
runs it is held to are made on such a server: ``start_server`` warms every size the workload can
reach before the profile and the runs (``warm_sizes``: up to the longest prompt with every other row
decoding beside it, within the step's budget). A step of more tokens (several prompts admitted at
once) may still meet a size for the first time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["warm_sizes", "warm"]


def warm_sizes(workload, knobs) -> range:
    """The step sizes (tokens) to run once: 1 up to the longest prompt plus ``max_num_seqs - 1``
    rows decoding beside it, within ``max_num_batched_tokens`` and the context (a prompt of n tokens
    and its one output must fit it). None is refused for its KV: a budget holds at least the whole
    context (``VLLMKnobs`` checks it)."""
    longest = int(workload.prompt_tokens.max()) if len(workload) else 1
    top = min(
        knobs.max_num_batched_tokens,
        knobs.max_model_len - 1,
        longest + knobs.max_num_seqs - 1,
    )
    return range(1, max(1, top) + 1)


def warm(server, vocab: int, sizes: range, say: Callable[[str], None] | None = None) -> float:
    """Run one step of each size in ``sizes`` (a prompt of that many tokens and one output token)
    on ``server``, one at a time; returns the seconds it took. ``say`` hears a progress line every
    few seconds."""
    from .probe import Prober

    pr = Prober(server, vocab)
    t0 = time.monotonic()

    async def run() -> None:
        last = t0
        for i, n in enumerate(sizes):
            await pr.prefill(n)
            if say is not None and time.monotonic() - last > 5.0:
                last = time.monotonic()
                say(f"warming vLLM's kernels: {i + 1} of {len(sizes)} step sizes")

    server.call(run)
    return time.monotonic() - t0
