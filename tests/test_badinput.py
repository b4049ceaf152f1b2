"""The bad-input suite: over 300 inputs to both command lines and the Python API.

Each case asserts one outcome (see ``badinput.py``): a refusal is exit code 2 and one
line on stderr naming the field and the value, never a traceback or a hang; an accepted
odd input exits 0 with finite JSON in which every run conserves its requests. The cases
run in this process (``main(argv)``), so the whole suite takes seconds.
"""

from __future__ import annotations

import pytest
from badinput import outcome, write_files
from badinput_cases import API, API_AFTER_MERGE, BATCHSIM, REALRUN

ALL = BATCHSIM + API + REALRUN


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("badinput")
    write_files(tmp)
    return tmp


def test_the_suite_is_large_and_its_ids_unique():
    assert len(ALL) >= 300, len(ALL)
    ids = [c.id for c in ALL]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("case", BATCHSIM, ids=[c.id for c in BATCHSIM])
def test_batchsim(case, files, monkeypatch):
    monkeypatch.chdir(files)  # default figure folders land in the temporary folder
    category, detail = outcome(case, files)
    assert category == "held", detail


@pytest.mark.parametrize("case", API, ids=[c.id for c in API])
def test_api(case, files):
    category, detail = outcome(case, files)
    assert category == "held", detail


@pytest.mark.parametrize("case", API_AFTER_MERGE, ids=[c.id for c in API_AFTER_MERGE])
def test_api_policies_and_limits_check_themselves(case, files):
    category, detail = outcome(case, files)
    assert category == "held", detail


@pytest.mark.parametrize("case", REALRUN, ids=[c.id for c in REALRUN])
def test_realrun(case, files, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(files)
    category, detail = outcome(case, files)
    assert category == "held", detail
