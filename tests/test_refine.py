"""The profile looks for bends in the prefill cost: a midpoint the line misses becomes a grid
point."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from realrun.timing.grid import Grid
from realrun.timing.refine import MOST, SHARE, TOL, misses, refine_lengths, rows_at

GRID = Grid(
    decode_rows=(1,),
    decode_widths=(16,),
    prefill_rows=(1, 2, 4, 8),
    prefill_lengths=(16, 32, 64, 128, 256, 512, 1024),
    max_prefill_tokens=4096,
)


def knee_cost(b: int, n: int, at: float = 500.0) -> float:
    """Seconds of b rows of n tokens: per token 1 ms below ``at`` and 1.3 ms above (a cache
    outgrown)."""
    return b * n * (1e-3 if n < at else 1.3e-3)


class Timer:
    """A fake engine: each timing is the cost times (1 + noise x a normal draw) and moves a fake
    clock on; what it timed and kept, and what it forgot, are recorded."""

    def __init__(self, cost, noise: float = 0.0, seed: int = 0, reps: int = 4) -> None:
        self.cost, self.noise, self.reps = cost, noise, reps
        self.rng = np.random.default_rng(seed)
        self.timed: dict[tuple[int, int], list[float]] = {}
        self.forgotten: list[tuple[int, int]] = []
        self.order: list[int] = []  # the midpoints looked at, in turn
        self.now = 0.0

    def seconds(self, b: int, n: int) -> list[float]:
        t = [
            self.cost(b, n) * (1 + self.noise * self.rng.standard_normal())
            for _ in range(self.reps)
        ]
        self.now += sum(t)
        return t

    def time_cell(self, b: int, lo: int, m: int, hi: int) -> dict[int, list[float]]:
        self.order.append(m)
        out = {n: self.seconds(b, n) for n in (lo, m, hi)}
        self.timed[(b, m)] = out[m]
        return out

    def time_point(self, b: int, n: int) -> None:
        self.timed[(b, n)] = self.seconds(b, n)

    def forget(self, b: int, n: int) -> None:
        del self.timed[(b, n)]
        self.forgotten.append((b, n))

    def refine(self, grid=GRID, round_s: float = 1e9, avoid=frozenset()):
        return refine_lengths(
            grid,
            self.time_cell,
            self.time_point,
            self.forget,
            round_s,
            avoid,
            clock=lambda: self.now,
        )


def price(grid: Grid, cost, b: int, n: int) -> float:
    """The straight line between the grid's lengths around n, at b rows."""
    xs = np.array(grid.prefill_lengths, float)
    return float(np.interp(n, xs, [cost(b, int(x)) for x in xs]))


def test_a_straight_cost_adds_nothing_and_keeps_no_midpoint():
    t = Timer(lambda b, n: 2e-3 + b * n * 1e-3)
    grid, added = t.refine()
    assert grid == GRID and added == [] and t.timed == {}
    # every cell wide enough was looked at, costliest first, at one row and at its most rows
    assert t.forgotten[:2] == [(1, 768), (4, 768)]


def test_a_knee_is_found_and_the_price_near_it_comes_right():
    t = Timer(knee_cost)
    grid, added = t.refine()
    assert len({n for _, n in added}) <= MOST
    assert set(grid.prefill_lengths) > set(GRID.prefill_lengths)
    # every added length is timed at every row count the pass limit allows, and kept
    for n in set(grid.prefill_lengths) - set(GRID.prefill_lengths):
        assert {b for b, m in added if m == n} == set(rows_at(grid, n))
        assert all((b, n) in t.timed for b in rows_at(grid, n))
    worst_before = max(
        abs(price(GRID, knee_cost, b, n) / knee_cost(b, n) - 1)
        for b, n in itertools.product((1, 8), range(300, 500, 7))
    )
    worst_after = max(
        abs(price(grid, knee_cost, b, n) / knee_cost(b, n) - 1)
        for b, n in itertools.product((1, 8), range(300, 500, 7))
    )
    assert worst_before > 0.15 and worst_after < worst_before / 2


