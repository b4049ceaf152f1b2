"""The labs' checks pass on the solutions and fail on the untouched student files.

``pytest course/labs -k labN`` is how a student checks lab N; CI's ``pytest`` runs
only ``tests/``, so this test runs the lab checks in a subprocess twice: against
``course/solutions/`` (every check must pass) and against the student files as
shipped (every check must fail: a check that passes on an empty lab checks nothing).
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LABS = ROOT / "course" / "labs"
SOLUTIONS = ROOT / "course" / "solutions"
LAB_FILES = sorted(p.name for p in LABS.glob("lab*.py"))


def _pytest(env_extra: dict) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != "BATCHSIM_LAB_SOLUTIONS"}
    env.update(MPLBACKEND="Agg", **env_extra)
    proc = subprocess.run([sys.executable, "-m", "pytest", str(LABS), "-q", "-p", "no:cacheprovider"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def _counts(out: str) -> dict[str, int]:
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|error|errors|skipped)", out.splitlines()[-1])}


def test_every_lab_has_a_solution_a_check_and_gaps():
    assert len(LAB_FILES) >= 3
    for name in LAB_FILES:
        n = re.match(r"lab(\d+)_", name).group(1)
        assert (LABS / f"test_lab{n}.py").is_file(), name
        student, solution = (LABS / name).read_text(), (SOLUTIONS / name).read_text()
        assert "your code here" in student and "your code here" not in solution, name

        def public(src: str) -> set[str]:
            return {n.name for n in ast.parse(src).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))} | {
                t.id for n in ast.parse(src).body if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Name) and not t.id.startswith("_")}

        assert public(student) <= public(solution), name


def test_solutions_pass_every_lab_check():
    rc, out = _pytest({"BATCHSIM_LAB_SOLUTIONS": "1"})
    assert rc == 0, out[-3000:]
    c = _counts(out)
    assert c.get("passed", 0) >= 20 and not c.get("failed") and not c.get("skipped"), out[-1000:]


def test_untouched_student_files_fail_every_check():
    rc, out = _pytest({})
    assert rc == 1, out[-3000:]
    c = _counts(out)
    assert c.get("failed", 0) >= 20 and not c.get("passed"), out[-2000:]
