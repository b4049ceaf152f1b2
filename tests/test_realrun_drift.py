"""The drift check and the canary: a machine's move is trusted only beyond its own error."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from batchsim.sim.profiled import ProfiledStepTime  # noqa: E402
from realrun.engine.engine import Engine  # noqa: E402
from realrun.engine.model import load_model  # noqa: E402
from realrun.timing.drift import Drift, recheck  # noqa: E402
from realrun.timing.grid import Grid  # noqa: E402
from realrun.timing.profile import profile  # noqa: E402


def _drift(*ratios: float) -> Drift:
    shapes = tuple(("decode", 1 + i, 32, r) for i, r in enumerate(ratios))
    ordered = sorted(ratios)
    return Drift(shapes, ordered[len(ordered) // 2])


def test_a_clear_slowdown_is_applied():
    d = _drift(1.20, 1.22, 1.19, 1.21, 1.18)
    assert d.error == pytest.approx(0.00707, rel=0.01)
    assert d.applied == pytest.approx(1.20)


def test_a_correction_within_its_own_error_is_not_applied():
    # Median 0.95, but the shapes scatter by +-15 %: the standard error (0.062) is larger than half
    # the shift.
    d = _drift(0.80, 1.10, 0.95, 1.12, 0.85)
    assert d.ratio == pytest.approx(0.95)
    assert 2 * d.error > abs(d.ratio - 1)
    assert d.applied == 1.0


def test_one_shape_alone_is_never_trusted():
    assert _drift(1.5).applied == 1.0


@pytest.fixture(scope="module")
def profiled():
    lm = load_model("tiny-gpt2", threads=1)
    engine = Engine(lm)
    grid = Grid(
        decode_rows=(1, 4),
        decode_widths=(8, 32),
        prefill_rows=(1, 2),
        prefill_lengths=(8, 32),
        max_prefill_tokens=64,
        past=(),
        join=(),
        policies=("taxi",),
        repeats=2,
        rounds=1,
        validation=0,
        wake_idle=(),
    )
    return engine, profile(engine, grid).model


def test_the_canary_reads_grid_points_against_their_profiled_price(profiled):
    from realrun.timing.canary import Canary

    engine, model = profiled
    c = Canary(engine, model)
    # At the grid's middle: priced from the profile's own means, not from an edge's extrapolation.
    assert c.length in model.prefill.y and model.decode.y[0] <= c.width <= model.decode.y[-1]
    # the profile kept its own
    assert c.reference is not None and model.extra["canary"]["decode"] == c.reference[1]
    r = c()
    # A reading of this machine's own speed: near 1 on a quiet one, but 4x has been read beside
    # other work, so only that it is a reading is asserted (the arithmetic of levels is tested on
    # injected readings).
    assert r.prefill > 0 and r.decode > 0 and r.seconds > 0
    assert not engine.kv.held and not engine.pass_log  # it leaves the engine fresh for the run


def test_the_recheck_on_a_real_engine_times_five_profiled_shapes(profiled):
    engine, model = profiled
    assert isinstance(model, ProfiledStepTime)
    d = recheck(engine, model)
    assert len(d.shapes) == 5 and all(r > 0 for *_, r in d.shapes)
    assert "drift: 5 profiled shapes" in d.text()


def test_against_the_shipped_reference_a_far_machine_is_told_how_to_get_its_own_prediction():
    # this machine runs the reference's passes in half the time
    far = _drift(0.50, 0.53, 0.55, 0.52, 0.54)
    line = far.text(reference=True)
    assert "47 % faster at the end than the course machine's reference" in line
    assert (
        "the prediction is the course machine's" in line
        and "python -m realrun compare profiles" in line
    )
    # a profile of its own
    assert "while profiling" in far.text() and "course machine" not in far.text()
    near = _drift(0.90, 0.92, 0.88, 0.91, 0.89)  # within REFERENCE_APART_PCT: the usual line only
    assert "the prediction is the course machine's" not in near.text(reference=True)