def test_a_held_out_length_is_never_made_a_grid_point():
    t = Timer(knee_cost)
    grid, _ = t.refine(avoid=frozenset({384, 448}))
    assert 384 not in grid.prefill_lengths and 448 not in grid.prefill_lengths
    assert 385 in grid.prefill_lengths  # the next length stands in


def test_the_search_stops_at_its_share_of_the_round():
    t = Timer(knee_cost)
    # a round of almost no time: the first midpoint's timing already spends the share
    grid, added = t.refine(round_s=1e-9)
    assert added == [] and grid == GRID and t.timed == {}


@pytest.mark.parametrize("seed", range(20))
def test_noise_within_the_timings_own_spread_adds_little(seed):
    # 1 % noise on each timing, a straight cost: a bend is never found
    t = Timer(lambda b, n: 2e-3 + b * n * 1e-3, noise=0.01, seed=seed)
    _, added = t.refine()
    assert added == []
    assert TOL > 3 * 0.01


def test_a_bend_beyond_tol_is_found_where_the_timings_are_tight():
    """Every midpoint 8 % above the line, each pass 1 % noisy: a bend, in every seed."""
    for seed in range(10):
        t = Timer(
            lambda b, n: b * n * 1e-3 * (1.0 if n in GRID.prefill_lengths else 1.08),
            noise=0.01,
            seed=seed,
        )
        assert t.refine()[1]


def test_a_straight_cost_timed_through_noise_is_rarely_split():
    """Each pass 8 % noisy (a busy machine), a straight cost: a midpoint's miss is often beyond TOL
    by chance, but within four of its standard errors (about 20 %), so splits are rare."""
    found = [
        bool(Timer(lambda b, n: 2e-3 + b * n * 1e-3, noise=0.08, seed=seed).refine()[1])
        for seed in range(20)
    ]
    assert sum(found) <= 2


def test_misses_reads_the_line_between_the_ends_and_the_noise_of_all_three():
    assert misses({0: [1.0, 1.0], 10: [2.2, 2.2], 20: [3.0, 3.0]}, 0, 10, 20)  # 2.0 against 2.2
    assert not misses({0: [1.0, 1.0], 10: [2.05, 2.05], 20: [3.0, 3.0]}, 0, 10, 20)  # within TOL
    # 10 % off, but the ends' timings spread so wide that four standard errors cover it
    assert not misses({0: [0.5, 1.5], 10: [2.2, 2.2], 20: [2.0, 4.0]}, 0, 10, 20)


def test_every_cell_of_the_grid_is_looked_at_before_the_halves_of_any():
    """Bends in the two dearest cells: the second's midpoint is timed before any half of the
    first."""

    def two_knees(b, n):
        return b * n * (1e-3 if n < 500 else 1.3e-3 if n < 900 else 1.7e-3)

    t = Timer(two_knees)
    grid, _ = t.refine()
    order = [n for i, n in enumerate(t.order) if i == 0 or t.order[i - 1] != n]  # a cell per entry
    assert order[:2] == [768, 384]  # the grid's two dearest cells, before any half of either
    assert {384, 768} <= set(grid.prefill_lengths)


def test_a_cell_dearer_than_what_is_left_of_the_share_is_passed_over_for_cheaper_ones():
    """The dearest cell first, unless its price says it would overrun the search's share: then the
    cheaper cells are looked at, and the dear one's midpoint is never timed."""
    t = Timer(knee_cost)

    def price(b, lo, m, hi):  # the Timer's own cost of a cell: its reps of lo, m and hi
        return t.reps * (knee_cost(b, lo) + knee_cost(b, m) + knee_cost(b, hi))

    dearest = sum(price(b, 512, 768, 1024) for b in (1, 4))
    # a share that holds the cells below 512 tokens but not the one above
    round_s = 0.9 * dearest / SHARE
    grid, added = refine_lengths(
        GRID, t.time_cell, t.time_point, t.forget, round_s, clock=lambda: t.now, price_cell=price
    )
    assert 768 not in t.order and t.order  # passed over; cheaper cells were looked at
    # without prices, the dearest cell is timed first, whatever it costs
    t2 = Timer(knee_cost)
    refine_lengths(GRID, t2.time_cell, t2.time_point, t2.forget, round_s, clock=lambda: t2.now)
    assert t2.order[0] == 768 and t2.now > SHARE * round_s
