"""The level's move from a profile to its runs (realrun.judge.level_move): read, pooled, held by the
interval made before the runs, and checked on a machine whose level wanders between the profile and
the runs, where the interval without it covers far less than 90 %."""

import math

import numpy as np
import pytest

from realrun.cli import main as realrun_main
from realrun.judge.equivalence import t90
from realrun.judge.interval import STORED_DF_MAX, MetricSpread, RunSpread, interval_for
from realrun.judge.level_move import LevelMove, move_of, next_move, parse_sd_df, read_move


def test_a_compare_s_move_is_its_mean_log_level_less_the_runs_own_spread():
    delta, tau = move_of([1.2, 1.2, 1.2], 0.0)
    assert delta == pytest.approx(math.log(1.2)) and tau == pytest.approx(math.log(1.2))
    delta, tau = move_of([1.2, 1.1, 1.3], 0.1)
    expect = math.log(1.2 * 1.1 * 1.3) / 3
    assert delta == pytest.approx(expect)
    assert tau == pytest.approx(math.sqrt(expect**2 - 0.01 / 3))
    # runs that scatter more than they moved: no move beyond their own spread
    assert move_of([1.01, 0.99], 0.2)[1] == 0.0
    assert move_of([], 0.1) is None and move_of([None, -1.0], 0.1) is None


def test_one_compare_s_move_alone_is_reported_not_used():
    used, here = read_move([1.3, 1.3], 0.05, None, STORED_DF_MAX)
    assert used is None and here == pytest.approx(math.log(1.3))
    # what the next compare is told to start from: this one's reading, one degree of freedom
    nxt = next_move(used, here)
    assert nxt.df == 1 and nxt.sd == pytest.approx(math.log(1.3))
    assert next_move(None, None) is None


def test_moves_pool_by_degrees_of_freedom_with_the_earlier_ones_capped():
    earlier = LevelMove(0.10, "earlier", 2)
    used, _ = read_move([1.2, 1.2], 0.0, earlier, STORED_DF_MAX)
    assert used.df == 3
    assert used.sd == pytest.approx(math.sqrt((math.log(1.2) ** 2 + 2 * 0.01) / 3))
    many = LevelMove(0.10, "earlier", 40)
    used, _ = read_move([1.2, 1.2], 0.0, many, STORED_DF_MAX)
    assert used.df == STORED_DF_MAX + 1
    assert used.sd == pytest.approx(
        math.sqrt((math.log(1.2) ** 2 + STORED_DF_MAX * 0.01) / (STORED_DF_MAX + 1))
    )
    assert next_move(used, 0.5) is used


def test_the_interval_takes_the_larger_of_the_reference_terms():
    part = MetricSpread(0.02, 1.5)
    spread = RunSpread(0.05, "runs", 6, 4)
    plain_sd, plain_df = part.log_sd_df(spread)
    assert plain_sd == pytest.approx(math.sqrt(0.02**2 + 2 * (1.5 * 0.05) ** 2)) and plain_df == 4
    # a move below the run spread's share leaves the interval as it was
    small = LevelMove(0.03, "small", 3)
    assert part.log_sd_df(spread, move=small) == (plain_sd, plain_df)
    assert interval_for(2.0, part, spread, move=small) == interval_for(2.0, part, spread)
    # a larger one stands for the reference's term, with Welch-Satterthwaite's degrees of freedom
    big = LevelMove(0.15, "big", 3)
    own, shared = 0.02**2 + (1.5 * 0.05) ** 2, (1.5 * 0.15) ** 2
    sd, df = part.log_sd_df(spread, move=big)
    assert sd == pytest.approx(math.sqrt(own + shared))
    assert df == pytest.approx((own + shared) ** 2 / (own**2 / 4 + shared**2 / 3))
    assert min(3, 4) <= df <= 3 + 4
    lo, hi = interval_for(2.0, part, spread, move=big)
    assert lo * hi == pytest.approx(4.0)  # around the centre, on a log scale
    assert math.log(hi / 2.0) == pytest.approx(t90(df) * sd)
    # a run spread taken as known: the move's degrees of freedom alone
    known = RunSpread(0.05, "given", 0, 0)
    _, df_known = part.log_sd_df(known, move=big)
    assert df_known == pytest.approx((own + shared) ** 2 / (shared**2 / 3))


def _one_compare(rng, sigma: float, tau: float, runs: int) -> tuple[float, list[float], float]:
    """(the profile's offset from the runs' level, the runs' levels against the profile, a held-out
    run's level): the machine wanders by tau between the profile and the runs, each run by sigma."""
    offset = rng.normal(0.0, tau)
    levels = list(np.exp(offset + rng.normal(0.0, sigma, runs)))
    return offset, levels, float(np.exp(offset + rng.normal(0.0, sigma)))


