"""Lab checks: ``pytest course/labs -k lab1`` checks your lab; CI checks the solutions.

Each ``test_labN.py`` loads the lab module through the ``load_lab`` fixture. It
loads ``course/labs/NAME.py`` (your work) unless ``--solutions`` is given or the
environment has ``BATCHSIM_LAB_SOLUTIONS=1``, in which case it loads
``course/solutions/NAME.py``: the same checks, held to the answers.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

HERE = Path(__file__).resolve().parent
SOLUTIONS = HERE.parent / "solutions"


def pytest_addoption(parser):
    parser.addoption("--solutions", action="store_true", default=False,
                     help="check course/solutions/ instead of your files in course/labs/")


def _use_solutions(config) -> bool:
    return bool(config.getoption("--solutions", default=False)) or os.environ.get("BATCHSIM_LAB_SOLUTIONS") == "1"


def pytest_report_header(config):
    return f"labs: checking {'course/solutions (answers)' if _use_solutions(config) else 'course/labs (your work)'}"


@pytest.fixture(scope="session")
def load_lab(request):
    folder = SOLUTIONS if _use_solutions(request.config) else HERE

    def load(name: str):
        path = folder / f"{name}.py"
        mod_name = f"_batchsim_{folder.name}_{name}"
        if mod_name in sys.modules:
            return sys.modules[mod_name]
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        spec.loader.exec_module(module)
        return module

    return load
