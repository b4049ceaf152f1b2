"""Lab checks: ``pytest course/labs -k lab1`` checks your lab.

Each ``test_labN.py`` loads the lab module through the ``load_lab`` fixture. It
loads ``course/labs/NAME.py`` (your work), or the same file from the folder given
with ``--labs DIR`` (or the environment's ``BATCHSIM_LABS``), so the same checks
can hold any copy of the labs to account.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

HERE = Path(__file__).resolve().parent


def pytest_addoption(parser):
    parser.addoption(
        "--labs",
        default=None,
        metavar="DIR",
        help="check the lab files in DIR instead of your files in course/labs/",
    )


def _folder(config) -> Path:
    given = config.getoption("--labs", default=None) or os.environ.get("BATCHSIM_LABS")
    if not given:
        return HERE
    folder = Path(given).resolve()
    if not folder.is_dir():
        raise pytest.UsageError(f"--labs must be a folder of lab files, got {given!r}")
    return folder


def pytest_report_header(config):
    return f"labs: checking {_folder(config)}"


@pytest.fixture(scope="session")
def load_lab(request):
    folder = _folder(request.config)

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
