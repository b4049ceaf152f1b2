"""The course's lessons say what the package computes, and point at files that exist.

Every number and figure in ``course/lessons``, ``course/teacher-notes.md`` and
``course/gpu-lab.md`` comes from ``scripts/make_course_figures.py``. Here the
script runs in check mode: it recomputes everything (figures into a temporary
folder) and fails if the committed Markdown differs, so a change in the package
that moves a number the course quotes cannot land without regenerating the course
(``make course``).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "course"


def _script():
    spec = importlib.util.spec_from_file_location("make_course_figures", ROOT / "scripts" / "make_course_figures.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_course_figures"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_course_numbers_and_figures_are_what_the_package_produces(azure_trace, tmp_path, capsys):
    # azure_trace: lesson 8 quotes the real trace; without it the numbers would differ, so skip.
    rc = _script().main(["--check", "--figures", str(tmp_path)])
    assert rc == 0, capsys.readouterr().err
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == sorted(p.name for p in (COURSE / "figures").glob("*.png")), "run: make course"


def test_every_template_placeholder_is_filled_and_every_link_exists():
    generated = [COURSE / "teacher-notes.md", COURSE / "gpu-lab.md", *sorted((COURSE / "lessons").glob("*.md"))]
    assert len(generated) == 10
    for md in generated + [COURSE / "README.md", COURSE / "labs" / "README.md"]:
        text = md.read_text()
        assert "{{" not in text, md
        for target in re.findall(r"\]\(([^)#]+)\)", text):
            if "://" not in target:
                assert (md.parent / target).exists(), f"{md.name} links to missing {target}"
        for path in re.findall(r"`((?:notebooks|course)/[\w./-]+)`", text):
            assert (ROOT / path).exists(), f"{md.name} names missing {path}"


def test_syllabus_covers_every_notebook_and_lab():
    readme = (COURSE / "README.md").read_text()
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        assert f"notebooks/{nb.name}" in readme, nb.name
    for n in (1, 2, 3, 4):
        assert f"lab {n}" in readme
    assert "voila notebooks/01_why_batch.ipynb" in readme
    lessons = sorted((COURSE / "lessons").glob("*.md"))
    assert 6 <= len(lessons) <= 8
    for md in lessons:
        assert re.search(r"\*\d+(-\d+)? minutes", md.read_text()), f"{md.name} states no duration"


def test_teacher_notes_answer_every_notebooks_questions():
    import nbformat

    notes = (COURSE / "teacher-notes.md").read_text()
    for nb_path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        questions = re.findall(r"^(\d+)\. ", nb.cells[-1].source, flags=re.M)
        n = int(nb_path.name[:2])
        section = notes.split(f"## Answers: notebook {n} ")[1].split("\n## ")[0]
        answers = re.findall(r"^(\d+)\. ", section, flags=re.M)
        assert questions == answers, f"notebook {n}: questions {questions}, answers {answers}"
