"""A request, and everything the server knows of it: the state lives on the request.

What the workload says (``id``, ``arrival``, ``prompt`` and ``output`` tokens), where it
stands in a continuous batch, and its record, written as it goes. Print one to see it.
"""

from __future__ import annotations


class Request:
    def __init__(self, id: int, arrival: float, prompt: int, output: int) -> None:
        self.id, self.arrival, self.prompt, self.output = id, arrival, prompt, output
        # Where it stands: the context to compute (its prompt; after a preemption, its prompt and
        # the tokens it had made), the tokens cached, the tokens still to make, its KV blocks.
        self.target = prompt
        self.kv = 0
        self.left = output
        self.blocks = 0
        # Its record: None until it happens. ``start``: its first pass began; ``itl_max``: the
        # longest gap between two of its tokens; ``rejected``: why it was turned away.
        self.start: float | None = None
        self.first_token: float | None = None
        self.last_token: float | None = None
        self.finish: float | None = None
        self.itl_max: float | None = None
        self.tokens = 0
        self.preemptions = 0
        self.rejected: str | None = None

    def got_token(self, t: float) -> None:
        """A token of this request came out of the pass that ended at ``t``."""
        if self.last_token is None:
            self.first_token = t
        elif self.itl_max is None or t - self.last_token > self.itl_max:
            self.itl_max = t - self.last_token
        self.last_token = t
        self.tokens += 1

    def __repr__(self) -> str:
        return (
            f"Request({self.id}, cached {self.kv}/{self.target}, {self.left} to go, {self.blocks} "
            f"blocks, {self.tokens} tokens)"
        )
