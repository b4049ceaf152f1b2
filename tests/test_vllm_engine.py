"""vLLM for real: served into batchsim's records, profiled, and predicted.

These run vLLM's CPU build on tiny-gpt2 (saved to a temporary folder). They skip where
vLLM is not installed; ``make test`` runs them in the virtual environment it makes for
vLLM (``.venv-vllm/``) with ``BATCHSIM_REQUIRE_VLLM=1``, under which a missing vLLM is a
failure, not a skip. One vLLM server serves the module (it takes ~15 s to start).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

if os.environ.get("BATCHSIM_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm")

from batchsim import Poisson, Uniform, make_workload, summarize  # noqa: E402
from batchsim.core.policies import Continuous  # noqa: E402
from batchsim.core.workload import Workload  # noqa: E402
from batchsim.sim.steptime import load_step_time  # noqa: E402
from realrun.cli import main  # noqa: E402
from realrun.clock.runner import limits_for, run_real  # noqa: E402
from realrun.engine.engine import Engine  # noqa: E402
from realrun.engine.model import load_model  # noqa: E402
from realrun.reference.vllm import VLLMServer, knobs_for, profile_vllm, run_vllm, save_model  # noqa: E402

MAX_SEQS, BUDGET, BLOCK, KV = 8, 128, 32, 1536

# vLLM's import and start-up raise deprecation and future warnings from inside vLLM and torch
# (torch.jit, torch.distributed): not ours to fix; everything else is still an error.
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    os.environ["BATCHSIM_MODELS"] = str(folder)
    return folder


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny-gpt2", device="cpu", dtype="fp32", threads=1)


@pytest.fixture(scope="module")
def server(models, lm):
    path = save_model("tiny-gpt2")
    assert (path / "config.json").is_file() and path.parent == models
    knobs = knobs_for(
        Continuous(MAX_SEQS, BUDGET, BLOCK), path, lm.n_positions, kv_budget_tokens=KV
    )
    srv = VLLMServer(knobs, lm.kv_bytes_per_token)
    yield srv
    srv.close()


def _serve(server, lm, wl):
    return run_vllm(wl, server, limits_for(lm, KV), lm.vocab_size, lm.tokenizer)


@pytest.fixture(scope="module")
def poisson():
    return make_workload(Poisson(30.0), Uniform(8, 60), Uniform(4, 40), n=24, seed=5)


@pytest.fixture(scope="module")
def served(server, lm, poisson):
    return _serve(server, lm, poisson)


def test_every_request_is_served_once_with_its_tokens(served, poisson):
    r = served.records
    assert (r.completed_mask ^ r.rejected_mask).all() and r.completed_mask.all()
    assert (r.tokens == poisson.output_tokens).all()
    outs = served.meta["outputs"]
    assert [len(outs[i]) for i in range(len(poisson))] == poisson.output_tokens.tolist()
    s = summarize(served)
    assert s["completed"] == len(poisson) and s["total_output_tokens"] == int(
        poisson.output_tokens.sum()
    )


def test_timestamps_are_monotone(served):
    r = served.records
    assert (r.start >= r.arrival - 1e-9).all()
    assert (r.first_token >= r.start).all()
    assert (r.last_token >= r.first_token).all() and (r.finish >= r.last_token).all()
    multi = r.tokens > 1
    assert (r.itl_max[multi] > 0).all()
    assert (r.itl_mean[multi] <= r.itl_max[multi] + 1e-12).all()


def test_vllms_steps_are_logged_within_its_knobs(served, poisson):
    st = served.records.steps
    assert len(st["start"]) == served.meta["vllm_steps"] > int(poisson.output_tokens.max())
    assert (np.diff(st["start"]) >= -1e-9).all() and (st["duration"] > 0).all()
    assert (st["batch_size"] <= MAX_SEQS).all()
    assert (
        st["prompt_tokens"] + st["decode_rows"] <= BUDGET
    ).all()  # vLLM counts decodes in its budget
    assert int(st["prompt_tokens"].sum()) >= int(poisson.prompt_tokens.sum())
    assert 0 < summarize(served)["busy_fraction"] < 1
    # Each step's idle before it, for pricing its cold start: one per priced pass, none negative,
    # and all of them within the run's span.
    idle = served.meta["pass_idle"]
    assert len(idle) == len(served.meta["passes"]) == len(st["start"]) and idle[0] == 0.0
    assert min(idle) >= 0.0 and sum(idle) <= st["start"][-1] - st["start"][0]


def test_on_the_cpu_no_step_is_scheduled_before_the_one_before_it_is_done(server, lm):
    """vLLM's CPU build does not schedule ahead (``VLLMKnobs.async_scheduling``), so its log, over
    its synchronous scheduler, holds each step's scheduling after the previous step's output was
    processed: the order the compare's simulated side follows."""
    from realrun.reference.vllm.probe import Prober

    assert server.knobs.device == "cpu" and not server.knobs.async_scheduling
    steps = server.call(Prober(server, lm.vocab_size).batch, [16] * 3, 12)
    assert len(steps) >= 12
    assert all(b["start"] >= a["end"] for a, b in zip(steps, steps[1:]))


