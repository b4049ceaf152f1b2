"""The labs' checks pass on the solutions and fail on the untouched student files.

``pytest course/labs -k labN`` is how a student checks lab N; CI's ``pytest`` runs
only ``tests/``, so this test runs the lab checks in a subprocess twice: against
the teacher's edition's ``course/teacher/solutions/`` (every check must pass) and against the
student files as shipped (every check must fail: a check that passes on an empty lab checks
nothing).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LABS = ROOT / "course" / "labs"
SOLUTIONS = ROOT / "course" / "teacher" / "solutions"
LAB_FILES = sorted(p.name for p in LABS.glob("lab*.py"))


def _pytest(env_extra: dict) -> tuple[int, str]:
    # Not an xdist worker's variables either: the inner pytest is a run of its own, on one process
    # (with them, a plugin such as pytest-benchmark takes it for a worker and refuses to start).
    env = {
        k: v
        for k, v in os.environ.items()
        if k != "BATCHSIM_LABS" and not k.startswith("PYTEST_XDIST")
    }
    env.update(MPLBACKEND="Agg", **env_extra)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(LABS), "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _counts(out: str) -> dict[str, int]:
    return {
        k: int(n)
        for n, k in re.findall(r"(\d+) (passed|failed|error|errors|skipped)", out.splitlines()[-1])
    }


def _load(name: str, path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_lab_has_a_solution_a_check_and_gaps():
    assert len(LAB_FILES) >= 3
    for name in LAB_FILES:
        n = re.match(r"lab(\d+)_", name).group(1)
        assert (LABS / f"test_lab{n}.py").is_file(), name
        student, solution = (LABS / name).read_text(), (SOLUTIONS / name).read_text()
        assert "your code here" in student and "your code here" not in solution, name

        def public(src: str) -> set[str]:
            return {
                n.name
                for n in ast.parse(src).body
                if isinstance(n, (ast.FunctionDef, ast.ClassDef))
            } | {
                t.id
                for n in ast.parse(src).body
                if isinstance(n, ast.Assign)
                for t in n.targets
                if isinstance(t, ast.Name) and not t.id.startswith("_")
            }

        assert public(student) <= public(solution), name


def test_solutions_pass_every_lab_check():
    rc, out = _pytest({"BATCHSIM_LABS": str(SOLUTIONS)})
    assert rc == 0, out[-3000:]
    c = _counts(out)
    assert c.get("passed", 0) >= 20 and not c.get("failed") and not c.get("skipped"), out[-1000:]


def test_untouched_student_files_fail_every_check():
    rc, out = _pytest({})
    assert rc == 1, out[-3000:]
    c = _counts(out)
    assert c.get("failed", 0) >= 20 and not c.get("passed"), out[-2000:]


def test_lab4_solution_agrees_with_realruns_own_fit():
    # The lab's fit is the one realrun profile uses; checked here, on the teacher's side, so the
    # student's check does not name the package's implementation as its oracle.
    pytest.importorskip("torch")
    import numpy as np

    from realrun.timing.profile import ProfilePoint, fit_linear

    sol = _load("_lab4_solution", SOLUTIONS / "lab4_calibrate.py")
    checks = _load("_lab4_checks", LABS / "test_lab4.py")
    p, d, k, t = checks._profile(np.random.default_rng(2))
    ref = fit_linear(
        [
            ProfilePoint("x", int(a), int(b), float(c), float(s), 0.0)
            for a, b, c, s in zip(p, d, k, t)
        ]
    )
    mine = sol.fit(p, d, k, t)
    assert np.allclose(mine.times(p, d, k), ref.times(p, d, k), rtol=0.05)


def test_lab8_solution_and_checks_agree_with_realruns_verdicts(capsys):
    # Lab 8's verdicts are the ones realrun compare gives (realrun.judge.equivalence,
    # realrun.judge.interval): checked here, on the teacher's side, so the student's check does not
    # name the package's implementation as its oracle.
    import numpy as np

    from realrun.judge.equivalence import judge, pooled_log_sd, t90
    from realrun.judge.interval import MetricSpread, RunSpread, interval_for
    from realrun.judge.verdict import TARGETS

    sol = _load("_lab8_solution", SOLUTIONS / "lab8_how_sure.py")
    # its t90 and targets are given, not a gap
    given = _load("_lab8_student", LABS / "lab8_how_sure.py")
    checks = _load("_lab8_checks", LABS / "test_lab8.py")
    for df in [None, *range(1, 300)]:
        assert sol.t90(df) == given.t90(df) == pytest.approx(t90(df), rel=1e-12), df
    assert sol.TOLERANCE_PCT == given.TOLERANCE_PCT == {k: TARGETS[k] for k in sol.TOLERANCE_PCT}
    # The checks' worked example is lesson 9's, which scripts/course_values_late.py reads from the
    # same runs.
    assert (checks.PREDICTED, checks.MEASURED) == (
        sol.RUNS["predicted"]["dynamic"]["p50_e2e"],
        sol.RUNS["measured"]["dynamic"]["p50_e2e"],
    )
    for metric, tol in sol.TOLERANCE_PCT.items():
        groups = {p: sol.RUNS["measured"][p][metric] for p in sol.RUNS["measured"]}
        sd, df = pooled_log_sd(list(groups.values()))
        assert (sd, df) == (
            pytest.approx(checks.SPREAD[metric][0], rel=1e-4),
            checks.SPREAD[metric][1],
        ), metric
        assert sol.pooled_spread(list(groups.values())) == (pytest.approx(sd, rel=1e-12), df)
        for policy, runs in groups.items():
            j = judge(sol.RUNS["predicted"][policy][metric], runs, tol, sd, df)
            assert j.verdict == checks.VERDICTS[metric][policy], (metric, policy, j.text())
    rng = np.random.default_rng(8)
    for _ in range(500):
        runs = list(rng.lognormal(0.0, 0.2, int(rng.integers(1, 7))))
        pred, tol = float(rng.lognormal(0.0, 0.2)), float(rng.choice([5.0, 10.0, 15.0, 20.0]))
        sd = float(rng.uniform(0, 0.3))
        df = None if rng.random() < 0.2 else int(rng.integers(1, 200))
        j = judge(pred, runs, tol, sd, df)
        err, lo, hi = sol.error_interval(pred, runs, sd, df)
        assert (err, lo, hi) == (
            pytest.approx(j.error_pct),
            pytest.approx(j.low_pct),
            pytest.approx(j.high_pct),
        )
        assert sol.verdict(lo, hi, tol) == j.verdict
        assert sol.smallest_difference(sd, df, len(runs)) == pytest.approx(j.resolvable_pct)
        assert sol.runs_needed(tol, sd, df) == j.runs_needed
        centre, seed_sd, e, level, ref = (
            pred,
            sd / 3,
            float(rng.uniform(0, 3)),
            sd,
            int(rng.integers(1, 5)),
        )
        want = interval_for(centre, MetricSpread(seed_sd, e), RunSpread(level, "lab 8"), 1, ref)
        assert sol.one_run_interval(centre, seed_sd, e, level, ref) == pytest.approx(tuple(want))
    assert sol.main(["3"]) == 0 and "cannot tell" in capsys.readouterr().out
    assert sol.main(["1"]) == 2 and "RUNS must be" in capsys.readouterr().err


def test_student_labs_name_no_reference_implementation():
    # A check whose oracle is the package's own class tells the student where to copy from.
    for path in sorted(LABS.glob("*.py")):
        text = path.read_text()
        for name in (
            "Dynamic",
            "padded.py",
            "fit_linear",
            "realrun.timing.profile",
            "solutions",
            "realrun.judge.equivalence",
            "realrun.judge.interval",
        ):
            assert name not in text, f"{path.name} names {name}"


def test_lab1_part_b_is_judged_on_its_own(tmp_path):
    # A right formula with a wrong bus (it leaves twice as late as the timetable says): Part A's
    # check must fail and Part B's must pass, since Part B's waits do not come from the student's
    # bus.
    text = (SOLUTIONS / "lab1_timetable.py").read_text()
    wrong = text.replace(
        "return self.queue[0].arrival + self.max_wait",
        "return self.queue[0].arrival + 2 * self.max_wait",
    )
    assert wrong != text
    (tmp_path / "lab1_timetable.py").write_text(wrong)
    lab = _load("_lab1_wrong_part_a", tmp_path / "lab1_timetable.py")
    checks = _load("_lab1_checks", LABS / "test_lab1.py")
    with pytest.raises(pytest.fail.Exception, match="later than the timetable says"):
        checks.test_lab1_each_bus_leaves_when_full_or_on_its_timetable(lab, 2.0, 8, 0.1)
    for rate, wait in [(2.0, 0.5), (0.5, 0.2), (10.0, 0.3)]:
        checks.test_lab1_part_b_prediction_matches_simulation(lab, rate, wait)
    right = lab.predict_mean_wait(2.0, 0.5)
    for formula, way in (
        (lambda rate, max_wait: max_wait, "above"),
        (lambda rate, max_wait: max_wait / 2, "below"),
    ):
        lab.predict_mean_wait = (
            formula  # a wrong formula still fails, saying which way, never the answer
        )
        with pytest.raises(pytest.fail.Exception, match=f"Part B.* {way} the mean wait") as failed:
            checks.test_lab1_part_b_prediction_matches_simulation(lab, 2.0, 0.5)
        assert f"{right:.2f}" not in str(failed.value) and f"{right:.3f}"[:-1] not in str(
            failed.value
        )


def test_lab6_parts_b_and_c_are_judged_on_their_own(tmp_path):
    # A server that comes back 10 s late: Part A's check must fail, Parts B and C (on the solution's
    # prediction and router) must pass, since they do not run the student's outage.
    text = (SOLUTIONS / "lab6_outage.py").read_text()
    wrong = text.replace("yield env.timeout(duration)", "yield env.timeout(duration + 10.0)")
    assert wrong != text
    (tmp_path / "lab6_outage.py").write_text(wrong)
    lab = _load("_lab6_wrong_part_a", tmp_path / "lab6_outage.py")
    checks = _load("_lab6_checks", LABS / "test_lab6.py")
    with pytest.raises(
        AssertionError, match="steps started during the outage|the moment the server comes back"
    ):
        checks.test_a_nothing_starts_on_the_server_while_it_is_down(lab)
    checks.test_b_predicted_wait_in_the_outage(lab)
    checks.test_c_router(lab)
    lab.predict_wait_in_outage = lambda duration: duration  # and a wrong prediction still fails
    with pytest.raises(AssertionError, match="your prediction"):
        checks.test_b_predicted_wait_in_the_outage(lab)


def test_lab7_checks_name_the_mistake_and_never_the_answer():
    """Lab 7's Part B and C checks, given the commonest wrong answers, name each one; no failure
    message holds the figure the student had to compute (issue 40: a check that prints the answer is
    no check)."""
    import json

    lab = _load("_lab7_solution", SOLUTIONS / "lab7_class_traffic.py")
    checks = _load("_lab7_checks", LABS / "test_lab7.py")
    expected = json.loads((LABS / "data" / "class-predicted.json").read_text())
    right = lab._summary
    mistakes = {
        "in milliseconds": lambda r, c, p, k: right(r, c, p, k)["p50_ttft"] * 1e3,
        "another statistic": lambda r, c, p, k: right(r, c, p, k)["mean_ttft"],
        # (The policy's default knobs and a run without the limits are named too, where they differ:
        # on the shipped records, light traffic and short prompts, they give the right figure, so no
        # mistake.)
        "policy's replay": lambda r, c, p, k: right(
            r,
            c,
            "static" if p == "continuous" else "continuous",
            {"max_batch": 8} if p == "continuous" else {},
        )["p50_ttft"],
        "check the workload": lambda r, c, p, k: right(r, c, p, k)["p50_ttft"] * 1.5,
    }

    def figures(x: float) -> list[str]:
        return [f"{x * 1e3:.1f}", f"{x * 1e3:.0f} ms", f"{x:.3f}", f"{x:.4f}", repr(x)]

    answers = [
        f
        for w in ("static", "continuous")
        for v in (expected[w]["predicted_p50_ttft"], *expected[w]["what_if"].values())
        for f in figures(v)
    ]
    for words, wrong in mistakes.items():
        lab.what_if = lambda r, c, p, k, wrong=wrong: wrong(r, c, p, k)
        lab.predict_p50_ttft = lambda r, c, wrong=wrong: wrong(
            r, c, lab.sidecar(r)["policy"], lab.sidecar(r)["policy_knobs"]
        )
        for check in (
            lambda: checks.test_lab7_b_prediction_is_batchsims(lab, "continuous"),
            lambda: checks.test_lab7_c_what_if(lab),
        ):
            with pytest.raises(pytest.fail.Exception) as e:
                check()
            text = str(e.value)
            assert words in text, (words, text)
            # A figure the student gave may be printed; the right one never is.
            assert not any(a in text.replace(repr_given(text), "") for a in answers), text


def repr_given(text: str) -> str:
    """The student's own figure, as the message quotes it ('you gave X:'), cut out before looking
    for the answer."""
    m = re.search(r"you gave (\S+):", text)
    return m[1] if m else "\0"
