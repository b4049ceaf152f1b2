"""The real engine: batched greedy tokens equal one-at-a-time greedy tokens, for every policy.

The reference runs each request alone through the model the textbook way (a plain
DynamicCache, no padding, no position ids), so a bug in our padding, positions, masks,
chunking, preemption or row bookkeeping shows up as a different token. tiny-gpt2 with
initializer_range=0.2 decodes to varied tokens, so equal sequences are not luck.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import DynamicCache  # noqa: E402

from batchsim import Poisson, Uniform, make_policy, make_workload, summarize  # noqa: E402
from batchsim.core.step import Chunk, Step  # noqa: E402
from batchsim.core.workload import Request, Workload  # noqa: E402
from realrun.clock.runner import run_real  # noqa: E402
from realrun.engine.engine import Engine  # noqa: E402
from realrun.engine.inputs import cache_argument, prompt_ids  # noqa: E402
from realrun.engine.kvcache import KVBatch  # noqa: E402
from realrun.engine.model import load_model  # noqa: E402
from realrun.reference.baselines import HFGenerateEngine, run_hf_continuous  # noqa: E402


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny-gpt2", device="cpu", dtype="fp32", threads=1)


@pytest.fixture(scope="module")
def engine(lm):
    return Engine(lm)


@pytest.fixture(scope="module")
def padded(lm):
    """The engine with the KV in left-padded rows (the layout the pool replaced; lesson 5's
    rectangle)."""
    return Engine(lm, kv="padded")


@pytest.fixture(scope="module")
def workload():
    # Fast arrivals, so batches form; prompts and outputs of many lengths, so padding is exercised.
    return make_workload(Poisson(300.0), Uniform(3, 40), Uniform(1, 24), n=12, seed=3)


def alone(lm, req: Request) -> list[int]:
    """Greedy tokens of one request run by itself, without any of our machinery."""
    with torch.inference_mode():
        ids = torch.tensor([prompt_ids(req, lm.vocab_size, lm.tokenizer, 0)])
        kw = {cache_argument(lm.model): DynamicCache()}  # the name this transformers takes
        out = lm.model(input_ids=ids, **kw, use_cache=True)
        toks = [int(out.logits[0, -1].argmax())]
        while len(toks) < req.output_tokens:
            out = lm.model(input_ids=torch.tensor([[toks[-1]]]), **kw, use_cache=True)
            toks.append(int(out.logits[0, -1].argmax()))
    return toks


@pytest.fixture(scope="module")
def reference(lm, workload):
    return {r.id: alone(lm, r) for r in workload.requests}


def test_reference_tokens_vary(reference):
    # Guards the strength of the equality tests: a model that repeats one token would pass them
    # trivially.
    all_tokens = [t for toks in reference.values() for t in toks]
    assert len(set(all_tokens)) > 20


CASES = [
    ("taxi", {}, None),
    ("static", {"max_batch": 4}, None),
    ("dynamic", {"max_batch": 4, "max_wait": 0.002}, None),
    ("continuous", {"max_seqs": 5}, None),
    (
        "continuous",
        {"max_seqs": 8, "max_batched_tokens": 16, "chunked_prefill": True, "block_size": 4},
        None,
    ),
    ("continuous", {"max_seqs": 8, "block_size": 4}, 72),  # preempts: recompute after eviction
    (
        "continuous",
        {"max_seqs": 8, "max_batched_tokens": 12, "chunked_prefill": True, "block_size": 4},
        60,
    ),
]


@pytest.mark.parametrize("name, kw, kv", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_batched_equals_alone(engine, workload, reference, name, kw, kv):
    policy = make_policy(name, **kw)
    res = run_real(workload, policy, engine, kv_budget_tokens=kv)
    s = summarize(res)
    assert s["completed"] == len(workload) and s["rejected"] == 0
    outs = engine.outputs()
    for r in workload.requests:
        assert outs[r.id] == reference[r.id], f"request {r.id} under {policy!r}"
    assert (res.records.tokens == workload.output_tokens).all()
    if kv is not None:
        assert 0 < res.kv_peak_tokens <= kv
    if kv == 72:
        assert res.preemptions > 0  # the case is there to exercise preemption; make sure it does


@pytest.mark.parametrize("name, kw, kv", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_paged_and_padded_give_the_same_tokens_and_the_pool_never_grows(
    engine, padded, workload, name, kw, kv
):
    paged = engine
    a = run_real(workload, make_policy(name, **kw), paged, kv_budget_tokens=kv)
    b = run_real(workload, make_policy(name, **kw), padded, kv_budget_tokens=kv)
    assert paged.outputs() == padded.outputs()
    assert (a.records.tokens == workload.output_tokens).all()
    m = a.meta
    assert m["kv_layout"] == "paged" and b.meta["kv_layout"] == "padded"
    # One pool, sized at the start: never grown, its bytes blocks x block bytes, never more held
    # than it has.
    assert m["kv_pool_regrown"] == 0
    assert m["kv_pool_bytes"] == m["kv_pool_blocks"] * paged.paged.pool.block_bytes
    assert 0 < m["kv_peak_blocks"] <= m["kv_pool_blocks"]
    if name == "continuous":
        # The same blocks as the policy counts: same block size, same peak.
        assert m["kv_block_size"] == kw.get("block_size", 16)
        assert m["kv_peak_blocks"] * m["kv_block_size"] == a.kv_peak_tokens
    if kv is not None:
        assert m["kv_pool_blocks"] * m["kv_block_size"] <= kv + m["kv_block_size"] * 8


def test_tiny_kv_budget_loses_and_duplicates_nothing(engine, lm):
    """Under a budget so small that requests are turned away and others evicted again and again."""
    wl = make_workload(Poisson(500.0), Uniform(4, 30), Uniform(1, 30), n=16, seed=11)
    budget = 48
    res = run_real(
        wl, make_policy("continuous", max_seqs=16, block_size=4), engine, kv_budget_tokens=budget
    )
    r = res.records
    done, rejected = r.completed_mask, r.rejected_mask
    assert (done ^ rejected).all(), (
        "every request is either completed or rejected, never both or neither"
    )
    assert rejected.any() and done.any() and res.preemptions > 0
    for i in np.flatnonzero(rejected):
        assert "KV" in r.rejected[i]
    outs = engine.outputs()
    for i in np.flatnonzero(done):
        req = wl.requests[i]
        assert r.tokens[i] == req.output_tokens
        assert outs[i] == alone(lm, req)  # preempted and recomputed, yet the same tokens
    for i in np.flatnonzero(rejected):
        assert outs[i] == [] and r.tokens[i] == 0
    assert res.kv_peak_tokens <= budget
    assert summarize(res)["completed"] + summarize(res)["rejected"] == len(wl)


def test_step_log_matches_policy_decisions(engine, workload):
    res = run_real(workload, make_policy("static", max_batch=4), engine)
    st = res.records.steps
    assert st["batch_size"].max() <= 4
    assert (st["duration"] > 0).all() and (np.diff(st["start"]) > 0).all()
    # a padded batch decodes its finished rows too: padded rows appear in the log
    assert st["padded_rows"].sum() > 0


def test_hf_generate_baseline_same_tokens(lm, workload, reference):
    eng = HFGenerateEngine(lm)
    res = run_real(workload, make_policy("static", max_batch=4), eng)
    assert summarize(res)["completed"] == len(workload)
    for r in workload.requests:
        assert eng.outputs()[r.id] == reference[r.id]


def test_hf_continuous_baseline_same_tokens(lm, workload, reference):
    res, outs = run_hf_continuous(workload, lm, max_seqs=8, max_batched_tokens=256)
    s = summarize(res)
    assert s["completed"] == len(workload)
    assert (res.records.tokens == workload.output_tokens).all()
    for r in workload.requests:
        assert outs[r.id] == reference[r.id]


def test_stop_on_eos_cuts_at_the_first_eos(lm, workload, reference):
    eos = lm.eos_token_id
    with_eos = [r.id for r in workload.requests if eos in reference[r.id]]
    assert with_eos, (
        "the reference needs a request that produces EOS for this test to mean anything"
    )
    eng = Engine(lm, stop_on_eos=True)
    res = run_real(workload, make_policy("continuous", max_seqs=8), eng)
    for rid in with_eos:
        k = reference[rid].index(eos) + 1
        assert res.records.tokens[rid] == k
        assert res.records.finish[rid] <= res.records.last_token[rid] + 1e-12
    others = [r.id for r in workload.requests if r.id not in with_eos]
    assert all(res.records.tokens[i] == workload.requests[i].output_tokens for i in others)


def test_text_prompts_are_used_and_cut_to_length(lm):
    req = Request(0, 0.0, 5, 3, text="hello world")
    assert prompt_ids(req, lm.vocab_size, lm.tokenizer) == list(b"hello")
    req = Request(1, 0.0, 7, 3, text="ab")
    assert prompt_ids(req, lm.vocab_size, lm.tokenizer) == list(b"abababa")
    # seeded per request: the same request gets the same prompt, another request another one
    a = prompt_ids(Request(2, 0.0, 8, 1), lm.vocab_size)
    assert (
        a
        == prompt_ids(Request(2, 0.0, 8, 1), lm.vocab_size)
        != prompt_ids(Request(3, 0.0, 8, 1), lm.vocab_size)
    )


def _one_row(shapes, rid: int, w: int) -> KVBatch:
    """A one-row batch of width w whose keys count up from 10 x rid (values: their negatives)."""
    one = KVBatch(shapes, torch.float32, "cpu", rows=1, columns=w)
    one.K[0][0] = torch.arange(w, dtype=torch.float32)[None, :, None].expand(2, w, 3) + 10 * rid
    one.V[0][0] = -one.K[0][0]
    one.mask[0] = 1
    one.ids, one.n, one.lo, one.hi = [rid], 1, 0, w
    return one


def test_kvbatch_rows_leave_and_join_without_disturbing_others(lm):
    """Swap-remove and right-aligned joins keep every row's tokens and mask intact."""
    shapes = [(2, 3)]
    b = KVBatch(shapes, torch.float32, "cpu")
    rows = []
    for rid, w in enumerate((3, 5, 2, 4)):
        one = _one_row(shapes, rid, w)
        rows.append(one)
        b.add(one)
    assert b.width == 5 and b.ids == [0, 1, 2, 3]
    b.remove([1])  # the widest row leaves: the padding it alone needed is trimmed
    assert sorted(b.ids) == [0, 2, 3] and b.width == 4
    for i, rid in enumerate(b.ids):
        w = rows[rid].width
        m = b.live_mask()[i]
        assert int(m.sum()) == w and m[-w:].all()
        assert torch.equal(b.K[0][i, :, b.hi - w : b.hi], rows[rid].K[0][0])
    assert not b.has_holes().any()