def test_the_warm_up_runs_one_step_of_each_size(server, lm):
    from realrun.reference.vllm.warm import warm

    server.clear_steps()
    assert warm(server, lm.vocab_size, range(1, 9)) > 0
    steps = [s for s in server.read_steps() if s["end"] is not None]
    # One prompt at a time, each with one output token: one step of exactly its size.
    assert [sum(row[2] for row in s["rows"]) for s in steps] == list(range(1, 9))


def test_greedy_tokens_agree_with_our_engine(served, lm, poisson):
    ours = Engine(lm)
    run_real(poisson, Continuous(MAX_SEQS, BUDGET, BLOCK), ours)
    mine, theirs = ours.outputs(), served.meta["outputs"]
    n = len(poisson)
    # The same network and prompts: every first token agrees (the prefill), and most whole
    # sequences. Two sets of fp32 kernels: a near-tie in tiny-gpt2's flat logits may break either
    # way, and from there the sequences part; so the check is on the share of tokens agreed before
    # parting.
    assert all(mine[i][0] == theirs[i][0] for i in range(n))
    agreed = sum(
        next((k for k, (a, b) in enumerate(zip(mine[i], theirs[i])) if a != b), len(mine[i]))
        for i in range(n)
    )
    assert agreed >= 0.6 * int(poisson.output_tokens.sum()), (
        f"{agreed} tokens agreed before the sequences parted"
    )


def test_a_request_past_the_context_is_rejected_with_batchsims_reason(server, lm):
    wl = Workload.from_arrays(
        np.array([0.0, 0.0]), np.array([1000, 10]), np.array([100, 5]), "one too long"
    )
    res = _serve(server, lm, wl)
    assert "exceeds the model's context of 1024 positions" in res.records.rejected[0]
    assert res.records.completed_mask.tolist() == [False, True]


def test_a_small_cache_preempts_and_loses_nothing(server, lm):
    # 8 at once (max_seqs), 220 tokens each, in a 1,536-token cache: vLLM must evict and recompute.
    wl = Workload.from_arrays(np.zeros(8), np.full(8, 100), np.full(8, 120), "burst")
    res = _serve(server, lm, wl)
    r = res.records
    assert r.completed_mask.all() and (r.tokens == 120).all()
    assert res.preemptions > 0 and int(r.preemptions.sum()) == res.preemptions
    assert (r.steps["kv_in_use"] <= KV + BLOCK * MAX_SEQS).all()


