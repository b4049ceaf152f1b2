"""A bench/ script as a module, for the tests that call its main (as run from bench/, where its
``from host import yardstick`` finds its neighbour)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def bench_script(name: str, monkeypatch):
    """bench/<name>.py, executed afresh with bench/ on the path for this test only."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"{name}_bench", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def assert_refused(main, argv: list[str], field: str, capsys) -> None:
    """``main(argv)`` exits 2 with argparse's usage, then one line naming ``field``."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and field in err[-1] and ": error: " in err[-1]
