"""Workloads: each distribution delivers the mean it states, arrivals the rate they state.

Statistical checks use large samples and a tolerance of 4-5 standard errors computed
from the sample itself, with a fixed seed: a wrong formula (a mean off by a rounding
rule, a rate off by a phase) shows up as tens of standard errors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from batchsim import ConfigError, Fixed, Gamma, LogNormal, Poisson, Uniform, Workload, make_workload
from batchsim.core.arrivals import Constant, RushHour, parse_arrival
from batchsim.core.lengths import Empirical, parse_length

N = 200_000


def rng(seed=0):
    return np.random.default_rng(seed)


def assert_mean(sample, mean, k=4.0):
    se = float(np.std(sample, ddof=1)) / math.sqrt(len(sample))
    assert abs(float(np.mean(sample)) - mean) <= k * se + 1e-12, (float(np.mean(sample)), mean, se)


# -- lengths -------------------------------------------------------------------------------


def test_fixed():
    x = Fixed(7).sample(rng(), 100)
    assert x.dtype == np.int64 and (x == 7).all() and Fixed(7).mean == 7


def test_uniform_mean_and_support():
    d = Uniform(5, 500)
    x = d.sample(rng(), N)
    assert x.min() == 5 and x.max() == 500  # both ends included
    assert d.mean == 252.5
    assert_mean(x, d.mean)


@pytest.mark.parametrize("mean, median", [(300.0, 150.0), (128.0, 96.0)])
def test_lognormal_mean_and_median(mean, median):
    d = LogNormal(mean, median)
    x = d.sample(rng(1), N)
    assert x.min() >= 1 and x.dtype == np.int64
    assert_mean(x, d.mean, k=5.0)
    assert np.median(x) == pytest.approx(median, rel=0.02)


def test_empirical_resamples_the_values():
    values = (3, 3, 10, 50, 400)
    d = Empirical(values)
    x = d.sample(rng(2), N)
    assert set(np.unique(x)) == set(values)
    assert_mean(x, d.mean)
    assert d.mean == pytest.approx(np.mean(values))


def test_parse_length():
    assert parse_length("128") == Fixed(128)
    assert parse_length(64) == Fixed(64)
    assert parse_length("uniform:5,500") == Uniform(5, 500)
    assert parse_length("lognormal:128,96") == LogNormal(128.0, 96.0)


@pytest.mark.parametrize(
    "spec", ["uniform:5", "uniform:9,3", "lognormal:10,20", "0", "-3", "abc", "normal:1,2", ""]
)
def test_parse_length_rejects(spec):
    with pytest.raises(ConfigError, match="prompt-len"):
        parse_length(spec, "prompt-len")


# -- arrivals ------------------------------------------------------------------------------


def test_poisson_rate_and_memorylessness():
    t = Poisson(4.0).times(rng(3), n=N)
    gaps = np.diff(t, prepend=0.0)
    assert (gaps >= 0).all()
    assert_mean(gaps, 0.25)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, abs=0.01)  # exponential: CV = 1
    # Counts in unit windows: Poisson, so variance = mean (index of dispersion 1).
    counts = np.bincount(t.astype(int))[:-1]
    assert counts.var() / counts.mean() == pytest.approx(1.0, abs=0.04)


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_rate_and_burstiness(cv):
    gaps = np.diff(Gamma(4.0, cv).times(rng(4), n=N), prepend=0.0)
    assert_mean(gaps, 0.25, k=5.0)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(cv, rel=0.03)


def test_constant_is_a_timetable():
    t = Constant(8.0).times(rng(), n=1000)
    np.testing.assert_allclose(np.diff(t), 0.125, rtol=1e-9)
    assert Constant(8.0).mean_rate == 8.0


def test_rush_hour_rates_per_phase():
    phases = ((20.0, 2.0), (10.0, 12.0), (30.0, 1.0))
    d = RushHour(phases)
    assert d.period == 60.0
    assert d.mean_rate == pytest.approx((40 + 120 + 30) / 60)
    assert [d.rate_at(t) for t in (0, 19.9, 20, 29.9, 30, 59.9, 60, 85)] == [
        2,
        2,
        12,
        12,
        1,
        1,
        2,
        12,
    ]
    periods = 2000
    t = d.times(rng(5), duration=periods * d.period)
    phase_time = t % d.period
    bounds = [(0, 20), (20, 30), (30, 60)]
    for (lo, hi), (dur, rate) in zip(bounds, phases):
        count = np.count_nonzero((phase_time >= lo) & (phase_time < hi))
        expected = periods * dur * rate
        assert abs(count - expected) <= 4 * math.sqrt(expected), (lo, hi, count, expected)
        # Within a phase arrivals are uniform (Poisson): the two halves get equal shares.
        half = np.count_nonzero((phase_time >= lo) & (phase_time < (lo + hi) / 2))
        assert abs(half - count / 2) <= 4 * math.sqrt(count / 4)


@pytest.mark.parametrize(
    "process", [Poisson(5.0), Gamma(5.0, 2.0), RushHour(((5.0, 1.0), (5.0, 9.0)))]
)
def test_duration_is_a_prefix_of_n(process):
    """The arrivals within a duration are the first arrivals of the same seed's n-request run."""
    D = 400.0
    by_duration = process.times(rng(6), duration=D)
    by_n = process.times(rng(6), n=len(by_duration) + 50)
    assert (by_duration < D).all() and by_n[len(by_duration)] >= D
    np.testing.assert_allclose(by_duration, by_n[: len(by_duration)], rtol=1e-12)
    expected = process.mean_rate * D
    # A renewal process with gap CV c has count variance ~ c^2 * mean (RushHour: Poisson).
    c2 = getattr(process, "cv", 1.0) ** 2
    assert abs(len(by_duration) - expected) <= 5 * math.sqrt(c2 * expected)


