"""realrun predict: a record of ``realrun serve`` held up to batchsim's prediction of it.

The records here are made by the simulator itself with a known step-time model and written
with ``realrun.classroom.serve.record.write_record`` (the server's own writer) beside a sidecar, so
the truth is known: predicting with that same model must give the measured figures (to the record's
microsecond rounding), a model twice as slow must be told apart, and a model with the same spread
but other luck must not be called wrong. No model is loaded, nothing is profiled: the calibrations
are files written here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_sampled import model as spread_model  # noqa: E402

from batchsim import Poisson, Uniform, make_workload, simulate  # noqa: E402
from batchsim.core.config import PolicyConfig  # noqa: E402
from batchsim.core.limits import ServerLimits  # noqa: E402
from batchsim.sim.sampled import with_noise  # noqa: E402
from batchsim.sim.steptime import LinearStepTime  # noqa: E402
from realrun.classroom.predict import PREDICT_METRICS, predict_record, read_record  # noqa: E402
from realrun.classroom.serve.record import write_record  # noqa: E402
from realrun.cli.predict import main  # noqa: E402

MODEL = LinearStepTime(c0=0.004, c1=2e-5, c2=3e-4, c3=1e-7, source="test")
WL = make_workload(Poisson(12.0), Uniform(16, 96), Uniform(8, 48), n=80, seed=4)
KNOBS = {
    "static": {"max_batch": 4, "max_wait": 0.05},
    "continuous": {
        "max_seqs": 8,
        "max_batched_tokens": 512,
        "block_size": 16,
        "chunked_prefill": True,
    },
}
KEYS = [k for k, *_ in PREDICT_METRICS]


def _meta(policy: str, context_len: int | None = 1024) -> dict:
    cfg = PolicyConfig(policy, **KNOBS[policy])
    return {
        "model": "tiny-gpt2",
        "device": "cpu",
        "dtype": "fp32",
        "threads": 1,
        "policy": policy,
        "policy_knobs": KNOBS[policy],
        "policy_repr": cfg.build().describe(),
        "kv_budget_tokens": None,
        "context_len": context_len,
    }


def _record(
    tmp_path: Path,
    policy: str = "continuous",
    step_time=MODEL,
    wl=WL,
    context_len: int | None = 1024,
    name: str = "r.csv",
) -> Path:
    meta = _meta(policy, context_len)
    run = simulate(
        wl,
        PolicyConfig(policy, **KNOBS[policy]).build(),
        step_time,
        limits=ServerLimits(context_len=context_len),
    )
    path = tmp_path / name
    write_record(run.records, path, meta)
    return path


def _cal(tmp_path: Path, model, name: str = "cal.json") -> Path:
    path = tmp_path / name
    model.to_json(path)
    return path


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_the_model_that_made_the_record_predicts_it(tmp_path, policy):
    rec = read_record(str(_record(tmp_path, policy)))
    p = predict_record(rec, MODEL)
    # The record keeps times to the microsecond: 1 us in a TTFT of several ms is under 0.05 %.
    for k in KEYS:
        assert p.predicted[k] == pytest.approx(p.measured[k], rel=5e-4), k
    assert set(p.verdicts.values()) == {"agrees"}
    assert p.compared == len(WL) and rec.never_ran == 0


def test_a_model_twice_as_slow_disagrees(tmp_path):
    slow = LinearStepTime(c0=2 * MODEL.c0, c1=2 * MODEL.c1, c2=2 * MODEL.c2, c3=2 * MODEL.c3)
    p = predict_record(read_record(str(_record(tmp_path))), slow)
    for k in ("p50_ttft", "p90_ttft", "p99_ttft", "mean_tpot", "p50_e2e", "p99_e2e", "busy_share"):
        assert p.verdicts[k] == "disagrees", (k, p.errors[k])
        # Too slow: the prediction is above the measurement; the busy share by less than the steps
        # (slower steps gather bigger batches, and one step serves more rows).
        assert p.errors[k] > (10 if k == "busy_share" else 50), (k, p.errors[k])
    # Light load: every request is served either way, at the rate it came; throughput barely moves.
    assert abs(p.errors["request_throughput"]) < 5


def test_same_spread_other_luck_is_not_called_wrong(tmp_path):
    m = spread_model()
    path = _record(tmp_path, step_time=with_noise(m, seed=99))
    cal = _cal(tmp_path, m)
    rec = read_record(str(path))
    p = predict_record(rec, m, seeds=7)
    assert p.band and p.seeds == 7
    assert "disagrees" not in {
        p.verdicts[k] for k in ("p50_ttft", "p50_e2e", "mean_tpot", "request_throughput")
    }, p.verdicts
    # Seeded: the same prediction twice; the CLI prints the same numbers.
    q = predict_record(rec, m, seeds=7)
    assert p.predicted == q.predicted and p.band == q.band
    # With noise on, the same model without noise is one prediction, no band.
    assert not predict_record(rec, m, seeds=1).band
    assert main([str(path), "--calibration", str(cal), "--seeds", "7", "--json"]) == 0


def test_cli_json_and_figure(tmp_path, capsys):
    path = _record(tmp_path, "static")
    cal = _cal(tmp_path, MODEL)
    out = tmp_path / "out"
    assert main([str(path), "--calibration", str(cal), "--json", "--out", str(out)]) == 0
    obj = json.loads(capsys.readouterr().out)
    run = obj["runs"][0]
    assert set(run["verdict"].values()) == {"agrees"} and run["seeds"] == 1
    assert obj["config"]["served"]["policy"] == "static"
    # a linear calibration: mean only, said so
    assert any("kept no spread" in n for n in obj["notes"])
    assert (out / "predict-ttft-cdf.png").stat().st_size > 1000
    assert main([str(path), "--calibration", str(cal)]) == 0
    text = capsys.readouterr().out
    assert "p90 TTFT ms" in text and "busy share" in text and "verdicts: 9 agrees" in text


def test_requests_that_never_ran_are_not_simulated_and_are_counted(tmp_path, capsys):
    # Three requests too long for a 200-position context: the server refuses them, and so does the
    # simulator; they are dropped from the replay, which changes nothing for the others.
    p_tok, o_tok = WL.prompt_tokens.copy(), WL.output_tokens.copy()
    p_tok[[5, 30, 60]] = 190
    wl = type(WL).from_arrays(WL.arrivals, p_tok, o_tok, "with three too long")
    path = _record(tmp_path, wl=wl, context_len=200)
    rec = read_record(str(path))
    assert rec.never_ran == 3 and len(rec.workload) == len(wl) - 3
    p = predict_record(rec, MODEL)
    assert set(p.verdicts.values()) == {"agrees"} and p.compared == len(wl) - 3
    assert main([str(path), "--calibration", str(_cal(tmp_path, MODEL))]) == 0
    assert "3 never ran" in capsys.readouterr().out


def test_a_request_left_part_way_weighs_on_the_others_and_is_left_out(tmp_path):
    path = _record(tmp_path)
    lines = path.read_text().splitlines()
    cells = lines[-1].split(",")  # the last arrival: the client left after its first 3 tokens
    cells[2], cells[5], cells[6], cells[7] = "3", "", "3", "cut: the client disconnected"
    lines[-1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    rec = read_record(str(path))
    assert (
        rec.never_ran == 0
        and rec.left_out == {"cut": 1}
        and int(rec.workload.output_tokens[-1]) == 3
    )
    p = predict_record(rec, MODEL)
    assert p.compared == len(WL) - 1


def _bad(args, capsys) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    path = _record(tmp_path)
    cal = _cal(tmp_path, MODEL)
    assert "no such file" in _bad([str(tmp_path / "nope.csv")], capsys)
    plain = tmp_path / "plain.csv"
    plain.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,10,5\n0.5,12,6\n")
    err = _bad([str(plain), "--calibration", str(cal)], capsys)
    assert "start_s" in err and "batchsim run --trace" in err
    notacsv = tmp_path / "x.csv"
    notacsv.write_text("hello,world\n1,2\n")
    assert "header" in _bad([str(notacsv)], capsys)
    lone = tmp_path / "lone.csv"
    lone.write_text(path.read_text())
    err = _bad([str(lone), "--calibration", str(cal)], capsys)
    assert "sidecar" in err and "lone.csv.json" in err and "batchsim run --trace" in err
    side = Path(str(path) + ".json")
    meta = json.loads(side.read_text())
    for change, words in (
        ({"policy": "bus"}, "bus"),
        ({"policy_knobs": {"max_seqs": 0}}, "max_seqs"),
        ({"policy_knobs": {"speed": 3}}, "speed"),
        ({"context_len": -5}, "context_len"),
    ):
        side.write_text(json.dumps({**meta, **change}))
        err = _bad([str(path), "--calibration", str(cal)], capsys)
        assert words in err and "sidecar" in err, err
    side.write_text("{not json")
    assert "JSON" in _bad([str(path), "--calibration", str(cal)], capsys)
    side.write_text(json.dumps(meta))
    bad = path.read_text().splitlines()
    bad[3] = ",".join(bad[3].split(",")[:3] + ["soon"] + bad[3].split(",")[4:])
    broken = tmp_path / "broken.csv"
    broken.write_text("\n".join(bad) + "\n")
    Path(str(broken) + ".json").write_text(json.dumps(meta))
    err = _bad([str(broken), "--calibration", str(cal)], capsys)
    assert "start_s" in err and "soon" in err and "line 4" in err
    assert "seeds" in _bad([str(path), "--calibration", str(cal), "--seeds", "0"], capsys)
    assert "step-noise" in _bad(
        [str(path), "--calibration", str(cal), "--step-noise", "loud"], capsys
    )
    assert "give one of them" in _bad(
        [str(path), "--calibration", str(cal), "--seeds", "3", "--step-noise", "none"], capsys
    )
    assert "spread" in _bad(
        [str(path), "--calibration", str(cal), "--step-noise", "profiled"], capsys
    )
    assert "calibration" in _bad([str(path), "--calibration", str(tmp_path / "none.json")], capsys)
    assert "--seeds" in _bad([str(path), "--seeds", "many"], capsys)


def test_measured_figures_come_from_the_record_columns(tmp_path):
    path = _record(tmp_path, "static")
    rows = [line.split(",") for line in path.read_text().splitlines()[1:]]
    arrival, first, finish = (np.array([float(r[i]) for r in rows]) for i in (0, 4, 5))
    p = predict_record(read_record(str(path)), MODEL)
    assert p.measured["p90_ttft"] == pytest.approx(np.percentile(first - arrival, 90), abs=1e-9)
    assert p.measured["p99_e2e"] == pytest.approx(np.percentile(finish - arrival, 99), abs=1e-9)
    assert p.measured["request_throughput"] == pytest.approx(
        len(rows) / (finish.max() - arrival.min()), rel=1e-9
    )


# -- lab 7's shipped records: what the lab's checks expect is what realrun predict says ------------

LABS = Path(__file__).resolve().parents[1] / "course" / "labs"


def _lab7():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_lab7_student", LABS / "lab7_class_traffic.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("which", ["static", "continuous"])
def test_lab7_data_is_what_predict_gives(which):
    from batchsim.sim.steptime import load_step_time

    expected = json.loads((LABS / "data" / "class-predicted.json").read_text())[which]
    rec = read_record(str(LABS / "data" / f"class-{which}.csv"))
    assert rec.never_ran == 0 and not rec.left_out and rec.meta["policy"] == which
    p = predict_record(rec, load_step_time(LABS / "data" / "class-calibration-tiny-gpt2-cpu.json"))
    assert p.predicted["p50_ttft"] == pytest.approx(expected["predicted_p50_ttft"], rel=1e-9)
    assert p.predicted["p90_ttft"] == pytest.approx(expected["predicted_p90_ttft"], rel=1e-9)
    assert p.measured["p90_ttft"] == pytest.approx(expected["measured_p90_ttft"], rel=1e-9)


def test_lab7_solo_is_one_server_and_four_clients_on_this_machine():
    cmds = _lab7().solo("static", "r1.csv", port=8123, dry_run=True)
    serve, *loads = cmds
    assert (
        serve[2:4] == ["realrun", "serve"]
        and "--record" in serve
        and serve[serve.index("--host") + 1] == "127.0.0.1"
    )
    assert serve[serve.index("--max-batch") + 1] == "8"
    assert len(loads) == 4 and all(c[2:4] == ["realrun", "load"] for c in loads)
    assert {c[c.index("--url") + 1] for c in loads} == {"http://127.0.0.1:8123"}
    # four students, four different arrival streams
    assert len({c[c.index("--seed") + 1] for c in loads}) == 4
    # One machine, one address: each student sends a key of its own and the server tells them apart
    # by it.
    assert (
        serve[serve.index("--client-by") + 1] == "key"
        and len({c[c.index("--api-key") + 1] for c in loads}) == 4
    )
    assert "--max-batch" not in _lab7().solo("continuous", dry_run=True)[0]
