"""Shared test fixtures: paths and a headless matplotlib."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("MPLBACKEND", "Agg")

ROOT = Path(__file__).resolve().parents[1]
AZURE_TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_2023_conv.csv"


@pytest.fixture
def azure_trace() -> Path:
    if not AZURE_TRACE.is_file():
        pytest.skip(f"Azure trace not found at {AZURE_TRACE}")
    return AZURE_TRACE
