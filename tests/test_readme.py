"""The README's commands do what the README says, as written, in a fresh clone.

The lines are read from README.md itself, so a line changed there is the line tested here.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from batchsim.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _line(start: str) -> list[str]:
    """The README's command that begins ``python -m batchsim START``, as argv (its comment
    dropped)."""
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith(f"python -m batchsim {start}"):
            return shlex.split(line.split("#")[0])[3:]
    raise AssertionError(f"README.md has no line 'python -m batchsim {start} ...'")


def _run(argv: list[str], capsys) -> dict:
    assert main([*argv, "--no-plots", "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_the_trace_line_replays_the_shipped_trace_from_the_repository_root(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.chdir(ROOT)  # the README's commands run from the repository root
    monkeypatch.delenv("BATCHSIM_TRACES", raising=False)
    argv = _line("run --arrival trace:")
    out = _run(argv, capsys)
    (run,) = out["runs"]
    assert (
        run["summary"]["completed"] == 2000
        and "azure_llm_2023_conv.csv" in out["config"]["workload"]
    )


def test_the_sweep_line_runs_on_the_server_every_run_uses(capsys):
    # "A run without a scenario happens on the scenarios' server, Llama-3-8B in fp16 on one
    # A100-80GB timed by a roofline model and priced per hour": the sweep line too, dollars
    # included.
    argv = _line("sweep ")
    assert argv[:2] == ["sweep", "replicas=1,2,4,8"]
    i = argv.index("--scheduler")
    argv[i + 1] = "none"  # where the runs happen, not what they are: no Dask cluster in a unit test
    out = _run([*argv, "--requests", "60"], capsys)
    notes = "\n".join(out["notes"])
    assert (
        "llama-3-8b (fp16) on A100-80GB" in notes and "Roofline(" in notes and "KV budget" in notes
    )
    assert len(out["runs"]) == 4
    assert all(r["summary"]["cost_per_1m_tokens"] > 0 for r in out["runs"])
    bills = [r["summary"]["cost_per_1m_tokens"] for r in out["runs"]]
    assert bills == sorted(bills)  # more servers, the same traffic: a bigger bill per token


@pytest.mark.parametrize("start", ["run taxi-vs-bus", "run --policy dynamic"])
def test_a_table_explains_only_the_ttft_columns_it_has(start, capsys):
    argv = _line(start)
    assert main([*argv, "--no-plots", "--requests", "60"]) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[2]
    assert "TTFT" in head and "TTFT dlv" not in head
    assert "TTFT = first token produced" in out and "TTFT dlv =" not in out
