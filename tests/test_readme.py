"""The README's commands do what the README says, as written, in a fresh clone.

The lines are read from README.md itself, so a line changed there is the line tested here.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path


from batchsim.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _line(start: str) -> list[str]:
    """The README's command that begins ``python -m batchsim START``, as argv (its comment dropped)."""
    for line in (ROOT / "README.md").read_text().splitlines():
        if line.startswith(f"python -m batchsim {start}"):
            return shlex.split(line.split("#")[0])[3:]
    raise AssertionError(f"README.md has no line 'python -m batchsim {start} ...'")


def _run(argv: list[str], capsys) -> dict:
    assert main([*argv, "--no-plots", "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_the_trace_line_replays_the_shipped_trace_from_the_repository_root(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(ROOT)  # the README's commands run from the repository root
    monkeypatch.delenv("BATCHSIM_TRACES", raising=False)
    argv = _line("run --arrival trace:")
    out = _run(argv, capsys)
    (run,) = out["runs"]
    assert run["summary"]["completed"] == 2000 and "azure_llm_2023_conv.csv" in out["config"]["workload"]