def test_a_wider_newcomer_slides_the_window_instead_of_reallocating(lm):
    """With room in the buffers, a row wider than the window's right edge moves the window, in
    place."""
    shapes = [(2, 3)]
    b = KVBatch(shapes, torch.float32, "cpu", rows=4, columns=40)
    rows = []
    for rid, w in enumerate((3, 9, 2)):
        one = _one_row(shapes, rid, w)
        rows.append(one)
        before = b.K[0].data_ptr()
        b.add(one)
        assert b.K[0].data_ptr() == before  # the same buffers: nothing was reallocated
    assert b.width == 9 and b.hi == 9
    for i, rid in enumerate(b.ids):
        w = rows[rid].width
        m = b.live_mask()[i]
        assert int(m.sum()) == w and m[-w:].all()
        assert torch.equal(b.K[0][i, :, b.hi - w : b.hi], rows[rid].K[0][0])
        assert torch.equal(b.V[0][i, :, b.hi - w : b.hi], rows[rid].V[0][0])


def test_engine_refuses_a_step_that_disagrees_with_its_cache(engine):
    wl = Workload((Request(0, 0.0, 4, 3), Request(1, 0.0, 4, 3)))
    engine.start(wl)
    engine.execute(Step(prefill=(Chunk(0, 0, 4, True),)))
    with pytest.raises(RuntimeError, match="disagree"):
        engine.execute(Step(decode=(0, 1)))


