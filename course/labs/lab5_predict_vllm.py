"""Lab 5 (capstone): predict vLLM's p99 latency with batchsim, then explain the gap.

vLLM is the engine you will most likely serve with. Here you predict it the way a
capacity planner would: profile it, simulate it, and only then compare with a
measurement. The profile and the measurement were made on a 2-core CPU with vLLM 0.32
serving tiny-gpt2 (``course/labs/data/``); on a machine with vLLM you can make your own
(part E).

Part A. ``workload(rate, requests=120, seed=0)``: the load that was measured: Poisson
arrivals at ``rate`` requests per second, prompts uniform 16..128 tokens, outputs
uniform 16..96, built with ``batchsim.make_workload`` (``Poisson`` and ``Uniform``).

Part B. ``predict(calibration, rate)``: batchsim's prediction of vLLM at ``rate``: load
the calibration file (``batchsim.load_step_time``), make the continuous policy with the
knobs vLLM was given (``MEASURED["knobs"]``) *scheduled in vLLM V1's order* (lesson 7:
``make_policy(..., scheduler=...)``), simulate the workload under the model's context of
``MEASURED["context"]`` positions (``batchsim.core.limits.ServerLimits``, passed to
``simulate`` as ``limits``) and return ``summarize`` of the result.

Part C. ``errors(predicted, measured)``: (predicted - measured) / measured for every
metric in ``measured``. ``goals_met(errors)``: for p50 E2E (within 10 %), p99 E2E (20 %)
and p50 TTFT (15 %), whether the error is inside the goal.

Part D. ``EXPLANATION``: in your own words, at least three sentences: how far your p99
prediction is from vLLM's, in which direction, and why. Name at least two causes: things
vLLM does that the simulator leaves out, or that the profile cannot see (lesson 7's
table and its "Reading the gap"). Your teacher grades what it says.

Part E (not checked; needs vLLM: ``make test`` installs it in ``.venv-vllm/``). Profile
and measure it yourself at two rates and see whether your explanation holds:

    .venv-vllm/bin/python -m realrun compare --engine vllm --rate 9 --requests 120 \\
        --prompt-len uniform:16,128 --output-len uniform:16,96 --max-seqs 32 --max-batched-tokens
        512 --out out/lab5

Check your work:  pytest course/labs -k lab5
"""

from __future__ import annotations

import json
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
CALIBRATION = DATA / "vllm-calibration-tiny-gpt2.json"
MEASURED = json.loads((DATA / "vllm-measured-tiny-gpt2.json").read_text())


def workload(rate: float, requests: int = 120, seed: int = 0):
    # --- your code here ---
    raise NotImplementedError("your code here: workload")


def predict(calibration, rate: float) -> dict:
    # --- your code here ---
    raise NotImplementedError("your code here: predict")


def errors(predicted: dict, measured: dict) -> dict:
    # --- your code here ---
    raise NotImplementedError("your code here: errors")


def goals_met(errors: dict) -> dict:
    # --- your code here ---
    raise NotImplementedError("your code here: goals_met")


EXPLANATION = """
your explanation here
"""
