"""The machine's level: prefill and decode priced apart, read by canaries, and a prediction moved
there.

The measured side is a stand-in (the simulator on a machine whose prefill runs 1.3x its profiled
price and whose decode runs at it, as measured here while a neighbour used the other core): what
is checked is that a canary reading that machine moves the prediction onto it, that a reading
within its own error moves nothing, and the bookkeeping of levels and their uncertainty.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_sampled import model as _model  # noqa: E402

from batchsim import Poisson, Uniform, make_policy, make_workload, simulate  # noqa: E402
from batchsim.core.errors import ConfigError  # noqa: E402
from batchsim.core.step import Chunk, Step  # noqa: E402
from batchsim.sim.level import LevelStepTime  # noqa: E402
from batchsim.sim.sampled import spread_of, with_noise  # noqa: E402
from batchsim.sim.spread import LEVELS  # noqa: E402
from realrun.judge.compare import compare_policies  # noqa: E402
from realrun.timing.canary import CanaryReading, session_level  # noqa: E402

WL = make_workload(Poisson(12.0), Uniform(200, 400), Uniform(4, 12), n=80, seed=5)


def model():
    return _model(ratios=np.linspace(0.9, 1.1, LEVELS))


def test_prefill_and_decode_are_priced_apart():
    m = model()
    lv = LevelStepTime(m, 1.3, 0.9)
    pre = Step(prefill=(Chunk(0, 0, 100, True),))
    dec = Step(decode=(0, 1), kv_read=200, decode_width=100, repeat=5)
    both = Step(prefill=(Chunk(2, 0, 50, True),), decode=(0, 1), kv_read=200, decode_width=100)
    from batchsim.core.plan import plan_step

    p_pass = sum(m.pass_time(p) for p in plan_step(both, m.plan) if p.prefill_rows)
    assert lv.durations(dec, 5) == pytest.approx(0.9 * m.durations(dec, 5))
    assert lv.durations(both, 1)[0] == pytest.approx(0.9 * m.durations(both, 1)[0] + 0.4 * p_pass)
    # A prefill-only step: its pass at 1.3x, the work around it (step_extra) with the machine
    # (0.9x).
    assert lv.durations(pre, 1)[0] == pytest.approx(
        1.3 * (m.durations(pre, 1)[0] - m.step_extra) + 0.9 * m.step_extra
    )
    assert lv.for_policy("taxi").prefill == 1.3 and spread_of(lv) is m.spread
    with pytest.raises(ConfigError, match="level prefill"):
        LevelStepTime(m, 0.0, 1.0)
    with pytest.raises(ConfigError, match="level decode"):
        LevelStepTime(m, 1.0, float("nan"))


def _readings(
    prefill: float, decode: float, jitter: float, n: int = 8, seed: int = 0
) -> list[CanaryReading]:
    rng = np.random.default_rng(seed)
    return [
        CanaryReading(
            prefill * (1 + jitter * rng.standard_normal()),
            decode * (1 + jitter * rng.standard_normal()),
            0.1,
        )
        for _ in range(n)
    ]


def _pairs(readings):
    return list(zip(readings[::2], readings[1::2]))


def test_the_session_level_is_the_median_and_moves_only_beyond_its_error():
    lv = session_level(_pairs(_readings(1.3, 1.0, 0.05)))
    assert lv.readings == 8 and lv.prefill == pytest.approx(1.3, abs=0.06)
    p, d = lv.applied()
    # the decode reading is within its error (and the canary's accuracy) of 1
    assert p == lv.prefill and d == 1.0
    assert lv.prefill_se == pytest.approx(
        1.2533 * np.std([r.prefill for r in _readings(1.3, 1.0, 0.05)], ddof=1) / math.sqrt(8)
    )
    # tight, but within the canary's accuracy
    steady = session_level(_pairs(_readings(1.15, 0.88, 0.005)))
    assert steady.applied() == (1.0, 1.0) and "not moved" in steady.text()
    one = session_level(_pairs(_readings(1.5, 1.5, 0.0, n=2)))
    # too few runs to tell
    assert one.prefill_run_sd == 0.0 and one.model(model(), np.random.default_rng(0)) is not None
    assert session_level([]) is None
    # Drawn levels scatter around the applied one by its standard error: one seed's share of the
    # band.
    draws = [lv.model(model(), np.random.default_rng(k)).prefill for k in range(400)]
    sd = math.hypot(lv.prefill_se, lv.prefill_run_sd) * p
    assert np.mean(draws) == pytest.approx(p, abs=3 * sd / 20) and np.std(draws) == pytest.approx(
        sd, rel=0.2
    )


def test_the_run_to_run_spread_is_told_apart_from_the_canary_s_own_noise():
    rng = np.random.default_rng(3)
    runs = []
    # each run its own level, 8 % apart; the canary's noise 5 %
    for level in 1.0 + 0.08 * rng.standard_normal(40):
        runs.append(
            tuple(
                CanaryReading(
                    level * (1 + 0.05 * rng.standard_normal()),
                    1 + 0.05 * rng.standard_normal(),
                    0.1,
                )
                for _ in range(2)
            )
        )
    lv = session_level(runs)
    assert lv.prefill_run_sd == pytest.approx(0.08, abs=0.03)
    assert lv.decode_run_sd < 0.03  # noise alone: no run-to-run spread
    assert lv.as_dict()["run_sd"][0] == pytest.approx(lv.prefill_run_sd, abs=1e-4)
    with pytest.raises(ConfigError, match="canary prefill"):
        CanaryReading(-1.0, 1.0, 0.1)


def _compare(canary, level=True):
    pairs = [(n, make_policy(n), make_policy(n)) for n in ("taxi", "static")]
    machine = LevelStepTime(model(), 1.3, 1.0)
    count = {"k": 0}

    def measure(label, policy):
        count["k"] += 1
        return simulate(WL, policy, with_noise(machine, 100 + count["k"], "passes"))

    return compare_policies(
        WL, pairs, measure, model(), seeds=3, repeats=2, canary=canary, noise="passes", level=level
    )


def test_a_canary_that_reads_the_machine_moves_the_prediction_onto_it():
    readings = iter(_readings(1.3, 1.0, 0.03, n=8, seed=1))
    report = _compare(lambda: next(readings))
    assert report.level is not None and report.level.applied()[0] == pytest.approx(1.3, abs=0.05)
    assert any("machine level over the runs (8 canaries)" in n for n in report.notes)
    for row in report.rows:
        # At the profile's level prefill is priced 1.3x too cheap, and TTFT (a prefill, mostly)
        # misses; at the canaries' level it agrees.
        assert row.errors_at_profile["p50_ttft"] < -15
        assert abs(row.errors["p50_ttft"]) < 8 and row.verdicts["p50_ttft"] == "agrees"
        assert abs(row.errors["p50_e2e"]) < abs(row.errors_at_profile["p50_e2e"])
        d = row.as_dict()
        assert (
            len(d["canary"]) == 2
            and d["canary"][0][0]["prefill"] > 1
            and d["canary_s"][0] == [0.1, 0.1]
        )
        assert "error_pct_at_profile" in d


def test_the_profile_s_canary_travels_in_the_calibration_and_is_checked(tmp_path):
    import dataclasses
    import json

    from batchsim.sim.steptime import load_step_time

    m = dataclasses.replace(model(), extra={"canary": {"prefill": 1.1, "decode": 1.05}})
    m.to_json(tmp_path / "cal.json")
    assert load_step_time(tmp_path / "cal.json").extra["canary"] == {"prefill": 1.1, "decode": 1.05}
    data = json.loads((tmp_path / "cal.json").read_text())
    data["canary"] = {"prefill": -1, "decode": 1.0}
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="canary must hold prefill and decode"):
        load_step_time(tmp_path / "bad.json")


def test_without_the_level_the_canary_is_only_kept():
    readings = iter(_readings(1.3, 1.0, 0.03, n=8, seed=1))
    report = _compare(lambda: next(readings), level=False)
    assert report.level is None
    for row in report.rows:
        assert row.predicted_at_profile is None and row.errors["p50_ttft"] < -15


def test_a_canary_that_reads_nothing_leaves_the_run_without_one():
    # vLLM's canary returns None when vLLM scheduled its shapes otherwise: that run has no reading,
    # the others still set the level, and the reference falls back to the price alone.
    from realrun.timing.canary import Canary

    class Empty(Canary):
        def __init__(self) -> None:
            self.reference = (1.0, 1.0)

        def raw(self):
            return None

    empty = Empty()
    assert empty() is None and empty.take_reference() is None
    readings = iter([None, None] + _readings(1.3, 1.0, 0.03, n=6, seed=2))
    report = _compare(lambda: next(readings))
    assert report.level is not None and report.level.readings == 6
    assert any("machine level over the runs (6 canaries)" in n for n in report.notes)
    row = next(r for r in report.rows if r.as_dict()["canary"][0] == [None, None])
    assert row.as_dict()["canary_s"][0] == [None, None]
