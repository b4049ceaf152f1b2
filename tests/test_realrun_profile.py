"""Profiling and the fit: known coefficients come back, and a calibration file round-trips into batchsim."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from batchsim.cli import main as batchsim_main  # noqa: E402
from batchsim.sim.steptime import LinearStepTime  # noqa: E402
from realrun.engine import Engine  # noqa: E402
from realrun.model import load_model  # noqa: E402
from realrun.profile import Grid, ProfilePoint, fit_linear, grid_for_workload, profile  # noqa: E402

TINY = Grid(decode=((1, 8), (4, 8), (8, 32)), prefill=((1, 8), (2, 16), (4, 32)), mixed=((2, 16, 8),), repeats=2)


def _points(c, shapes, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for p, d, kv in shapes:
        t = c[0] + c[1] * p + c[2] * d + c[3] * kv
        out.append(ProfilePoint("x", p, d, kv, t * (1 + noise * rng.standard_normal()), 0.0))
    return out


SHAPES = [(p, d, kv) for p in (0, 64, 512) for d in (1, 8, 64) for kv in (0, 1000, 20000)]


def test_fit_recovers_known_coefficients():
    c = (0.003, 2e-5, 1e-4, 5e-8)
    m = fit_linear(_points(c, SHAPES))
    assert np.allclose([m.c0, m.c1, m.c2, m.c3], c, rtol=1e-6)


def test_fit_is_non_negative_and_close_under_noise():
    c = (0.003, 2e-5, 0.0, 5e-8)  # a coefficient that is truly zero must not come back negative
    m = fit_linear(_points(c, SHAPES, noise=0.05, seed=1))
    assert min(m.c0, m.c1, m.c2, m.c3) >= 0 and m.c0 > 0
    assert m.c0 == pytest.approx(c[0], rel=0.15) and m.c1 == pytest.approx(c[1], rel=0.15)
    assert m.c2 < 2e-5


def test_grid_for_workload_covers_the_workload():
    from batchsim import Poisson, Uniform, make_workload

    wl = make_workload(Poisson(5.0), Uniform(10, 200), Uniform(5, 100), n=50, seed=0)
    g = grid_for_workload(wl, max_rows=16, max_prefill=512)
    assert max(b for b, _ in g.decode) == 16
    assert max(c for _, c in g.decode) >= int((wl.prompt_tokens + wl.output_tokens).max())
    assert max(n for _, n in g.prefill) == int(wl.prompt_tokens.max())


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    lm = load_model("tiny-gpt2", device="cpu", threads=1)
    prof = profile(Engine(lm), TINY)
    path = prof.write(tmp_path_factory.mktemp("cal") / "calibration.json")
    return prof, path


def test_profile_measures_every_point_and_reports_heldout_error(calibration):
    prof, path = calibration
    kinds = [q.kind for q in prof.points]
    assert kinds.count("decode") == 3 and kinds.count("prefill") == 3 and kinds.count("mixed") == 1
    assert all(q.seconds > 0 for q in prof.points)
    # more rows cost more than one row (not a sure thing per point on a busy CPU, so on the big gap)
    dec = {q.decode_rows: q.seconds for q in prof.points if q.kind == "decode"}
    assert dec[8] > 0.5 * dec[1]
    assert np.isfinite(prof.heldout_mean_pct) and prof.heldout_max_pct >= prof.heldout_mean_pct
    data = json.loads(path.read_text())
    assert data["model"] == "linear" and data["model_name"] == "tiny-gpt2" and len(data["points"]) == 7
    assert "heldout_mean_abs_error_pct" in data and data["random_weights"] is True


def test_calibration_round_trips_into_batchsim(calibration, capsys):
    prof, path = calibration
    loaded = LinearStepTime.from_json(path)
    assert (loaded.c0, loaded.c1, loaded.c2, loaded.c3) == (prof.model.c0, prof.model.c1, prof.model.c2, prof.model.c3)
    code = batchsim_main(["run", "--calibration", str(path), "--requests", "30", "--policy", "continuous", "--json", "--no-plots"])
    out = capsys.readouterr().out
    assert code == 0
    obj = json.loads(out)
    assert f"c0={prof.model.c0!r}" in obj["config"]["step_time"]
    assert obj["summary"]["completed"] == 30
