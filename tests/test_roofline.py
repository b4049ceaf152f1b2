"""The roofline step time: memory-bound when small, compute-bound when big, and the arithmetic
behind it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from batchsim import Workload, make_policy, simulate, summarize
from batchsim.cli import main
from batchsim.core.plan import plan_step
from batchsim.core.step import Chunk, Step
from batchsim.machine.catalog import DEFAULT_CATALOG
from batchsim.machine.roofline import RooflineStepTime, decode_table, knee_batch

A100 = DEFAULT_CATALOG.gpu("A100-80GB")
GPT2 = DEFAULT_CATALOG.model("gpt2")


def rf(model="gpt2", gpu="A100-80GB", **kw) -> RooflineStepTime:
    return RooflineStepTime(DEFAULT_CATALOG.gpu(gpu), DEFAULT_CATALOG.model(model), **kw)


def test_gpt2_decode_at_batch_1_is_memory_bound_and_costs_a_weight_read():
    st = rf()
    t = st.decode([1], context=128)
    assert not t["compute_bound"][0]
    by_hand = GPT2.weight_bytes("fp16") / A100.bandwidth + st.overhead  # 0.122 ms + 0.5 ms
    assert t["step_s"][0] == pytest.approx(by_hand, rel=0.20)
    # Without overhead and at full bandwidth the step *is* the weight read, to within the KV bytes.
    bare = rf(overhead=0.0, memory_eff=1.0)
    assert bare.step_time(decode_rows=1, kv_read=128) == pytest.approx(
        GPT2.weight_bytes() / A100.bandwidth, rel=0.05
    )


def test_decode_turns_compute_bound_at_large_batch():
    t = rf().decode([1, 8, 64, 512], context=0)
    assert list(t["compute_bound"]) == [False, False, False, True]
    assert t["compute_s"][-1] > t["memory_s"][-1]


def test_tokens_per_second_rise_with_batch_then_flatten():
    tps = rf(model="llama-3-8b").decode(2 ** np.arange(10), context=0)["tokens_per_s"]
    assert np.all(np.diff(tps) > 0)
    assert tps[1] / tps[0] > 1.9  # memory-bound: a second row is almost free
    assert tps[-1] / tps[-2] < 1.3  # compute-bound: doubling the batch barely helps


def test_knee_matches_a_hand_computation():
    st = rf()
    # At context 0, a decode row does 2P FLOPs plus attention to itself and writes one token of KV:
    # compute(B) = B (2P + a) / F, memory(B) = (W + B kv) / BW; the knee is the first B with compute
    # >= memory.
    F = A100.peak_flops("fp16") * st.compute_eff
    BW = A100.bandwidth * st.memory_eff
    per_row = (
        2 * GPT2.params + GPT2.attention_flops_per_pair()
    ) / F - GPT2.kv_bytes_per_token() / BW
    assert knee_batch(st, 0) == math.ceil(GPT2.weight_bytes() / BW / per_row)
    # near the A100's ridge of ~153 FLOPs/byte, less the efficiencies
    assert 64 < knee_batch(st, 0) < 160
    # H100's ridge is about twice the A100's, so is its knee.
    assert knee_batch(rf(gpu="H100-SXM"), 0) == pytest.approx(2 * knee_batch(st, 0), rel=0.1)
    # GPT-2's cache is large next to its weights: at 512 tokens of context decode never turns
    # compute-bound.
    assert knee_batch(st, 512) is None


def test_long_context_pushes_the_knee_out():
    st = rf(model="llama-3-8b")
    k0, k512 = knee_batch(st, 0), knee_batch(st, 512)
    assert k0 is not None and k512 is not None and k512 > k0


def test_chunked_prefill_conserves_attention_flops():
    st = rf(model="llama-3-8b", overhead=0.0)
    whole = Step(prefill=(Chunk(0, 0, 1000),))
    first = Step(prefill=(Chunk(0, 0, 600, completes=False),))
    second = Step(prefill=(Chunk(0, 600, 400),), kv_read=600)

    def flops_time(step):
        (p,) = plan_step(step, st.plan)
        return st.components([p.prefill_tokens], [p.decode_rows], [p.attn_read], [p.attn_pairs])[0][
            0
        ]

    assert flops_time(first) + flops_time(second) == pytest.approx(flops_time(whole), rel=1e-12)
    # 1000 tokens attend to 1000*1001/2 pairs: that is what durations() prices beyond 2 x params x
    # tokens.
    extra = DEFAULT_CATALOG.model("llama-3-8b").attention_flops_per_pair() * 1000 * 1001 / 2
    base = 2 * st.model.params * 1000
    assert flops_time(whole) == pytest.approx((base + extra) / st.flops_per_s, rel=1e-12)
    assert st.durations(whole, 1)[0] == pytest.approx(st.prefill(1000)["step_s"], rel=1e-12)


def test_padded_prefill_computes_every_row_at_the_longest_prompt():
    st = rf(overhead=0.0, memory_eff=1.0)
    padded = Step(prefill=(Chunk(0, 0, 10), Chunk(1, 0, 100)), prefill_padding=90)
    unpadded = Step(prefill=(Chunk(0, 0, 10), Chunk(1, 0, 100)))
    assert st.durations(padded, 1)[0] > st.durations(unpadded, 1)[0]
    c, _ = st.components(np.array([200.0]), np.zeros(1), np.zeros(1), np.array([2 * 100 * 101 / 2]))
    assert st.durations(padded, 1)[0] == pytest.approx(
        max(c[0], st.components([200.0], [0.0], [0.0])[1][0])
    )


def test_repeated_decode_steps_read_a_growing_cache():
    st = rf(model="llama-2-7b")
    step = Step(decode=(0, 1, 2, 3), kv_read=4 * 1000, repeat=50)
    d = st.durations(step, 50)
    assert np.all(np.diff(d) > 0)  # every repetition reads 4 more KV tokens
    one_by_one = [st.step_time(decode_rows=4, kv_read=4 * 1000 + 4 * j) for j in range(50)]
    assert np.allclose(d, one_by_one, rtol=1e-12)


def test_decode_table_rows():
    rows = decode_table(rf(), [1, 2, 4], context=64)
    assert [r["batch"] for r in rows] == [1, 2, 4]
    assert all(r["bound"] == "memory" for r in rows)
    assert rows[2]["tokens_per_s"] == pytest.approx(4 / (rows[2]["step_ms"] / 1e3))


def test_bad_efficiencies_are_refused():
    from batchsim.core.errors import ConfigError

    with pytest.raises(ConfigError, match="compute_eff must be in"):
        rf(compute_eff=0)
    with pytest.raises(ConfigError, match="memory_eff must be in"):
        rf(memory_eff=1.5)
    with pytest.raises(ConfigError, match="overhead must be >= 0"):
        rf(overhead=-1)


def test_batching_pays_in_simulation_on_a_roofline_server():
    wl = Workload.from_arrays(np.linspace(0, 5, 100), np.full(100, 200), np.full(100, 64))
    st = rf(model="llama-3-8b")
    taxi = summarize(simulate(wl, make_policy("taxi"), st))
    cont = summarize(
        simulate(wl, make_policy("continuous", max_seqs=64), st, kv_budget_tokens=400_000)
    )
    assert cont["request_throughput"] > 3 * taxi["request_throughput"]
    # A taxi decode step is the weight read: TPOT close to the batch-1 step time.
    assert taxi["mean_tpot"] == pytest.approx(st.step_time(decode_rows=1, kv_read=232), rel=0.05)


def test_roofline_command_prints_the_table_the_knee_and_writes_a_plot(tmp_path, capsys):
    assert main(["roofline", "--gpu", "A100-80GB", "--model", "gpt2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = [ln.split() for ln in out.splitlines()]
    batches = [int(ln[0]) for ln in lines if ln and ln[0].isdigit() and len(ln) >= 6]
    assert batches == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    assert f"at context      0: batch {knee_batch(rf(), 0)}" in out
    png = tmp_path / "roofline_A100-80GB_gpt2.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_roofline_command_at_a_context_and_as_json(capsys):
    import json

    assert (
        main(
            [
                "roofline",
                "--gpu",
                "H100-SXM",
                "--model",
                "llama-3-8b",
                "--context",
                "512",
                "--json",
                "--no-plots",
            ]
        )
        == 0
    )
    obj = json.loads(capsys.readouterr().out)
    assert obj["context"] == 512 and len(obj["rows"]) == 10
    assert obj["knee"]["512"] == knee_batch(rf(model="llama-3-8b", gpu="H100-SXM"), 512)


@pytest.mark.parametrize(
    "argv,field",
    [
        (["roofline", "--gpu", "V100"], "gpu must be one of"),
        (["roofline", "--model", "gpt5"], "model must be one of"),
        (["roofline", "--gpu", "T4", "--model", "llama-3-8b"], "does not fit on gpu T4"),
        (["roofline", "--model", "gpt2", "--context", "5000"], "context must be <="),
        (["roofline", "--gpu-price", "-1"], "gpu-price must be >= 0"),
    ],
)
def test_roofline_bad_input_exits_2_with_one_line(argv, field, capsys):
    assert main(argv + ["--no-plots"]) == 2
    err = capsys.readouterr().err
    assert field in err and len(err.strip().splitlines()) == 1


def test_a_cpu_entry_calibrated_from_a_linear_profile_reproduces_it():
    from batchsim.machine.roofline import calibrated_gpu
    from batchsim.sim.steptime import LinearStepTime

    gpt2 = DEFAULT_CATALOG.model("gpt2")
    cal = LinearStepTime(c0=0.030, c1=0.0004, source="made-up profile")
    cpu = calibrated_gpu(cal, gpt2, "fp32")
    assert cpu.bandwidth == pytest.approx(gpt2.weight_bytes("fp32") / 0.030)
    st = RooflineStepTime(cpu, gpt2, "fp32", compute_eff=1.0, memory_eff=1.0, overhead=0.0)
    # a lone decode step is the weight read (c0); a long prefill is compute-bound at c1 per token
    assert st.step_time(decode_rows=1) == pytest.approx(cal.c0, rel=0.01)
    assert st.step_time(prefill_tokens=1000) == pytest.approx(1000 * cal.c1, rel=0.01)