def test_long_outputs_outgrow_the_buffers_without_changing_tokens(lm, engine):
    """Outputs far longer than the prompts make the cache grow (reallocate) many columns past its
    start."""
    wl = Workload((Request(0, 0.0, 5, 160), Request(1, 0.0, 60, 20), Request(2, 0.001, 3, 120)))
    run_real(wl, make_policy("continuous", max_seqs=4), engine)
    for r in wl.requests:
        assert engine.outputs()[r.id] == alone(lm, r)


def test_kvbatch_window_slides_back_inside_its_buffers():
    shapes = [(1, 2)]
    b = KVBatch(shapes, torch.float32, "cpu", rows=1, columns=20)
    one = KVBatch(shapes, torch.float32, "cpu", rows=1, columns=4)
    one.K[0][0, 0] = torch.arange(8, dtype=torch.float32).view(4, 2)
    one.mask[0] = 1
    one.ids, one.n, one.lo, one.hi = [7], 1, 0, 4
    b.add(one)
    assert (b.lo, b.hi) == (0, 4)
    for j in range(12):  # twelve decode columns, as _decode writes them
        b.reserve(1)
        b.K[0][0, 0, b.hi] = 100.0 + j
        b.mask[0, b.hi] = 1
        b.hi += 1
    b.mask[0, :12] = 0  # the first twelve columns fall out of use (as when the wide rows have left)
    b._trim()
    assert (b.lo, b.hi, b.width) == (12, 16, 4)
    live = b.K[0][0, 0, b.lo : b.hi].clone()
    buf = b.K[0]
    b.reserve(5)  # 16 + 5 > 20, and the 12 free columns on the left hold the 4 live ones
    assert b.K[0] is buf and (b.lo, b.hi) == (0, 4)  # same memory, window moved
    assert torch.equal(b.K[0][0, 0, 0:4], live)
    assert b.live_mask().tolist() == [[1, 1, 1, 1]] and int(b.mask[0, 4:].sum()) == 0
    b.reserve(30)  # now it cannot slide: the buffers grow
    assert b.capacity >= 34 and torch.equal(b.K[0][0, 0, b.lo : b.hi], live)


