"""The command line, in-process (``main(argv)``) and once as a real subprocess.

Bad input must give exit code 2 and exactly one line on stderr that names the field
and the value, never a traceback; good input prints a table or valid JSON.
"""

from __future__ import annotations

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
    except SystemExit as e:  # argparse's own errors (a non-number for a number) exit from parse_args
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, field, value", [
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
])
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
    argv = ["run", "--policy", "continuous", "--rate", "20", "--json", "--out", str(tmp_path), *SMALL]
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
    argv = ["compare", "--policy", "taxi,static,dynamic,continuous", "--rate", "10", "--json", "--out", str(tmp_path), *SMALL]
    code, out, err = call(argv, capsys)
    assert code == 0, err
    runs = json.loads(out)["runs"]
    assert [r["label"] for r in runs] == ["taxi", "static", "dynamic", "continuous"]
    assert all(r["summary"]["completed"] == 120 for r in runs)


def test_run_table(tmp_path, capsys):
    code, out, err = call(["run", "--policy", "taxi,continuous", "--out", str(tmp_path), *SMALL], capsys)
    assert code == 0, err
    assert "taxi" in out and "continuous" in out and "req/s" in out


def test_scenarios_lists_the_flagship(capsys):
    code, out, err = call(["scenarios"], capsys)
    assert code == 0 and err == ""
    names = [line.split()[0] for line in out.splitlines() if line.strip() and not line.startswith("run one")]
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
    for expected in ("M/D/1", "M/M/1", "M/G/1", "bus fill", "M/M^(4,4)/1", "M/M^(1,4)/1", "M/M^(2,5)/1", "continuous capacity"):
        assert expected in names
    for c in cases:
        assert c["theory"] > 0 and c["simulated"] > 0
        assert c["error"] == pytest.approx((c["simulated"] - c["theory"]) / c["theory"])
        assert abs(c["error"]) < 0.3, c  # 2000 requests: noisy, but never off by a factor
    code, out, _ = call(["theory", "--requests", "500"], capsys)
    assert code == 0 and "M/D/1" in out and "%" in out


def test_subprocess_bad_input():
    p = subprocess.run([sys.executable, "-m", "batchsim", "run", "--max-batch", "0", "--policy", "static", "--no-plots"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["batchsim: error: max_batch must be an integer >= 1, got 0"]
