"""The catalog of GPUs and models, and the KV budget in bytes and tokens, against hand
arithmetic."""

from __future__ import annotations

import dataclasses
import json

import pytest

from batchsim.core.errors import ConfigError
from batchsim.machine.catalog import DEFAULT_CATALOG, GPU, Model, load_catalog
from batchsim.machine.memory import kv_budget
from batchsim.machine.server import Server

REQUIRED_GPUS = ("T4", "L4", "A10G", "A100-40GB", "A100-80GB", "H100-SXM", "H200", "cpu")
REQUIRED_MODELS = (
    "distilgpt2",
    "gpt2",
    "gpt2-medium",
    "gpt2-large",
    "gpt2-xl",
    "llama-2-7b",
    "llama-3-8b",
    "mistral-7b",
)


def test_catalog_has_the_required_entries_with_prices_and_sources():
    for name in REQUIRED_GPUS:
        g = DEFAULT_CATALOG.gpu(name)
        assert g.price_per_hour > 0 and g.source
    for name in REQUIRED_MODELS:
        assert DEFAULT_CATALOG.model(name).source


def test_datasheet_figures_and_ridge():
    a100 = DEFAULT_CATALOG.gpu("A100-80GB")
    assert (
        a100.peak_flops("fp16") == 312e12
        and a100.bandwidth == 2039e9
        and a100.memory_bytes == 80 * 2**30
    )
    # 312 TFLOP/s over 2.039 TB/s: about 153 FLOPs per byte before efficiencies.
    assert a100.ridge() == pytest.approx(153.0, rel=0.01)
    assert DEFAULT_CATALOG.gpu("H100-SXM").ridge() == pytest.approx(295.2, rel=0.01)
    assert DEFAULT_CATALOG.gpu("a100-80gb") is a100  # names are case-insensitive


def _gpt2_params(m: Model) -> int:
    # token + position embeddings, per block (attn 4d^2+4d, 2 LayerNorms 4d, MLP 8d^2+5d), final
    # LayerNorm
    d = m.hidden
    return m.vocab * d + m.max_context * d + m.layers * (12 * d * d + 13 * d) + 2 * d


def _llama_params(m: Model, ffn: int) -> int:
    d, kv = m.hidden, m.kv_heads * m.head_dim
    block = 2 * d * d + 2 * d * kv + 3 * d * ffn + 2 * d
    return 2 * m.vocab * d + m.layers * block + d  # untied input and output embeddings, final norm


