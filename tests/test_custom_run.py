"""Your own run (no scenario) uses the scenarios' GPU server unless a step-time flag replaces it."""

from __future__ import annotations

import json

from batchsim.cli import main


def _run(capsys, *flags):
    assert (
        main(["run", "--policy", "taxi", "--requests", "20", "--json", "--no-plots", *flags]) == 0
    )
    return json.loads(capsys.readouterr().out)


def test_plain_run_is_priced_on_the_scenarios_server(capsys):
    out = _run(capsys)
    assert "Roofline(llama-3-8b fp16 on A100-80GB" in out["config"]["step_time"]
    assert out["summary"]["cost_per_request"] > 0
    assert out["config"]["kv_budget_tokens"] > 0


def test_a_step_time_flag_brings_no_gpu_price_or_memory(capsys):
    out = _run(capsys, "--step-time", "0.01")
    assert out["config"]["step_time"] == "ConstantStepTime(seconds=0.01)"
    assert "cost_per_request" not in out["summary"]
    assert out["config"]["kv_budget_tokens"] is None
