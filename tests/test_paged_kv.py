"""The engine's KV in blocks of one pool: the attention over blocks equals torch's, the pool hands
out and takes back blocks, a padded batch holds fewer bytes in blocks, and the slow reference path
gives the same tokens. (Each policy's tokens, paged against padded, and the pool against the
policy's count: ``test_realrun_engine.py``.)"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from batchsim import Poisson, Uniform, make_policy, make_workload  # noqa: E402
from realrun.clock.runner import run_real  # noqa: E402
from realrun.engine.engine import Engine  # noqa: E402
from realrun.engine.model import load_model  # noqa: E402
from realrun.engine.paged import pool as pool_module  # noqa: E402
from realrun.engine.paged.attention import (  # noqa: E402
    attention_reference,
    kernel_available,
    kernel_problem,
    paged_attention,
)
from realrun.engine.paged.pool import KVPool, PoolFull  # noqa: E402


@pytest.fixture(scope="module")
def lm():
    return load_model("tiny-gpt2", device="cpu", dtype="fp32", threads=1)


@pytest.fixture(scope="module")
def paged(lm):
    eng = Engine(lm)
    assert eng.kv_layout == "paged", eng.kv_note
    return eng


@pytest.fixture(scope="module")
def padded(lm):
    return Engine(lm, kv="padded")


@pytest.fixture(scope="module")
def workload():
    return make_workload(Poisson(300.0), Uniform(3, 40), Uniform(1, 24), n=12, seed=3)


def _ragged(seed: int, heads=3, dim=8, bs=4, contexts=(1, 5, 17, 30), queries=(1, 5, 1, 7)):
    """A pool with rows in scattered blocks, each bringing some queries (a decode: 1; a chunk:
    more)."""
    g = torch.Generator().manual_seed(seed)
    blocks = [-(-c // bs) for c in contexts]
    nb = sum(blocks) + 5
    pk, pv = (
        torch.randn(nb, heads, bs, dim, generator=g),
        torch.randn(nb, heads, bs, dim, generator=g),
    )
    order = torch.randperm(nb, generator=g).tolist()
    table = torch.zeros(len(contexts), max(blocks), dtype=torch.long)
    at = 0
    for r, n in enumerate(blocks):
        table[r, :n] = torch.tensor(order[at : at + n])
        at += n
    starts = torch.tensor(np.concatenate([[0], np.cumsum(queries)]), dtype=torch.long)
    q = torch.randn(int(sum(queries)), heads, dim, generator=g)
    return q, pk, pv, table, torch.tensor(contexts), starts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_attention_over_blocks_equals_torchs_per_row(seed):
    q, pk, pv, table, ctx, starts = _ragged(seed)
    out = paged_attention(q, pk, pv, table, ctx, starts, 8**-0.5)
    ref = attention_reference(q, pk, pv, table, ctx, starts, 8**-0.5)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)
    # And the reference is torch's attention on each row's tokens laid out contiguously, causal.
    D, bs = q.shape[2], pk.shape[2]
    r, n, a, b = 3, int(ctx[3]), int(starts[3]), int(starts[4])
    k = torch.cat([pk[int(blk)] for blk in table[r, : -(-n // bs)]], dim=1)[:, :n]
    v = torch.cat([pv[int(blk)] for blk in table[r, : -(-n // bs)]], dim=1)[:, :n]
    for i in range(b - a):
        pos = n - (b - a) + i
        w = torch.softmax((q[a + i][:, None] * k[:, : pos + 1]).sum(-1) * D**-0.5, dim=-1)
        assert torch.allclose(out[a + i], (w[..., None] * v[:, : pos + 1]).sum(1), atol=1e-5)


def test_the_kernel_is_built_here():
    # CI's machine has a compiler: the fast path must be the one measured, not the slow fallback.
    assert kernel_available(), kernel_problem()


def test_the_pool_hands_out_and_takes_back_blocks():
    pool = KVPool([(2, 4), (2, 4)], blocks=5, block_size=4, dtype=torch.float32, device="cpu")
    assert pool.nbytes == 5 * pool.block_bytes == sum(t.numel() * 4 for t in pool.K + pool.V)
    slots = pool.grow(7, 6)  # 6 tokens: two blocks
    assert len(pool.table[7]) == 2 and len(slots) == 6 and pool.used_blocks == 2
    assert [s // 4 for s in slots] == [pool.table[7][0]] * 4 + [pool.table[7][1]] * 2
    pool.grow(7, 2)  # fills the second block: no new one
    assert len(pool.table[7]) == 2
    pool.grow(8, 12)
    with pytest.raises(PoolFull, match="request 9 needs 1 more KV blocks, 0 of 5 are free"):
        pool.grow(9, 1)
    pool.free(7)
    assert pool.used_blocks == 3 and pool.peak_blocks == 5 and 7 not in pool


def test_a_padded_batch_holds_fewer_bytes_in_blocks_than_in_its_rectangle(paged, padded, workload):
    a = run_real(workload, make_policy("static", max_batch=4), paged)
    b = run_real(workload, make_policy("static", max_batch=4), padded)
    assert a.meta["kv_peak_bytes_used"] < b.meta["kv_peak_bytes_measured"]


def test_a_padded_batch_computes_its_padding_on_the_pool_and_gives_it_back(
    paged, workload, monkeypatch
):
    # generate()'s semantics, which the plan prices: a static batch's prefill computes rows x its
    # longest prompt. Every pass that runs is counted here, in tokens, against the plan's
    # prefill_tokens.
    fed: list[int] = []
    inner = paged.paged._forward
    monkeypatch.setattr(
        paged.paged,
        "_forward",
        lambda rows, tokens, *a: fed.append(len(tokens)) or inner(rows, tokens, *a),
    )
    res = run_real(workload, make_policy("static", max_batch=4), paged)
    prefills = [p for p, _ in paged.pass_log if p.prefill_rows]
    # some padding
    assert prefills and any(p.prefill_tokens > sum(c.length for c in p.chunks) for p in prefills)
    assert sum(fed) == sum(p.prefill_tokens + p.decode_rows for p, _ in paged.pass_log)
    # the padding's blocks came back
    assert paged.paged.pool.used_blocks == 0 and res.meta["kv_pool_regrown"] == 0
    # (That the padding changes nobody's tokens: test_realrun_engine.py's one-at-a-time equality,
    # static included.)


def test_the_reference_attention_serves_when_the_kernel_cannot(lm, paged, workload, monkeypatch):
    want = run_real(workload, make_policy("continuous", max_seqs=4, block_size=4), paged) and dict(
        paged.outputs()
    )
    monkeypatch.setattr(pool_module, "paged_attention", attention_reference)
    run_real(workload, make_policy("continuous", max_seqs=4, block_size=4), paged)
    assert paged.outputs() == want


def test_an_unknown_kv_layout_is_refused(lm):
    with pytest.raises(ValueError, match="kv must be one of auto, paged, padded, got 'rows'"):
        Engine(lm, kv="rows")


def test_the_profilers_rows_fit_a_pool_that_grows_between_runs(paged):
    paged.start(make_workload(Poisson(10.0), Uniform(4, 8), Uniform(2, 4), n=40, seed=0))
    # more than the last run's pool: it grows, outside any run
    paged.fill_rows(list(range(40)), [300] * 40)
    assert (
        len(paged.paged.running) == 40
        and paged.paged.pool.used_blocks >= 40 * 300 // paged.paged.pool.block_size
    )
    paged.release(list(range(40)))
    assert paged.paged.pool.used_blocks == 0
