"""compare with noise: seeds give a median and a band, repeats a median and a spread, and a verdict.

The measured side here is a stand-in (the simulator itself, on a model whose passes run
``slow`` times the calibrated mean, or the same model): what is checked is the bookkeeping
(interleaving, medians, bands, verdicts), not the machine. One CLI test runs tiny-gpt2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_sampled import model  # noqa: E402

from batchsim import Fixed, Poisson, Uniform, make_policy, make_workload, simulate, summarize  # noqa: E402
from batchsim.sim.busy import rate_factor_for_busy, scaled  # noqa: E402
from batchsim.sim.sampled import with_noise  # noqa: E402
from batchsim.sim.steptime import ScaledStepTime  # noqa: E402
from realrun.judge.compare import compare_policies, format_compare  # noqa: E402
from realrun.judge.verdict import band_of, median_summary, noise_pct, verdict  # noqa: E402

WL = make_workload(Poisson(30.0), Uniform(16, 64), Uniform(4, 24), n=60, seed=3)


def test_verdicts():
    assert verdict(8.0, 10, None) == "agrees" and verdict(-10.0, 10, 2.0) == "agrees"
    assert verdict(14.0, 10, 15.0) == "within noise" and verdict(14.0, 10, 12.0) == "disagrees"
    assert verdict(14.0, 10, None) == "disagrees" and verdict(None, 10, 1.0) is None
    reps = [
        {"x": 1.0, "n": 3, "s": "a"},
        {"x": 1.2, "n": 3, "s": "b"},
        {"x": 0.9, "n": 3, "s": "c"},
    ]
    assert median_summary(reps) == {"x": 1.0, "n": 3, "s": "a"}
    assert (
        noise_pct(reps, ["x"])["x"] == pytest.approx(20.0)
        and noise_pct(reps[:1], ["x"])["x"] is None
    )
    lo, hi = band_of([{"x": float(v)} for v in range(101)], ["x"])["x"]
    assert (lo, hi) == (pytest.approx(5.0), pytest.approx(95.0))


def _compare(measured_model, seeds=5, repeats=3, order_seed=0, log=None, adjust=None):
    pairs = [
        (
            n,
            make_policy(n, max_seqs=8) if n == "continuous" else make_policy(n),
            make_policy(n, max_seqs=8) if n == "continuous" else make_policy(n),
        )
        for n in ("taxi", "continuous")
    ]
    count = {"k": 0}

    def measure(label, policy):
        count["k"] += 1
        if log is not None:
            log.append(label)
        return simulate(WL, policy, with_noise(measured_model, 100 + count["k"]))

    return compare_policies(
        WL,
        pairs,
        measure,
        model(),
        seeds=seeds,
        repeats=repeats,
        order_seed=order_seed,
        adjust=adjust,
    )


def test_repeats_are_interleaved_in_seeded_shuffled_rounds():
    logs = [[], [], []]
    for log, seed in zip(logs, (1, 1, 2)):
        _compare(model(), seeds=2, repeats=6, order_seed=seed, log=log)
    assert logs[0] == logs[1] != logs[2]  # the order is the seed's
    for log in logs:
        rounds = [log[i : i + 2] for i in range(0, 12, 2)]
        # every round measures each once
        assert all(sorted(r) == ["continuous", "taxi"] for r in rounds)
    # and the order varies
    assert len({tuple(r) for r in (logs[0][i : i + 2] for i in range(0, 12, 2))}) == 2


def test_same_model_measured_agrees_and_falls_in_its_band():
    report = _compare(model())
    for row in report.rows:
        assert len(row.repeats) == 3 and row.seeds == 5 and set(row.band) >= {"p50_e2e", "p99_ttft"}
        assert row.measured["p50_e2e"] == pytest.approx(
            np.median([r["p50_e2e"] for r in row.repeats])
        )
        lo, hi = row.band["p50_e2e"]
        assert lo <= row.predicted["p50_e2e"] <= hi
        # The same model on both sides: never "disagrees"; "cannot tell" is honest where 3 runs are
        # too few.
        assert not {row.verdicts[k] for k in ("p50_e2e", "p99_e2e", "mean_tpot")} & {"disagrees"}
        d = row.as_dict()
        assert {
            "predicted",
            "predicted_band",
            "measured",
            "repeats",
            "verdicts",
            "in_band",
            "interval_one_run",
            "interval_median",
            "judgements",
        } <= set(d)
        lo, hi = row.interval_one_run["p50_e2e"]
        assert (
            lo < row.predicted["p50_e2e"] < hi
            and hi - lo > row.band["p50_e2e"][1] - row.band["p50_e2e"][0]
        )
        json.dumps(d)  # plain JSON
    text = format_compare(report, decomposition=False)
    assert (
        "one run, 90%" in text
        and "error [90% CI]" in text
        and "verdicts:" in text
        and "seeds' band" not in text
    )
    assert len(text.splitlines()) < 25  # one screen
    full = format_compare(report, decomposition=False, explain=True)
    assert (
        "seeds' band" in full
        and "mean TPOT" in full
        and "runs inside their one-run interval" in full
    )


def test_a_level_shift_the_runs_agree_on_is_called_the_machines():
    # Every measured run 30 % slower than the profile, each pass priced at that level: the repeats
    # agree with each other, the prediction misses, and the prediction at the passes' level does
    # not.
    from batchsim.core.plan import Pass

    st, count = model(), {"k": 0}
    passes = [Pass(prefill_tokens=40, prefill_rows=1, query=40)] * 20 + [
        Pass(decode_rows=4, kv_read=400, attn_read=400)
    ] * 200

    def measure(label, policy):
        count["k"] += 1
        res = simulate(WL, policy, with_noise(ScaledStepTime(st, 1.3), 100 + count["k"], "passes"))
        f = 1.3 * (1 + 0.02 * (count["k"] % 3 - 1))  # a level that moves a little from run to run
        res.meta["passes"] = [(p, st.for_policy(policy.name).pass_time(p) * f) for p in passes]
        return res

    pairs = [(n, make_policy(n), make_policy(n)) for n in ("taxi", "static")]
    report = compare_policies(WL, pairs, measure, st, seeds=3, repeats=3, noise="passes")
    assert "passes of this compare's 6 runs" in report.spread.source and report.spread.sd < 0.05
    row = report.rows[0]
    assert row.verdicts["mean_tpot"] == "disagrees" and row.causes["mean_tpot"] == "level"
    text = format_compare(report, decomposition=False)
    assert "the machine ran at" in text and "predicted again at that level" in text


def test_an_adjustment_reaches_every_seeds_prediction():
    # vLLM's side: each token reaches the client a fixed lag after its step. Applied to every seed's
    # simulation, it moves the median and both ends of the band by the lag, and the TPOT not at all.
    from realrun.reference.vllm.commands import delivered

    lag = 0.25
    plain, late = (
        _compare(model(), repeats=1),
        _compare(model(), repeats=1, adjust=lambda r: delivered(r, lag)),
    )
    for a, b in zip(plain.rows, late.rows):
        for k in ("p50_e2e", "p99_e2e", "p50_ttft", "p99_ttft"):
            assert b.predicted[k] == pytest.approx(a.predicted[k] + lag, abs=1e-9)
            assert b.band[k] == pytest.approx([a.band[k][0] + lag, a.band[k][1] + lag], abs=1e-9)
        assert b.predicted["mean_tpot"] == pytest.approx(a.predicted["mean_tpot"], abs=1e-12)
        assert b.measured == a.measured  # the measured side is not touched
        assert b.sim.meta["delivery_s"] == lag


def test_taxi_on_the_same_model_agrees():
    row = _compare(model()).rows[0]
    assert row.verdicts["p50_e2e"] == "agrees" and row.verdicts["mean_tpot"] == "agrees"


def test_a_slower_machine_disagrees():
    report = _compare(ScaledStepTime(model(), 1.5))
    row = report.rows[0]
    assert row.errors["mean_tpot"] < -25 and row.verdicts["mean_tpot"] == "disagrees"
    assert row.in_band["mean_tpot"] is False


def test_rate_for_busy_reaches_the_asked_busy_fraction():
    unit = make_workload(Poisson(1.0), Fixed(32), Fixed(16), n=300, seed=0)
    m = model()
    for busy in (0.5, 0.8):
        f = rate_factor_for_busy(unit, lambda: make_policy("taxi"), m, busy)
        got = summarize(simulate(scaled(unit, f), make_policy("taxi"), m))["busy_fraction"]
        assert got == pytest.approx(busy, abs=0.02)
    # A batching policy needs a higher rate for the same busy fraction (it does the work in less
    # time).
    f_taxi = rate_factor_for_busy(unit, lambda: make_policy("taxi"), m, 0.7)
    f_cont = rate_factor_for_busy(unit, lambda: make_policy("continuous", max_seqs=8), m, 0.7)
    assert f_cont > f_taxi


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--step-noise", "loud"], "step-noise"),
        (["--seeds", "0"], "seeds"),
        (["--repeats", "0"], "repeats"),
        (["--busy", "1.5"], "busy"),
        (["--busy", "0"], "busy"),
        (["--seeds", "3", "--step-noise", "none"], "--seeds"),
        (["--run-spread", "8x:2"], "--run-spread"),
        (["--run-spread", "0.1:0"], "--run-spread"),
        (["--run-spread", "1.5"], "--run-spread"),
        (["--run-spread", "nan:4"], "--run-spread"),
    ],
)
def test_bad_compare_flags_are_one_line(flags, words, capsys):
    pytest.importorskip("torch")
    from realrun.cli import main

    code = main(["compare", "--requests", "3", "--threads", "1", "--no-plots", *flags])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err


def test_cli_compare_with_seeds_repeats_and_busy(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from realrun.cli import main

    cal = tmp_path / "cal.json"
    model().to_json(cal)
    code = main(
        [
            "compare",
            "--requests",
            "8",
            "--prompt-len",
            "uniform:4,24",
            "--output-len",
            "uniform:2,8",
            "--threads",
            "1",
            "--policy",
            "taxi,continuous",
            "--calibration",
            str(cal),
            "--repeats",
            "2",
            "--seeds",
            "3",
            "--busy",
            "0.5",
            "--no-plots",
            "--json",
            "--no-speed-check",
            "--run-spread",
            "10%:8",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    obj = json.loads(out)
    # two runs of two policies (2 df) pooled with the 8 given; or, 3x apart, the wider alone
    spread = obj["run_spread"]
    if "not pooled" in spread["source"]:
        assert spread["df"] in (2, 8)
    else:
        assert spread["df"] == 10 and "pooled with 8 more" in spread["source"]
    assert obj["config"]["seeds"] == 3 and obj["config"]["repeats"] == 2
    for r in obj["runs"]:
        assert (
            len(r["repeats"]) == 2
            and set(r["predicted_band"])
            and r["verdicts"]["p50_e2e"] in ("agrees", "disagrees", "cannot tell")
        )
        lo, hi = r["interval_one_run"]["p50_e2e"]
        assert lo <= r["predicted"]["p50_e2e"] <= hi
        assert len(r["canary_s"]) == 2
    assert any("--busy 0.5" in n for n in obj["notes"])
