"""The attention kernel's Python entry refuses what would crash or mislead the C++ beneath it.

Each bad argument is a ``ValueError`` naming the argument and the value, raised before any C++ runs
(before this, a block id past the pool, a context past its blocks or a short ``q_start`` killed the
interpreter). Inputs that are merely laid out differently (sliced, transposed, int32) give the
reference's numbers, where they used to give numbers 0.65 or 2e28 away.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_paged_kv import _ragged as paged_kv_ragged  # noqa: E402

from batchsim import ConfigError  # noqa: E402
from realrun.engine.paged.attention import _build_name, attention_reference, paged_attention  # noqa: E402

SCALE = 8**-0.5


def _ragged(seed: int = 0, **kw):
    """A pool with rows in scattered blocks, each bringing some queries: test_paged_kv's, as a list
    to edit."""
    return list(paged_kv_ragged(seed, **kw))


def _with(index: int, value):
    args = _ragged()
    args[index] = value(args[index]) if callable(value) else value
    return args


Q, PK, PV, TABLE, CTX, START = range(6)

BAD = {
    "block id past the pool": (
        lambda: _with(
            TABLE, lambda t: t.index_put((torch.tensor(3), torch.tensor(7)), torch.tensor(10**6))
        ),
        "table[3, 7]",
        "1000000",
    ),
    "negative block id": (
        lambda: _with(
            TABLE, lambda t: t.index_put((torch.tensor(0), torch.tensor(0)), torch.tensor(-1))
        ),
        "table[0, 0]",
        "-1",
    ),
    "context past its blocks": (
        lambda: _with(CTX, torch.tensor([1, 5, 17, 300])),
        "ctx[3] = 300",
        "8 per row",
    ),
    "negative context": (lambda: _with(CTX, torch.tensor([1, 5, -17, 30])), "ctx[2]", "-17"),
    "fewer context than queries": (
        lambda: _with(CTX, torch.tensor([1, 4, 17, 30])),
        "ctx[1]",
        "5 queries",
    ),
    "q_start too short": (lambda: _with(START, torch.tensor([0, 1, 6])), "q_start", "(3,)"),
    "q_start short of q": (
        lambda: _with(START, torch.tensor([0, 1, 6, 7, 10])),
        "q_start[-1]",
        "10",
    ),
    "q_start not from 0": (lambda: _with(START, torch.tensor([1, 1, 6, 7, 14])), "q_start[0]", "1"),
    "q_start falling": (
        lambda: _with(START, torch.tensor([0, 6, 1, 7, 14])),
        "q_start",
        "q_start[1] = 6",
    ),
    "q of two dims": (lambda: _with(Q, lambda q: q.reshape(14, -1)), "q must be", "(14, 24)"),
    "pools of another head_dim": (
        lambda: [a[..., :4] if i in (PK, PV) else a for i, a in enumerate(_ragged())],
        "pool_k must have q's heads 3 and head_dim 8",
        "(21, 3, 4, 4)",
    ),
    "pool_v unlike pool_k": (lambda: _with(PV, lambda p: p[:-1]), "pool_v", "(20, 3, 4, 8)"),
    "float table": (lambda: _with(TABLE, lambda t: t.float()), "table", "torch.float32"),
    "float64 pool with float32 q": (
        lambda: _with(PK, lambda p: p.double()),
        "pool_k",
        "torch.float64",
    ),
    "integer q": (
        lambda: _with(Q, lambda q: q.long()),
        "q must hold floating-point",
        "torch.int64",
    ),
    "a list for a tensor": (
        lambda: _with(CTX, [1, 5, 17, 30]),
        "ctx must be a torch.Tensor",
        "list",
    ),
    "table of other rows": (
        lambda: _with(TABLE, lambda t: t[:3]),
        "table must be [rows=4",
        "(3, 8)",
    ),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_arguments_are_refused_by_name_before_the_kernel(case):
    make, name, value = BAD[case]
    with pytest.raises(ValueError) as caught:
        paged_attention(*make(), SCALE)
    assert isinstance(caught.value, ConfigError)
    assert name in str(caught.value) and value in str(caught.value), str(caught.value)


@pytest.mark.parametrize("scale", [float("nan"), "0.35", None])
def test_a_scale_that_is_no_number_is_refused(scale):
    with pytest.raises(ValueError, match="scale must be a finite number"):
        paged_attention(*_ragged(), scale)


def test_table_padding_past_a_rows_blocks_is_never_read_so_never_refused():
    args = _ragged()
    args[TABLE][0, 1:] = -(10**9)  # row 0 has one block: the rest is padding
    out = paged_attention(*args, SCALE)
    assert torch.allclose(out, attention_reference(*_ragged(), SCALE), atol=1e-5)


def _transposed_copy(t: torch.Tensor, dims: tuple[int, int]) -> torch.Tensor:
    """The same values, laid out with ``dims`` swapped in memory (not contiguous)."""
    return t.transpose(*dims).contiguous().transpose(*dims)


LAYOUTS = {
    "q transposed": lambda a: a.__setitem__(Q, _transposed_copy(a[Q], (0, 1))),
    "pool_k transposed": lambda a: a.__setitem__(PK, _transposed_copy(a[PK], (2, 3))),
    "pool_v transposed": lambda a: a.__setitem__(PV, _transposed_copy(a[PV], (0, 2))),
    "table transposed": lambda a: a.__setitem__(TABLE, _transposed_copy(a[TABLE], (0, 1))),
    "table int32": lambda a: a.__setitem__(TABLE, a[TABLE].int()),
    "ctx and q_start strided": lambda a: (
        a.__setitem__(CTX, torch.stack([a[CTX], a[CTX]], 1)[:, 0]),
        a.__setitem__(START, torch.stack([a[START], a[START]], 1)[:, 0]),
    ),
}


@pytest.mark.parametrize("layout", list(LAYOUTS), ids=list(LAYOUTS))
def test_inputs_laid_out_otherwise_give_the_references_numbers(layout):
    args = _ragged(seed=4)
    ref = attention_reference(*_ragged(seed=4), SCALE)
    LAYOUTS[layout](args)
    assert any(not t.is_contiguous() for t in args) or layout == "table int32"
    out = paged_attention(*args, SCALE)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5), (out - ref).abs().max()


def test_the_build_name_follows_the_cpus_instruction_sets(monkeypatch, tmp_path):
    from realrun.engine.paged import attention

    def name_for(cpuinfo: str) -> str:
        path = tmp_path / "cpuinfo"
        path.write_text(cpuinfo)
        real_open = open
        monkeypatch.setattr(
            "builtins.open",
            lambda f, *a, **k: real_open(path if f == "/proc/cpuinfo" else f, *a, **k),
        )
        try:
            return attention._build_name()
        finally:
            monkeypatch.setattr("builtins.open", real_open)

    model = "processor\t: 0\nmodel name\t: Some CPU @ 2.0GHz\n"
    avx512 = name_for(model + "flags\t\t: fpu sse2 avx2 avx512f\n")
    avx2 = name_for(model + "flags\t\t: fpu sse2 avx2\n")
    assert avx512 != avx2  # same model name, different instruction sets: different builds
    assert avx2 == name_for(
        model + "flags\t\t: fpu sse2 avx2\n\nprocessor\t: 1\nflags\t\t: other\n"
    )
    assert _build_name().startswith("realrun_paged_")
