"""Notebook 2 in JupyterLab itself, on a laptop's screen (1366 x 768), run as a student runs it.

JupyterLab opens with its file browser shown, so the notebook's page is narrower (about 1,000 px)
than the 1,210 px of ``test_browser``'s folded side bar: the harder case, and the one a student
meets.

``test_browser`` holds the layout in Voila at JupyterLab's narrower page; this opens the real
thing: JupyterLab on 127.0.0.1 with a throwaway configuration, notebook 2 opened, Run > Run All
Cells from the menu, and the panel's figure then drawn beside its sliders, inside the notebook's
page, and its table whole or scrolling in its own box. A screenshot is kept under
``out/browser/``. It needs what the browser test needs (Debian's chromium, playwright) and
JupyterLab, a requirement of the package; it skips with the reason where chromium cannot be had.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from test_browser import (
    ARTEFACTS,
    CHROMIUM_ARGS,
    ROOT,
    SCREEN,
    _chromium,
    _free_port,
    _python_packages,
    _stop,
    _wait_for_port,
)

NOTEBOOK = "02_static_dynamic_continuous.ipynb"
WATCHDOG_MS = 600_000  # against a hang only: a busy laptop starts a kernel in seconds


@pytest.fixture
def lab_url(tmp_path):
    """JupyterLab serving a copy of the notebooks folder, with no token and no state of its own."""
    _python_packages()
    pytest.importorskip("jupyterlab")
    books = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", books, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    port = _free_port()
    env = dict(
        os.environ,
        MPLBACKEND="Agg",
        JUPYTER_PLATFORM_DIRS="1",
        JUPYTER_CONFIG_DIR=str(tmp_path / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
        # the notebook imports the package from the checkout, as a student's kernel does
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    log = (tmp_path / "lab.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={port}",
            "--ServerApp.ip=127.0.0.1",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            "--ServerApp.disable_check_xsrf=True",
            f"--ServerApp.root_dir={books}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",  # offline: no look at the package index
            *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []),
        ],
        cwd=books,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        _wait_for_port(port, proc, timeout=600, name="jupyterlab")  # a watchdog only
        yield f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK}"
    finally:
        _stop(proc, log, ARTEFACTS / "jupyterlab.log")


def test_notebook2_in_jupyterlab_keeps_its_figure_beside_the_sliders(lab_url):
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium, args=CHROMIUM_ARGS, timeout=WATCHDOG_MS
        )
        try:
            page = browser.new_page(viewport=SCREEN)
            page.set_default_timeout(WATCHDOG_MS)
            page.goto(lab_url, timeout=WATCHDOG_MS)
            page.locator(".jp-Notebook .jp-Cell").first.wait_for(state="visible")
            # The status bar says "Idle" once the kernel is up; before that, Run All Cells is greyed
            # out.
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jp-StatusBar-TextItem')].some(e => "
                "/\\bIdle\\b/.test(e.textContent))"
            )
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jp-OutputArea .widget-image')].some(i => "
                "i.complete && i.naturalWidth > 100)"
            )
            page.evaluate(
                "() => [...document.querySelectorAll('.jp-OutputArea .widget-image')].find(i => "
                "i.naturalWidth > 100).closest('.widget-hbox').scrollIntoView({block: 'start'})"
            )
            geometry = page.evaluate("""() => {
                const img = [...document.querySelectorAll('.jp-OutputArea .widget-image')]
                    .find(i => i.naturalWidth > 100);
                const row = img.closest('.widget-hbox');
                const controls = row.querySelector('.widget-vbox').getBoundingClientRect();
                const i = img.getBoundingClientRect();
                const out = img.closest('.jp-OutputArea-output').getBoundingClientRect();
                const pre = row.parentElement.querySelector('pre');
                const p = pre ? pre.getBoundingClientRect() : null;
                return {img: [i.left, i.top, i.right, i.width, i.height],
                        natural: [img.naturalWidth, img.naturalHeight],
                        controls: [controls.left, controls.top, controls.right], output_right: out.right,
                        table: p ? [p.right, pre.scrollWidth, pre.clientWidth, getComputedStyle(pre).overflowX] : null};
            }""")
            page.screenshot(path=str(ARTEFACTS / "notebook2-jupyterlab-1366.png"))
        finally:
            browser.close()
    left, top, right, w, h = geometry["img"]
    # beside
    assert left >= geometry["controls"][2] - 0.5 and abs(top - geometry["controls"][1]) < 40, (
        geometry
    )
    assert right <= geometry["output_right"] + 0.5, geometry  # inside the notebook's page, not cut
    assert w <= geometry["natural"][0] + 0.5, geometry
    # not stretched
    assert abs(h / w - geometry["natural"][1] / geometry["natural"][0]) < 0.02, geometry
    assert w >= 480 - 0.5, geometry  # shrunk no further than the layout allows before it wraps
    table = geometry["table"]
    assert table is not None and table[0] <= geometry["output_right"] + 0.5, geometry
    # whole, or scrolling in its own box
    assert table[1] <= table[2] or table[3] == "auto", geometry
