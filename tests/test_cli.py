"""The command line, in-process (``main(argv)``) and once as a real subprocess.

Bad input must give exit code 2 and exactly one line on stderr that names the field
and the value, never a traceback; good input prints a table or valid JSON.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from batchsim.cli import main
from batchsim.core.metrics import SUMMARY_KEYS
from batchsim.teach.scenarios import FLAGSHIP, SCENARIOS

SMALL = ["--requests", "120", "--no-plots"]


def call(argv, capsys):
    try:
        code = main(argv)
    except (
        SystemExit
    ) as e:  # argparse's own errors (a non-number for a number) exit from parse_args
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "argv, field, value",
    [
        (["run", "--policy", "taxi", "--rate", "-1"], "rate", "-1"),
        (["run", "--policy", "static", "--max-batch", "0"], "max_batch", "0"),
        (["run", "--policy", "dynamic", "--max-batch", "0"], "max_batch", "0"),
        (["run", "--policy", "bogus"], "policy", "bogus"),
        (["compare", "--policy", "taxi,limo"], "policy", "limo"),
        (["run", "--arrival", "trace:/no/such/trace.csv"], "trace", "/no/such/trace.csv"),
        (["run", "--prompt-len", "uniform:5"], "prompt-len", "uniform:5"),
        (["run", "--output-len", "lognormal:10,20"], "output-len", "10"),
        (["run", "--output-len", "0"], "output-len", "0"),
        (["run", "--requests", "0"], "requests", "0"),
        (["run", "--policy", "dynamic", "--max-wait", "-1"], "max_wait", "-1"),
        (["run", "--policy", "continuous", "--max-seqs", "0"], "max_seqs", "0"),
        (["run", "--kv-budget-tokens", "0"], "kv-budget-tokens", "0"),
        (["run", "--step-time", "-0.1"], "step-time", "-0.1"),
        (["run", "--arrival", "weibull"], "arrival", "weibull"),
        (["run", "no-such-scenario"], "scenario", "no-such-scenario"),
        (["run", "--rate", "abc"], "--rate", "abc"),  # argparse's message, kept to one line
        (["theory", "--requests", "5"], "requests", "5"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, field, value, capsys):
    if argv[0] != "theory":  # keep the runs small, without overriding the flag under test
        argv = argv + (["--no-plots"] if "--requests" in argv else SMALL)
    code, out, err = call(argv, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert field in lines[0] and value in lines[0], lines[0]
    assert "Traceback" not in err


def test_malformed_and_unreadable_traces(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,ten,5\n")
    code, _, err = call(["run", "--arrival", f"trace:{bad}", *SMALL], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert str(bad) in err and "line 3" in err
    code, _, err = call(["run", "--arrival", f"trace:{tmp_path}", *SMALL], capsys)  # a folder
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(tmp_path) in err


def test_run_json_has_the_summary(tmp_path, capsys):
    argv = [
        "run",
        "--policy",
        "continuous",
        "--rate",
        "20",
        "--json",
        "--out",
        str(tmp_path),
        *SMALL,
    ]
    code, out, err = call(argv, capsys)
    assert code == 0, err
    obj = json.loads(out)
    s = obj["summary"]
    for key in SUMMARY_KEYS:
        assert key in s, key
    assert s["completed"] + s["rejected"] == 120
    assert 0 < s["busy_fraction"] <= 1 and s["mean_ttft"] > 0 and s["p99_e2e"] >= s["p50_e2e"]
    # Same flags, same seed: the very same JSON.
    code2, out2, _ = call(argv, capsys)
    assert code2 == 0 and out2 == out
    # Another seed: another workload.
    code3, out3, _ = call(argv + ["--seed", "1"], capsys)
    assert code3 == 0 and json.loads(out3)["summary"] != s


def test_compare_json_one_run_per_policy(tmp_path, capsys):
    argv = [
        "compare",
        "--policy",
        "taxi,static,dynamic,continuous",
        "--rate",
        "10",
        "--json",
        "--out",
        str(tmp_path),
        *SMALL,
    ]
    code, out, err = call(argv, capsys)
    assert code == 0, err
    runs = json.loads(out)["runs"]
    assert [r["label"] for r in runs] == ["taxi", "static", "dynamic", "continuous"]
    assert all(r["summary"]["completed"] == 120 for r in runs)


def test_run_table(tmp_path, capsys):
    code, out, err = call(
        ["run", "--policy", "taxi,continuous", "--out", str(tmp_path), *SMALL], capsys
    )
    assert code == 0, err
    assert "taxi" in out and "continuous" in out and "req/s" in out


def test_scenarios_lists_the_flagship(capsys):
    code, out, err = call(["scenarios"], capsys)
    assert code == 0 and err == ""
    names = [
        line.split()[0]
        for line in out.splitlines()
        if line.strip() and not line.startswith("run one")
    ]
    assert FLAGSHIP in names
    assert set(names) == set(SCENARIOS)


def test_no_arguments_runs_the_flagship(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # figures, if any, land here
    code, out, err = call([], capsys)
    assert code == 0, err
    assert FLAGSHIP in out
    for name in ("taxi", "static", "dynamic", "continuous"):
        assert name in out


def test_theory_command(capsys):
    code, out, err = call(["theory", "--requests", "2000", "--json"], capsys)
    assert code == 0, err
    obj = json.loads(out)
    assert set(obj) >= {"config", "runs", "notes"} and obj["config"]["requests"] == 2000
    cases = obj["runs"]
    names = [c["name"] for c in cases]
    for expected in (
        "M/D/1",
        "M/M/1",
        "M/G/1",
        "bus fill",
        "M/M^(4,4)/1",
        "M/M^(1,4)/1",
        "M/M^(2,5)/1",
        "continuous capacity",
    ):
        assert expected in names
    for c in cases:
        assert c["theory"] > 0 and c["simulated"] > 0
        assert c["error"] == pytest.approx((c["simulated"] - c["theory"]) / c["theory"])
        assert abs(c["error"]) < 0.3, c  # 2000 requests: noisy, but never off by a factor
    code, out, _ = call(["theory", "--requests", "500"], capsys)
    assert code == 0 and "M/D/1" in out and "%" in out


def test_subprocess_bad_input():
    # a watchdog against a hang, not a speed limit
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "batchsim",
            "run",
            "--max-batch",
            "0",
            "--policy",
            "static",
            "--no-plots",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "batchsim: error: max_batch must be an integer >= 1, got 0"
    ]


# -- one contract: --out DIR/<scenario>/, records and figures; --json {config, runs, notes} --------


def test_out_writes_records_and_figures_under_the_scenario(tmp_path, capsys):
    code, out, err = call(
        [
            "run",
            "taxi-vs-bus",
            "--requests",
            "40",
            "--policy",
            "taxi,continuous",
            "--out",
            str(tmp_path),
        ],
        capsys,
    )
    assert code == 0, err
    d = tmp_path / "taxi-vs-bus"
    names = sorted(p.name for p in d.iterdir())
    for policy in ("taxi", "continuous"):
        assert f"{policy}-requests.csv" in names and f"{policy}-steps.csv" in names
    assert any(n.endswith(".png") for n in names)
    assert not any(n.startswith(".partial") for n in names)  # staged files all moved in
    with (d / "taxi-requests.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 40 and "rejected" in rows[0]  # the reason column
    # The table came first, then the files: the figure line is after the table.
    assert out.index("req/s") < out.index("figures: ")


def test_two_scenarios_into_one_folder_keep_both_sets_of_files(tmp_path, capsys):
    for name in ("taxi-vs-bus", "mixed-lengths"):
        code, _, err = call(
            ["run", name, "--requests", "30", "--out", str(tmp_path), "--no-plots"], capsys
        )
        assert code == 0, err
    a, b = tmp_path / "taxi-vs-bus", tmp_path / "mixed-lengths"
    assert (a / "taxi-requests.csv").is_file() and (b / "static-requests.csv").is_file()
    assert not (
        b / "taxi-requests.csv"
    ).exists()  # mixed-lengths runs no taxi: the folders did not mix


def test_rejected_requests_carry_their_reason_into_the_csv_and_under_the_table(tmp_path, capsys):
    # A KV budget of 512 tokens: requests whose prompt + output need more blocks than that are
    # refused.
    code, out, err = call(
        [
            "run",
            "--policy",
            "continuous",
            "--requests",
            "60",
            "--step-time",
            "0.01",
            "--kv-budget-tokens",
            "512",
            "--out",
            str(tmp_path),
            "--no-plots",
        ],
        capsys,
    )
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("continuous:") and "rejected" in ln)
    n = int(line.split(":")[1].split()[0])
    with (tmp_path / "custom" / "continuous-requests.csv").open() as fh:
        reasons = [r["rejected"] for r in csv.DictReader(fh) if r["rejected"]]
    assert n == len(reasons) > 0 and all("KV blocks" in r for r in reasons)
    assert f"{n} of 60 rejected" in line


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--policy", "taxi", "--requests", "20", "--no-plots", "--json"],
        ["compare", "--policy", "taxi,static", "--requests", "20", "--no-plots", "--json"],
        ["theory", "--requests", "200", "--json"],
        ["roofline", "--no-plots", "--json"],
        ["sweep", "max_batch=2,4", "--requests", "20", "--no-plots", "--json", "--jobs", "1"],
    ],
)
def test_every_command_prints_one_json_object_with_config_runs_notes(argv, capsys):
    code, out, err = call(argv, capsys)
    assert code == 0, err
    obj = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert isinstance(obj, dict) and {"config", "runs", "notes"} <= set(obj)
    assert isinstance(obj["runs"], list) and obj["runs"] and isinstance(obj["notes"], list)


def test_one_default_server_everywhere(capsys):
    from batchsim.cli import _CUSTOM_GPU
    from batchsim.machine.server import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_SERVER, Server
    from batchsim.teach.scenarios import SERVER

    assert (DEFAULT_GPU, DEFAULT_MODEL) == ("A100-80GB", "llama-3-8b")
    assert SERVER == DEFAULT_SERVER == {k: v for k, v in _CUSTOM_GPU.defaults.items()}
    assert Server.named().model.name == DEFAULT_MODEL
    code, out, _ = call(["roofline", "--no-plots", "--json"], capsys)
    assert code == 0 and json.loads(out)["config"]["server"]["model"] == DEFAULT_MODEL


def test_results_are_printed_before_a_failing_write(tmp_path, monkeypatch, capsys):
    from batchsim.core import files

    def full_disk(self):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.Staging, "commit", full_disk)
    code, out, err = call(
        ["run", "--policy", "taxi", "--requests", "20", "--out", str(tmp_path), "--no-plots"],
        capsys,
    )
    assert code == 2 and "req/s" in out  # the table was printed, and survives the failure
    assert "No space left on device" in err and len(err.strip().splitlines()) == 1
    assert not any((tmp_path / "custom").iterdir())  # no partial file, no staging folder


def test_output_path_is_checked_before_any_work(tmp_path, monkeypatch, capsys):
    import batchsim.teach.scenarios.execute as base  # where every scenario run calls simulate

    ran = []
    monkeypatch.setattr(base, "simulate", lambda *a, **k: ran.append(1))
    (tmp_path / "f").write_text("a file")
    code, _, err = call(["run", "--requests", "20", "--out", str(tmp_path / "f" / "sub")], capsys)
    assert code == 2 and "out" in err and not ran


def test_ctrl_c_prints_the_finished_runs_and_names_the_one_cut_short(tmp_path, monkeypatch, capsys):
    import batchsim.teach.scenarios.execute as base  # where every scenario run calls simulate

    real = base.simulate
    calls = []

    def interrupted_on_the_second(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(base, "simulate", interrupted_on_the_second)
    code, out, err = call(
        ["run", "--policy", "taxi,static,continuous", "--requests", "30", "--out", str(tmp_path)],
        capsys,
    )
    assert code == 130
    assert (
        "taxi" in out and "interrupted (Ctrl-C) during static" in out and "continuous " not in out
    )
    assert err.strip().splitlines() == [
        "batchsim: interrupted (Ctrl-C) during static: it and any run after it did not finish"
    ]
    assert sorted(p.name for p in (tmp_path / "custom").iterdir()) == [
        "taxi-requests.csv",
        "taxi-steps.csv",
    ]


def test_staging_leaves_nothing_when_interrupted(tmp_path):
    from batchsim.core.files import Staging

    with pytest.raises(KeyboardInterrupt):
        with Staging(tmp_path) as s:
            s.path("half.csv").write_text("id,arr")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_in_a_sweep_prints_the_values_that_finished(monkeypatch, capsys):
    import batchsim.teach.scenarios.execute as base  # where every scenario run calls simulate

    real, calls = base.simulate, []

    def interrupted_on_the_second(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(base, "simulate", interrupted_on_the_second)
    code, out, err = call(
        [
            "sweep",
            "max_batch=2,4,8",
            "--policy",
            "static",
            "--requests",
            "30",
            "--jobs",
            "1",
            "--no-plots",
        ],
        capsys,
    )
    assert (
        code == 130
        and "max_batch=2 static" in out
        and "max_batch=4 static" not in out.split("interrupted")[0]
    )
    assert err.strip().splitlines() == [
        "batchsim: interrupted (Ctrl-C) during max_batch=4: it and the values after it did not "
        "finish"
    ]
