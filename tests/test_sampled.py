"""Sampled step times: the profile's mean kept, its spread added, seeded, and the queue feels it.

A profiled model prices each pass at its grid's mean; ``SampledStepTime`` draws each pass
from the spread measured there. The checks: the draws have the profiled mean and spread
(within stated tolerances), the same seed gives the same run, a calibration file keeps the
spread (an older one without it still loads), and a server whose steps vary waits longer
than one priced at the mean, by Pollaczek-Khinchine's 1 + CV^2.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from batchsim import MD1, MG1, Fixed, Poisson, make_policy, make_workload, simulate, summarize
from batchsim.core.errors import ConfigError
from batchsim.core.step import Chunk, Step
from batchsim.sim.profiled import Grid2D, ProfiledStepTime
from batchsim.sim.sampled import SampledStepTime, with_noise
from batchsim.sim.spread import LEVELS, SpreadGrid, StepSpread, lag1_of, ratio_quantiles
from batchsim.sim.steptime import ScaledStepTime, load_step_time

# ratios uniform on [0.1, 1.9]: mean 1, CV 0.9 / sqrt(3) = 0.52
UNIFORM = np.linspace(0.1, 1.9, LEVELS)
CV_UNIFORM = 0.9 / np.sqrt(3)


def model(z_decode=0.004, z_prefill=0.01, ratios=UNIFORM, lag1=0.0) -> ProfiledStepTime:
    """A 2 x 2 grid each way; every point's spread is ``ratios``."""
    dx, dy = np.array([1.0, 8.0]), np.array([16.0, 256.0])
    px, py = np.array([1.0, 4.0]), np.array([16.0, 512.0])
    dz = z_decode * np.array([[1.0, 1.5], [2.0, 3.0]])
    pz = z_prefill * np.array([[1.0, 4.0], [3.0, 12.0]])
    q = np.broadcast_to(np.asarray(ratios, dtype=float), (2, 2, len(ratios)))
    spread = StepSpread(
        SpreadGrid(dx, dy, q, "decode"), SpreadGrid(px, py, q, "prefill"), lag1=lag1
    )
    return ProfiledStepTime(
        Grid2D(dx, dy, dz, "decode"), Grid2D(px, py, pz, "prefill"), step_extra=1e-4, spread=spread
    )


def decode_step(rows=4, width=100, repeat=1) -> Step:
    return Step(decode=tuple(range(rows)), kv_read=rows * width, decode_width=width, repeat=repeat)


def test_draws_keep_the_profiled_mean_and_spread():
    m = model()
    s = with_noise(m, seed=3)
    step = decode_step()
    mean = m.durations(step, 1)[0]
    draws = np.array([s.durations(step, 1)[0] for _ in range(20_000)])
    # The mean: within 1 % (its standard error is 0.52 x mean / sqrt(20000) = 0.4 %).
    assert draws.mean() == pytest.approx(mean, rel=0.01)
    # The spread around the pass (step_extra is not noised): CV of the pass within 3 %.
    pass_mean = mean - 1e-4
    assert (draws - 1e-4).std() / pass_mean == pytest.approx(CV_UNIFORM, rel=0.03)
    assert m.spread.decode.cv() == pytest.approx(np.full((2, 2), CV_UNIFORM), rel=1e-9)
    # A repeated step draws one ratio per pass, around the same means the mean model prices.
    rep = decode_step(repeat=5000)
    d = s.durations(rep, 5000)
    assert d.mean() == pytest.approx(m.durations(rep, 5000).mean(), rel=0.02)
    assert d.min() > 0 and (d.std() / d.mean()) > 0.4


def test_same_seed_same_times_other_seed_other_times():
    step = decode_step(repeat=50)
    a, b, c = (with_noise(model(), seed=k) for k in (7, 7, 8))
    da, db, dc = a.durations(step, 50), b.durations(step, 50), c.durations(step, 50)
    assert np.array_equal(da, db) and not np.array_equal(da, dc)
    wl = make_workload(Poisson(20.0), Fixed(64), Fixed(16), n=80, seed=1)
    runs = [
        summarize(simulate(wl, make_policy("continuous", max_seqs=8), with_noise(model(), seed=k)))
        for k in (5, 5, 6)
    ]
    assert runs[0] == runs[1] and runs[0]["p99_e2e"] != runs[2]["p99_e2e"]
    # Mean-only is the model itself, untouched.
    assert with_noise(model(), seed=1, noise="none").__class__ is ProfiledStepTime


def test_a_noisy_queue_waits_longer_by_one_plus_cv_squared():
    """One-token answers on a taxi: every request is one prefill pass, so the server is M/G/1 with
    the pass's spread as its service-time spread. Pollaczek-Khinchine: W_q = lambda E[S^2] / (2 (1 -
    rho)), so sampled over mean-only waits 1 + CV^2 = 1.27 times longer."""
    m = model(z_prefill=0.01, ratios=UNIFORM)
    lam = 0.7 / 0.0101  # rho 0.7, service = pass + step_extra
    wl = make_workload(Poisson(lam), Fixed(16), Fixed(1), n=20_000, seed=11)
    pol = make_policy("taxi")
    mean_only = summarize(simulate(wl, pol, m))["mean_queue_wait"]
    sampled = summarize(simulate(wl, make_policy("taxi"), with_noise(m, seed=2)))["mean_queue_wait"]
    s, ps = 0.0101, 0.01
    md1 = MD1(lam, s).mean_wait
    mg1 = MG1(lam, s, (s - ps) ** 2 + 2 * (s - ps) * ps + ps * ps * (1 + CV_UNIFORM**2)).mean_wait
    assert mean_only == pytest.approx(md1, rel=0.08)
    assert sampled == pytest.approx(mg1, rel=0.08)
    assert sampled / mean_only == pytest.approx(mg1 / md1, rel=0.08) and sampled > 1.15 * mean_only


