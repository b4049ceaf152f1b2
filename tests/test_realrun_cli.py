"""``python -m realrun`` in-process (and once as a subprocess): tables, JSON, figures, and one-line
errors.

Every run here is tiny (a handful of short requests on tiny-gpt2, one thread) and
offline: HF_HUB_OFFLINE is set, and the one test that reaches the hub probe gets a
socket that refuses at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from batchsim.core.metrics import summarize  # noqa: E402
from batchsim.sim.profiled import ProfiledStepTime  # noqa: E402
from batchsim.sim.steptime import LinearStepTime, load_step_time  # noqa: E402
from realrun.cli import main  # noqa: E402

SMALL = [
    "--requests",
    "6",
    "--rate",
    "40",
    "--prompt-len",
    "uniform:4,24",
    "--output-len",
    "uniform:2,10",
    "--threads",
    "1",
]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def calibration(tmp_path) -> Path:
    p = tmp_path / "cal.json"
    LinearStepTime(0.003, 2e-5, 1e-4, 1e-8, source="test").to_json(p)
    return p


def call(argv, capsys):
    code = main(argv)  # never SystemExit: a bad flag is a return code, as in batchsim
    out, err = capsys.readouterr()
    return code, out, err


def test_compare_prints_a_table_and_writes_a_figure(tmp_path, calibration, capsys):
    code, out, err = call(
        [
            "compare",
            *SMALL,
            "--policy",
            "taxi,continuous",
            "--calibration",
            str(calibration),
            "--out",
            str(tmp_path),
        ],
        capsys,
    )
    assert code == 0, err
    for word in (
        "predicted",
        "one run, 90%",
        "measured",
        "error",
        "taxi",
        "continuous",
        "req/s",
        "p50 E2E s",
        "schedule:",
        "timing is real, the text is not",
        "--explain",
    ):
        assert word in out
    assert "p99 TTFT ms" not in out  # one screen: the toleranced metrics only
    # --out DIR writes DIR/<scenario>/
    fig = tmp_path / "realrun-compare" / "predicted_vs_measured.png"
    assert fig.is_file() and fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    d = tmp_path / "realrun-compare"
    assert (d / "taxi-measured-requests.csv").is_file() and (
        d / "continuous-predicted-steps.csv"
    ).is_file()


def test_compare_json_has_predicted_and_measured_per_policy(tmp_path, calibration, capsys):
    code, out, _ = call(
        [
            "compare",
            *SMALL,
            "--policy",
            "static,dynamic",
            "--max-batch",
            "3",
            "--calibration",
            str(calibration),
            "--out",
            str(tmp_path),
            "--no-plots",
            "--json",
        ],
        capsys,
    )
    assert code == 0
    obj = json.loads(out)
    assert [r["label"] for r in obj["runs"]] == ["static", "dynamic"]
    for r in obj["runs"]:
        assert r["predicted"]["completed"] == r["measured"]["completed"] == 6
        assert set(r["predicted"]) == set(r["measured"])
        assert r["error_pct"]["request_throughput"] is not None
    assert obj["calibration"]["model"] == "linear" and obj["figures"] == []
    # Ours measured: every run's error is decomposed, and the replay of its step times is exact.
    for r in obj["runs"]:
        d = r["decomposition"]
        assert d["replay_max_diff_s"] < 1e-9 and d["passes"]["decode"]["n"] > 0


def test_compare_explain_shows_every_metric_the_notes_and_where_the_error_came_from(
    tmp_path, calibration, capsys
):
    code, out, err = call(
        [
            "compare",
            *SMALL,
            "--policy",
            "taxi",
            "--calibration",
            str(calibration),
            "--no-plots",
            "--explain",
            "--out",
            str(tmp_path),
        ],
        capsys,
    )
    assert code == 0, err
    for word in (
        "p99 TTFT ms",
        "mean TPOT ms",
        "seeds' band",
        "where the error comes from",
        "(b) replay",
        "error = (predicted - measured) / measured",
    ):
        assert word in out
    assert "more notes" not in out


def test_compare_profiles_first_when_no_calibration_is_given(tmp_path, capsys):
    code, out, err = call(
        [
            "compare",
            *SMALL,
            "--policy",
            "continuous",
            "--out",
            str(tmp_path),
            "--no-plots",
            "--explain",
        ],
        capsys,
    )
    assert code == 0, err
    cal = tmp_path / "realrun-compare" / "calibration.json"
    assert cal.is_file() and "calibration (profiled now" in out
    assert isinstance(load_step_time(cal), ProfiledStepTime)
    assert "where the error comes from" in out and "identical schedule" in out and "drift:" in out


def test_run_json_is_batchsims_shape(capsys):
    code, out, _ = call(
        ["run", *SMALL, "--policy", "dynamic", "--max-batch", "4", "--json"], capsys
    )
    assert code == 0
    obj = json.loads(out)
    assert obj["summary"]["completed"] == 6 and obj["runs"][0]["summary"] == obj["summary"]
    assert (
        obj["runs"][0]["meta"]["random_weights"] is True
        and obj["runs"][0]["meta"]["peak_rss_bytes"] > 0
    )
    # the same keys batchsim's summary has
    from batchsim import (
        ConstantStepTime,
        Poisson,
        Uniform,
        make_policy,
        make_workload,
        simulate,
    )

    sim = simulate(
        make_workload(Poisson(1.0), Uniform(1, 2), Uniform(1, 2), n=3),
        make_policy("taxi"),
        ConstantStepTime(0.1),
    )
    assert set(obj["summary"]) == set(summarize(sim))


def test_run_with_the_hf_generate_engine(capsys):
    code, out, _ = call(
        ["run", *SMALL, "--policy", "static", "--max-batch", "3", "--engine", "hf-generate"], capsys
    )
    assert code == 0 and "static (hf-generate)" in out


def test_profile_command_writes_a_calibration(tmp_path, capsys):
    path = tmp_path / "c.json"  # a file name (the course's form) ...
    code, out, _ = call(["profile", "--threads", "1", "--repeats", "1", "--out", str(path)], capsys)
    assert code == 0 and path.is_file()
    assert "held-out" in out and "gap between steps" in out and "linear fit per pass" in out
    assert "python -m batchsim run --calibration" in out
    assert out.index("held-out") < out.index("calibration written")  # results first, then the file
    # ... or a folder, as --out is everywhere else; as JSON, one {config, runs, notes} object
    code, out, _ = call(
        ["profile", "--threads", "1", "--repeats", "1", "--out", str(tmp_path / "d"), "--json"],
        capsys,
    )
    obj = json.loads(out)
    assert code == 0 and {"config", "runs", "notes"} <= set(obj)
    written = Path(obj["calibration"])
    assert written.parent == tmp_path / "d" and written.name.startswith("calibration-tiny-gpt2-cpu")
    assert load_step_time(written).step_gap == pytest.approx(obj["model"]["step_gap"])


def test_doctor(capsys):
    code, out, _ = call(["doctor", "--threads", "1"], capsys)
    assert code == 0
    for word in (
        "torch",
        "transformers",
        "device",
        "threads",
        "1 torch intra-op",
        "random",
        "peak RSS",
    ):
        assert word in out
    code, out, _ = call(["doctor", "--threads", "1", "--json"], capsys)
    obj = json.loads(out)
    assert code == 0 and {"config", "runs", "notes"} <= set(obj)
    assert obj["config"]["threads"] == 1 and obj["runs"][0]["decode_step_s"]["16"] > 0


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_missing_model_fails_with_one_line(capsys):
    # (How fast it fails is a speed, not a behaviour: no test asserts one on a machine that may be
    # busy.)
    code, _, err = call(["run", "--model", "no-such-org/no-such-model", *SMALL], capsys)
    assert code == 2
    line = _one_line(err)
    assert "no-such-org/no-such-model" in line and "tiny-gpt2" in line


def test_missing_model_with_the_hub_unreachable(monkeypatch, capsys):
    import socket

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)

    def refuse(*a, **k):
        raise OSError("network is unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    code, _, err = call(["run", "--model", "no-such-org/no-such-model", *SMALL], capsys)
    assert code == 2
    assert "unreachable" in _one_line(err)


BAD = [
    (["run", "--rate", "abc"], "rate"),
    (["run", "--rate", "-1"], "rate"),
    (["run", "--device", "tpu"], "device"),
    (["run", "--dtype", "fp8"], "dtype"),
    (["run", "--threads", "0"], "threads"),
    (["run", "--engine", "warp"], "engine"),
    (["run", "--policy", "taxi,static"], "policy"),
    (["run", "--policy", "continuous", "--engine", "hf-generate"], "hf-generate"),
    (["run", "--policy", "bus"], "policy"),
    (["run", "--max-batch", "0", "--policy", "static"], "max_batch"),
    (["run", "--kv-budget-tokens", "0"], "kv-budget-tokens"),
    (["compare", "--grid", "huge"], "grid"),
    (["compare", "--calibration", "/no/such/calibration.json"], "calibration"),
    (["profile", "--grid", "huge"], "grid"),
    (["run", "no-such-scenario"], "scenario"),
    (["run", "--bogus-flag"], "bogus"),
]


@pytest.mark.parametrize("argv, word", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_with_one_line(argv, word, capsys):
    code, _, err = call(argv if "--threads" in argv else argv + ["--threads", "1"], capsys)
    assert code == 2
    assert word in _one_line(err)


def test_run_json_has_config_runs_notes_and_rejections(capsys):
    code, out, _ = call(
        [
            "run",
            *SMALL,
            "--policy",
            "continuous",
            "--kv-budget-tokens",
            "24",
            "--block-size",
            "4",
            "--json",
        ],
        capsys,
    )
    obj = json.loads(out)
    assert code == 0 and {"config", "runs", "notes"} <= set(obj)
    rej = obj["runs"][0]["rejections"]
    s = obj["summary"]
    assert sum(rej.values()) == s["rejected"] > 0 and s["completed"] + s["rejected"] == 6


def test_a_long_real_run_says_how_long_before_it_starts(capsys):
    from realrun.cli import RunSetup, build_parser  # RunSetup lives in realrun.cli.run_setup

    RunSetup(
        build_parser().parse_args(
            ["run", "--requests", "3", "--rate", "0.01", "--threads", "1", "--no-plots"]
        )
    )
    err = capsys.readouterr().err
    assert "realrun: note: this will take at least" in err and "min" in err


def test_realrun_does_not_import_batchsims_command_line():
    code = (
        "import sys, realrun.cli, realrun.cli.run, realrun.cli.doctor; bad = [m for m in "
        "sys.modules if m == 'batchsim.cli' or m.startswith('batchsim.cli.')]; assert not bad, bad"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,  # a watchdog, not a speed limit
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert p.returncode == 0, p.stderr


def test_cuda_asked_without_a_gpu(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, _, err = call(["doctor", "--device", "cuda"], capsys)
    assert code == 2 and "CUDA" in _one_line(err)


def test_module_entry_point_as_a_subprocess():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    # a watchdog against a hang, not a speed limit
    p = subprocess.run(
        [sys.executable, "-m", "realrun", "run", "--model", "no-such-org/no-such-model"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert p.returncode == 2
    assert "tiny-gpt2" in _one_line(p.stderr)