def test_the_profile_is_a_fused_calibration(server, lm, poisson, tmp_path):
    prof = profile_vllm(server, poisson, lm.vocab_size, quick=True, capacity_tokens=KV // 2)
    m = prof.model
    assert m.plan == "fused" and m.step_gap == 0.0
    assert (m.decode.z > 0).all() and (np.diff(m.decode.z, axis=0) >= 0).all()
    # A longer prompt never costs less. (Not "more": on tiny-gpt2 a 60-token prefill and an 8-token
    # one differ by less than this host's noise, and the fit, kept non-decreasing, then prices them
    # alike.) Within rounding: two points made equal interpolate a unit in the last place apart
    # (seen beside busy work).
    assert float(m.prefill(1, 60)[0]) >= float(m.prefill(1, 8)[0]) * (1 - 1e-12)
    # In seconds, not milliseconds: a 1-row step of tiny-gpt2 is a few ms on a quiet machine, tens
    # beside other work; the bounds only catch a unit slip (how fast this machine is, is not a
    # test's business).
    assert 1e-5 < float(m.decode(1, 32)[0]) < 5.0
    # Each shape's spread is kept, as our engine's profile keeps it: quantiles of time / mean, each
    # point's non-decreasing with mean 1, so sampling keeps the profiled mean and adds the spread.
    q = m.spread.decode.q
    assert q.shape[:2] == m.decode.z.shape and (np.diff(q, axis=2) >= -1e-12).all()
    assert (q[..., 0] <= 1.0).all() and (q[..., -1] >= 1.0).all() and (q[..., -1] > q[..., 0]).any()
    assert np.isfinite(m.spread.prefill.q).all() and 0.0 <= m.spread.lag1 < 1.0
    # The canary's reference, read at the profile's end: vLLM's own steps against their profiled
    # price.
    ref = m.extra["canary"]
    assert set(ref) == {"prefill", "decode"} and all(0.2 < ref[k] < 5.0 for k in ref)
    path = prof.write(tmp_path / "cal.json")
    back = load_step_time(path)
    assert back.plan == "fused" and np.allclose(back.decode.z, m.decode.z)
    assert np.allclose(back.spread.decode.q, q, atol=1e-4) and back.spread.lag1 == pytest.approx(
        m.spread.lag1, abs=1e-4
    )
    assert json.loads(path.read_text())["engine"] == "vllm"


def test_compare_engine_vllm_predicts_and_decomposes(models, tmp_path, capsys):
    code = main(
        [
            "compare",
            "--engine",
            "vllm",
            "--requests",
            "12",
            "--rate",
            "20",
            "--prompt-len",
            "uniform:8,48",
            "--output-len",
            "uniform:4,24",
            "--grid",
            "quick",
            "--seeds",
            "3",
            "--repeats",
            "2",
            "--busy",
            "0.6",
            "--json",
            "--no-plots",
            "--out",
            str(tmp_path),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    obj = json.loads(out)
    (run,) = obj["runs"]
    assert run["label"] == "continuous (vllm)"
    # vLLM's profile kept its spread: three sampled predictions make a band, two runs a repeat
    # spread, and every metric gets a verdict, as for our engine.
    assert run["seeds"] == 3 and len(run["repeats"]) == 2
    for k in ("p50_e2e", "p99_e2e", "p50_ttft"):
        lo, hi = run["predicted_band"][k]
        assert lo <= run["predicted"][k] <= hi and lo < hi
        assert run["verdicts"][k] in ("agrees", "disagrees", "cannot tell") and run["in_band"][
            k
        ] in (True, False)
        assert run["repeat_spread_pct"][k] is not None
    # A canary of vLLM's own steps before and after each run, and the session's level from them.
    assert len(run["canary"]) == 2 and all(
        x is not None and x["decode"] > 0 for pair in run["canary"] for x in pair
    )
    notes = "\n".join(obj["notes"])
    assert (
        "machine level over the runs (4 canaries)" in notes and "--busy 0.6: continuous at" in notes
    )
    for k in ("p50_e2e", "p99_e2e", "p50_ttft", "mean_tpot"):
        assert run["error_pct"][k] is not None and np.isfinite(run["error_pct"][k])
        assert run["predicted"][k] > 0 and run["measured"][k] > 0
    d = run["decomposition"]
    assert d["passes"]["decode"]["n"] > 0 and d["replay_max_diff_s"] is None
    assert "does not apply to vLLM" in d["replay_note"]
    notes = "\n".join(obj["notes"])
    assert "max_num_seqs=" in notes and "enable_prefix_caching=False" in notes and "steps" in notes
    assert (tmp_path / "realrun-compare" / "calibration-vllm.json").is_file()