@pytest.mark.parametrize("name", ["distilgpt2", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"])
def test_gpt2_parameter_counts_follow_from_the_shapes(name):
    m = DEFAULT_CATALOG.model(name)
    assert m.params == _gpt2_params(m)
    assert m.heads * m.head_dim == m.hidden


@pytest.mark.parametrize(
    "name,ffn", [("llama-2-7b", 11008), ("llama-3-8b", 14336), ("mistral-7b", 14336)]
)
def test_llama_parameter_counts_follow_from_the_shapes(name, ffn):
    m = DEFAULT_CATALOG.model(name)
    assert m.params == _llama_params(m, ffn)


def test_weight_and_kv_bytes():
    gpt2, l2, l3 = (DEFAULT_CATALOG.model(n) for n in ("gpt2", "llama-2-7b", "llama-3-8b"))
    assert gpt2.weight_bytes("fp16") == 2 * 124_439_808
    assert gpt2.weight_bytes("fp32") == 4 * 124_439_808
    assert gpt2.kv_bytes_per_token("fp16") == 2 * 12 * 12 * 64 * 2 == 36_864
    assert l2.kv_bytes_per_token("fp16") == 2 * 32 * 32 * 128 * 2 == 524_288  # half a MiB per token
    # GQA: 8 KV heads, not 32
    assert l3.kv_bytes_per_token("fp16") == l2.kv_bytes_per_token("fp16") // 4


def test_kv_budget_by_hand_for_gpt2_and_a_7b_model():
    # The A100-80GB has 80 GiB (HBM); vLLM's profiling pass of 8,192 tokens and 256 sampled rows is
    # set aside (batchsim.machine.memory): (4 x hidden + 3 x MLP) x 2 bytes per token, 2 x 256 x
    # vocab x 4 bytes of logits, and 0.5 GiB the CUDA context and graphs take.
    a100 = DEFAULT_CATALOG.gpu("A100-80GB")
    act2 = 8192 * (4 * 768 + 3 * 3072) * 2 + 2 * 256 * 50257 * 4 + 2**29
    b = kv_budget(a100, DEFAULT_CATALOG.model("gpt2"), "fp16", 0.9)
    assert b.bytes == pytest.approx(80 * 2**30 * 0.9 - 248_879_616 - act2)
    assert b.tokens == int((80 * 2**30 * 0.9 - 248_879_616 - act2) // 36_864)
    b7 = kv_budget(a100, DEFAULT_CATALOG.model("llama-2-7b"), "fp16", 0.9)
    act7 = 8192 * (4 * 4096 + 3 * 11008) * 2 + 2 * 256 * 32000 * 4 + 2**29
    assert b7.tokens == int((80 * 2**30 * 0.9 - 13_476_831_232 - act7) // 524_288) == 119_057
    assert b7.max_batch(1024) == 116  # rows of 1,024 cached tokens each
    half = kv_budget(a100, DEFAULT_CATALOG.model("llama-2-7b"), "fp16", 0.5)
    assert half.tokens == int((80 * 2**30 * 0.5 - 13_476_831_232 - act7) // 524_288)


def test_kv_budget_overrides_in_tokens_and_bytes():
    a100, gpt2 = DEFAULT_CATALOG.gpu("A100-80GB"), DEFAULT_CATALOG.model("gpt2")
    assert kv_budget(a100, gpt2, override_tokens=5000).tokens == 5000
    assert kv_budget(a100, gpt2, override_bytes=1e9).tokens == 1_000_000_000 // 36_864


def test_a_model_larger_than_the_gpu_is_refused_naming_both():
    with pytest.raises(ConfigError) as e:
        Server.named("T4", "llama-3-8b")
    msg = str(e.value)
    assert "llama-3-8b" in msg and "T4" in msg and "16 GB x 0.9" in msg and "--tp" in msg
    with pytest.raises(ConfigError, match="llama-2-7b.*L4"):
        Server.named("L4", "llama-2-7b", dtype="fp32")  # 27 GB of fp32 weights on a 24 GB card
    # Even a small model does not fit an override that leaves no memory at all.
    with pytest.raises(ConfigError, match="mem-util"):
        Server.named("A100-80GB", "gpt2", mem_util=0)


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ConfigError, match=r"gpu must be one of T4, L4, .*got 'V100'"):
        DEFAULT_CATALOG.gpu("V100")
    with pytest.raises(ConfigError, match=r"model must be one of distilgpt2, .*got 'gpt5'"):
        DEFAULT_CATALOG.model("gpt5")


def test_entries_validate_and_are_frozen():
    with pytest.raises(ConfigError, match="tflops must be > 0, got -1"):
        GPU("x", -1, 100, 10, 1.0)
    with pytest.raises(ConfigError, match="price_per_hour must be >= 0"):
        GPU("x", 1, 100, 10, -0.5)
    with pytest.raises(ConfigError, match="multiple of kv_heads"):
        Model("m", 2, 64, 4, 3, 16, 100, 1000, 128)
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_CATALOG.gpu("T4").tflops = 1  # type: ignore[misc]
    with pytest.raises(ConfigError, match="bf16 is not supported by T4"):
        Server.named("T4", "gpt2", dtype="bf16")
    with pytest.raises(ConfigError, match="dtype must be one of"):
        Server.named("A100-80GB", "gpt2", dtype="fp8")


def test_user_catalog_from_json_adds_and_overrides(tmp_path):
    f = tmp_path / "cat.json"
    f.write_text(
        json.dumps(
            {
                "gpus": {
                    "my-gpu": {
                        "tflops": 100,
                        "bandwidth_gbs": 1000,
                        "memory_gb": 48,
                        "price_per_hour": 1.25,
                    },
                    "T4": {
                        "tflops": 65,
                        "bandwidth_gbs": 320,
                        "memory_gb": 16,
                        "price_per_hour": 0.11,
                        "bf16": False,
                    },
                },
                "models": {
                    "tiny": {
                        "layers": 4,
                        "hidden": 256,
                        "heads": 4,
                        "kv_heads": 4,
                        "head_dim": 64,
                        "vocab": 1000,
                        "params": 4.0e6,
                        "max_context": 512,
                    }
                },
            }
        )
    )
    cat = load_catalog(f)
    assert cat.gpu("my-gpu").price_per_hour == 1.25
    assert cat.gpu("T4").price_per_hour == 0.11  # the file wins over the built-in entry
    assert (
        cat.model("tiny").params == 4_000_000
        and cat.model("tiny").kv_bytes_per_token() == 2 * 4 * 4 * 64 * 2
    )
    assert cat.model("gpt2") is DEFAULT_CATALOG.model("gpt2")  # built-ins stay
    srv = Server.named("my-gpu", "tiny", cat)
    # a GDDR-like entry: decimal GB
    act = 8192 * (4 * 256 + 3 * 1024) * 2 + 2 * 256 * 1000 * 4 + 2**29
    assert srv.kv.tokens == int((48e9 * 0.9 - 8e6 - act) // 4096)


def test_user_catalog_from_toml(tmp_path):
    f = tmp_path / "cat.toml"
    f.write_text(
        "[gpus.lab-gpu]\ntflops = 50\nbandwidth_gbs = 500\nmemory_gb = 24\nprice_per_hour = 0.7\n"
    )
    assert load_catalog(f).gpu("lab-gpu").bandwidth == 500e9


@pytest.mark.parametrize(
    "content,match",
    [
        (
            '{"gpus": {"g": {"tflops": 1, "bandwidth_gbs": 1, "memory_gb": 1, "price_per_hour": 1, '
            '"colour": "red"}}}',
            "unknown field 'colour'",
        ),
        ('{"gpus": {"g": {"tflops": 1}}}', "gpus.g"),
        (
            '{"gpus": {"g": {"tflops": 0, "bandwidth_gbs": 1, "memory_gb": 1, "price_per_hour": '
            "1}}}",
            "tflops must be > 0",
        ),
        ('{"machines": {}}', "'gpus' and/or 'models'"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_catalog_files_name_the_problem(tmp_path, content, match):
    f = tmp_path / "bad.json"
    f.write_text(content)
    with pytest.raises(ConfigError, match=match):
        load_catalog(f)
    with pytest.raises(ConfigError, match="not found"):
        load_catalog(tmp_path / "missing.json")


@pytest.mark.parametrize(
    "extra, words",
    [
        ('"bf16": "no"', "bf16 must be true or false, got 'no'"),
        ('"bf16": 0', "bf16 must be true or false, got 0"),
        ('"default_dtype": 16', "default_dtype must be"),
        ('"tflops_fp32": 1e308', "tflops_fp32 must be <="),
    ],
)
def test_catalog_values_of_the_wrong_type_are_refused(tmp_path, extra, words):
    f = tmp_path / "c.json"
    f.write_text(
        '{"gpus": {"g": {"tflops": 100, "bandwidth_gbs": 900, "memory_gb": 48, "price_per_hour": '
        "1, " + extra + "}}}"
    )
    with pytest.raises(ConfigError, match=words):
        load_catalog(f)


def test_catalog_files_with_a_bom_or_in_utf16(tmp_path):
    body = (
        '{"gpus": {"g": {"tflops": 100, "bandwidth_gbs": 900, "memory_gb": 48, "price_per_hour": '
        "1}}}"
    )
    f = tmp_path / "c.json"
    f.write_bytes(("\ufeff" + body).encode("utf-8"))
    assert load_catalog(f).gpu("g").tflops == 100
    f.write_bytes(body.encode("utf-16"))
    with pytest.raises(ConfigError, match="UTF-16"):
        load_catalog(f)
    f.write_bytes(body.replace("100", "NaN").encode())
    with pytest.raises(ConfigError, match="NaN"):
        load_catalog(f)
