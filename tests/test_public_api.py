"""batchsim's public face: about thirty names in ``batchsim.__all__``, in six sections.

The front door is what a student or an engineer needs to run a scenario from Python: workloads,
policies, step times, running, results and theory, in that order (``batchsim/__init__.py`` says
which is which in comments). Every other name is imported from its module
(``batchsim.core.step.Step``, ``batchsim.core.driver.drive``): the package re-exports nothing
beside ``__all__``, so a name cannot stay reachable by accident after it left the list. The
README, the lessons, the labs and the notebooks import from the front door only what it has.
"""

from __future__ import annotations

import importlib
import json
import re
import types
from pathlib import Path

import batchsim

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ["workloads", "policies", "step times", "running", "results", "theory"]
#: Subpackages a reader may import from the front door (``from batchsim import textbook``):
#: modules, not names of ``__init__``, so they are not in ``__all__``.
SUBPACKAGES = {"textbook"}


def test_the_face_is_small_and_every_name_in_it_imports():
    names = batchsim.__all__
    assert len(names) <= 32, len(names)
    assert len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)
    for name in names:
        scope: dict = {}
        exec(f"from batchsim import {name}", scope)  # as a reader writes it
        assert scope[name] is getattr(batchsim, name)


def test_star_import_gives_exactly_the_face():
    scope: dict = {}
    exec("from batchsim import *", scope)
    assert set(scope) - {"__builtins__"} == set(batchsim.__all__)


def test_nothing_is_re_exported_beside_the_face():
    public = {
        n
        for n, v in vars(batchsim).items()
        if not n.startswith("_") and not isinstance(v, types.ModuleType)
    }
    assert public == set(batchsim.__all__), (
        sorted(public - set(batchsim.__all__)),
        sorted(set(batchsim.__all__) - public),
    )


def test_every_name_of_the_face_lives_in_a_module_of_its_own():
    # The front door only re-exports: each name is defined deeper and importable from there.
    for name in batchsim.__all__:
        obj = getattr(batchsim, name)
        home = obj.__module__
        assert home.startswith("batchsim.") and home != "batchsim", (name, home)
        assert getattr(importlib.import_module(home), name) is obj, (name, home)


def test_the_face_is_written_in_its_six_sections():
    source = (ROOT / "batchsim" / "__init__.py").read_text()
    block = source.split("__all__ = [", 1)[1].split("\n]", 1)[0]
    sections, seen = [], []
    for line in block.splitlines():
        line = line.strip()
        if line.startswith("#"):
            sections.append(line.lstrip("# ").strip())
        elif line:
            assert sections, f"a name before the first section: {line}"
            seen += re.findall(r'"(\w+)"', line)
    assert sections == SECTIONS
    assert seen == batchsim.__all__


def _imported_from_the_front(text: str) -> set[str]:
    """The names a text imports with ``from batchsim import ...`` (one line, or in parentheses)."""
    found = set()
    for group in re.findall(r"from batchsim import (\([^)]*\)|[^\n]*)", text):
        found |= set(re.findall(r"\b[A-Za-z_]\w*\b", re.sub(r"#[^\n]*", "", group)))
    return found


def test_the_docs_lessons_labs_and_notebooks_import_only_what_the_face_has():
    # Code blocks in Markdown and notebooks are not run by the quick tests: read them here.
    texts = [
        ROOT / "README.md",
        *(ROOT / "course").rglob("*.md"),
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "course").rglob("*.py"),
        ROOT / "notebooks" / "build.py",
    ]
    wrong = {}
    for path in texts:
        extra = _imported_from_the_front(path.read_text()) - set(batchsim.__all__) - SUBPACKAGES
        if extra:
            wrong[str(path.relative_to(ROOT))] = sorted(extra)
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        cells = json.loads(path.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        extra = _imported_from_the_front(code) - set(batchsim.__all__) - SUBPACKAGES
        if extra:
            wrong[path.name] = sorted(extra)
    assert not wrong, f"imported from batchsim but not in batchsim.__all__: {wrong}"


def test_the_reader_of_imports_sees_a_name_the_face_lacks():
    # The check above must be able to fail: a lesson importing a name that left the face.
    text = "```python\nfrom batchsim import (\n    simulate,  # run\n    Recorder,\n)\n```\n"
    assert _imported_from_the_front(text) - set(batchsim.__all__) == {"Recorder"}
    assert _imported_from_the_front("from batchsim import Poisson, textbook  # x") == {
        "Poisson",
        "textbook",
    }
