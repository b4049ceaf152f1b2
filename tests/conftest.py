"""Shared test settings: the checkout's root and a headless matplotlib."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session", autouse=True)
def _paged_kernel_built():
    """The paged-attention kernel built (or its build by another worker waited for) before any test
    runs.

    On a fresh machine the first process to need the kernel builds it (a minute or more on a busy
    laptop) and every other waits, saying so on stderr. A test that reads a subprocess's stderr line
    by line would see that notice, on a fresh machine only and only if it ran early: built here
    first, every test meets the machine as a student's second run does. Without torch, nothing to
    do."""
    try:
        from realrun.engine.paged.attention import kernel_available
    except ImportError:
        return
    kernel_available()