@pytest.mark.parametrize("tau", [0.15, 0.0])
def test_on_a_machine_whose_level_wanders_the_interval_before_the_runs_holds_nine_in_ten(tau):
    """Each compare: a profile, three runs (the run spread read from them, 2 df), one held-out run;
    the moves of the compares before it pooled into its interval. With the move the held-out runs
    land inside 80-95 % of the time (the issue's target); without it, where the level wanders (tau
    15 % against sigma 5 %), fewer than 80 %; where it does not, the move changes little (it stays
    within the run spread's share more often than not, and coverage holds)."""
    rng = np.random.default_rng(7)
    sigma, part = 0.05, MetricSpread(0.0, 1.0)
    earlier, inside, inside_plain, n = None, 0, 0, 1500
    for _ in range(n):
        _, levels, new = _one_compare(rng, sigma, tau, 3)
        lv = np.log(levels)
        spread = RunSpread(float(lv.std(ddof=1)), "runs", 3, 2).pooled_with(None)
        used, here = read_move(levels, spread.sd, earlier, STORED_DF_MAX)
        # the prediction is at the profile's level: 1.0; a run at level x reads the metric x
        lo, hi = interval_for(1.0, part, spread, move=used)
        inside += lo <= new <= hi
        lo, hi = interval_for(1.0, part, spread)
        inside_plain += lo <= new <= hi
        earlier = next_move(used, here)
    print(f"tau {tau}: inside {inside / n:.3f} with the move, {inside_plain / n:.3f} without")
    if tau > 0:
        assert 0.80 <= inside / n <= 0.95  # the 80-95 % the issue asks
        assert inside_plain / n < 0.8  # below the 80-95 % the issue asks of it
    else:
        assert 0.88 <= inside / n <= 0.99 and inside_plain / n >= 0.85


def test_the_move_validates_itself_and_its_flag_names_itself():
    with pytest.raises(ValueError, match="sd"):
        LevelMove(-0.1, "x", 1)
    with pytest.raises(ValueError, match="df"):
        LevelMove(0.1, "x", 0)
    assert parse_sd_df("12%:3", "--level-move") == (pytest.approx(0.12), 3)
    assert parse_sd_df("0.05", "--level-move") == (0.05, 1)
    for bad in ("x", "1.5:2", "0.1:0", "nan:3", "-1%:2"):
        with pytest.raises(ValueError, match="--level-move"):
            parse_sd_df(bad, "--level-move")


@pytest.mark.parametrize("flag", ["--level-move", "--run-spread"])
@pytest.mark.parametrize("value", ["abc", "2:3", "0.1:0"])
def test_a_bad_level_move_or_run_spread_is_one_line_and_exit_2(flag, value, capsys):
    assert realrun_main(["compare", flag, value, "--requests", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and value in err[0]


def test_a_move_stored_with_the_calibration_is_pooled_into_the_interval_before_the_runs(
    tmp_path, capsys, monkeypatch
):
    """A calibration file that an earlier compare stored a move in: the next compare on it pools
    that move with its own reading, says where it came from, widens its interval made before the
    runs against the same compare told no move (the same runs are not repeated: the width is
    computed from the JSON's own parts), and hands the pooled move on."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import json

    from test_sampled import model

    cal = tmp_path / "cal.json"
    model().to_json(cal)
    obj = json.loads(cal.read_text())
    obj["level_move"] = {"sd": 0.4, "df": 3, "source": "an earlier compare"}
    cal.write_text(json.dumps(obj))
    flags = "--requests 6 --prompt-len uniform:4,24 --output-len uniform:2,8 --threads 1"
    flags += " --policy taxi --repeats 2 --no-plots --json --no-speed-check"
    argv = ["compare", *flags.split(), "--calibration", str(cal)]
    assert realrun_main(argv) == 0
    got = json.loads(capsys.readouterr().out)
    move, here = got["level_move"], got["level_move_here"]
    assert move["df"] == 4 and "stored with the calibration" in move["source"]
    tau2 = max(0.0, here**2 - got["run_spread"]["sd"] ** 2 / 2)
    assert move["sd"] == pytest.approx(math.sqrt((tau2 + 3 * 0.4**2) / 4), abs=1e-3)
    assert got["level_move_next"] == move
    (run,) = got["runs"]
    e, sigma = run["elasticity"]["p50_e2e"], got["run_spread"]["sd"]
    lo, hi = run["interval_one_run"]["p50_e2e"]
    if e > 0 and (e * move["sd"]) ** 2 > (e * sigma) ** 2:
        # the reference's term is the move's: half the log width holds at least e x tau
        assert math.log(hi / lo) / 2 >= e * move["sd"]
    # the calibration given was not written to
    assert json.loads(cal.read_text())["level_move"]["source"] == "an earlier compare"
