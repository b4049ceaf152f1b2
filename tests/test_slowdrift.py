"""The machine's slow drift: fitted from a probe, sampled with its mean kept, felt by the queue.

Synthetic probes of a known drift (an Ornstein-Uhlenbeck log speed plus independent pass noise)
check the fit; the sampled model is checked for its mean, its correlation over many passes
(which the passes' own spread lacks), its determinism, and the queue's direction: a machine
whose speed wanders makes requests wait longer than one whose passes only jitter.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_sampled import model as _model  # noqa: E402

from batchsim import Fixed, Poisson, make_policy, make_workload, simulate, summarize  # noqa: E402
from batchsim.core.errors import ConfigError  # noqa: E402
from batchsim.core.step import Step  # noqa: E402
from batchsim.sim.profiled import ProfiledStepTime  # noqa: E402
from batchsim.sim.sampled import with_noise  # noqa: E402
from batchsim.sim.slowdrift import SlowDrift, fit_slow_drift  # noqa: E402
from batchsim.sim.spread import (
    LEVELS,  # noqa: E402
    StepSpread,  # noqa: E402
)


def model() -> ProfiledStepTime:
    """test_sampled's grid with a narrow spread of each pass (CV 6 %), so a drift stands out of
    it."""
    return _model(ratios=np.linspace(0.9, 1.1, LEVELS))


PASS_S = 0.017


def _probe(sd: float, tau: float, n: int, fast: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = math.exp(-PASS_S / tau)
    s = np.empty(n)
    s[0] = rng.standard_normal()
    for i in range(1, n):
        s[i] = a * s[i - 1] + math.sqrt(1 - a * a) * rng.standard_normal()
    return PASS_S * np.exp(sd * s + fast * rng.standard_normal(n))


def _with_slow(sd: float, tau: float, base: ProfiledStepTime | None = None) -> ProfiledStepTime:
    m = base or model()
    sp = m.spread
    return dataclasses.replace(
        m, spread=StepSpread(sp.decode, sp.prefill, sp.lag1, SlowDrift(sd, tau))
    )


@pytest.mark.parametrize("sd, tau", [(0.15, 0.3), (0.25, 1.0)])
def test_the_fit_recovers_a_known_drift(sd, tau):
    fits = [fit_slow_drift(_probe(sd, tau, 2000, 0.08, seed)) for seed in range(6)]
    assert all(f is not None for f in fits)
    sds = np.median([f.sd for f in fits])
    taus = np.median([f.tau_s for f in fits])
    # A probe of 2,000 passes (34 s): the drift's size within 30 %, its time constant within a
    # factor 2.5.
    assert sds == pytest.approx(sd, rel=0.30)
    assert tau / 2.5 <= taus <= tau * 2.5


def test_independent_noise_shows_no_drift_and_a_short_probe_tells_nothing():
    rng = np.random.default_rng(0)
    assert fit_slow_drift(PASS_S * np.exp(0.1 * rng.standard_normal(1000))) is None
    assert fit_slow_drift(_probe(0.2, 0.5, 30, 0.05, 1)) is None


@pytest.mark.parametrize(
    "kw, words",
    [
        ({"sd": -0.1, "tau_s": 1.0}, "slow drift sd"),
        ({"sd": 0.1, "tau_s": 0.0}, "slow drift tau_s"),
        ({"sd": "big", "tau_s": 1.0}, "slow drift sd"),
        ({"sd": 0.1, "tau_s": float("nan")}, "slow drift tau_s"),
    ],
)
def test_a_bad_drift_names_its_field(kw, words):
    with pytest.raises(ConfigError, match=words):
        SlowDrift(**kw)


def test_the_drift_travels_in_the_calibration_json(tmp_path):
    m = _with_slow(0.2, 0.4)
    m.to_json(tmp_path / "cal.json")
    from batchsim.sim.steptime import load_step_time

    back = load_step_time(tmp_path / "cal.json")
    assert back.spread.slow == SlowDrift(0.2, 0.4)
    assert model().spread.slow is None and "slow" not in model().spread.as_dict()


def test_sampling_keeps_the_mean_and_adds_correlation_over_many_passes():
    step = Step(decode=(0,), kv_read=64, decode_width=64, repeat=1)
    mean = float(model().durations(step, 1)[0])

    def series(m, noise, seed=3):
        s = with_noise(m, seed, noise)
        return np.array([float(s.durations(step, 1)[0]) for _ in range(6000)])

    slow = series(_with_slow(0.2, 0.1), "profiled")
    passes = series(_with_slow(0.2, 0.1), "passes")
    assert slow.mean() == pytest.approx(mean, rel=0.05) and passes.mean() == pytest.approx(
        mean, rel=0.03
    )

    def lag(x, k):
        x = np.log(x) - np.log(x).mean()
        return float(np.mean(x[:-k] * x[k:]) / x.var())

    assert lag(slow, 10) > 0.3 and abs(lag(passes, 10)) < 0.1  # "passes" leaves the drift out
    assert np.array_equal(slow, series(_with_slow(0.2, 0.1), "profiled"))  # same seed, same times
    assert not np.array_equal(slow, series(_with_slow(0.2, 0.1), "profiled", seed=4))
    # A repeated step prices its passes along the same drift, a pass at a time.
    rep = with_noise(_with_slow(0.2, 0.5), 5).durations(
        Step(decode=(0,), kv_read=64, decode_width=64, repeat=4000), 4000
    )
    assert lag(rep, 10) > 0.3


def test_a_wandering_machine_makes_requests_wait_longer():
    wl = make_workload(Poisson(18.0), Fixed(16), Fixed(8), n=3000, seed=2)
    base = _with_slow(0.3, 1.0)
    waits = {}
    for noise in ("passes", "profiled"):
        runs = [
            summarize(simulate(wl, make_policy("taxi"), with_noise(base, k, noise)))
            for k in range(3)
        ]
        waits[noise] = float(np.median([r["mean_ttft"] for r in runs]))
        busy = float(np.median([r["busy_fraction"] for r in runs]))
        assert 0.5 < busy < 0.95  # a loaded server, where the queue shows the noise
    assert waits["profiled"] > 1.3 * waits["passes"]
