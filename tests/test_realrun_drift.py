"""The speed check: it scales a prediction only by a correction larger than its own error."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from batchsim.sim.profiled import ProfiledStepTime  # noqa: E402
from batchsim.sim.steptime import ScaledStepTime  # noqa: E402
from realrun.drift import Drift, speed_check  # noqa: E402
from realrun.engine import Engine  # noqa: E402
from realrun.grid import Grid  # noqa: E402
from realrun.model import load_model  # noqa: E402
from realrun.profile import profile  # noqa: E402


def _drift(*ratios: float) -> Drift:
    shapes = tuple(("decode", 1 + i, 32, r) for i, r in enumerate(ratios))
    ordered = sorted(ratios)
    return Drift(shapes, ordered[len(ordered) // 2])


def test_a_clear_slowdown_is_applied():
    d = _drift(1.20, 1.22, 1.19, 1.21, 1.18)
    assert d.error == pytest.approx(0.00707, rel=0.01)
    assert d.applied == pytest.approx(1.20)
    assert "scaled by that" in d.before()


def test_a_correction_within_its_own_error_is_not_applied():
    # Median 0.95, but the shapes scatter by +-15 %: the standard error (0.062) is larger than half the shift.
    d = _drift(0.80, 1.10, 0.95, 1.12, 0.85)
    assert d.ratio == pytest.approx(0.95)
    assert 2 * d.error > abs(d.ratio - 1)
    assert d.applied == 1.0
    assert "not scaled" in d.before()


def test_one_shape_alone_is_never_trusted():
    assert _drift(1.5).applied == 1.0


def test_speed_check_on_a_real_engine_returns_a_model_at_the_applied_factor():
    lm = load_model("tiny-gpt2", threads=1)
    engine = Engine(lm)
    grid = Grid(decode_rows=(1, 4), decode_widths=(8, 32), prefill_rows=(1, 2), prefill_lengths=(8, 32),
                max_prefill_tokens=64, past=(), join=(), policies=("taxi",), repeats=2, rounds=1, validation=0,
                wake_idle=())
    model = profile(engine, grid).model
    assert isinstance(model, ProfiledStepTime)
    now, d = speed_check(engine, model)
    assert len(d.shapes) == 5 and all(r > 0 for *_, r in d.shapes)
    if d.applied == 1.0:
        assert now is model
    else:
        assert isinstance(now, ScaledStepTime) and now.factor == pytest.approx(d.applied)
