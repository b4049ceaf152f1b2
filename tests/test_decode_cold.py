"""A step's first decode passes cost more than the repeated ones the profile's grid times.

The extras are priced in the simulator's step (``ProfiledStepTime.durations``) and in the
pass-by-pass referee (``priced_passes``) alike, and read off passes tagged with their step's
repetition (``realrun.timing.cold.decode_cold``). The timed passes here are made up (seeded), so the
tests are of the arithmetic; one test runs the real engine only to check which repetition it tags
each pass with.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from test_profiled import model as profiled_model

from batchsim import ConfigError
from batchsim.core.plan import Pass, plan_step
from batchsim.core.step import Chunk, Step
from batchsim.sim.level import LevelStepTime
from batchsim.sim.profiled import ProfiledStepTime
from batchsim.sim.steptime import load_step_time
from realrun.timing.cold import MIN_PASSES, burst_passes, decode_cold
from realrun.timing.pass_level import priced_passes

FIRST, SECOND = 0.0021, 0.0009


def cold_model(**kw) -> ProfiledStepTime:
    return profiled_model(first_decode_extra=FIRST, second_decode_extra=SECOND, **kw)


DECODE = Step(decode=(1, 2, 3, 4), kv_read=4 * 100, decode_width=100)


def test_a_repeated_decode_step_pays_the_first_extra_once_and_the_second_once():
    cold, warm = cold_model(), profiled_model()
    d = cold.durations(DECODE, 4) - warm.durations(DECODE, 4)
    np.testing.assert_allclose(d, [FIRST, SECOND, 0.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(
        cold.durations(DECODE, 1) - warm.durations(DECODE, 1), [FIRST], atol=1e-15
    )


def test_a_step_that_only_prefills_pays_neither():
    step = Step(prefill=(Chunk(1, 0, 64, True),))
    assert cold_model().durations(step, 1)[0] == pytest.approx(
        profiled_model().durations(step, 1)[0]
    )


def test_a_step_that_prefills_and_decodes_pays_the_first_extra_on_its_decode_pass():
    step = Step(prefill=(Chunk(9, 0, 64, True),), decode=(1, 2), kv_read=2 * 80, decode_width=80)
    cold, warm = cold_model(plan="paged"), profiled_model(plan="paged")
    assert cold.durations(step, 1)[0] - warm.durations(step, 1)[0] == pytest.approx(FIRST)
    pre, dec = plan_step(step, "paged")
    assert (cold.cold_extra(pre, 0), cold.cold_extra(dec, 0)) == (0.0, FIRST)


def test_the_pass_by_pass_price_takes_the_extra_by_repetition():
    m = cold_model()
    (p,) = plan_step(DECODE, m.plan)
    assert [m.cold_extra(p, j) for j in range(4)] == [FIRST, SECOND, 0.0, 0.0]


def test_a_level_scales_the_extras_with_the_decode_level():
    m = LevelStepTime(cold_model(), prefill=1.5, decode=1.2)
    (p,) = plan_step(DECODE, m.plan)
    assert m.cold_extra(p, 0) == pytest.approx(1.2 * FIRST)
    d = m.durations(DECODE, 2) - LevelStepTime(profiled_model(), 1.5, 1.2).durations(DECODE, 2)
    np.testing.assert_allclose(d, [1.2 * FIRST, 1.2 * SECOND], rtol=1e-9)


def test_the_extras_round_trip_through_a_file_and_an_older_file_reads_them_as_zero(tmp_path):
    path = tmp_path / "cal.json"
    cold_model().to_json(path)
    back = load_step_time(path)
    assert (back.first_decode_extra, back.second_decode_extra) == (FIRST, SECOND)
    data = json.loads(path.read_text())
    del data["first_decode_extra"], data["second_decode_extra"]
    path.write_text(json.dumps(data))
    old = load_step_time(path)
    assert (old.first_decode_extra, old.second_decode_extra) == (0.0, 0.0)


@pytest.mark.parametrize("bad", [-0.001, 1e9, "1 ms", True])
def test_a_bad_extra_in_a_file_is_refused_by_name(tmp_path, bad):
    path = tmp_path / "cal.json"
    data = cold_model().as_dict()
    data["first_decode_extra"] = bad
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="first_decode_extra"):
        load_step_time(path)


def test_the_referee_prices_a_runs_first_passes_with_the_extra():
    m = cold_model()
    (p,) = plan_step(DECODE, m.plan)
    log = [(p, 0.01)] * 5
    run = SimpleNamespace(meta={"passes": log, "pass_rep": [0, 1, 2, 0, 1]})
    priced = [t for _, t, _ in priced_passes(run, m)]
    base = m.pass_time(p)
    np.testing.assert_allclose(
        priced, [base + FIRST, base + SECOND, base, base + FIRST, base + SECOND]
    )
    # a run that kept no repetitions is priced as before
    plain = [t for _, t, _ in priced_passes(SimpleNamespace(meta={"passes": log}), m)]
    np.testing.assert_allclose(plain, [base] * 5)


def _burst(level, first, second, n_steps=40, reps=5, seed=0, noise=0.03):
    """Passes of ``n_steps`` decode steps of ``reps`` repetitions each: price x level, plus the
    extras."""
    rng = np.random.default_rng(seed)
    price = profiled_model().pass_time
    out = []
    for _ in range(n_steps):
        rows = int(rng.integers(1, 16))
        w = int(rng.integers(20, 400))
        for j in range(reps):
            p = Pass(decode_rows=rows, kv_read=rows * (w + j), attn_read=rows * (w + j))
            secs = price(p) * level * (1 + noise * rng.standard_normal())
            secs += first if j == 0 else second if j == 1 else 0.0
            out.append((p, secs, j))
    return price, out


def test_the_extras_are_recovered_at_any_level_of_the_machine():
    for level in (0.8, 1.0, 1.4):
        price, passes = _burst(level, 0.002, 0.0007)
        got = decode_cold(price, passes)
        assert got["level"] == pytest.approx(level, rel=0.03)
        assert got["first"] == pytest.approx(0.002, abs=3e-4)
        assert got["second"] == pytest.approx(0.0007, abs=3e-4)
        assert got["n"] == [40, 40, 120]


def test_passes_that_lent_their_core_away_are_left_out():
    price, passes = _burst(1.0, 0.002, 0.0)
    # every fifth first pass ran 4x long: another process had the core
    spoiled = [(p, s * 4 if j == 0 and i % 25 == 0 else s, j) for i, (p, s, j) in enumerate(passes)]
    got = decode_cold(price, spoiled)
    assert got["first"] == pytest.approx(0.002, abs=3e-4)
    assert got["n"][0] < 40


def test_no_extra_is_read_from_too_few_passes_and_none_is_negative():
    price, passes = _burst(1.0, 0.002, 0.001, n_steps=MIN_PASSES - 1)
    assert decode_cold(price, passes)["first"] == 0.0  # seven first passes: not read
    price, passes = _burst(1.0, 0.0, 0.0, n_steps=40, reps=2)
    got = decode_cold(price, passes)  # no repeated pass past the second: no level
    assert got["level"] is None and got["first"] == got["second"] == 0.0
    price, passes = _burst(1.0, -0.0005, 0.0)  # first passes faster (noise): no negative extra
    assert decode_cold(price, passes)["first"] == 0.0


def test_the_engine_tags_each_pass_with_its_steps_repetition():
    from batchsim.core.arrivals import Poisson
    from batchsim.core.lengths import Uniform
    from batchsim.core.policies import make_policy
    from batchsim.core.workload import make_workload
    from realrun.clock.runner import run_real
    from realrun.engine.engine import Engine
    from realrun.engine.model import load_model

    eng = Engine(load_model("tiny-gpt2", device="cpu", dtype="fp32", threads=1))
    wl = make_workload(Poisson(50.0), Uniform(4, 12), Uniform(3, 9), n=8, seed=3)
    res = run_real(wl, make_policy("continuous", max_seqs=4), eng, trace=True)
    log, rep = res.meta["passes"], res.meta["pass_rep"]
    assert len(rep) == len(log)
    # the trace's steps, in order, give each pass's repetition: a step's passes of its first
    # repetition (its prefill and its decode) are 0, each further repetition's decode pass 1, 2, ...
    expected = []
    for _, step, _, ends in res.meta["trace"]:
        first = len(plan_step(step, eng.plan))
        expected += [0] * first + list(range(1, len(ends)))
    assert rep == expected
    assert any(j >= 2 for j in rep)  # the workload repeats steps: the test reads something
    assert [(p, s) for p, s, _ in burst_passes(res)] == [(p, s) for p, s in log if p.decode_rows]


def test_each_first_pass_is_held_to_the_warm_level_of_its_own_row_count():
    """The grid prices 1-row passes 20 % cheap and 8-row ones right; the first passes are all 1 row,
    the warm ones mostly 8: against one level for all, the grid's 1-row error would read as an
    extra."""
    price = profiled_model().pass_time
    out = []
    for i in range(60):
        one = Pass(decode_rows=1, kv_read=100 + i, attn_read=100 + i)
        eight = Pass(decode_rows=8, kv_read=800 + i, attn_read=800 + i)
        out.append((one, price(one) * 1.2 + 0.001, 0))  # a first pass: the 1-row level, plus 1 ms
        out.append((one, price(one) * 1.2, 2))
        out += [(eight, price(eight) * 1.0, 2)] * 4
    got = decode_cold(price, out)
    assert got["first"] == pytest.approx(0.001, rel=1e-6)
    assert got["level"] < 1.1  # the one level, mostly 8 rows: it would have read ~1.2 ms or more
