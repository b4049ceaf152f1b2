"""A student's view, end to end: notebook 1 served by Voila, opened in headless Chromium.

The test starts Voila on 127.0.0.1 (the dashboard a teacher projects), opens
notebook 1 in Debian's Chromium driven by Playwright on a laptop's screen
(1366x768), waits for the slider panel to draw its figure, and scrolls to it as a
student would. The arrival-rate slider and the *whole* figure must then lie inside
the screen, the figure shown at its natural size (not stretched, so not blurry),
and drawn once on the page. Then it types a new arrival rate into the slider's
readout and checks that the panel's picture really changed (pixel data, not just
a re-render). Notebook 2, whose figure is the course's widest, is opened at the laptop's width and
at the narrower page JupyterLab leaves: its figure stays beside the sliders and its table whole.
Screenshots are kept under ``out/browser/`` as artefacts.

What it needs: the ``chromium`` Debian package, and the ``voila`` and
``playwright`` Python packages (never ``playwright install``: Debian's browser is
used). Missing Python packages are installed with pip; a missing browser is
installed with apt-get when the test runs as root, and the test is skipped, with
the reason, only where that is impossible.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "01_why_batch.ipynb"
ARTEFACTS = ROOT / "out" / "browser"
SCREEN = {"width": 1366, "height": 768}  # the commonest laptop screen
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _chromium() -> str:
    """Path to Debian's Chromium, installing it with apt-get if we may; else skip."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if os.name != "posix" or os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(
            "chromium is not installed and cannot be (needs root and apt-get): apt-get install -y "
            "chromium"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        subprocess.run(
            ["apt-get", "update", "-qq"], check=True, env=env, timeout=600, capture_output=True
        )
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "chromium"],
            check=True,
            env=env,
            timeout=900,
            capture_output=True,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"chromium could not be installed with apt-get: {e}")
    path = shutil.which("chromium")
    if not path:
        pytest.skip("apt-get installed chromium but no chromium executable is on PATH")
    return path


