"""Profiling the real engine: every grid shape timed, a model that prices what was timed, a file
batchsim reads."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from batchsim import Poisson, Uniform, make_workload  # noqa: E402
from batchsim.cli import main as batchsim_main  # noqa: E402
from batchsim.sim.profiled import ProfiledStepTime  # noqa: E402
from batchsim.sim.steptime import load_step_time  # noqa: E402
from realrun.engine.engine import Engine  # noqa: E402
from realrun.engine.model import load_model  # noqa: E402
from realrun.timing.grid import Grid, doubling, grid_for_workload  # noqa: E402
from realrun.timing.profile import (  # noqa: E402
    HELDOUT_WARN_PCT,
    ProfilePoint,
    fit_linear,
    pass_errors,
    point_pass,
    profile,
)

TINY = Grid(
    decode_rows=(1, 4, 8),
    decode_widths=(8, 32),
    prefill_rows=(1, 2, 4),
    prefill_lengths=(8, 16, 32),
    max_prefill_tokens=64,
    past=((16, 16),),
    join=((2, 16, 8),),
    policies=("taxi", "continuous"),
    repeats=2,
    rounds=1,
    validation=4,
    wake_idle=(0.001, 0.01),
)


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


def test_doubling_spans_both_ends():
    assert doubling(1, 64) == (1, 2, 4, 8, 16, 32, 64)
    d = doubling(1, 50)
    assert d[0] == 1 and d[-1] == 50 and all(1.3 < b / a <= 2 for a, b in zip(d, d[1:]))
    assert doubling(7, 7) == (7,)


def test_grid_for_workload_covers_the_workload():
    wl = make_workload(Poisson(5.0), Uniform(10, 200), Uniform(5, 100), n=50, seed=0)
    g = grid_for_workload(wl, max_rows=16, max_prefill=512)
    assert g.decode_rows[-1] == 16 and g.prefill_rows[-1] == 16
    assert g.decode_widths[-1] >= int((wl.prompt_tokens + wl.output_tokens).max())
    assert g.prefill_lengths[-1] == int(wl.prompt_tokens.max()) and g.past == ()
    chunked = grid_for_workload(wl, max_rows=16, max_prefill=64, chunk=64)
    assert (
        chunked.prefill_lengths[-1] == 64 and chunked.past and all(q == 64 for q, _ in chunked.past)
    )
    # A chunking policy beside one that prefills whole prompts: chunks over their past, and whole
    # prompts too.
    both = grid_for_workload(wl, max_rows=16, max_prefill=512, chunk=64, whole_prompts=True)
    assert both.prefill_lengths[-1] == int(wl.prompt_tokens.max()) and both.past == chunked.past


def test_grid_for_policies_gives_unchunked_policies_their_whole_prompts():
    from batchsim import make_policy
    from realrun.cli.calibration import grid_for_policies

    wl = make_workload(Poisson(5.0), Uniform(300, 900), Uniform(5, 50), n=50, seed=0)
    chunky = make_policy("continuous", max_batched_tokens=256, chunked_prefill=True)
    alone = grid_for_policies(wl, [chunky])
    assert alone.prefill_lengths[-1] == 256 and alone.past
    for other in (
        make_policy("taxi"),
        make_policy("continuous", max_batched_tokens=1024, chunked_prefill=False),
    ):
        g = grid_for_policies(wl, [chunky, other])
        assert g.prefill_lengths[-1] == int(wl.prompt_tokens.max()) and g.past == alone.past


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    lm = load_model("tiny-gpt2", device="cpu", threads=1)
    prof = profile(Engine(lm), TINY)
    path = prof.write(tmp_path_factory.mktemp("cal") / "calibration.json")
    return prof, path


def test_profile_times_every_shape_and_holds_some_out(calibration):
    prof, path = calibration
    kinds = [q.kind for q in prof.points]
    # 4 x 32 > 64
    assert kinds.count("decode") == 6 and kinds.count("prefill") == 8 and kinds.count("past") == 1
    assert any(k.startswith("validation-") for k in kinds)
    assert all(q.seconds > 0 and q.samples >= 1 for q in prof.points)
    m = prof.model
    # the engine runs on its block pool here (a CPU)
    assert isinstance(m, ProfiledStepTime) and m.plan == "paged"
    assert set(m.policy_gaps) == {"taxi", "continuous"} and all(
        g > 0 for g in m.policy_gaps.values()
    )
    assert m.wake_idle == (0.001, 0.01) and m.wake_late >= 0
    # The model prices the grid's own shapes close to their (monotone-made) measurements.
    grid_pts = [q for q in prof.points if q.kind in ("decode", "prefill")]
    assert np.median(np.abs(pass_errors(m, grid_pts))) < 25
    h = prof.heldout
    assert h["shapes"] >= 2 and h["max_pct"] >= h["mean_pct"] >= 0
    data = json.loads(path.read_text())
    assert (
        data["model"] == "profiled" and data["version"] == 2 and data["model_name"] == "tiny-gpt2"
    )
    assert data["random_weights"] is True and len(data["points"]) == len(prof.points)
    assert "linear" in data and "heldout" in data


def test_a_profile_whose_held_out_shapes_ran_slow_says_to_profile_again(calibration):
    prof, _ = calibration
    assert "warning" not in prof.text() or prof.heldout_mean_pct > HELDOUT_WARN_PCT
    # A burst of other work while the held-out shapes were timed: they ran twice as slow as the grid
    # says.
    burst = [
        replace(q, seconds=q.seconds * 2) if q.kind.startswith("validation-") else q
        for q in prof.points
    ]
    slow = replace(prof, points=burst)
    assert slow.heldout_mean_pct > HELDOUT_WARN_PCT
    warning = [line for line in slow.text().splitlines() if "warning" in line]
    assert (
        len(warning) == 1
        and "profile again" in warning[0]
        and f"{slow.heldout_mean_pct:.0f} %" in warning[0]
    )


def test_calibration_round_trips_into_batchsim(calibration, capsys):
    prof, path = calibration
    loaded = load_step_time(path)
    for q in prof.points:
        assert loaded.pass_time(point_pass(q)) == pytest.approx(
            prof.model.pass_time(point_pass(q)), rel=1e-12
        )
    code = batchsim_main(
        [
            "run",
            "--calibration",
            str(path),
            "--requests",
            "30",
            "--policy",
            "continuous",
            "--json",
            "--no-plots",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    obj = json.loads(out)
    assert obj["summary"]["completed"] == 30
