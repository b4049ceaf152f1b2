"""Checks for lab 3 (memory and money). Run: pytest course/labs -k lab3"""

from __future__ import annotations

import pytest

from batchsim.machine.catalog import DEFAULT_CATALOG
from batchsim.machine.cost import cost_summary, implied_price_per_hour
from batchsim.machine.memory import activation_bytes, kv_budget


@pytest.fixture(scope="module")
def lab(load_lab):
    return load_lab("lab3_memory_and_money")


@pytest.mark.parametrize("name", ["gpt2", "llama-2-7b", "llama-3-8b", "mistral-7b"])
def test_lab3_kv_bytes_per_token_agrees_with_the_catalog(lab, name):
    m = DEFAULT_CATALOG.model(name)
    for dtype, nbytes in (("fp16", 2), ("fp32", 4)):
        assert lab.kv_bytes_per_token(
            m.layers, m.kv_heads, m.head_dim, nbytes
        ) == m.kv_bytes_per_token(dtype)


@pytest.mark.parametrize(
    "gpu,model,context",
    [
        ("A100-80GB", "llama-2-7b", 4096),
        ("A100-80GB", "llama-3-8b", 4096),
        ("L4", "llama-3-8b", 2048),
        ("H100-SXM", "mistral-7b", 8192),
    ],
)
def test_lab3_max_batch_agrees_with_the_package(lab, gpu, model, context):
    g, m = DEFAULT_CATALOG.gpu(gpu), DEFAULT_CATALOG.model(model)
    budget = kv_budget(g, m, "fp16", 0.9)
    per_token = m.kv_bytes_per_token("fp16")
    # The package counts the card's memory as the card reports it (GiB on HBM cards) and sets aside
    # what the engine's activations take besides the weights: handed those, your formula must give
    # its answer.
    set_aside = m.weight_bytes("fp16") + activation_bytes(m)
    got = lab.max_batch(g.memory_bytes / 1e9, 0.9, set_aside / 1e9, context, per_token)
    assert got == budget.max_batch(context)


def test_lab3_grouped_query_attention_fits_four_times_the_batch(lab):
    l2, l3 = DEFAULT_CATALOG.model("llama-2-7b"), DEFAULT_CATALOG.model("llama-3-8b")
    a = lab.max_batch(
        80, 0.9, l2.weight_bytes() / 1e9, 4096, lab.kv_bytes_per_token(32, 32, 128, 2)
    )
    b = lab.max_batch(80, 0.9, l3.weight_bytes() / 1e9, 4096, lab.kv_bytes_per_token(32, 8, 128, 2))
    assert 3.5 < b / a < 4.5


def test_lab3_money(lab):
    # 10 requests/s for an hour
    s = {
        "duration": 3600.0,
        "completed": 36_000,
        "total_output_tokens": 3_600_000,
    }
    assert lab.cost_per_request(2.5, 10.0) == pytest.approx(
        cost_summary(s, 2.5)["cost_per_request"]
    )
    assert lab.implied_price_per_hour(7.0, 0.002) == pytest.approx(
        implied_price_per_hour(7.0, 0.002)
    )
    taxi, batched = lab.claim_check()
    assert taxi == pytest.approx(3600.0)
    assert batched == pytest.approx(3600.0)
