"""How the course writes its numbers and quotes its commands: shared by ``course_values*.py``.

``fixed`` rounds a figure to the precision the prose needs; ``cli_block`` quotes what a
command prints, as a lesson shows it; ``lab_checks`` counts a lab's checks for the teacher's
edition.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path

__all__ = ["COURSE", "Figure", "cli_block", "fixed", "lab_checks"]

COURSE = Path(__file__).resolve().parents[1] / "course"
#: ``figure(name)``: draw and save the course figure ``name``; its lesson's summary.
Figure = Callable[[str], dict]


def fixed(x: float, digits: int = 2) -> str:
    """A number as prose writes it: thousands separated, ``digits`` after the point."""
    return f"{x:,.{digits}f}"


def cli_block(argv: list[str]) -> str:
    """What ``python -m batchsim ARGV`` prints (figures off), as the lesson quotes it."""
    from batchsim.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(argv + ["--no-plots"])
    if rc != 0:
        raise SystemExit(f"python -m batchsim {' '.join(argv)} exited {rc}")
    return "```\n$ python -m batchsim " + " ".join(argv) + "\n" + out.getvalue().rstrip() + "\n```"


def lab_checks(n: int) -> int:
    """How many checks ``pytest course/labs -k labN`` runs: its test functions, a parametrized one
    once per case."""
    import ast

    count = 0
    for node in ast.parse((COURSE / "labs" / f"test_lab{n}.py").read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            cases = [
                len(d.args[1].elts)
                for d in node.decorator_list
                if isinstance(d, ast.Call)
                and getattr(d.func, "attr", "") == "parametrize"
                and isinstance(d.args[1], (ast.List, ast.Tuple))
            ]
            count += cases[0] if cases else 1
    return count