def test_correlated_passes_share_their_luck():
    """lag1 0.8: consecutive passes' ratios correlate (the copula keeps each pass's distribution),
    and a step of many passes varies far more than with independent passes."""
    step = decode_step(repeat=20_000)
    ind = with_noise(model(lag1=0.0), seed=1).durations(step, 20_000)
    cor = with_noise(model(lag1=0.8), seed=1).durations(step, 20_000)
    base = model().durations(step, 20_000)
    r_ind, r_cor = ind / base, cor / base
    assert np.corrcoef(r_cor[:-1], r_cor[1:])[0, 1] == pytest.approx(0.8, abs=0.05)
    assert abs(np.corrcoef(r_ind[:-1], r_ind[1:])[0, 1]) < 0.03
    assert r_cor.mean() == pytest.approx(1.0, abs=0.03) and r_cor.std() == pytest.approx(
        r_ind.std(), rel=0.05
    )
    # Sums of 50 passes' deviations: sqrt((1 + rho) / (1 - rho)) = 3 times wider when correlated.
    sums_ind = (ind - base).reshape(-1, 50).sum(1)
    sums_cor = (cor - base).reshape(-1, 50).sum(1)
    assert sums_cor.std() > 2 * sums_ind.std()


def test_spread_from_timings():
    rng = np.random.default_rng(0)
    t = 0.002 * rng.gamma(25, 1 / 25, 400)  # CV 0.2
    q = np.array(ratio_quantiles(np.append(t, 1.0)))  # one pass that lost the core: left out
    assert len(q) == LEVELS and np.all(np.diff(q) >= 0) and q[-1] < 2
    g = SpreadGrid([1.0], [1.0], q[None, None, :])
    assert g.cv()[0, 0] == pytest.approx(0.2, rel=0.15)
    # slow drifts: correlated
    runs = [0.002 * (1 + 0.1 * np.sin(np.arange(16) / 3)) for _ in range(8)]
    assert lag1_of(runs) > 0.8
    assert lag1_of([rng.normal(1, 0.1, 16) for _ in range(50)]) < 0.2


def test_calibration_file_keeps_the_spread_and_old_files_still_load(tmp_path):
    m = model(lag1=0.3)
    path = tmp_path / "cal.json"
    m.to_json(path)
    back = load_step_time(path)
    assert back.spread is not None and back.spread.lag1 == pytest.approx(0.3)
    assert np.allclose(back.spread.decode.q, m.spread.decode.q, atol=1e-5)
    # Sampling through a speed scaling (realrun's speed check): same spread, means scaled.
    scaled = with_noise(ScaledStepTime(back, 2.0), seed=1)
    assert isinstance(scaled, SampledStepTime)
    d = np.array([scaled.durations(decode_step(), 1)[0] for _ in range(4000)])
    assert d.mean() == pytest.approx(2.0 * m.durations(decode_step(), 1)[0], rel=0.02)
    data = json.loads(path.read_text())
    del data["spread"]
    path.write_text(json.dumps(data))
    old = load_step_time(path)
    assert old.spread is None
    with pytest.raises(ConfigError, match="step-noise profiled needs a calibration that kept"):
        with_noise(old, seed=1)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"decode": [[[1.0, 0.5]] * 2] * 2}, r"quantiles \[0\]\[0\] must not decrease"),
        ({"decode": [[[1.0, "x"]] * 2] * 2}, "quantiles must be numbers"),
        ({"decode": [[[0.0, 1.0]] * 2] * 2}, r"quantile \[0\]\[0\]\[0\] must be a ratio"),
        ({"decode": [[[1.0, 1.0]] * 2]}, "must be a 2 x 2 table"),
        ({"lag1": 1.5}, "lag1 must be a correlation"),
        ({"prefill": None}, "spread needs prefill quantiles"),
    ],
)
def test_bad_spreads_are_one_line_naming_the_file(tmp_path, change, words):
    data = model().as_dict()
    data["spread"] = {**data["spread"], **change}
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=words) as e:
        load_step_time(path)
    assert "cal.json" in str(e.value) and "\n" not in str(e.value)


def test_prefill_and_grouped_steps_are_sampled_per_pass():
    m = model()
    step = Step(
        prefill=(Chunk(9, 0, 100, True), Chunk(10, 0, 30, True)),
        decode=(1, 2),
        kv_read=200,
        decode_width=100,
    )
    s = with_noise(m, seed=4)
    d = np.array([s.durations(step, 1)[0] for _ in range(8000)])
    assert d.mean() == pytest.approx(m.durations(step, 1)[0], rel=0.02)
    assert d.std() > 0.1 * d.mean()
