"""The course's lessons say what the package computes, and point at files that exist.

Every number and figure in ``course/lessons``, ``course/teacher/notes.md`` and
``course/gpu-lab.md`` comes from ``scripts/make_course_figures.py``. Here the
script runs in check mode: it recomputes everything (figures into a temporary
folder) and fails if the committed Markdown differs, so a change in the package
that moves a number the course quotes cannot land without regenerating the course
(``make course``).
"""

from __future__ import annotations

import re
from pathlib import Path

from course_script import make_course_figures

ROOT = Path(__file__).resolve().parents[1]
COURSE = ROOT / "course"


def test_course_numbers_and_figures_are_what_the_package_produces(tmp_path, capsys):
    # Lesson 8 quotes the real trace, which ships with batchsim: this runs in every clone.
    rc = make_course_figures().main(["--check", "--figures", str(tmp_path)])
    assert rc == 0, capsys.readouterr().err
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == sorted(p.name for p in (COURSE / "figures").glob("*.png")), "run: make course"


def test_every_template_placeholder_is_filled_and_every_link_exists():
    generated = [
        COURSE / "teacher" / "notes.md",
        COURSE / "gpu-lab.md",
        *sorted((COURSE / "lessons").glob("*.md")),
    ]
    assert len(generated) == 11
    hand_written = [
        COURSE / "README.md",
        COURSE / "labs" / "README.md",
        COURSE / "teacher" / "README.md",
        COURSE / "teacher" / "rubrics.md",
    ]
    for md in generated + hand_written:
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
    for n in range(1, 9):
        assert f"lab {n}" in readme
    assert "voila notebooks/01_why_batch.ipynb" in readme
    lessons = sorted((COURSE / "lessons").glob("*.md"))
    assert 6 <= len(lessons) <= 9
    for md in lessons:
        assert re.search(r"\*\d+(-\d+)? minutes", md.read_text()), f"{md.name} states no duration"


def test_teacher_notes_answer_every_notebooks_questions():
    import nbformat

    notes = (COURSE / "teacher" / "notes.md").read_text()
    for nb_path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        nb = nbformat.read(nb_path, as_version=4)
        questions = re.findall(r"^(\d+)\. ", nb.cells[-1].source, flags=re.M)
        n = int(nb_path.name[:2])
        section = notes.split(f"## Answers: notebook {n} ")[1].split("\n## ")[0]
        answers = re.findall(r"^(\d+)\. ", section, flags=re.M)
        assert questions == answers, f"notebook {n}: questions {questions}, answers {answers}"


def _student_material() -> list[Path]:
    """What a student is handed: the notebooks, the labs and their checks, the lessons (and their
    templates, from which the lessons are written), and the GPU lab guide."""
    files = sorted((ROOT / "notebooks").glob("*.ipynb")) + [ROOT / "notebooks" / "build.py"]
    files += sorted((COURSE / "labs").iterdir()) + sorted((COURSE / "lessons").glob("*.md"))
    files += sorted((COURSE / "src" / "lessons").glob("*.md")) + [
        COURSE / "gpu-lab.md",
        COURSE / "src" / "gpu-lab.md",
    ]
    return [f for f in files if f.is_file()]


def test_student_material_points_nowhere_into_the_teachers_edition():
    pointers = re.compile(r"teacher/|teacher-notes|teacher's edition|solutions|rubric", re.I)
    files = _student_material()
    assert len(files) > 25
    for f in files:
        text = f.read_text()
        # the generator's own docstring explains the rule; the notebooks it writes are checked
        if f.name == "build.py":
            text = text.split('"""', 2)[2]
        hits = sorted(set(m.group(0) for m in pointers.finditer(text)))
        assert not hits, f"{f.relative_to(ROOT)} points at the answers: {hits}"


def test_the_teachers_edition_holds_notes_solutions_and_rubrics():
    teacher = COURSE / "teacher"
    assert (teacher / "notes.md").is_file() and (teacher / "rubrics.md").is_file()
    assert sorted(p.name for p in (teacher / "solutions").glob("lab*.py")) == sorted(
        p.name for p in (COURSE / "labs").glob("lab*.py")
    )
    rubrics = (teacher / "rubrics.md").read_text()
    for part in ("Lab 4, Part C", "Lab 8, Part C", "Lesson 8"):
        section = rubrics.split(f"## {part}")[1].split("\n## ")[0]
        # A rubric: criteria, each with levels a grader can tell apart.
        assert (
            section.count("|") > 20
            and "excellent" in section.lower()
            and "missing" in section.lower()
        ), part
    assert not (COURSE / "solutions").exists() and not (COURSE / "teacher-notes.md").exists()


def _plan() -> dict[int, list[tuple[int, int, str]]]:
    """The teacher's plan: session -> its rows (from minute, to minute, what happens)."""
    notes = (COURSE / "teacher" / "notes.md").read_text()
    plan = {}
    for block in re.split(r"^### Session ", notes, flags=re.M)[1:]:
        n = int(block.split(":")[0])
        body = block.split("\n## ")[0]
        plan[n] = [
            (int(a), int(b), what)
            for a, b, what in re.findall(r"^\| (\d+)-(\d+) \| ([^|]+)\|", body, flags=re.M)
        ]
    return plan


def test_the_plan_fills_nine_sessions_of_90_minutes_and_gives_every_lab_a_slot():
    plan = _plan()
    assert sorted(plan) == list(range(1, 10))
    for n, rows in plan.items():
        assert rows[0][0] == 0 and rows[-1][1] == 90, f"session {n} runs {rows[0][0]}-{rows[-1][1]}"
        for (_, end, _), (start, _, what) in zip(rows, rows[1:]):
            assert start == end, f"session {n}: a gap or an overlap before {what!r}"
    slots = {}
    for rows in plan.values():
        for a, b, what in rows:
            for lab in re.findall(r"\bLab (\d)\b", what):
                slots[int(lab)] = slots.get(int(lab), 0) + b - a
    assert sorted(slots) == list(range(1, 9)), f"labs with a slot: {sorted(slots)}"
    # The notes say a lab takes 30-60 minutes; the plan must give it that.
    assert all(30 <= m <= 60 for m in slots.values()), slots
    notes = (COURSE / "teacher" / "notes.md").read_text()
    for lab in range(1, 9):
        assert f"**Lab {lab}, " in notes.split("## The labs: what right looks like")[1], (
            f"lab {lab}: no common mistakes"
        )


def test_the_syllabus_gives_each_lesson_the_minutes_the_lesson_states():
    readme = (COURSE / "README.md").read_text()
    rows = [
        r
        for r in readme.split("## Syllabus")[1].split("\n\n")[2].splitlines()
        if re.match(r"\| \d+ \|", r)
    ]
    assert [int(r.split("|")[1]) for r in rows] == list(range(1, 10)) == sorted(_plan())
    minutes: dict[str, int] = {}
    for r in rows:
        for target, m in re.findall(r"\]\((lessons/[^)#]+)[^)]*\) \((\d+) min\)", r):
            minutes[target] = minutes.get(target, 0) + int(m)
    for md in sorted((COURSE / "lessons").glob("*.md")):
        stated = re.search(r"\*(\d+)(?:-\d+)? minutes", md.read_text()).group(1)
        assert minutes.get(f"lessons/{md.name}") == int(stated), (
            md.name,
            stated,
            minutes.get(f"lessons/{md.name}"),
        )
