"""What the attention kernel must be handed, checked before any C++ runs.

The kernel reads raw pointers: a block id past the pool, a context longer than its row of the
table, or a ``q_start`` shorter than the rows walks off the end of memory (a segfault), and a
tensor that is not laid out contiguously is read as if it were (a wrong number, silently). So
every argument is checked here, in Python, and refused with a ``ConfigError`` (a ``ValueError``)
that names the argument and the value. What costs nothing to mend is mended: integer tensors of
another width become int64 and any tensor becomes contiguous (a no-op for the engine's own,
which already are; a copy only for a caller who sliced or transposed).

The checks are a few whole-tensor comparisons, one Python bool each. Measured here (one thread,
median of 7) for one layer of the 124M GPT-2 shape, 12 heads x 64, 64 rows decoding, contexts
8..191 in blocks of 16: 0.08 ms of checks beside 7.2 ms of the kernel itself, about 1 %.
"""

from __future__ import annotations

import math

import torch

from batchsim.core.errors import ConfigError, is_number, show

__all__ = ["checked_arguments"]

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def checked_arguments(q, pool_k, pool_v, table, ctx, q_start, scale):
    """The arguments as the kernel needs them (contiguous, indices int64), or ``ConfigError``."""
    named = {
        "q": q,
        "pool_k": pool_k,
        "pool_v": pool_v,
        "table": table,
        "ctx": ctx,
        "q_start": q_start,
    }
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise ConfigError(f"{name} must be a torch.Tensor, got {type(t).__name__} {show(t)}")
    _check_shapes(q, pool_k, pool_v, table, ctx, q_start)
    if q.dtype not in _FLOATS:
        raise ConfigError(f"q must hold floating-point numbers, got dtype {q.dtype}")
    for name in ("pool_k", "pool_v"):
        if named[name].dtype != q.dtype:
            raise ConfigError(f"{name} must have q's dtype {q.dtype}, got {named[name].dtype}")
    for name in ("table", "ctx", "q_start"):
        t = named[name]
        if t.dtype == torch.bool or t.is_floating_point() or t.is_complex():
            raise ConfigError(f"{name} must hold integers, got dtype {t.dtype}")
    for name, t in named.items():
        if t.device != q.device:
            raise ConfigError(f"{name} must be on q's device {q.device}, got {t.device}")
    if not is_number(scale) or not math.isfinite(float(scale)):
        raise ConfigError(f"scale must be a finite number, got {show(scale)}")
    table, ctx, q_start = (t.to(torch.long).contiguous() for t in (table, ctx, q_start))
    _check_values(q, pool_k, table, ctx, q_start)
    return (
        q.contiguous(),
        pool_k.contiguous(),
        pool_v.contiguous(),
        table,
        ctx,
        q_start,
        float(scale),
    )


def _check_shapes(q, pool_k, pool_v, table, ctx, q_start) -> None:
    if q.dim() != 3:
        raise ConfigError(f"q must be [queries, heads, head_dim], got shape {tuple(q.shape)}")
    if pool_k.dim() != 4:
        raise ConfigError(
            f"pool_k must be [blocks, heads, block_size, head_dim], got shape {tuple(pool_k.shape)}"
        )
    if pool_v.shape != pool_k.shape:
        raise ConfigError(
            f"pool_v must have pool_k's shape {tuple(pool_k.shape)}, got {tuple(pool_v.shape)}"
        )
    if pool_k.shape[1] != q.shape[1] or pool_k.shape[3] != q.shape[2]:
        raise ConfigError(
            f"pool_k must have q's heads {q.shape[1]} and head_dim {q.shape[2]} (dims 1 and 3), "
            f"got shape {tuple(pool_k.shape)}"
        )
    if pool_k.shape[2] < 1:
        raise ConfigError(f"pool_k's block_size (dim 2) must be >= 1, got {pool_k.shape[2]}")
    if ctx.dim() != 1:
        raise ConfigError(f"ctx must be [rows], got shape {tuple(ctx.shape)}")
    rows = ctx.shape[0]
    if table.dim() != 2 or table.shape[0] != rows:
        raise ConfigError(
            f"table must be [rows={rows}, blocks per row], got shape {tuple(table.shape)}"
        )
    if q_start.dim() != 1 or q_start.shape[0] != rows + 1:
        raise ConfigError(
            f"q_start must be [rows + 1 = {rows + 1}], got shape {tuple(q_start.shape)}"
        )


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    """The index of the first True in ``mask`` (row-major), as ints."""
    return tuple(int(i) for i in mask.nonzero()[0])


def _check_values(q, pool_k, table, ctx, q_start) -> None:
    blocks, bs = pool_k.shape[0], pool_k.shape[2]
    n_q = q.shape[0]
    if q_start[0] != 0:
        raise ConfigError(f"q_start[0] must be 0, got {int(q_start[0])}")
    if q_start[-1] != n_q:
        raise ConfigError(f"q_start[-1] must equal q's {n_q} queries, got {int(q_start[-1])}")
    brought = q_start[1:] - q_start[:-1]
    if (brought < 0).any():
        (r,) = _first(brought < 0)
        raise ConfigError(
            f"q_start must not decrease, got q_start[{r}] = {int(q_start[r])} then "
            f"q_start[{r + 1}] = {int(q_start[r + 1])}"
        )
    if (ctx < 0).any():
        (r,) = _first(ctx < 0)
        raise ConfigError(f"ctx[{r}] must be >= 0, got {int(ctx[r])}")
    # A row's queries are the last of its context: more queries than context would sit before
    # position 0.
    if (brought > ctx).any():
        (r,) = _first(brought > ctx)
        raise ConfigError(
            f"ctx[{r}] must be at least the row's {int(brought[r])} queries (q_start[{r + 1}] - "
            f"q_start[{r}]), got {int(ctx[r])}"
        )
    needed = (ctx + bs - 1) // bs
    if (needed > table.shape[1]).any():
        (r,) = _first(needed > table.shape[1])
        raise ConfigError(
            f"ctx[{r}] = {int(ctx[r])} needs {int(needed[r])} blocks of {bs}, but table has "
            f"{table.shape[1]} per row"
        )
    # Only the blocks a row's context covers are read: what pads the table past them may be
    # anything.
    read = torch.arange(table.shape[1], device=table.device)[None, :] < needed[:, None]
    outside = read & ((table < 0) | (table >= blocks))
    if outside.any():
        r, c = _first(outside)
        raise ConfigError(
            f"table[{r}, {c}] must be a block of the pool (0..{blocks - 1}, pool_k.shape[0] = "
            f"{blocks}), got {int(table[r, c])}"
        )
