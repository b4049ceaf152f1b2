"""Which passes the profiler times: a grid of shapes, chosen from the workload when there is one.

A pass's time depends on its shape (``batchsim.core.plan.Pass``), so the profiler times
the engine on a grid of shapes and batchsim interpolates between them
(``batchsim.sim.profiled``):

- decode passes: rows x rectangle width;
- prefill passes: rows x chunk length (no cached context), up to the most tokens a pass
  of this workload computes;
- continued chunks: one row of ``query`` new tokens after ``past`` cached ones (what
  chunked prefill does to a long prompt);
- joins: a prompt admitted while rows decode (the step's work beyond its two passes);
- policies: each runs a short burst through the real driver, to time the server's own
  work between steps.

Points are spaced by factors of about two, so interpolating a curved cost between two of
them is off by little; a few shapes *between* grid points are timed too and held out, to
report how far the interpolation is from a measurement it never saw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchsim.core.errors import ConfigError, check_int_at_least
from batchsim.core.workload import Workload

__all__ = ["Grid", "GRIDS", "grid_for_workload", "doubling", "jittered", "validation_shapes"]


def doubling(lo: int, hi: int, factor: float = 2.0) -> tuple[int, ...]:
    """lo, about lo*factor, ..., hi: both ends included, integers, strictly increasing."""
    lo, hi = max(1, int(lo)), max(1, int(hi))
    if hi <= lo:
        return (hi,)
    out, x = [lo], float(lo)
    while True:
        x *= factor
        if x >= hi / (1 + (factor - 1) / 3):  # don't leave a sliver of a cell at the top
            break
        out.append(int(round(x)))
    out.append(hi)
    return tuple(sorted(set(out)))


@dataclass(frozen=True)
class Grid:
    """What to time. ``past``: (query, past) pairs of a continued chunk; ``join``: (rows, width,
    prompt) of a prompt admitted into a decoding batch; ``policies``: names whose gap between steps
    is timed; ``max_prefill_tokens``: prefill points with rows x length above it are not timed."""

    decode_rows: tuple[int, ...]
    decode_widths: tuple[int, ...]
    prefill_rows: tuple[int, ...]
    prefill_lengths: tuple[int, ...]
    max_prefill_tokens: int = 4096
    past: tuple[tuple[int, int], ...] = ()
    join: tuple[tuple[int, int, int], ...] = ()
    policies: tuple[str, ...] = ("taxi", "static", "dynamic", "continuous")
    repeats: int = 8  # decode passes timed per point and round (prefills: half as many)
    rounds: int = 2
    validation: int = 10  # off-grid shapes timed and held out
    seed: int = 0
    # idle seconds after which a cold start is timed
    wake_idle: tuple[float, ...] = (
        0.001,
        0.005,
        0.02,
        0.1,
    )
    # Seconds of the slow probe (one pass over and over: how the machine's speed wanders); 0, a grid
    # made by hand: the fewest passes that can show a drift (120).
    probe_s: float = 0.0

    def __post_init__(self) -> None:
        check_int_at_least("repeats", self.repeats, 1)
        check_int_at_least("rounds", self.rounds, 1)
        check_int_at_least("max_prefill_tokens", self.max_prefill_tokens, 1)
        if (
            isinstance(self.probe_s, bool)
            or not isinstance(self.probe_s, (int, float))
            or not 0 <= self.probe_s <= 600
        ):
            raise ConfigError(f"grid probe_s must be seconds in [0, 600], got {self.probe_s!r}")
        for name in ("decode_rows", "decode_widths", "prefill_rows", "prefill_lengths"):
            axis = getattr(self, name)
            if (
                not axis
                or any(not isinstance(v, (int, np.integer)) or v < 1 for v in axis)
                or list(axis) != sorted(set(axis))
            ):
                raise ConfigError(f"grid {name} must be increasing integers >= 1, got {axis!r}")
        if self.prefill_rows[0] * self.prefill_lengths[0] > self.max_prefill_tokens:
            raise ConfigError("grid: the smallest prefill point is above max_prefill_tokens")

    def clipped(self, n_positions: int) -> Grid:
        """Keep to the model's context: a decode width plus its repetitions, a chunk plus its
        past."""
        from dataclasses import replace

        room = n_positions - self.repeats - 1
        widths = tuple(w for w in self.decode_widths if w <= room) or (
            min(self.decode_widths[0], room),
        )
        lengths = tuple(n for n in self.prefill_lengths if n <= n_positions) or (n_positions,)
        return replace(
            self,
            decode_widths=widths,
            prefill_lengths=lengths,
            past=tuple((q, p) for q, p in self.past if q + p <= n_positions),
            join=tuple((b, w, n) for b, w, n in self.join if w <= room and n <= n_positions),
        )

    @property
    def points(self) -> int:
        pre = sum(
            1
            for b in self.prefill_rows
            for n in self.prefill_lengths
            if b * n <= self.max_prefill_tokens
        )
        return (
            len(self.decode_rows) * len(self.decode_widths)
            + pre
            + len(self.past)
            + len(self.join)
            + len(self.wake_idle)
        )


GRIDS = {
    # About 15 s for tiny-gpt2 on one core: shapes a small classroom workload reaches.
    "quick": Grid(
        decode_rows=doubling(1, 32),
        decode_widths=(16, 64, 256),
        prefill_rows=(1, 2, 4, 8),
        prefill_lengths=(8, 32, 128, 256),
        max_prefill_tokens=1024,
        past=((64, 128),),
        join=((4, 64, 32), (16, 128, 64)),
        repeats=4,
        probe_s=3.0,
    ),
    "full": Grid(
        decode_rows=doubling(1, 128),
        decode_widths=(16, 64, 256, 768),
        prefill_rows=doubling(1, 32),
        prefill_lengths=doubling(8, 1024),
        max_prefill_tokens=4096,
        past=((128, 256), (256, 512), (512, 256)),
        join=((4, 64, 32), (16, 256, 64), (64, 256, 128)),
        repeats=6,
        rounds=3,
        probe_s=6.0,
    ),
}


def grid_for_workload(
    workload: Workload,
    max_rows: int,
    max_prefill: int,
    chunk: int | None = None,
    policies: tuple[str, ...] = GRIDS["quick"].policies,
    repeats: int = 8,
    rounds: int = 2,
    probe_s: float = 4.0,
    whole_prompts: bool = False,
) -> Grid:
    """A grid that covers what this workload will run.

    max_rows: the most rows a step may hold; max_prefill: the most prompt tokens one pass may
    compute (a padded batch: rows x longest prompt; continuous: its token budget); chunk: the
    chunk length of a chunked prefill (None: prompts are never split); whole_prompts: besides the
    chunks, another policy prefills whole prompts, so prefill lengths go to the longest prompt
    (a 900-token prompt priced from a ladder that stops at a 256-token chunk is extrapolated
    without its attention's square, and comes out cheap).
    """
    if not len(workload):
        return GRIDS["quick"]
    prompts = workload.prompt_tokens
    ctx = int(np.max(prompts + workload.output_tokens))
    rows = int(max(1, min(max_rows, len(workload))))
    p_max = int(prompts.max())
    longest_chunk = min(p_max, chunk) if chunk and not whole_prompts else p_max
    p_min = int(max(1, prompts.min()))
    max_prefill = max(int(max_prefill), longest_chunk)
    past = ()
    if chunk and p_max > chunk:
        # Chunks of ``chunk`` tokens after 1, 2, 4, ... chunks already cached, up to the longest
        # past a prompt's last chunk has (at most three points: the cost is a slope,
        # ``fit_past_cost``).
        ks = [k for k in (1, 2, 4, 8, 16, 32) if k * chunk < p_max]
        past = tuple((chunk, k * chunk) for k in sorted({ks[0], ks[len(ks) // 2], ks[-1]}))
    mean_prompt = int(max(1, min(np.mean(prompts), longest_chunk)))
    width_lo = max(8, min(p_min, 32))
    join_rows = sorted({min(rows, 4), rows})
    join = tuple((b, max(width_lo, ctx // 2), mean_prompt) for b in join_rows if b >= 1)
    return Grid(
        decode_rows=doubling(1, rows),
        decode_widths=doubling(width_lo, max(width_lo, ctx), factor=2.5),
        prefill_rows=doubling(1, rows),
        prefill_lengths=doubling(max(1, min(p_min, 16)), longest_chunk),
        max_prefill_tokens=max_prefill,
        past=past,
        join=join,
        policies=tuple(policies),
        repeats=repeats,
        rounds=rounds,
        probe_s=probe_s,
    )


def jittered(n: int, reps: int, rnd: int, longest: int) -> list[int]:
    """``reps`` prompt lengths around n, averaging n, none used in an earlier round.

    A real run's prompts are of many lengths, each a shape the CPU's kernels meet for the first
    time or nearly (which costs a few per cent); the same length timed over and over would be
    cheaper than any prompt a run sees."""
    if n < 8:
        return [n] * reps
    half = [rnd * reps // 2 + j + 1 for j in range(reps // 2)]
    out = [n + d for d in half] + [n - d for d in half] + ([n] if reps % 2 else [])
    return [min(max(1, x), longest) for x in out]


def validation_shapes(grid: Grid, rng: np.random.Generator) -> dict:
    """Shapes strictly between grid points (never measured for the model), to hold out."""
    out: dict = {"decode": [], "prefill": []}
    for _ in range(grid.validation // 2 + grid.validation % 2):
        b = int(rng.integers(grid.decode_rows[0], grid.decode_rows[-1] + 1))
        w = int(rng.integers(grid.decode_widths[0], grid.decode_widths[-1] + 1))
        if (b, w) not in out["decode"] and not (b in grid.decode_rows and w in grid.decode_widths):
            out["decode"].append((b, w))
    for _ in range(grid.validation // 2):
        n = int(rng.integers(grid.prefill_lengths[0], grid.prefill_lengths[-1] + 1))
        hi = max(1, min(grid.prefill_rows[-1], grid.max_prefill_tokens // n))
        b = int(rng.integers(1, hi + 1))
        if (b, n) not in out["prefill"] and not (
            b in grid.prefill_rows and n in grid.prefill_lengths
        ):
            out["prefill"].append((b, n))
    return out
