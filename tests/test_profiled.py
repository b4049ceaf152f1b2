"""The profiled step-time model: grids that recover known costs, files that round-trip, prices that
add up.

``realrun profile`` times passes on a grid and batchsim interpolates between the points
(``batchsim.sim.profiled``). Here the "measurements" are a known synthetic function, a
concave decode cost and a prefill whose attention is quadratic in the chunk, so the
interpolation can be checked on and between the grid points, torch-free.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from batchsim import ConfigError, LinearStepTime, Workload, simulate
from batchsim.cli import main
from batchsim.core.plan import plan_step
from batchsim.core.policies import make_policy
from batchsim.core.step import Chunk, Step
from batchsim.sim.profiled import PROFILE_VERSION, Grid2D, ProfiledStepTime
from batchsim.sim.steptime import load_step_time


def decode_cost(b, w):  # concave in rows (a fixed cost shared), linear attention per row and column
    b, w = np.asarray(b, float), np.asarray(w, float)
    return 1e-3 + 2e-4 * b**0.8 + 5e-8 * b * w


def prefill_cost(n, q):  # per-token work plus attention within the chunk, quadratic in its length
    n, q = np.asarray(n, float), np.asarray(q, float)
    return 1.5e-3 + 8e-5 * n * q + 2e-8 * n * q * q


ROWS = np.array([1, 2, 4, 8, 16, 32, 64.0])
WIDTHS = np.array([16, 40, 100, 250, 625.0])
LENGTHS = np.array([8, 16, 32, 64, 128, 256, 512.0])


def model(**kw) -> ProfiledStepTime:
    dz = decode_cost(ROWS[:, None], WIDTHS[None, :])
    pz = prefill_cost(ROWS[:16][:, None], LENGTHS[None, :])
    return ProfiledStepTime(
        Grid2D(ROWS, WIDTHS, dz, "decode"), Grid2D(ROWS, LENGTHS, pz, "prefill"), **kw
    )


def test_the_grids_are_exact_on_their_points():
    m = model()
    b, w = np.meshgrid(ROWS, WIDTHS, indexing="ij")
    np.testing.assert_allclose(
        m.decode(b.ravel(), w.ravel()), decode_cost(b, w).ravel(), rtol=1e-12
    )
    n, q = np.meshgrid(ROWS, LENGTHS, indexing="ij")
    np.testing.assert_allclose(
        m.prefill(n.ravel(), q.ravel()), prefill_cost(n, q).ravel(), rtol=1e-12
    )


def test_between_points_the_interpolation_is_off_by_little():
    """Grid points two to two and a half times apart: within 3 % of the true cost between them.

    The bound follows from the functions: bilinear interpolation is exact on the b*w term, and
    the curvature of b^0.8 and of q^2 over a cell of ratio 2-2.5 stays under 3 % of the total."""
    m = model()
    rng = np.random.default_rng(0)
    b = rng.uniform(1, 64, 2000)
    w = rng.uniform(16, 625, 2000)
    err = np.abs(m.decode(b, w) / decode_cost(b, w) - 1)
    assert err.max() < 0.03, err.max()
    n = rng.integers(1, 65, 2000)
    q = rng.uniform(8, 512, 2000)
    err = np.abs(m.prefill(n, q) / prefill_cost(n, q) - 1)
    assert err.max() < 0.03, err.max()
    # ... and the interpolation is not vacuously right: a linear fit through the corners is far off.
    corner = decode_cost(1, 16) + (decode_cost(64, 625) - decode_cost(1, 16)) * (b - 1) / 63
    assert np.abs(corner / decode_cost(b, w) - 1).max() > 0.2


def test_beyond_the_grid_the_last_slope_carries_on_and_below_it_nothing_is_cheaper():
    m = model()
    f32, f64 = float(m.decode(32, 625)[0]), float(m.decode(64, 625)[0])
    assert float(m.decode(128, 625)[0]) == pytest.approx(f64 + (128 - 64) * (f64 - f32) / 32)
    assert float(m.decode(1, 4)[0]) == pytest.approx(float(m.decode(1, 16)[0]))


def test_noisy_measurements_are_made_monotone():
    z = np.array([[1.0, 2.0, 1.5], [0.9, 3.0, 4.0]])  # noise: more columns or rows cost less here
    g = Grid2D(np.array([1, 2.0]), np.array([1, 2, 3.0]), z, "decode")
    x = np.linspace(1, 2, 21)
    y = np.linspace(1, 3, 41)
    vals = g(*np.meshgrid(x, y, indexing="ij"))
    assert (np.diff(vals, axis=0) >= -1e-12).all() and (np.diff(vals, axis=1) >= -1e-12).all()


def test_a_step_costs_the_sum_of_its_passes():
    step = Step(
        prefill=(Chunk(5, 0, 100), Chunk(6, 0, 30)),
        decode=(0, 1, 2),
        kv_read=3 * 50,
        decode_width=70,
    )
    passes = plan_step(step, "grouped")
    # 30 < 0.75 x 100: two prefill passes
    assert [p.kind for p in passes] == [
        "prefill",
        "prefill",
        "decode",
    ]
    assert passes[-1].attn_read == 3 * 70  # the rectangle reads its padding
    for st in (model(), LinearStepTime(1e-3, 2e-5, 1e-4, 1e-7, plan="grouped")):
        assert st.durations(step, 1)[0] == pytest.approx(
            sum(st.pass_time(p) for p in passes), rel=1e-12
        )
    lin = LinearStepTime(1e-3, 2e-5, 1e-4, 1e-7, plan="grouped")
    fused = LinearStepTime(1e-3, 2e-5, 1e-4, 1e-7, plan="fused")
    # two more fixed costs, and the padding read
    assert lin.durations(step, 1)[0] - fused.durations(step, 1)[0] == pytest.approx(
        2e-3 + 1e-7 * (3 * 70 - 150)
    )


def test_the_pool_packs_every_chunk_into_one_pass_and_reads_only_real_tokens():
    # realrun's engine on its block pool (plan "paged"): nothing padded, so nothing to group.
    step = Step(
        prefill=(Chunk(5, 0, 100), Chunk(6, 20, 30)),
        decode=(0, 1, 2),
        kv_read=3 * 50 + 20,
        decode_width=70,
    )
    pre, dec = plan_step(step, "paged")
    assert (pre.prefill_tokens, pre.prefill_rows, pre.query, pre.kv_read, pre.ragged) == (
        130,
        2,
        100,
        20,
        True,
    )
    # no rectangle
    assert (dec.decode_rows, dec.kv_read, dec.attn_read, dec.ragged) == (
        3,
        150,
        150,
        True,
    )
    for st in (
        model(past_cost=1e-9, plan="paged"),
        LinearStepTime(1e-3, 2e-5, 1e-4, 1e-7, plan="paged"),
    ):
        assert st.durations(step, 1)[0] == pytest.approx(
            st.pass_time(pre) + st.pass_time(dec), rel=1e-12
        )
    m = model(past_cost=1e-9, plan="paged")
    # The chunks as equal ones with the same tokens (130) and attention among themselves (100^2 +
    # 30^2).
    assert m.pass_time(pre) == pytest.approx(
        float(m.prefill(130**2 / 10900, 10900 / 130)[0]) + 1e-9 * 30 * 20
    )
    lin = LinearStepTime(1e-3, 2e-5, 1e-4, 1e-7, plan="paged")
    assert lin.pass_time(dec) == pytest.approx(1e-3 + 3e-4 + 150e-7)
    # A padded batch computes its padding on the pool too: rows x the longest prompt, as its policy
    # counts.
    padded = Step(prefill=(Chunk(1, 0, 40), Chunk(2, 0, 10)), prefill_padding=30)
    (p,) = plan_step(padded, "paged")
    assert p.prefill_tokens == 80 and p.query == 40
    # ... the padding as a row of its own (30 tokens beside the 10-token prompt), attending to
    # itself.
    assert p.prefill_shape == pytest.approx((80**2 / 2600, 2600 / 80))
    # ... and a repeated decode reads each row's real context, a token longer each time.
    rep = Step(decode=(0, 1, 2, 3), kv_read=4 * 90, decode_width=100, repeat=5)
    np.testing.assert_allclose(m.durations(rep, 5), m.decode(4, 90 + np.arange(5)), rtol=1e-12)
    np.testing.assert_allclose(
        lin.durations(rep, 5), 1e-3 + 4e-4 + 1e-7 * (360 + 4 * np.arange(5)), rtol=1e-12
    )


def test_a_padded_batch_decodes_on_the_pool_reading_no_padding():
    # Static's rows are left-padded to the longest prompt in a rectangle; on the pool the padding
    # was a throwaway row, dropped after the prefill, so the decode reads each row's own prompt and
    # tokens.
    from batchsim import Request, Static

    pol = Static(max_batch=3)
    pol.start()
    for i, p in enumerate((40, 10, 25)):
        pol.on_arrival(Request(i, 0.0, p, 6), 0.0)
    pre = pol.next_action(0.0)
    assert pre.prefill_tokens == 3 * 40 and pre.prefill_padding == 45
    pol.on_step_end(pre, 1, 0.1)
    dec = pol.next_action(0.1)
    assert (dec.kv_read, dec.kv_padding, dec.decode_width) == (3 * 40, 45, 40)
    (grouped,) = plan_step(dec, "grouped")
    (paged,) = plan_step(dec, "paged")
    (fused,) = plan_step(dec, "fused")
    assert grouped.attn_read == 3 * 40 and fused.attn_read == 3 * 40  # a rectangle, padding read
    assert paged.kv_read == paged.attn_read == 40 + 10 + 25  # the pool: real tokens only
    lin = LinearStepTime(1e-3, 2e-5, 1e-4, 1e-7, plan="paged")
    m = model(past_cost=1e-9, plan="paged")
    # The linear model's shortcut and the plan's pricing agree, repetition by repetition.
    np.testing.assert_allclose(
        lin.durations(dec, dec.repeat),
        1e-3 + 3e-4 + 1e-7 * (75 + 3 * np.arange(dec.repeat)),
        rtol=1e-12,
    )
    assert lin.short_durations(dec, 2) == pytest.approx(
        [lin.pass_time(paged), lin.pass_time(paged) + 3e-7], rel=1e-12
    )
    np.testing.assert_allclose(m.durations(dec, 3), m.decode(3, 25 + np.arange(3)), rtol=1e-12)
    with pytest.raises(ValueError, match="kv_padding"):
        Step(decode=(0,), kv_read=5, kv_padding=6)


def test_a_repeated_decode_prices_each_repetition_a_column_wider():
    m = model()
    step = Step(decode=(0, 1, 2, 3), kv_read=4 * 90, decode_width=100, repeat=20)
    d = m.durations(step, 20)
    np.testing.assert_allclose(d, m.decode(4, 100 + np.arange(20)), rtol=1e-12)


def test_a_step_after_idle_starts_late_and_runs_cold():
    m = model(wake_late=0.002, wake_idle=(0.001, 0.1), wake_extra=(0.0005, 0.003))
    wl = Workload.from_arrays([0.0, 1.0], [10, 10], [1, 1])
    r = simulate(wl, make_policy("taxi"), m).records
    warm = float(m.prefill(1, 10)[0])
    # the second request woke the server after 1 s asleep
    assert r.start[1] == pytest.approx(1.0 + 0.002)
    # colder than any idle timed: the last extra
    assert r.finish[1] - r.start[1] == pytest.approx(warm + 0.003)
    late, extra = m.wake_penalty(0.01)
    assert 0.0005 < extra < 0.003 and late == 0.002


def test_calibration_files_round_trip(tmp_path):
    m = model(
        past_cost=1e-9,
        step_extra=2e-5,
        join_cost=3e-6,
        step_gap=1e-4,
        repeat_extra=1e-6,
        wake_late=1e-4,
        wake_idle=(0.001, 0.1),
        wake_extra=(0.0002, 0.001),
        policy_gaps={"taxi": 1e-4, "continuous": 3e-4},
    )
    path = tmp_path / "cal.json"
    m.to_json(path)
    back = load_step_time(path)
    assert isinstance(back, ProfiledStepTime)
    rng = np.random.default_rng(1)
    for _ in range(50):
        k = int(rng.integers(1, 9))
        step = Step(
            prefill=(Chunk(99, int(rng.integers(0, 50)), int(rng.integers(1, 300))),),
            decode=tuple(range(k)),
            kv_read=k * 40,
            decode_width=int(rng.integers(40, 400)),
        )
        assert back.durations(step, 1)[0] == m.durations(step, 1)[0]
    assert (
        back.for_policy("continuous").step_gap == 3e-4
        and back.for_policy("static").step_gap == 1e-4
    )
    assert back.wake_penalty(0.01) == m.wake_penalty(0.01)


BAD = {
    "version": ({"version": 1}, "version must be 2"),
    "plan": ({"plan": "sideways"}, "plan must be one of"),
    "gap": ({"step_gap": -1.0}, "step_gap must be a number of seconds in"),
    "bool": ({"join_cost": True}, "join_cost must be a number of seconds in"),
    "grid": (
        {"decode": {"rows": [1, 2], "columns": [8], "seconds": [[0.1], [-0.2]]}},
        r"decode seconds\[1\]\[0\] must be",
    ),
    # Bounded: a pass of 1e300 s is no measurement (it overflowed every sum it entered).
    "huge": (
        {"decode": {"rows": [1, 2], "columns": [8], "seconds": [[0.1], [1e300]]}},
        r"decode seconds\[1\]\[0\] must be a pass time in \(0, 3600\] seconds, got 1e\+300",
    ),
    "gap_huge": ({"step_gap": 1e300}, "step_gap must be a number of seconds in"),
    # A string in a cell of a grid that has rows, columns and seconds: the cell is named.
    "cell": (
        {"decode": {"rows": [1, 2], "columns": [8], "seconds": [[0.1], ["fast"]]}},
        r"decode seconds\[1\]\[0\] must be a number, got 'fast'",
    ),
    # Plain numbers, not np.float64(32.0).
    "plain": (
        {"decode": {"rows": [1, 2], "columns": [32, 16], "seconds": [[0.1, 0.1], [0.2, 0.2]]}},
        r"decode columns must be strictly increasing, got \[32, 16\]",
    ),
    # The model's own check (wake_extra against wake_idle) names the file too.
    "wake": (
        {"wake_idle": [0.001, 0.01], "wake_extra": [0.001]},
        "cal.json': wake_idle must be increasing",
    ),
    "axis": (
        {"prefill": {"rows": [2, 1], "columns": [8], "seconds": [[0.1], [0.2]]}},
        "strictly increasing",
    ),
    "gaps": ({"policy_gaps": {"taxi": "fast"}}, "policy_gaps must map"),
    "missing": ({"decode": None}, "needs a decode grid"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_calibration_files_are_one_line_and_exit_2(tmp_path, capsys, case):
    change, words = BAD[case]
    good = model().as_dict()
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({**good, **change}))
    with pytest.raises(ConfigError, match=words):
        load_step_time(path)
    code = main(
        ["run", "--calibration", str(path), "--requests", "5", "--policy", "taxi", "--no-plots"]
    )
    err = capsys.readouterr().err
    assert (
        code == 2
        and len(err.strip().splitlines()) == 1
        and words.split()[0].replace("\\", "") in err
    )
    assert "np.float64" not in err
    assert good["version"] == PROFILE_VERSION


def test_a_calibration_runs_batchsim_from_the_command_line(tmp_path, capsys):
    path = tmp_path / "cal.json"
    model(policy_gaps={"continuous": 2e-4}).to_json(path)
    code = main(
        [
            "run",
            "--calibration",
            str(path),
            "--requests",
            "40",
            "--rate",
            "20",
            "--policy",
            "continuous",
            "--json",
            "--no-plots",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    obj = json.loads(out)
    assert (
        obj["runs"][0]["summary"]["completed"] == 40
        and "ProfiledStepTime" in obj["config"]["step_time"]
    )


def test_a_calibration_of_the_other_kv_layout_is_named_before_it_misprices(tmp_path):
    # A rectangle's profile ("grouped") prices padding and groups that the block pool's engine never
    # runs.
    from types import SimpleNamespace

    from realrun.cli.calibration import calibration

    path = tmp_path / "cal.json"
    model().to_json(path)  # plan "grouped": made with --kv padded
    lm = SimpleNamespace(name="tiny-gpt2", device="cpu", dtype="fp32", threads=1)
    for engine, warned in (
        (SimpleNamespace(plan="paged", kv_layout="paged"), True),
        (SimpleNamespace(plan="grouped", kv_layout="padded"), False),
    ):
        setup = SimpleNamespace(notes=[], workload=Workload(()))
        got, _ = calibration(SimpleNamespace(calibration=str(path)), lm, engine, setup, [])
        assert got.plan == "grouped"
        lines = [n for n in setup.notes if "pass plan" in n]
        assert bool(lines) == warned
        if warned:
            assert (
                "prices steps as the 'grouped' pass plan, but this engine runs them as 'paged'"
                in lines[0]
            )
            assert "--kv padded" in lines[0]


def test_a_ragged_prefill_is_priced_as_equal_chunks_with_its_tokens_and_its_attention():
    from batchsim.core.plan import Pass

    # Equal chunks are their own shape; any pieces keep rows x length (tokens) and rows x length^2.
    equal = Pass(
        prefill_tokens=4 * 64,
        prefill_rows=4,
        query=64,
        chunks=tuple(Chunk(i, 0, 64) for i in range(4)),
        ragged=True,
    )
    assert equal.prefill_shape == pytest.approx((4, 64))
    lengths = [300, 360, 410, 433, 320, 390, 350, 400]
    ragged = Pass(
        prefill_tokens=sum(lengths),
        prefill_rows=8,
        query=433,
        ragged=True,
        chunks=tuple(Chunk(i, 0, n) for i, n in enumerate(lengths)),
    )
    rows, length = ragged.prefill_shape
    assert rows * length == pytest.approx(sum(lengths))
    assert rows * length**2 == pytest.approx(sum(n * n for n in lengths))
    # fewer, longer chunks than the mean: more attention
    assert rows < 8 and length > sum(lengths) / 8
    # A padded batch on the pool: 8 x 433 tokens, but the padding attends only to itself, so on a
    # table whose cost per token grows with the length it costs less than 8 chunks of 433, more than
    # its prompts alone.
    padded = Pass(
        prefill_tokens=8 * 433, prefill_rows=8, query=433, ragged=True, chunks=ragged.chunks
    )
    rows, length = padded.prefill_shape
    assert rows * length == pytest.approx(8 * 433) and rows > 8 and length < 433
    m = ProfiledStepTime(
        Grid2D([1, 64], [1, 1024], [[1e-3, 2e-3], [5e-3, 9e-3]], "decode"),
        Grid2D(
            [1, 8, 16],
            [128, 256, 512],
            [[0.05, 0.11, 0.25], [0.4, 0.9, 2.0], [0.8, 1.8, 4.0]],
            "prefill",
        ),
        plan="paged",
    )
    full = float(m.prefill(8, 433)[0])
    assert float(m.prefill(8, sum(lengths) / 8)[0]) < m.pass_time(padded) < full
