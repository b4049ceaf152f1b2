"""The bad-input suite's cases on calibrations' step times and spreads, step noise, and compare's
repeats, seeds and load (``badinput_cases``: NOISE_*): one line naming the field and the value, exit
2."""

from __future__ import annotations

import pytest
from badinput import outcome, write_files
from badinput_cases import NOISE_API, NOISE_BATCHSIM, NOISE_REALRUN


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("badinput_noise")
    write_files(tmp)
    return tmp


@pytest.mark.parametrize("case", NOISE_BATCHSIM, ids=[c.id for c in NOISE_BATCHSIM])
def test_batchsim(case, files, monkeypatch):
    monkeypatch.chdir(files)
    category, detail = outcome(case, files)
    assert category == "held", detail


@pytest.mark.parametrize("case", NOISE_API, ids=[c.id for c in NOISE_API])
def test_api(case, files):
    category, detail = outcome(case, files)
    assert category == "held", detail


@pytest.mark.parametrize("case", NOISE_REALRUN, ids=[c.id for c in NOISE_REALRUN])
def test_realrun(case, files, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(files)
    category, detail = outcome(case, files)
    assert category == "held", detail