def _python_packages() -> None:
    """voila and playwright (the Python package only): pip-install them if absent."""
    missing = [
        pkg
        for pkg, mod in (("voila", "voila"), ("playwright", "playwright"))
        if importlib.util.find_spec(mod) is None
    ]
    if missing:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", *missing], check=True, timeout=900
        )
        importlib.invalidate_caches()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float, name: str = "voila") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with code {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{name} did not listen on port {port} within {timeout:.0f} s")


def _pixels(png: bytes) -> np.ndarray:
    import matplotlib.image

    return matplotlib.image.imread(io.BytesIO(png), format="png")


def _changed_fraction(a: bytes, b: bytes) -> float:
    x, y = _pixels(a), _pixels(b)
    if x.shape != y.shape:
        return 1.0
    return float((np.abs(x - y).max(axis=-1) > 0.05).mean())


def _stop(proc: subprocess.Popen, log, keep_as: Path) -> None:
    """Stop a server the test started (killed if it will not end) and keep its log as an
    artefact."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)
    log.close()
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(log.name, keep_as)


@contextlib.contextmanager
def _voila(notebook: Path, tmp_path: Path):
    """Voila serving ``notebook`` on 127.0.0.1; yields its URL and stops it (its log kept as an
    artefact)."""
    _python_packages()
    port = _free_port()
    log = (tmp_path / "voila.log").open("w")
    env = dict(os.environ, MPLBACKEND="Agg", JUPYTER_PLATFORM_DIRS="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "voila",
            str(notebook.relative_to(ROOT)),
            "--no-browser",
            f"--port={port}",
            "--Voila.ip=127.0.0.1",
            "--VoilaConfiguration.show_tracebacks=True",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        # a watchdog: voila starts in seconds, slowly on a busy laptop
        _wait_for_port(port, proc, timeout=600)
        yield f"http://127.0.0.1:{port}/"
    finally:
        _stop(proc, log, ARTEFACTS / f"voila-{notebook.stem}.log")


@pytest.fixture
def voila_url(tmp_path):
    with _voila(NOTEBOOK, tmp_path) as url:
        yield url


def test_notebook1_slider_changes_the_plot_in_a_real_browser(voila_url):
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=600_000)
        try:
            page = browser.new_page(viewport=SCREEN)
            page.set_default_timeout(600_000)  # watchdogs against a hang only
            page.goto(voila_url, timeout=600_000)
            panel_img = page.locator(".widget-image").last
            panel_img.wait_for(state="visible")
            page.wait_for_function(
                "() => { const i = [...document.querySelectorAll('.widget-image')].pop(); return i "
                "&& i.naturalWidth > 100; }"
            )
            images_on_page = page.evaluate(
                "() => [...document.querySelectorAll('img')].filter(i => i.naturalWidth > "
                "100).length"
            )
            # A student scrolls the panel to the top of the screen; then nothing more may be needed.
            panel_img.evaluate("i => i.closest('.widget-hbox').scrollIntoView({block: 'start'})")
            page.wait_for_timeout(300)
            slider = page.locator(".widget-slider").filter(has_text="arrival rate").first
            geometry = page.evaluate("""() => {
                const i = [...document.querySelectorAll('.widget-image')].pop().getBoundingClientRect();
                const s = [...document.querySelectorAll('.widget-slider')]
                    .find(e => e.innerText.includes('arrival rate')).getBoundingClientRect();
                const img = [...document.querySelectorAll('.widget-image')].pop();
                return {img: [i.left, i.top, i.right, i.bottom], slider: [s.left, s.top, s.right, s.bottom],
                        natural: [img.naturalWidth, img.naturalHeight], shown: [i.width, i.height]};
            }""")
            page.screenshot(path=str(ARTEFACTS / "01_screen.png"))
            page.screenshot(path=str(ARTEFACTS / "01_page.png"), full_page=True)
            before_src = panel_img.get_attribute("src")
            before = panel_img.screenshot(path=str(ARTEFACTS / "02_panel_before.png"))

            # The arrival-rate slider is the first slider of the panel; type into its readout, as a
            # student can.
            slider = page.locator(".widget-slider").filter(has_text="arrival rate").first
            readout = slider.locator(".widget-readout")
            readout.click()
            page.keyboard.press("Control+A")
            page.keyboard.type("40")
            page.keyboard.press("Enter")
            page.wait_for_function(
                "(old) => { const i = [...document.querySelectorAll('.widget-image')].pop(); "
                "return i && i.src !== old; }",
                arg=before_src,
            )
            page.wait_for_function(
                "() => { const i = [...document.querySelectorAll('.widget-image')].pop(); return "
                "i.complete && i.naturalWidth > 100; }"
            )
            after = panel_img.screenshot(path=str(ARTEFACTS / "03_panel_after.png"))
            page.screenshot(path=str(ARTEFACTS / "04_screen_after.png"))
            readout_text = readout.inner_text()
            table_text = page.locator(".widget-html").filter(has_text="p99 E2E").last.inner_text()
        finally:
            browser.close()

    def inside(box):
        left, top, right, bottom = box
        return (
            left >= 0
            and top >= 0
            and right <= SCREEN["width"] + 0.5
            and bottom <= SCREEN["height"] + 0.5
        )

    assert inside(geometry["slider"]), geometry
    assert inside(geometry["img"]), geometry
    # Natural size: one PNG pixel per CSS pixel (the old panel stretched 800 px to 1,332).
    assert abs(geometry["shown"][0] - geometry["natural"][0]) <= 1, geometry
    assert abs(geometry["shown"][1] - geometry["natural"][1]) <= 1, geometry
    assert images_on_page == 1, f"the figure is drawn {images_on_page} times on the page"
    assert readout_text.strip().startswith("40"), readout_text
    # The figure's title names the rate, and the bars move: a real change of pixels, not a redraw.
    assert _changed_fraction(before, after) > 0.01
    assert "taxi" in table_text and "dynamic" in table_text


#: The notebook's width in JupyterLab on a 1366 px screen, its side bar folded: the page less the
#: side bar's tabs, the prompts' column, the margins and a scroll bar (about 1,210 px), where Voila
#: gives about 1,330. A page this wide is what the panels must fit there.
JUPYTERLAB_WIDTH = 1210


@pytest.mark.parametrize("width", [SCREEN["width"], JUPYTERLAB_WIDTH])
def test_notebook2_figure_stays_beside_the_sliders_and_its_table_is_whole(tmp_path, width):
    """Notebook 2's figure is the course's widest (880 px). At a laptop's width in Voila, and at the
    narrower page JupyterLab leaves, it is drawn beside the controls, inside the page, and the table
    under it is whole on screen or scrolls in its own box, never cut at the page's edge."""
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    with (
        _voila(ROOT / "notebooks" / "02_static_dynamic_continuous.ipynb", tmp_path) as url,
        sync_playwright() as pw,
    ):
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=600_000)
        try:
            page = browser.new_page(viewport={"width": width, "height": SCREEN["height"]})
            page.set_default_timeout(600_000)  # watchdogs against a hang only
            page.goto(url, timeout=600_000)
            page.wait_for_function(
                "() => [...document.querySelectorAll('.widget-image')].some(i => i.complete && "
                "i.naturalWidth > 100)"
            )
            geometry = page.evaluate("""() => {
                const img = [...document.querySelectorAll('.widget-image')].find(i => i.naturalWidth > 100);
                const row = img.closest('.widget-hbox');
                const controls = row.querySelector('.widget-vbox').getBoundingClientRect();
                const i = img.getBoundingClientRect();
                const pre = row.parentElement.querySelector('pre');
                const p = pre ? pre.getBoundingClientRect() : null;
                return {img: [i.left, i.top, i.right, i.width, i.height], natural: [img.naturalWidth, img.naturalHeight],
                        controls: [controls.left, controls.top, controls.right],
                        table: p ? [p.right, pre.scrollWidth, pre.clientWidth, getComputedStyle(pre).overflowX] : null,
                        page: document.documentElement.clientWidth};
            }""")
            page.screenshot(path=str(ARTEFACTS / f"notebook2-{width}.png"))
        finally:
            browser.close()
    left, top, right, w, h = geometry["img"]
    # beside
    assert left >= geometry["controls"][2] - 0.5 and abs(top - geometry["controls"][1]) < 40, (
        geometry
    )
    assert right <= geometry["page"] + 0.5, geometry
    assert (
        w <= geometry["natural"][0] + 0.5
        and abs(h / w - geometry["natural"][1] / geometry["natural"][0]) < 0.02
    ), geometry
    if width == SCREEN["width"]:
        # room enough: its natural size, not shrunk
        assert abs(w - geometry["natural"][0]) <= 1, geometry
    table = geometry["table"]
    assert table is not None and table[0] <= geometry["page"] + 0.5, geometry
    # whole, or scrolling in its own box
    assert table[1] <= table[2] or table[3] == "auto", geometry
