"""scripts/make_course_figures.py as a module, for the tests that run it or measure its figures."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "make_course_figures.py"


def make_course_figures():
    """The script, executed afresh (it is registered in sys.modules, as its dataclasses need)."""
    spec = importlib.util.spec_from_file_location("make_course_figures", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_course_figures"] = mod
    spec.loader.exec_module(mod)
    return mod
