"""The slow probe: one decode pass over and over, and how the machine's speed wanders over seconds.

A grid point's mean says what a pass costs; it cannot say how the cost moves while a run goes on
(another process wakes, the clock steps down). Some seconds of one pass repeated, timed by the
engine's own log, show it: ``batchsim.sim.slowdrift`` fits the drift from the series, the canary
(``realrun.timing.canary``) reads the machine's level from short ones, and ``realrun doctor``
prints the machine's jitter from one.
"""

from __future__ import annotations

from batchsim.core.step import Step

from .grid import Grid

__all__ = [
    "WARMUP",
    "PROBE_PASSES",
    "probe_log",
    "probe_passes",
    "probe_series",
    "probe_width",
    "slow_probe",
]

#: Decode passes run and thrown away before a shape's are timed: the first passes over freshly made
#: rows run slow (new buffers, kernels for a new shape), which a running server's rows are not.
WARMUP = 2
#: The fewest passes of the slow probe: fewer cannot tell a drift from noise (``fit_slow_drift``).
PROBE_PASSES = 120


def slow_probe(engine, grid: Grid, rid: int, pass_s: float) -> list[float]:
    """About ``grid.probe_s`` seconds (at least ``PROBE_PASSES`` passes of about ``pass_s`` seconds)
    of consecutive one-row decode passes at the grid's middle width, in stretches that fit the
    context (each refilled, its first passes dropped as the grid's are)."""
    w = probe_width(grid)
    return probe_series(engine, w, probe_passes(grid.probe_s, pass_s), rid)


def probe_width(grid: Grid) -> int:
    """The decode width the slow probe runs at: the grid's middle one."""
    return grid.decode_widths[len(grid.decode_widths) // 2]


def probe_passes(seconds: float, pass_s: float) -> int:
    """How many passes of ``pass_s`` seconds fill ``seconds`` of a probe: at least ``PROBE_PASSES``,
    at most 4,000."""
    return int(min(4000, max(PROBE_PASSES, seconds / max(pass_s, 1e-5))))


def probe_log(engine, width: int, passes: int, rid: int = 0) -> list:
    """(planned pass, seconds) of ``passes`` consecutive one-row decode passes over ``width`` tokens
    of (random) KV, in stretches that fit the model's context: each stretch refilled and its first
    passes dropped (fresh rows run slow at first). The engine must hold no rows; it holds none
    after."""
    stretch = max(8, min(256, int(engine.lm.n_positions) - 1 - width - WARMUP))
    out: list = []
    log = engine.pass_log
    while len(out) < passes:
        k = min(stretch, passes - len(out))
        engine.fill_rows([rid], [width])
        log.clear()
        engine.execute(Step(decode=(rid,), kv_read=width, decode_width=width, repeat=k + WARMUP))
        out.extend(log[WARMUP:])
        engine.release([rid])
    return out


def probe_series(engine, width: int, passes: int, rid: int = 0) -> list[float]:
    """The seconds of ``probe_log``'s passes."""
    return [s for _, s in probe_log(engine, width, passes, rid)]
