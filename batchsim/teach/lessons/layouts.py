"""Lesson 5's picture of the same requests' KV cache held two ways: a padded rectangle, and blocks
of one pool.

A padded batch (``generate()``, realrun's ``--kv padded``) keeps one row per request, every row as
wide as the longest, the short ones padded on the left so that all end at the same column. A paged
engine (vLLM, realrun's default on a CPU) keeps each request's tokens in fixed-size blocks taken
from one pool as it grows, wherever a free block lies; only its last block is partly empty.

The pool is drawn as it fills in a run: each prompt's blocks at its prefill, then one token per
row per decode step, a new block taken from the free list (lowest number first, as
``realrun.engine.paged.pool.KVPool`` does) whenever a row's last block is full. So the blocks of one
request are scattered: that is why attention reads them through a block table.
"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from ...core.errors import ConfigError, check_int_at_least, show

__all__ = ["kv_layouts", "DEFAULT_REQUESTS"]

#: (prompt, output) tokens of the first eight requests of ``bench/engine_efficiency.py``'s workload.
DEFAULT_REQUESTS = ((56, 113), (44, 24), (37, 78), (23, 95), (25, 110), (10, 71), (12, 53), (8, 45))


def _pool(requests, block_size: int) -> tuple[list[int], list[int]]:
    """(owner of each block; tokens in each block) after every request reached its last token."""
    owner: list[int] = []
    fill: list[int] = []
    tables: list[list[int]] = [[] for _ in requests]
    length = [0] * len(requests)

    def add(r: int, n: int) -> None:
        for _ in range(n):
            if length[r] % block_size == 0:
                tables[r].append(len(owner))
                owner.append(r)
                fill.append(0)
            fill[tables[r][-1]] += 1
            length[r] += 1

    for r, (prompt, _) in enumerate(requests):  # the prefill: each prompt's blocks at once
        add(r, prompt)
    for step in range(max(out for _, out in requests)):  # decode: a token per running row per step
        for r, (_, out) in enumerate(requests):
            if step < out:
                add(r, 1)
    return owner, fill


def kv_layouts(
    requests=DEFAULT_REQUESTS, block_size: int = 16, blocks_per_line: int = 16
) -> tuple[dict, Figure]:
    """The KV tokens of ``requests`` ((prompt, output) pairs, each at its last token) as a padded
    rectangle and as blocks of ``block_size`` tokens in one pool; the summary counts both."""
    check_int_at_least("block_size", block_size, 1)
    check_int_at_least("blocks_per_line", blocks_per_line, 1)
    try:
        reqs = [(int(p), int(o)) for p, o in requests]
    except (TypeError, ValueError):
        raise ConfigError(
            f"requests must be (prompt, output) pairs of token counts, got {show(requests)}"
        ) from None
    if not reqs or any(p < 1 or o < 0 for p, o in reqs):
        raise ConfigError(
            f"requests must be one or more (prompt >= 1, output >= 0) pairs, got {show(requests)}"
        )
    ctx = np.array([p + o for p, o in reqs])
    width = int(ctx.max())
    owner, fill = _pool(reqs, block_size)
    tokens, rect, held = int(ctx.sum()), len(reqs) * width, len(owner) * block_size
    summary = {
        "requests": len(reqs),
        "block_size": block_size,
        "tokens": tokens,
        "rectangle_tokens": rect,
        "blocks": len(owner),
        "block_tokens": held,
        "rectangle_padding_pct": 100.0 * (rect - tokens) / rect,
        "block_waste_pct": 100.0 * (held - tokens) / held,
        "rectangle_over_blocks": rect / held,
        "table": (
            f"{len(reqs)} requests, {tokens} tokens of context: a rectangle of {len(reqs)} x "
            f"{width} = {rect} token slots ({100 * (rect - tokens) / rect:.0f} % padding); "
            f"{len(owner)} blocks x {block_size} = {held} slots "
            f"({100 * (held - tokens) / held:.0f} % empty, in last blocks)"
        ),
    }

    n = len(reqs)
    # Colour 0: padding or an empty slot; 1..n: the requests; n+1: a free block's slot.
    hues = [f"C{i}" for i in range(10) if i != 7]  # C7 is grey: the padding's colour
    cmap = ListedColormap(["0.88", *[hues[i % len(hues)] for i in range(n)], "white"])
    grid = np.zeros((n, width), dtype=int)
    for r, c in enumerate(ctx):
        grid[r, width - c :] = r + 1  # left padding: every row ends at the same column
    lines = -(-len(owner) // blocks_per_line)
    pool = np.full((lines, blocks_per_line * block_size), n + 1, dtype=int)
    for b, (r, used) in enumerate(zip(owner, fill)):
        row, col = divmod(b, blocks_per_line)
        pool[row, col * block_size : (col + 1) * block_size] = 0
        pool[row, col * block_size : col * block_size + used] = r + 1

    fig = Figure(figsize=(11, 4.6), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=(width, blocks_per_line * block_size))
    left.imshow(grid, cmap=cmap, vmin=0, vmax=n + 1, aspect="auto", interpolation="nearest")
    left.set_yticks(range(n), [f"req {r}" for r in range(n)])
    left.set_xlabel("position (left-padded to the longest)")
    left.set_title(
        f"padded rectangle: {n} x {width} = {rect} slots,\n{summary['rectangle_padding_pct']:.0f} "
        f"% padding (grey)"
    )
    right.imshow(pool, cmap=cmap, vmin=0, vmax=n + 1, aspect="auto", interpolation="nearest")
    for x in range(1, blocks_per_line):
        right.axvline(x * block_size - 0.5, color="white", lw=1.5)
    for y in range(1, lines):
        right.axhline(y - 0.5, color="white", lw=1.5)
    right.set_yticks(range(lines), [f"{y * blocks_per_line}" for y in range(lines)])
    right.set_ylabel("first block of the line")
    right.set_xticks(
        [(x + 0.5) * block_size - 0.5 for x in range(0, blocks_per_line, 4)],
        [str(x) for x in range(0, blocks_per_line, 4)],
    )
    right.set_xlabel(f"block (+ line's first), {block_size} tokens each")
    right.set_title(
        f"block pool: {len(owner)} blocks = {held} slots,\n{summary['block_waste_pct']:.0f} % "
        f"empty, "
        "one request's blocks scattered"
    )
    fig.suptitle(
        f"the same {n} requests' KV cache, {tokens} tokens: {rect / held:.2f}x the slots as a "
        f"rectangle"
    )
    return summary, fig
