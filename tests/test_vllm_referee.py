"""batchsim's ``vllm-v1`` policy held to vLLM's own ``Scheduler``, step by step, with no clock.

``realrun.reference.vllm.referee`` feeds one workload to vLLM 0.32's V1 scheduler (a stand-in model:
one token per scheduled row) and to batchsim's policy, and compares every step: who runs with
how many tokens, who is preempted, who is admitted, the KV blocks in use. Prefix caching is off.
These need vLLM; they skip where it is not installed, and ``make test-vllm`` runs them with
``BATCHSIM_REQUIRE_VLLM=1``, under which a missing vLLM is a failure.
"""

from __future__ import annotations

import os

import pytest

if os.environ.get("BATCHSIM_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm")

from batchsim.core.errors import ConfigError  # noqa: E402
from batchsim.core.workload import Request  # noqa: E402
from realrun.reference.vllm.referee import RefereeConfig, referee  # noqa: E402
from realrun.reference.vllm.referee_engine import make_scheduler  # noqa: E402
from realrun.reference.vllm.referee_scan import main, scan  # noqa: E402
from realrun.reference.vllm.referee_table import markdown, textbook_table  # noqa: E402
from realrun.reference.vllm.referee_workloads import CONFIGURATIONS, random_workload  # noqa: E402

# vLLM's import raises deprecation and future warnings from inside vLLM and torch: not ours to fix.
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

#: Workloads per configuration: 12 configurations x 17 = 204 workloads of 1 to 200 requests.
WORKLOADS = 17
#: The rules each configuration must make decide, so that agreeing there means something.
MUST_BITE = {
    "roomy": ("chunked",),
    "max_seqs binds": ("full_rows",),
    "max_batched_tokens binds": ("full_budget", "shared_budget", "chunked"),
    "KV forces preemption": ("preemptions", "chunked", "full_rows"),
    "KV binds alone": ("preemptions", "full_rows"),
    "chunked prefill off": ("preemptions", "full_rows"),
}


@pytest.fixture(scope="module")
def rows():
    return scan(WORKLOADS)


def test_vllm_v1_schedules_every_step_as_vllms_scheduler_does(rows):
    assert sum(r.workloads for r in rows) >= 200
    assert {r.name for r in rows} == set(CONFIGURATIONS)
    for r in rows:
        assert r.differing_steps == 0, r.first.report()
        assert r.steps > 1000 * WORKLOADS // 24, r.line()  # workloads big enough to say something


def test_every_configuration_makes_its_rule_decide(rows):
    for r in rows:
        bit = dict(r.bites)
        for rule in MUST_BITE[r.name.split(",")[0]]:
            assert bit[rule] > 0, f"{r.name}: {rule} never decided anything: {r.line()}"
        if not r.config.chunked_prefill:
            assert bit["chunked"] == 0, r.line()


def test_vllm_preempts_requests_whose_last_token_is_in_flight_only_with_async_scheduling(rows):
    # The one documented difference in what a step lists: vLLM (async) may preempt, as the newest
    # running request, one whose last token is in flight; it finishes when the token lands and never
    # runs again, so the referee reports it apart and batchsim lists no such preemption.
    late = {r.name: r.last_token_preemptions for r in rows}
    # the policy saw them
    assert all(r.batchsim_last_token_preemptions == r.last_token_preemptions for r in rows)
    assert late["KV forces preemption, async"] > 0 and late["chunked prefill off, async"] > 0
    assert all(n == 0 for name, n in late.items() if name.endswith("sync") and "async" not in name)


def test_the_referee_catches_a_scheduler_that_differs(monkeypatch):
    # The textbook scheduler gives a prompt the whole budget while rows decode: vLLM counts the
    # decodes.
    cfg = RefereeConfig(max_seqs=8, max_batched_tokens=16)
    reqs = [Request(0, 0.0, 4, 10), Request(1, 2.0, 40, 3)]
    assert referee(reqs, cfg).agrees
    v = referee(reqs, cfg, policy="continuous")
    assert not v.agrees and v.first.step == 2 and v.first.fields == ("tokens",)
    assert dict(v.first.vllm.tokens) == {0: 1, 1: 15} and dict(v.first.batchsim.tokens) == {
        0: 1,
        1: 16,
    }
    assert "step 2 differs in tokens" in v.report()
    # batchsim's vllm-v1 told the wrong engine loop (async scheduling off) against vLLM's (on).
    on = RefereeConfig(max_seqs=8, max_batched_tokens=16, async_scheduling=True)
    assert all(referee(random_workload(s, on, 40), on).agrees for s in range(3))
    from realrun.reference.vllm import referee_policy

    real = referee_policy.make_referee_policy
    monkeypatch.setattr(
        referee_policy, "make_referee_policy", lambda config, policy: real(cfg, policy)
    )
    assert not any(referee(random_workload(s, on, 40), on).agrees for s in range(3))


