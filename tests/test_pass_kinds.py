"""bench/pass_kinds.py, the sums bench/step_fidelity.py tabulates: how far two profiles price the
very same passes apart, kind by kind, once their common level is out, and a step's first decode
passes held to its later ones (on given numbers; no engine runs); and the bench's refusal of bad
flags."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from bench_script import BENCH, assert_refused, bench_script

_path = BENCH / "pass_kinds.py"
_spec = importlib.util.spec_from_file_location("pass_kinds", _path)
SF = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("pass_kinds", SF)
_spec.loader.exec_module(SF)


def _rows(scale: dict[str, float]) -> list:
    """Two rounds of two families; each kind's price scaled as given (measured is the same for
    all)."""
    base = {"decode short": (2.0, 2.0), "prefill long": (1.0, 1.0), "decode long": (3.0, 3.0)}
    out = []
    for r in range(2):
        for fam in ("short", "long"):
            v = {k: (m, p * scale.get(k, 1.0)) for k, (m, p) in base.items()}
            v["all"] = (sum(m for m, _ in v.values()), sum(p for _, p in v.values()))
            out.append((r, fam, v))
    return out


def test_a_common_level_is_taken_out():
    apart = SF.profiles_apart(
        [_rows({}), _rows(dict.fromkeys(("decode short", "prefill long", "decode long"), 1.3))]
    )
    assert apart[0] == pytest.approx(
        {"decode short": 1.0, "prefill long": 1.0, "decode long": 1.0, "all": 1.3}
    )


def test_one_kind_priced_apart_shows_against_the_rest():
    # decode short priced 1.5x by the second profile, the rest the same: the common level is
    # (2 * 1.5 + 1 + 3) / 6 = 7/6, so decode short reads 1.5 / (7/6) and the others 1 / (7/6).
    (apart,) = SF.profiles_apart([_rows({}), _rows({"decode short": 1.5})])
    assert apart["decode short"] == pytest.approx(1.5 * 6 / 7)
    assert apart["prefill long"] == pytest.approx(6 / 7)
    assert apart["decode long"] == pytest.approx(6 / 7)
    assert apart["all"] == pytest.approx(7 / 6)


def test_one_table_per_later_profile():
    got = SF.profiles_apart([_rows({}), _rows({"decode long": 2.0}), _rows({})])
    assert len(got) == 2
    assert got[0]["all"] == pytest.approx(1.5) and got[1]["decode long"] == pytest.approx(1.0)


def test_place_ratios_hold_first_passes_to_the_later_ones_of_the_same_run():
    # run 1: later passes at 1.2x their price (the machine's level), first passes at 1.2 * 1.1x
    # (an extra the price missed by 10 %), second passes priced right: 1.1 and 1.0 once level out.
    run1 = {"first": (1.32, 1.0), "second": (2.4, 2.0), "later": (6.0, 5.0)}
    run2 = {"first": (0.9, 1.0), "later": (4.5, 5.0)}  # no second pass; the level 0.9
    run3 = {"first": (1.0, 1.0)}  # no later pass: nothing to hold it to
    got = SF.place_ratios([(0, "a", run1), (0, "b", run2), (1, "a", run3)])
    assert got["first"] == pytest.approx([1.1, 1.0])
    assert got["second"] == pytest.approx([1.0])


def test_run_sums_read_the_step_repetition_of_decode_passes_only():
    from types import SimpleNamespace

    from batchsim.core.plan import Pass
    from batchsim.sim.steptime import LinearStepTime

    model = LinearStepTime(c0=0.01, c1=0.0, c2=0.0, c3=0.0)
    dec = Pass(decode_rows=2, kv_read=20, attn_read=20)
    pre = Pass(prefill_tokens=8, prefill_rows=1, query=8)
    log = [(pre, 0.05), (dec, 0.02), (dec, 0.03), (dec, 0.01), (dec, 0.01), (dec, 0.04)]
    run = SimpleNamespace(meta={"passes": log, "pass_rep": [0, 0, 1, 2, 3, 0]})
    kinds, got = SF.run_sums(run, model, "continuous")
    assert kinds["all"][0] == pytest.approx(0.16)  # every pass by kind, the prefill too
    assert got["first"][0] == pytest.approx(0.06)  # the prefill's own first pass is left out
    assert got["second"][0] == pytest.approx(0.03)
    assert got["later"][0] == pytest.approx(0.02)
    assert got["first"][1] == pytest.approx(2 * model.pass_time(dec))
    # a run that did not tag its passes has no places
    kinds_untagged, places = SF.run_sums(SimpleNamespace(meta={"passes": log}), model, "continuous")
    assert places == {} and kinds_untagged == kinds


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--only", "short,nope"], "--only"),
        (["--rounds", "0"], "--rounds"),
        (["--load", "1.5"], "--load"),
        (["--seconds", "-1"], "--seconds"),
        (["--threads", "0"], "--threads"),
        (["--profile-budget", "0"], "--profile-budget"),
    ],
)
def test_the_step_fidelity_bench_refuses_bad_input_in_one_line_with_exit_2(
    argv, field, capsys, monkeypatch
):
    # argparse's error, before any model is loaded
    assert_refused(bench_script("step_fidelity", monkeypatch).main, argv, field, capsys)
