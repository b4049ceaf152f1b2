"""The notebooks run top to bottom, small, and are exactly what ``notebooks/build.py`` writes.

Each notebook has one cell tagged ``parameters``; the test injects a cell right
after it that makes the run small (as papermill does), and one at the end that
reports what the slider panel drew; it executes the notebook with nbclient in a
real kernel, and checks that no cell failed, that the slider panel was displayed
and drew the lesson's figure once (notebook 7's panel waits for its Run button,
so there the figure is the one its first cell draws). Committed notebooks
carry no outputs, and must equal the generator's output, so the eight stay
consistent.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"

# What CI overrides, per notebook: small enough to run in a few seconds on 2 cores.
SMALL = {
    "01_why_batch.ipynb": {"REQUESTS": 120},
    "02_static_dynamic_continuous.ipynb": {"REQUESTS": 100, "SHOW": 20},
    "03_memory.ipynb": {"REQUESTS": 24},
    "04_cost.ipynb": {"REQUESTS": 48, "FLEET_REQUESTS": 150},
    "05_roofline.ipynb": {},
    "06_theory.ipynb": {"REQUESTS": 300, "REPLICATIONS": 3},
    "07_predicted_vs_measured.ipynb": {"REQUESTS": 8},
    "08_real_day.ipynb": {"MINUTES": 1.0},
}
NOTEBOOKS = sorted(p.name for p in NB_DIR.glob("*.ipynb"))


def _load_build():
    spec = importlib.util.spec_from_file_location("notebooks_build", NB_DIR / "build.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["notebooks_build"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_eight_notebooks_all_listed_here():
    assert len(NOTEBOOKS) == 8
    assert set(NOTEBOOKS) == set(SMALL)


def test_committed_notebooks_are_what_build_py_writes_and_carry_no_outputs():
    build = _load_build()
    assert build.write(check=True) == 0, "run: python notebooks/build.py"
    for name in NOTEBOOKS:
        nb = nbformat.read(NB_DIR / name, as_version=4)
        nbformat.validate(nb)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), name
        tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1, name
        assert "What you will learn" in nb.cells[0].source, name
        assert nb.cells[-1].source.startswith("## Questions to think about"), name
        # Notebooks are thin: a notebook calls the package, it defines nothing of its own.
        for c in code:
            tree = ast.parse(
                "\n".join(line for line in c.source.splitlines() if not line.startswith("%"))
            )
            assert not any(
                isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Lambda)) for n in ast.walk(tree)
            ), name


def _parameters(nb) -> dict:
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    names = {}
    for node in ast.parse(cell.source).body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                names[t.id] = ast.literal_eval(node.value)
    return names


def _small(nb, overrides: dict):
    """Insert a cell after the parameters cell, as papermill does; only names the cell defines."""
    params = _parameters(nb)
    unknown = set(overrides) - set(params)
    assert not unknown, f"overrides {unknown} are not in the parameters cell {sorted(params)}"
    idx = next(i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", []))
    src = "# injected by tests/test_notebooks.py\n" + "\n".join(
        f"{k} = {v!r}" for k, v in overrides.items()
    )
    cell = nbformat.v4.new_code_cell(src)
    cell.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(idx + 1, cell)
    return nb


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_top_to_bottom_small(name):
    from nbclient import NotebookClient

    nb = _small(nbformat.read(NB_DIR / name, as_version=4), SMALL[name])
    report = nbformat.v4.new_code_cell(
        "# injected by tests/test_notebooks.py\nprint('panel drew', None if panel.result is None "
        "else widgets.png_size(panel.image.value))\nprint('panel table', bool(panel.table.value) "
        "and len(panel.table.value))"
    )
    nb.cells.append(report)
    saved = {k: os.environ.get(k) for k in ("MPLBACKEND", "PYTHONPATH")}
    os.environ["MPLBACKEND"] = (
        "Agg"  # the kernel inherits it; %matplotlib inline still shows figures
    )
    # The kernel imports this checkout's package, whatever else is installed.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + ([saved["PYTHONPATH"]] if saved["PYTHONPATH"] else [])
    )
    try:
        # timeout: a watchdog per cell against a hung kernel, not a speed check (notebook 7, the
        # slowest, took 108 s in all on a loaded 2-core machine).
        NotebookClient(
            nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(NB_DIR)}}
        ).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs), (
        "no slider panel"
    )
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    drew = "".join(o.get("text", "") for o in report.outputs)
    figures = sum("image/png" in o.get("data", {}) for o in outputs)
    if name.startswith("07"):
        assert figures == 1 and "panel drew None" in drew, (figures, drew)
        assert "predicted" in printed and "measured" in printed, printed[:500]
    else:
        # The panel drew its figure, and nothing drew it a second time on the page.
        w, h = ast.literal_eval(drew.split("panel drew", 1)[1].split("\n")[0].strip())
        assert w > 300 and h > 200, drew
        assert figures == 0, f"{name}: {figures} static figures besides the panel's"
        table = int(drew.split("panel table", 1)[1].split()[0].replace("False", "0"))
        assert table > 100, drew