def test_packed_products_leave_the_model_alone_and_the_tokens_equal(lm):
    # The engine runs a copy of the body with oneDNN-packed products (realrun.engine.packed) over
    # the same parameters; the model the baselines and the reference run is untouched.
    from realrun.engine.packed import PackedLinear

    eng = Engine(lm)
    if eng.head is None:
        pytest.skip("no oneDNN packing on this machine: the engine runs the model's own forward")
    assert isinstance(eng._body.h[0].attn.c_attn, PackedLinear)
    assert type(lm.model.transformer.h[0].attn.c_attn).__name__ == "Conv1D"
    assert eng._body.wte.weight is lm.model.transformer.wte.weight


def test_batched_equals_alone_with_gpt2s_vocabulary():
    # tiny-gpt2-50k: the 50,257-row output layer, where the packed head does most of a step's work.
    big = load_model("tiny-gpt2-50k", device="cpu", dtype="fp32", threads=1)
    wl = make_workload(Poisson(300.0), Uniform(3, 30), Uniform(1, 16), n=8, seed=9)
    eng = Engine(big)
    res = run_real(wl, make_policy("continuous", max_seqs=8), eng)
    assert summarize(res)["completed"] == len(wl)
    for r in wl.requests:
        assert eng.outputs()[r.id] == alone(big, r), f"request {r.id}"


def test_every_offline_model_s_special_ids_lie_inside_its_vocabulary():
    # A special id past the last row is an IndexError at the first padded batch (GPT-2's default
    # 50256 under gpt2-8l-32k's 32,000 rows would be one). Configs only: no weights are built.
    from realrun.engine.model import OFFLINE_MODELS, _gpt2_config

    for name in OFFLINE_MODELS:
        cfg = _gpt2_config(name)
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            assert 0 <= getattr(cfg, key) < cfg.vocab_size, (name, key)
    cfg = _gpt2_config("gpt2-8l-32k")
    assert (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size) == (8, 768, 12, 32000)