def test_vllm_ends_a_request_one_token_sooner_at_max_model_len():
    # A documented difference of limits, not of scheduling: vLLM stops a request once its tokens
    # reach max_model_len (vllm/v1/core/sched/utils.py, check_stop: request.num_tokens >=
    # max_model_len); batchsim (as transformers) needs a position only for each token fed, prompt +
    # output - 1.
    cfg = RefereeConfig(max_seqs=4, max_batched_tokens=64, context_len=64)
    fits = referee([Request(0, 0.0, 60, 4)], cfg)  # 64 tokens: both produce all 4
    assert fits.agrees and len(fits.vllm) == 4
    edge = referee([Request(0, 0.0, 60, 5)], cfg)  # 65 tokens, 64 fed: batchsim 5 tokens, vLLM 4
    assert len(edge.batchsim) == 5 and len(edge.vllm) == 4
    assert [d.step for d in edge.differences] == [4] and edge.differences[0].vllm is None


def test_prefix_caching_is_off_in_the_referees_scheduler():
    sched = make_scheduler(RefereeConfig(), 64)
    assert sched.cache_config.enable_prefix_caching is False
    assert sched.kv_cache_manager.enable_caching is False
    # One block more than batchsim's budget: the null block vLLM's pool keeps for itself.
    assert sched.kv_cache_manager.block_pool.get_num_free_blocks() == 63


def test_kv_blocks_in_use_match_with_a_budget_that_forces_preemption():
    cfg = CONFIGURATIONS["KV forces preemption, async"]
    v = referee(random_workload(3, cfg, 120), cfg)
    assert v.agrees, v.report()
    # the budget binds, and is never passed
    assert max(s.kv_blocks for s in v.vllm) == cfg.kv_blocks
    assert any(s.preempted for s in v.vllm)


@pytest.mark.parametrize(
    "knobs, match",
    [
        ({"max_seqs": 0}, "max_seqs must be an integer >= 1, got 0"),
        ({"kv_blocks": 0}, "kv_blocks must be an integer >= 1, got 0"),
        ({"async_scheduling": "no"}, "async_scheduling must be true or false, got 'no'"),
        (
            {"chunked_prefill": False, "max_batched_tokens": 64},
            "max_batched_tokens must be >= context_len",
        ),
    ],
)
def test_bad_configurations_are_one_line(knobs, match):
    with pytest.raises(ConfigError, match=match):
        RefereeConfig(**knobs)


def test_bad_workloads_are_one_line():
    cfg = RefereeConfig(kv_blocks=4)
    with pytest.raises(ConfigError, match="arrival must be a whole tick"):
        referee([Request(0, 0.5, 4, 4)], cfg)
    with pytest.raises(ConfigError, match="request ids must be 0..n-1"):
        referee([Request(1, 0.0, 4, 4)], cfg)
    with pytest.raises(ConfigError, match="request 0 can never run"):
        referee([Request(0, 0.0, 100, 4)], cfg)  # 7 blocks of 16 against 4
    with pytest.raises(ConfigError, match="policy must be one of vllm-v1, continuous, got 'taxi'"):
        referee([Request(0, 0.0, 4, 4)], cfg, policy="taxi")


def test_the_command_line_prints_each_configuration(capsys):
    assert main(["--workloads", "1", "--max-requests", "20"]) == 0
    out = capsys.readouterr().out
    assert "prefix caching off" in out and all(name in out for name in CONFIGURATIONS)
    assert main(["--workloads", "1", "--max-requests", "20", "--textbook-table"]) == 0
    assert "| KV binds alone, sync | 1 |" in capsys.readouterr().out
    assert main(["--workloads", "0"]) == 2
    assert "workloads must be >= 1, got 0" in capsys.readouterr().err


def test_the_textbook_policy_differs_from_vllm_where_and_why_the_table_says():
    table = textbook_table(3)
    for name, tally in table.items():
        assert sum(tally.values()) == 3 and not tally["other"], (name, tally)
        if name.endswith("async"):
            # a newcomer waits a step in vLLM, never in the textbook
            assert tally["async"] > 0, (
                name,
                tally,
            )
    # Where neither the budget nor async scheduling decides anything, the textbook is vLLM, step for
    # step.
    assert table["KV binds alone, sync"]["same"] == 3
    assert (
        table["roomy, sync"]["budget"] == 3
        and table["max_batched_tokens binds, sync"]["budget"] == 3
    )
    text = markdown(table)
    assert (
        text.startswith("| configuration | same | budget | async |")
        and "decodes spend vLLM's token budget" in text
    )
