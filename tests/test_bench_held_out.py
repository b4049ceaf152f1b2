"""bench/held_out.py, the coverage check both fidelity benches share: the intervals each held-out
run is held up to, the share inside, and sharpness, on given numbers (no engine runs)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from bench_script import assert_refused, bench_script

from realrun.judge.interval import MetricSpread, RunSpread

_spec = importlib.util.spec_from_file_location(
    "held_out", Path(__file__).resolve().parents[1] / "bench" / "held_out.py"
)
H = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("held_out", H)  # dataclasses look their module up by name
_spec.loader.exec_module(H)

SPREAD = RunSpread(0.10, "given")
SEED_SD, ELASTICITY = 0.05, 2.0


def _row(label="continuous", at_passes=True, repeats=3):
    """A compare's row: every covered metric predicted at 1.0 before the runs and 1.2 at the passes'
    level."""
    parts = {k: MetricSpread(SEED_SD, ELASTICITY) for k in H.COVERED}
    return SimpleNamespace(
        label=label,
        partial=False,
        parts=parts,
        ref_runs=1,
        repeats=[{}] * repeats,
        predicted={k: 1.0 for k in H.COVERED},
        predicted_at_passes={k: 1.2 for k in H.COVERED} if at_passes else None,
    )


def _report(*rows):
    return SimpleNamespace(rows=list(rows), spread=SPREAD, move=None)


def _runs(*values):
    return [{k: v for k in H.COVERED} for v in values]


def test_the_intervals_are_the_compares_one_run_intervals_before_and_at_the_passes_level():
    # Before: one run around a level read from one run, sd^2 = s^2 + (e sigma)^2 (1 + 1/1);
    # at the passes' level, read from the compare's 3 repeats: (e sigma)^2 (1 + 1/3).
    half_b = 1.645 * math.sqrt(SEED_SD**2 + (ELASTICITY * 0.10) ** 2 * 2)
    half_a = 1.645 * math.sqrt(SEED_SD**2 + (ELASTICITY * 0.10) ** 2 * (1 + 1 / 3))
    assert half_b == pytest.approx(0.4725, abs=1e-4)
    inside_both, only_after, neither = 1.25, math.exp(half_b) * 1.01, 2.0
    rows = H.held_up(
        "short", _report(_row()), {"continuous": _runs(inside_both, only_after, neither)}
    )
    assert len(rows) == 3 * len(H.COVERED)
    p50 = [r for r in rows if r.metric == "p50_e2e"]
    assert [r.inside_before for r in p50] == [True, False, False]
    assert [r.inside_after for r in p50] == [True, True, False]
    assert all(
        r.half_before == pytest.approx(half_b) and r.half_after == pytest.approx(half_a)
        for r in rows
    )
    assert p50[0].values == (inside_both, only_after, neither) and p50[0].seed_sd == SEED_SD


def test_without_a_level_from_the_passes_nothing_is_counted_at_it():
    rows = H.held_up("short", _report(_row(at_passes=False)), {"continuous": _runs(1.0, 1.1)})
    assert len(rows) == 2 * len(H.COVERED) and all(
        r.inside_after is None and r.half_after is None for r in rows
    )
    lines = H.coverage_lines(rows)
    assert "at the passes' level none made" in lines[-2]
    assert (
        f"inside the interval made before the runs {len(rows)} of {len(rows)} (100%)" in lines[-2]
    )
    assert lines[-1].strip().startswith("a right interval in each place would read")
    assert "x before, - at the passes' level" in lines[-1]
    assert "at passes -" in H.shape_lines(rows)[0]


def test_a_partial_row_and_a_missing_metric_are_left_out():
    cut = _row("static")
    cut.partial = True
    runs = {"continuous": [{"p50_e2e": 1.0}], "static": _runs(1.0)}
    rows = H.held_up("short", _report(_row(), cut), runs)
    assert [(r.policy, r.metric) for r in rows] == [("continuous", "p50_e2e")]


def test_sharpness_is_the_half_width_against_what_the_held_out_runs_call_for():
    values = (1.0, 1.1, 1.3)
    rows = H.held_up("short", _report(_row()), {"continuous": _runs(*values)})
    group = [r for r in rows if r.metric == "p99_e2e"]
    want = 1.645 * math.sqrt(float(np.log(values).std(ddof=1)) ** 2 + SEED_SD**2)
    before, after = H.sharpness(group)
    assert before == pytest.approx(group[0].half_before / want)
    assert after == pytest.approx(group[0].half_after / want)
    assert after < before  # the level read from three repeats is tighter than one read from one run
    one = H.held_up("short", _report(_row()), {"continuous": _runs(1.0)})
    assert all(math.isnan(x) for x in H.sharpness(one))  # one run has no sd of its own


def test_the_table_counts_per_metric_and_over_all():
    rows = H.held_up(
        "short", _report(_row("a"), _row("b")), {"a": _runs(1.0, 2.0), "b": _runs(1.25, 1.3)}
    )
    lines = H.coverage_lines(rows)
    body = [x for x in lines if x.startswith("short")]
    assert len(body) == 2 * len(H.COVERED)
    # a: 1.0 inside both, 2.0 in neither
    assert body[0].split("|")[1].split() == [
        "1",
        "of",
        "2",
        "1",
        "of",
        "2",
    ]
    assert body[-1].split("|")[1].split() == ["2", "of", "2", "2", "of", "2"]  # b: both inside both
    n = len(rows)
    assert (
        f"before the runs {3 * n // 4} of {n} (75%); at the passes' level {3 * n // 4} of {n} (75%)"
        in lines[-2]
    )
    assert lines == H.coverage_lines(rows)  # the right intervals' draws are seeded
    (line,) = H.shape_lines(rows)
    assert line.startswith("short") and f"inside before {3 * n // 4} of {n} (75%)" in line


def test_held_out_rounds_run_every_label_count_times_in_a_seeded_shuffled_order():
    def order(seed):
        seen = []
        runs = H.run_rounds(
            ["a", "b", "c"],
            lambda label: seen.append(label) or {"p50_e2e": 1.0},
            4,
            np.random.default_rng(seed),
        )
        assert {k: len(v) for k, v in runs.items()} == {"a": 4, "b": 4, "c": 4}
        # every round runs each once
        assert all(sorted(seen[i : i + 3]) == ["a", "b", "c"] for i in range(0, 12, 3))
        return seen

    assert order(7) == order(7)
    assert len({tuple(order(s)) for s in range(6)}) > 1
    with pytest.raises(ValueError, match="count must be >= 0, got -1"):
        H.run_rounds(["a"], dict, -1, np.random.default_rng(0))


def test_a_held_out_row_names_a_bad_field():
    with pytest.raises(ValueError, match="half_before must be a finite number >= 0, got -0.1"):
        H.HeldOut("short", "taxi", "p50_e2e", 0, True, True, -0.1, 0.1, 0.0, (1.0,))
    with pytest.raises(ValueError, match="inside_after and half_after"):
        H.HeldOut("short", "taxi", "p50_e2e", 0, True, None, 0.1, 0.1, 0.0, (1.0,))


def _place(seed_sd=0.0, level_sd=0.2, df=0, ref_runs=1, repeats=3, values=(1.0, 1.1, 1.2)):
    return [
        H.HeldOut(
            "s", "p", "m", 0, True, True, 0.1, 0.1, seed_sd, values, level_sd, df, ref_runs, repeats
        )
    ]


def test_a_right_interval_with_a_known_spread_reads_the_closed_form():
    # No seeds' part, sigma known (z = 1.645), three held-out runs: half / (1.645 sd_h) =
    # sqrt(1 + 1/ref) / sqrt(chi2_2 / 2), whose median is sqrt((1 + 1/ref) / ln 2): 1.699 with the
    # profile's one reference run, 1.387 at the level three repeats read. A right interval is not
    # 1x.
    before, after = H.right_sharpness(_place(), np.random.default_rng(1), draws=40_000)
    assert before == pytest.approx(math.sqrt(2 / math.log(2)), rel=0.02)
    assert after == pytest.approx(math.sqrt(4 / 3 / math.log(2)), rel=0.02)


def test_a_right_interval_reads_sharper_with_more_degrees_of_freedom_and_held_out_runs():
    rng = np.random.default_rng(2)
    two = H.right_sharpness(_place(df=2), rng)[0]
    eight = H.right_sharpness(_place(df=8), rng)[0]
    known = H.right_sharpness(_place(df=0), rng)[0]
    assert two > eight > known  # Student's t: 2.92, 1.86, 1.645
    many = H.right_sharpness(_place(values=tuple(1 + i / 10 for i in range(12))), rng)[0]
    assert many < known  # the held-out runs' own sd, read with 11 df, no longer lies low
    assert all(math.isnan(x) for x in H.right_sharpness(_place(values=(1.0,)), rng))
    same = [H.right_sharpness(_place(df=2), np.random.default_rng(3)) for _ in range(2)]
    assert same[0] == same[1]


def test_a_right_interval_reads_what_the_check_reads_of_intervals_that_are_right():
    # The whole check, over a machine that is as the interval says: the level from one run to the
    # next sd 0.1, elasticity 2, seeds' sd 0.05; each compare reads sigma from 3 runs (2 df) and
    # predicts at a level read from one run (the profile, its error shared by every later run);
    # three held-out runs. Across 2,000 such compares, the held-out runs land inside nine in ten,
    # and the median sharpness the check reads is what right_sharpness draws for the same place.
    rng = np.random.default_rng(4)
    sigma, e, s = 0.10, 2.0, 0.05
    sharp, inside = [], []
    for _ in range(2000):
        read = sigma * math.sqrt(rng.chisquare(2) / 2)
        report = SimpleNamespace(
            rows=[_row()], spread=RunSpread(read, "three runs", 3, 2), move=None
        )
        report.rows[0].parts = {k: MetricSpread(s, e) for k in H.COVERED}
        report.rows[0].predicted = {
            k: math.exp(e * sigma * rng.standard_normal()) for k in H.COVERED
        }
        report.rows[0].predicted_at_passes = None
        values = np.exp(e * sigma * rng.standard_normal(3) + s * rng.standard_normal(3))
        rows = [
            r
            for r in H.held_up("x", report, {"continuous": _runs(*values)})
            if r.metric == "p50_e2e"
        ]
        sharp.append(H.sharpness(rows)[0])
        inside += [r.inside_before for r in rows]
    assert 0.87 <= np.mean(inside) <= 0.93
    right = H.right_sharpness(
        _place(seed_sd=s, level_sd=e * sigma, df=2, values=(1.0, 1.1, 1.2)),
        np.random.default_rng(5),
        20_000,
    )[0]
    assert float(np.median(sharp)) == pytest.approx(right, rel=0.06)
    assert (
        right > 2.0
    )  # 2 df and one reference run: far above the 1.5x target, for a right interval


@pytest.mark.parametrize(
    "argv, field",
    [
        (["--run-spread", "12"], "--run-spread"),
        (["--run-spread", "8%:zero"], "--run-spread"),
        (["--level-move", "2:3"], "--level-move"),
        (["--coverage", "-1"], "--coverage"),
        (["--shapes", "short,wavy"], "--shapes"),
    ],
)
def test_the_vllm_bench_refuses_a_bad_flag_in_one_line_before_starting_vllm(
    argv, field, monkeypatch, capsys
):
    assert_refused(bench_script("vllm_fidelity", monkeypatch).main, argv, field, capsys)


def test_a_level_move_widens_the_interval_before_the_runs_and_the_table_shows_both():
    """With the level's move in the report, the interval made before the runs takes e x tau for its
    reference term (tau 30 % against sigma 10 % here), the one at the passes' level does not, and
    the same held-out runs are counted against the interval without it too."""
    from realrun.judge.level_move import LevelMove

    move = LevelMove(0.30, "earlier compares", 4)
    report = SimpleNamespace(rows=[_row()], spread=SPREAD, move=move)
    # 1.0 x exp(0.6): outside the plain interval (half 0.47), inside the one with the move
    rows = H.held_up("short", report, {"continuous": _runs(1.0, math.exp(0.6))})
    p50 = [r for r in rows if r.metric == "p50_e2e"]
    sd, df = MetricSpread(SEED_SD, ELASTICITY).log_sd_df(SPREAD, 1, 1, move)
    assert sd == pytest.approx(math.sqrt(SEED_SD**2 + (ELASTICITY * 0.10) ** 2 + (2 * 0.30) ** 2))
    # the run spread taken as known: the move's degrees of freedom alone, by Welch-Satterthwaite
    assert df == pytest.approx(sd**4 / ((2 * 0.30) ** 4 / 4))
    assert all(r.half_before == pytest.approx(H.t90(df) * sd) for r in p50)
    assert all(r.half_plain == pytest.approx(0.4725, abs=1e-4) for r in p50)
    assert [r.inside_plain for r in p50] == [True, False]
    assert [r.inside_before for r in p50] == [True, True]
    half_a = 1.645 * math.sqrt(SEED_SD**2 + (ELASTICITY * 0.10) ** 2 * (1 + 1 / 3))
    assert all(r.half_after == pytest.approx(half_a) for r in p50)
    text = "\n".join(H.coverage_lines(rows))
    assert "without the level's move (8 runs whose interval held one): 4 of 8 (50%)" in text
    assert "against 8 with it" in text
    # a right interval with the move reads wider than one without
    with_move, _ = H.right_sharpness(p50, np.random.default_rng(1), draws=400)
    plain = [H.replace(r, move_sd=0.0) for r in p50]
    without, _ = H.right_sharpness(plain, np.random.default_rng(1), draws=400)
    assert with_move > 1.3 * without


@pytest.mark.parametrize("value", ["2:3", "12%:0", "x"])
def test_our_engine_s_bench_refuses_a_bad_level_move_in_one_line_before_loading_a_model(
    value, monkeypatch, capsys
):
    assert_refused(
        bench_script("fidelity", monkeypatch).main, ["--level-move", value], "--level-move", capsys
    )
