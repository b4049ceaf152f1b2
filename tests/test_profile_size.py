"""A profile sized before it runs: the rows the workload reaches, an estimate, a budget, progress
that says what is left."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from batchsim import (  # noqa: E402
    ConfigError,
    LinearStepTime,
    Poisson,
    Uniform,
    Workload,
    make_policy,
    make_workload,
)
from realrun.cli import main as realrun_main  # noqa: E402
from realrun.cli.calibration import grid_for_policies  # noqa: E402
from realrun.engine.engine import Engine  # noqa: E402
from realrun.engine.model import load_model  # noqa: E402
from realrun.timing.grid import Grid  # noqa: E402
from realrun.timing.measure import measure, schedule  # noqa: E402
from realrun.timing.profile_size import (  # noqa: E402
    Reach,
    Ticker,
    estimate,
    pilot,
    point_costs,
    reach,
    within_budget,
)

TINY = Grid(
    decode_rows=(1, 4),
    decode_widths=(8, 32),
    prefill_rows=(1, 2),
    prefill_lengths=(8, 16),
    max_prefill_tokens=64,
    past=((8, 8),),
    join=((2, 16, 8),),
    policies=("taxi",),
    repeats=2,
    rounds=2,
    validation=2,
    wake_idle=(0.001,),
)
PRICE = LinearStepTime(1e-3, 2e-5, 1e-4, 1e-8)


class Counter:
    def __init__(self) -> None:
        self.n, self.closed = 0, False

    def update(self, n: int = 1) -> None:
        self.n += n

    def close(self) -> None:
        self.closed = True


@pytest.fixture(scope="module")
def engine():
    return Engine(load_model("tiny-gpt2", device="cpu", threads=1))


def test_the_schedule_is_what_measure_ticks_through(engine):
    bar = Counter()
    meas = measure(engine, TINY, progress=bar)
    assert bar.n == len(schedule(meas["grid"])) and bar.closed and meas["rounds_timed"] == 2
    kinds = [k for k, *_ in schedule(TINY)]
    assert (
        kinds.count("probe") == 1 and kinds.count("gap") == 1 and kinds.count("past") == TINY.rounds
    )


def test_a_budget_leaves_out_the_rounds_that_would_overrun_it_and_the_ticks_still_add_up(engine):
    bar = Counter()
    meas = measure(engine, replace(TINY, rounds=3), progress=bar, budget_s=1e-6)
    assert meas["rounds_timed"] == 1 and bar.n == len(schedule(meas["grid"]))


def test_the_pilot_prices_a_pass_from_the_engine(engine):
    lin = pilot(engine)
    assert lin.c0 > 0 and lin.step_time(prefill_tokens=64) >= lin.step_time(prefill_tokens=8)
    assert estimate(TINY, lin) > 0


def test_a_sparse_workload_reaches_one_row_and_a_burst_reaches_many():
    cont = {"continuous": lambda: make_policy("continuous", max_seqs=32, max_batched_tokens=1024)}
    sparse = Workload.from_arrays(
        [0.0, 100.0, 200.0, 300.0], [500, 900, 700, 800], [20, 20, 20, 20]
    )
    assert reach(sparse, cont, PRICE) == Reach(1, 900)
    burst = make_workload(Poisson(1000.0), Uniform(16, 64), Uniform(16, 32), n=40, seed=0)
    got = reach(burst, cont, PRICE)
    assert 8 < got.rows <= 32 and got.prefill_tokens > 64


def test_the_grid_goes_as_far_as_the_workload_reaches_and_no_further_than_the_policy():
    wl = Workload.from_arrays(
        [100.0 * i for i in range(40)], [500 + 10 * i for i in range(40)], [20] * 40
    )
    pols = [
        make_policy("continuous", max_seqs=32, max_batched_tokens=1024),
        make_policy("static", max_batch=8),
    ]
    whole = grid_for_policies(wl, pols)
    sized = grid_for_policies(wl, pols, Reach(2, 890))
    assert (
        whole.decode_rows[-1] == 32 and sized.decode_rows[-1] == 2 and sized.prefill_rows[-1] == 2
    )
    # a padded pass of the rows reached, at the longest prompt
    assert sized.max_prefill_tokens == 2 * 890
    assert grid_for_policies(wl, pols, Reach(64, 10**6)).decode_rows[-1] == 32


def test_a_grid_over_budget_is_thinned_until_it_fits_and_one_under_it_is_kept():
    big = grid_for_policies(
        make_workload(Poisson(5.0), Uniform(16, 1000), Uniform(16, 200), n=50, seed=0),
        [make_policy("continuous", max_seqs=64, max_batched_tokens=2048)],
    )
    slow = LinearStepTime(5e-3, 2e-4, 1e-3, 1e-7)
    full = estimate(big, slow)
    # (a third: its longest prefills are timed once a round already, so fewer repetitions save less
    # there)
    thin, est = within_budget(big, slow, full / 3)
    assert est <= full / 3 < full and est == pytest.approx(estimate(thin, slow))
    assert len(schedule(thin)) < len(schedule(big)) and thin.decode_rows[-1] == big.decode_rows[-1]
    assert within_budget(big, slow, full * 2) == (big, full)
    with pytest.raises(ConfigError, match="budget"):
        within_budget(big, slow, 0)


def test_progress_says_what_is_left_scaled_by_how_the_ticks_so_far_ran():
    now = [0.0]
    lines: list[str] = []
    t = Ticker([1.0, 1.0, 2.0], lines.append, every=3600, clock=lambda: now[0])
    try:
        assert t.line().endswith("about 4 s left")  # nothing timed yet: the pilot's price
        now[0] = 2.0
        t.update()  # the first shape took twice its price
        assert t.line() == "profiling: 1 of 3 shapes timed, about 6 s left"
        now[0] = 3.0  # one second into the second: 2 s of it left, then 4 s
        assert t.line().endswith("about 5 s left")
        # work between ticks (the search for bends) says what it is, then stops saying it
        t.note("looking for bends in the prefill cost: 8 x 448 tokens")
        assert t.line() == (
            "profiling: 1 of 3 shapes timed (looking for bends in the prefill cost: 8 x 448 "
            "tokens), about 5 s left"
        )
        t.note("")
        assert t.line() == "profiling: 1 of 3 shapes timed, about 5 s left"
    finally:
        t.close()
    assert lines == []  # no line before ``every`` seconds


def test_the_costs_follow_the_schedule():
    assert (
        len(point_costs(TINY, PRICE)) == len(schedule(TINY)) and min(point_costs(TINY, PRICE)) > 0
    )


@pytest.mark.parametrize("value", ["0", "-5", "nan", "100000"])
def test_a_bad_profile_budget_is_one_line_and_exit_2(value, capsys):
    assert realrun_main(["compare", "--profile-budget", value, "--requests", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--profile-budget" in err[0]


def test_the_search_for_bends_keeps_the_ticks_the_schedule_and_the_held_out_shapes_whole(engine):
    """A cell wide enough to be looked at (8 to 64 tokens): whether its midpoint is kept or not, the
    ticks add up to the schedule of the grid measured, every grid point was timed in every round,
    and no held-out length became a grid point."""
    grid = replace(TINY, prefill_lengths=(8, 64), max_prefill_tokens=128)
    bar = Counter()
    meas = measure(engine, grid, progress=bar)
    got = meas["grid"]
    assert set(got.prefill_lengths) >= set(grid.prefill_lengths)
    assert bar.n == len(schedule(got))
    held = {n for _, n in meas["validation"]["prefill"]}
    assert not held & (set(got.prefill_lengths) - set(grid.prefill_lengths))
    s = meas["samples"].by_key
    for b in got.prefill_rows:
        for n in got.prefill_lengths:
            if b * n <= got.max_prefill_tokens:
                assert len(s[("prefill", b, n)]) == 2 * got.rounds  # reps (2) in each round
    # a midpoint looked at and not kept leaves no timings behind
    kept = {(b, n) for b in got.prefill_rows for n in got.prefill_lengths}
    extra = {(b, n) for k, b, n in s if k == "prefill"} - kept
    assert extra <= set(meas["validation"]["prefill"])


class _FakePrefills:
    """An engine whose prefill of ``tokens`` tokens takes ``per_token x tokens`` seconds (no clock
    read)."""

    def __init__(self, per_token: float) -> None:
        self.per_token, self.pass_log, self.lengths = per_token, [], []

    def execute(self, step):
        n = sum(c.length for c in step.prefill)
        self.lengths.append(n)
        self.pass_log.append((None, self.per_token * n))

    def release(self, rows) -> None:
        pass


def test_a_long_prefill_point_stops_at_point_s_and_keeps_its_timings_scaled_to_its_length():
    from realrun.timing.prefills import POINT_S
    from realrun.timing.prefills import time_prefill as _time_prefill
    from realrun.timing.samples import Samples

    # 100 tokens at 2 ms a token: 0.2 s a pass, so two passes reach POINT_S (0.3 s) of four planned
    eng, s = _FakePrefills(0.002), Samples()
    _time_prefill(eng, [0], [(1, 100)], 4, 1, 1000, s, None)
    assert POINT_S == 0.3 and len(eng.lengths) == 2 and eng.lengths[0] != 100  # jittered lengths
    assert s.by_key[("prefill", 1, 100)] == pytest.approx([0.2, 0.2])  # x 100 / its length
    # 1 ms a pass: every planned pass runs, its own time kept
    eng, s = _FakePrefills(1e-5), Samples()
    _time_prefill(eng, [0], [(1, 100)], 4, 1, 1000, s, None)
    assert len(eng.lengths) == 4 and sum(eng.lengths) == 400
    assert s.by_key[("prefill", 1, 100)] == pytest.approx([1e-5 * n for n in eng.lengths])


def test_the_estimate_prices_a_long_prefill_point_at_the_passes_measure_will_time():
    from realrun.timing.prefills import POINT_S

    slow = LinearStepTime(1e-12, 0.01, 0.0, 0.0)  # 10 ms a prompt token
    grid = replace(TINY, prefill_rows=(1, 4), prefill_lengths=(8, 16), repeats=8)
    costs = dict(zip(map(tuple, schedule(grid)), point_costs(grid, slow)))
    # 4 x 16 tokens: 0.64 s, above POINT_S: one pass; 1 x 8: 0.08 s, four passes (the planned four)
    assert costs[("prefill", 4, 16)] == pytest.approx(0.64)
    assert costs[("prefill", 1, 8)] == pytest.approx(4 * 0.08)
    # 1 x 16: 0.16 s, so two passes reach POINT_S
    assert costs[("prefill", 1, 16)] == pytest.approx(2 * 0.16) and 0.16 < POINT_S <= 0.32


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--rows", "0"], "--rows"),
        (["--requests", "-3"], "--requests"),
        (["--rate", "0"], "--rate"),
        (["--prompt-len", "uniform:5"], "prompt-len"),
    ],
)
def test_the_profile_time_bench_refuses_bad_input_in_one_line_with_exit_2(
    argv, field, capsys, monkeypatch
):
    from bench_script import assert_refused, bench_script

    assert_refused(bench_script("profile_time", monkeypatch).main, argv, field, capsys)
