"""``python -m batchsim doctor``: is this laptop ready for class? Checks what the course needs.

Run it before the first lesson, on every student machine. It checks, in the order a
class meets them: the simulator's own packages, plotting (a figure is drawn and
saved, headless), the notebook front-end (``jupyter lab``, a Python kernel, Voila
for projecting), the slider widgets (a panel is built and its figure drawn, as
notebook 1 does), and the Azure trace that lesson 8 replays. Every failed check
prints the command that fixes it. The real-model side (torch, a GPU) has its own
check, ``python -m realrun doctor``.

Exit code 0 when everything the course needs is there (a missing trace is only a
note: lesson 8 then uses a synthetic fit), 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..core.errors import ConfigError

__all__ = ["add_arguments", "run", "CHECKS"]

_FIX_NOTEBOOKS = 'pip install -e ".[notebooks]"   (from the repository root)'
_FIX_CORE = "pip install -e .   (from the repository root)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trace",
        default=None,
        help="a trace file to check instead of the Azure trace that lesson 8 looks for",
    )
    p.add_argument(
        "--no-widgets",
        action="store_true",
        help="skip building a slider panel (the slowest check, about a second)",
    )


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _packages(names: tuple[str, ...], fix: str) -> tuple[bool, str]:
    found, missing = [], []
    for name in names:
        v = _version(name)
        try:
            importlib.import_module(name.replace("-", "_"))
        except ImportError:
            v = ""
        (found if v else missing).append(f"{name} {v}" if v else name)
    if missing:
        return False, f"missing {', '.join(missing)}: {fix}"
    return True, ", ".join(found)


def _check_core() -> tuple[bool, str]:
    ok, text = _packages(("numpy", "matplotlib", "tqdm"), _FIX_CORE)
    return ok, (f"python {sys.version.split()[0]}; " + text) if ok else text


def _check_plotting() -> tuple[bool, str]:
    # The course's figures are drawn without pyplot (no display needed); draw and save one to prove
    # it.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 1.5))
    FigureCanvasAgg(fig)
    fig.add_subplot().plot([1, 2, 3], [1, 4, 9])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "check.png"
        fig.savefig(path)
        size = path.stat().st_size
    return size > 500, f"drew and saved a PNG headless ({size:,} bytes)"


def _check_jupyterlab() -> tuple[bool, str]:
    exe = shutil.which("jupyter-lab") or shutil.which("jupyter")
    if not _version("jupyterlab") or exe is None:
        return False, f"`jupyter lab` is not installed: {_FIX_NOTEBOOKS}"
    args = [exe, "--version"] if exe.endswith("jupyter-lab") else [exe, "lab", "--version"]
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"`jupyter lab --version` failed ({e}): {_FIX_NOTEBOOKS}"
    if out.returncode != 0:
        return False, f"`jupyter lab --version` exited {out.returncode}: {_FIX_NOTEBOOKS}"
    return True, f"jupyter lab {out.stdout.strip()} ({exe})"


def _check_kernel() -> tuple[bool, str]:
    ok, text = _packages(("ipykernel", "nbclient", "nbformat", "ipywidgets"), _FIX_NOTEBOOKS)
    if not ok:
        return ok, text
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        return False, "no 'python3' kernel: python -m ipykernel install --user"
    return True, f"{text}; kernel python3 runs {spec.argv[0]}"


def _check_voila() -> tuple[bool, str]:
    ok, text = _packages(("voila",), _FIX_NOTEBOOKS)
    if not ok:
        return ok, text
    # Voila's page templates are data files under <prefix>/share/jupyter, not a module: a virtual
    # environment made with --system-site-packages imports the system's voila but looks for its
    # templates under its own prefix, and every page then fails with a template error in the
    # browser, not here.
    from jupyter_core.paths import jupyter_path

    if not any(Path(d, "lab").is_dir() for d in jupyter_path("voila", "templates")):
        base = Path(sys.base_prefix, "share", "jupyter")
        hint = (
            f"export JUPYTER_PATH={base}   (a venv made with --system-site-packages sees the "
            f"system's voila but not its data), or pip install voila inside the venv"
            if Path(base, "voila", "templates", "lab").is_dir()
            else _FIX_NOTEBOOKS
        )
        return (
            False,
            f"voila is installed but its page templates are not on Jupyter's data path: {hint}",
        )
    return True, text + " (projects a notebook as a dashboard)"


def _check_widgets() -> tuple[bool, str]:
    from ..teach import widgets

    t0 = time.perf_counter()
    panel = widgets.why_batch_ui(requests=40)
    png = panel.image.value
    if panel.error or len(png) < 1000:
        return False, f"the slider panel drew no figure ({panel.error or 'empty image'})"
    w, h = widgets.png_size(png)
    return True, f"notebook 1's panel drew a {w}x{h} figure in {time.perf_counter() - t0:.1f} s"


def _check_trace(path: str | None) -> tuple[bool | None, str]:
    from ..core.traces import read_trace
    from ..teach.lessons import AZURE_TRACE, find_trace

    p = Path(path) if path else find_trace()
    if p is None or not p.is_file():
        if path:
            from ..traces import missing_trace_hint

            return None, missing_trace_hint(path)
        return None, (
            f"{AZURE_TRACE} is in neither $BATCHSIM_TRACES, the cache nor the package (a wheel "
            f"built "
            "without its data?): lesson 8 and azure-conv use a synthetic fit instead"
        )
    tr = read_trace(p)
    return True, f"{p}: {len(tr.arrival_s):,} requests over {tr.duration / 60:.0f} minutes"


#: (label, check). A check returns (True: fine, False: must be fixed, None: a note) and one line.
CHECKS: tuple[tuple[str, Callable[..., tuple[bool | None, str]]], ...] = (
    ("simulator", _check_core),
    ("plotting", _check_plotting),
    ("jupyter lab", _check_jupyterlab),
    ("kernel", _check_kernel),
    ("voila", _check_voila),
    ("widgets", _check_widgets),
    ("trace", _check_trace),
)


def run(args: argparse.Namespace) -> int:
    trace = getattr(args, "trace", None)
    if trace is not None and not Path(trace).is_file():
        raise ConfigError(f"trace must be an existing trace file, got {trace!r}")
    print("batchsim doctor: what the course needs on this machine")
    problems = 0
    width = max(len(label) for label, _ in CHECKS)
    for label, check in CHECKS:
        if label == "widgets" and getattr(args, "no_widgets", False):
            continue
        try:
            ok, text = check(trace) if label == "trace" else check()
        except Exception as e:  # a broken install must read as one line, not a traceback
            ok, text = False, f"{type(e).__name__}: {e}"
        mark = {True: "ok  ", False: "FIX ", None: "note"}[ok]
        problems += ok is False
        print(f"  {mark} {label.ljust(width)}  {text}")
    if problems:
        print(
            f"{problems} check(s) need fixing before class; the real-model side: python -m realrun "
            f"doctor"
        )
        return 1
    print("ready for class. The real-model side (torch, a GPU): python -m realrun doctor")
    return 0