def test_extent_must_be_exactly_one():
    with pytest.raises(ConfigError):
        Poisson(1.0).times(rng(), n=10, duration=5.0)
    with pytest.raises(ConfigError):
        Poisson(1.0).times(rng())
    with pytest.raises(ConfigError, match="requests"):
        Poisson(1.0).times(rng(), n=0)
    with pytest.raises(ConfigError, match="duration"):
        Poisson(1.0).times(rng(), duration=-1.0)


def test_parse_arrival():
    assert parse_arrival("poisson", 3.0) == Poisson(3.0)
    assert parse_arrival("gamma:2.5", 3.0) == Gamma(3.0, 2.5)
    assert parse_arrival("constant", 3.0) == Constant(3.0)
    assert parse_arrival("rush-hour", 4.0).mean_rate == pytest.approx(4.0)
    assert parse_arrival("rush-hour:10@1,5@8", 1.0) == RushHour(((10.0, 1.0), (5.0, 8.0)))
    for bad in ("weibull", "gamma:x", "rush-hour:10", "rush-hour:10@-1"):
        with pytest.raises(ConfigError):
            parse_arrival(bad, 3.0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Poisson(0.0),
        lambda: Poisson(-1.0),
        lambda: Gamma(1.0, 0.0),
        lambda: Constant(float("inf")),
        lambda: RushHour(()),
        lambda: Fixed(0),
        lambda: Uniform(3, 2),
        lambda: Empirical(()),
    ],
)
def test_bad_parameters(make):
    with pytest.raises(ConfigError):
        make()


# -- workloads -----------------------------------------------------------------------------


def test_make_workload_by_count_and_by_duration():
    wl = make_workload(Poisson(10.0), Uniform(8, 64), Fixed(5), n=500, seed=9)
    assert len(wl) == 500 and [r.id for r in wl.requests] == list(range(500))
    assert (np.diff(wl.arrivals) >= 0).all()
    assert ((wl.prompt_tokens >= 8) & (wl.prompt_tokens <= 64)).all() and (
        wl.output_tokens == 5
    ).all()
    wd = make_workload(Poisson(10.0), Uniform(8, 64), Fixed(5), duration=30.0, seed=9)
    assert (wd.arrivals < 30.0).all()
    assert abs(len(wd) - 300) <= 4 * math.sqrt(300)
    # Same seed: the duration run is the count run cut at 30 s, lengths included.
    k = len(wd)
    np.testing.assert_allclose(wd.arrivals, wl.arrivals[:k], rtol=1e-12)
    np.testing.assert_array_equal(wd.prompt_tokens, wl.prompt_tokens[:k])


def test_workload_validates_itself():
    with pytest.raises(ConfigError, match="sorted"):
        Workload.from_arrays([1.0, 0.5], [1, 1], [1, 1])
    wl = Workload.from_arrays([0.0, 0.5], [1, 2], [3, 4])
    with pytest.raises(ConfigError, match="ids"):
        Workload((wl.requests[1], wl.requests[0]))


# -- the workload's configuration: one place for every rule ----------------------------------------


def test_workload_config_precedence_and_numpy_values():
    from batchsim.core.config import WorkloadConfig

    c = WorkloadConfig.from_flags(
        {"rate": np.float64(3.0)}, {"rate": 9.0, "requests": 50, "seed": 4}
    )
    assert (c.rate, c.requests, c.seed) == (3.0, 50, 4)  # flag > scenario > package
    c = WorkloadConfig.from_flags({"duration": 10.0}, {"requests": 50})
    # a flag's extent replaces the scenario's other kind
    assert (c.requests, c.duration) == (
        None,
        10.0,
    )
    wl = WorkloadConfig(rate=np.float64(2.0), requests=np.int64(7), seed=np.int64(1)).build()
    assert len(wl) == 7


@pytest.mark.parametrize(
    "flags, words",
    [
        ({"requests": 5, "duration": 2.0}, "--requests and --duration"),
        ({"trace": "t.csv", "rate": 3.0}, "--rate means nothing with a trace"),
        ({"arrival": "trace:t.csv", "prompt_len": "10"}, "--prompt-len means nothing with a trace"),
        ({"speedup": 2.0}, "--speedup replays a trace"),
        ({"step_time": 0.1, "calibration": "c.json"}, "two step-time models"),
        ({"kv_budget_tokens": 10, "kv_budget_bytes": "1GB"}, "two KV budgets"),
        ({"compute_eff": 0.5, "step_time": 0.1}, "--compute-eff and --step-time"),
    ],
)
def test_conflicting_flags_are_refused_naming_both(flags, words):
    from batchsim.core.flags import check_conflicts

    with pytest.raises(ConfigError, match=words):
        check_conflicts(flags)


def test_seed_and_extent_checks_of_make_workload():
    for bad in (-1, 1.5, "1", True):
        with pytest.raises(ConfigError, match="seed"):
            make_workload(Poisson(1.0), Fixed(1), Fixed(1), n=3, seed=bad)
    wl = make_workload(
        Poisson(np.int64(2)), Fixed(np.int64(3)), Fixed(1), n=np.int64(4), seed=np.int64(0)
    )
    assert len(wl) == 4 and set(wl.prompt_tokens) == {3}
