"""The bad-input suite's newer categories: fleets, schedulers, sweeps, plans, the API and the
engines.

The cases are in ``badinput_categories`` (issue 23's, and their neighbours). Each must
be ``held`` (see ``badinput.py``), under its watchdog against a hang (``WATCHDOG_S``, 600 s). A
scheduler case's connection attempt gives up after one second instead of the default five, so
that the suite stays quick: the refusal is the same at either, and no result waits on a time.
"""

from __future__ import annotations

import pytest
from badinput import outcome, write_files
from badinput_categories import (
    API,
    API_SIMULATE,
    CATEGORIES,
    ENGINES,
    FLEETS,
    PLANS,
    SCHEDULERS,
    SWEEPS,
)

NEW = [c for cases in CATEGORIES.values() for c in cases] + API_SIMULATE


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("badinput_categories")
    write_files(tmp)
    return tmp


def test_every_category_has_cases_and_the_ids_are_new():
    from badinput_cases import API as OLD_API
    from badinput_cases import BATCHSIM, REALRUN

    assert all(len(cases) >= 4 for cases in CATEGORIES.values()), {
        k: len(v) for k, v in CATEGORIES.items()
    }
    ids = [c.id for c in NEW + BATCHSIM + OLD_API + REALRUN]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def _held(case, files):
    category, detail = outcome(case, files)
    assert category == "held", detail


@pytest.mark.parametrize("case", FLEETS, ids=[c.id for c in FLEETS])
def test_fleets(case, files, monkeypatch):
    monkeypatch.chdir(files)
    _held(case, files)


@pytest.mark.parametrize("case", SCHEDULERS, ids=[c.id for c in SCHEDULERS])
def test_schedulers(case, files, monkeypatch):
    pytest.importorskip("dask.distributed")
    from batchsim.sim import tasks

    monkeypatch.setattr(tasks, "CONNECT_TIMEOUT", 1.0)
    monkeypatch.chdir(files)
    _held(case, files)


@pytest.mark.parametrize("case", SWEEPS, ids=[c.id for c in SWEEPS])
def test_sweeps(case, files, monkeypatch):
    monkeypatch.chdir(files)
    _held(case, files)


@pytest.mark.parametrize("case", PLANS, ids=[c.id for c in PLANS])
def test_plans(case, files, monkeypatch):
    monkeypatch.chdir(files)
    _held(case, files)


@pytest.mark.parametrize("case", API, ids=[c.id for c in API])
def test_api(case, files):
    _held(case, files)


@pytest.mark.parametrize("case", API_SIMULATE, ids=[c.id for c in API_SIMULATE])
def test_simulate_checks_its_arguments(case, files):
    _held(case, files)


@pytest.mark.parametrize("case", ENGINES, ids=[c.id for c in ENGINES])
def test_engines(case, files, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(files)
    _held(case, files)
