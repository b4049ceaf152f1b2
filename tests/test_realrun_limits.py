"""Long prompts on a real model: the server's limits hold on the wall clock, as in the simulator.

tiny-gpt2 has 1,024 positions. A padded batch whose longest prompt plus longest output
passes them used to crash inside the model (``IndexError`` in the position embedding)
although each request fitted alone; now the policy cuts the batch, on both clocks, and a
request that never fits is rejected on arrival with the same reason on both clocks.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from batchsim import LinearStepTime, Workload, make_policy, simulate, summarize  # noqa: E402
from realrun.clock.runner import limits_for, run_real  # noqa: E402
from realrun.engine.engine import Engine  # noqa: E402
from realrun.engine.model import load_model  # noqa: E402
from realrun.reference.baselines import HFGenerateEngine  # noqa: E402

STEP = LinearStepTime(0.002, 2e-6, 1e-5, 1e-8, plan="grouped")


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny-gpt2", device="cpu", dtype="fp32", threads=1)


# The issue's repro, with the 1,000-token output shortened to 300 to keep the test quick: it still
# cannot share a batch with the 1,000-token prompt (1000 + 300 - 1 > 1024), though each fits alone.
REPRO = Workload.from_arrays([0, 0, 0, 0], [1000, 10, 500, 20], [4, 300, 500, 20], "repro")


@pytest.mark.parametrize("engine_name", ["ours", "hf-generate"])
@pytest.mark.parametrize("policy", ["static", "dynamic"])
def test_the_padded_context_repro_completes_on_both_clocks(lm, engine_name, policy):
    engine = Engine(lm) if engine_name == "ours" else HFGenerateEngine(lm)
    real = run_real(REPRO, make_policy(policy, max_batch=4), engine)
    sim = simulate(REPRO, make_policy(policy, max_batch=4), STEP, limits=limits_for(lm))
    for res in (real, sim):
        s = summarize(res)
        assert s["completed"] == 4 and s["rejected"] == 0
        assert res.records.start[0] != res.records.start[1]  # cut into different batches
    np.testing.assert_array_equal(real.records.tokens, REPRO.output_tokens)


def long_prompt_trace() -> Workload:
    """Prompts past the context, pairs that only fail together, and ordinary requests."""
    prompts = [1100, 900, 30, 600, 450, 40, 1020, 12, 700, 300, 5, 1024]
    outputs = [4, 6, 200, 3, 500, 8, 6, 20, 300, 10, 1021, 1]
    arrivals = np.arange(len(prompts)) * 0.002
    return Workload.from_arrays(arrivals, prompts, outputs, "long prompts")


@pytest.mark.parametrize(
    "policy, kw",
    [
        ("static", {"max_batch": 4}),
        ("dynamic", {"max_batch": 4, "max_wait": 0.01}),
        ("taxi", {}),
        ("continuous", {"max_seqs": 4}),
    ],
)
def test_same_rejections_with_the_same_reasons_on_both_clocks(lm, policy, kw):
    wl = long_prompt_trace()
    real = run_real(wl, make_policy(policy, **kw), Engine(lm))
    sim = simulate(wl, make_policy(policy, **kw), STEP, limits=limits_for(lm))
    assert real.records.rejected == sim.records.rejected
    rejected = [i for i, r in enumerate(sim.records.rejected) if r]
    assert rejected == [0, 6, 10]  # 1100 + 4 - 1, 1020 + 6 - 1 and 5 + 1021 - 1 pass 1024 positions
    assert all("context of 1024 positions" in sim.records.rejected[i] for i in rejected)
    for res in (real, sim):
        assert summarize(res)["completed"] == len(wl) - 3


def test_the_issues_command_line_repro_completes(tmp_path, capsys):
    """``python -m realrun run --no-plots --policy static --max-batch 4 --trace p.csv`` once crashed
    with an IndexError inside the model; now every request is served (none needs rejecting) and it
    exits 0."""
    import json

    from realrun.cli import main

    trace = tmp_path / "p.csv"
    trace.write_text(
        "arrival_s,prompt_tokens,output_tokens\n0,1000,4\n0,10,300\n0,500,100\n0,20,20\n"
    )
    code = main(
        [
            "run",
            "--no-plots",
            "--policy",
            "static",
            "--max-batch",
            "4",
            "--trace",
            str(trace),
            "--threads",
            "1",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    s = out["runs"][0]["summary"]
    assert s["completed"] == 4 and s["rejected"] == 0
