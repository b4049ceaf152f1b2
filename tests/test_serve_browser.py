"""The live view a class watches, in a real browser: ``/dashboard`` while the server is busy.

A ``realrun serve`` process on 127.0.0.1 (the offline tiny model, at most 4 rows so that a
queue forms), Debian's Chromium driven by Playwright at 1280x720 (the smallest projector mode
the page must fit), and a background load of 20 streaming requests over about three seconds.
What is read back is what the class sees, from the page itself: the running and
tokens-per-second numbers rise above 0 while the load runs, the batch chart really has bars
drawn (pixels of the bars' colour, not just axes), every request finishes and the running
count comes back to 0, nothing spills off the screen, and a failed poll brings up the
"unreachable" banner, which goes when polls answer again. A screenshot taken during the load
is kept at ``out/browser/dashboard.png``.

Needs ``playwright`` (the Python package only) and Debian's ``chromium``, found (or installed)
exactly as ``test_browser.py`` does; skipped, with the reason, where neither can be had.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
pytest.importorskip(
    "playwright",
    reason="needs the playwright Python package (pip install playwright; no `playwright install`)",
)

from serving import served  # noqa: E402
from test_browser import CHROMIUM_ARGS, _chromium  # noqa: E402 - one way to find the browser, not two

ROOT = Path(__file__).resolve().parents[1]
ARTEFACTS = ROOT / "out" / "browser"
SCREEN = {"width": 1280, "height": 720}
REQUESTS, SPREAD_S, MAX_TOKENS = 20, 3.0, 60


def _load(url: str, errors: list, done: list) -> None:
    """20 streaming completions, one every 0.15 s, each read to its end; what went wrong goes to
    errors."""

    async def one(client: httpx.AsyncClient, i: int) -> None:
        await asyncio.sleep(i * SPREAD_S / REQUESTS)
        body = {
            "prompt": [1 + i, 2, 3, 4],
            "max_tokens": MAX_TOKENS,
            "stream": True,
            "ignore_eos": True,
        }
        async with client.stream("POST", url + "/v1/completions", json=body) as r:
            if r.status_code != 200:
                errors.append(f"request {i}: HTTP {r.status_code}")
                return
            async for line in r.aiter_lines():
                if line == "data: [DONE]":
                    done.append(i)
                    return
        errors.append(f"request {i}: the stream ended without [DONE]")

    async def all_of_them() -> None:
        async with httpx.AsyncClient(timeout=600) as client:  # a watchdog against a hang only
            await asyncio.gather(*(one(client, i) for i in range(REQUESTS)))

    try:
        asyncio.run(all_of_them())
    except Exception as e:  # noqa: BLE001 - the test thread reports it; a thread's exception would be lost
        errors.append(repr(e))


def _number(page, id_: str) -> float:
    text = page.locator(f"#{id_}").inner_text().strip()
    try:
        return float(text)
    except ValueError:
        return float("nan")


# Pixels of the bars' own colour in the batch chart (axes, grid and labels are other colours).
BAR_PIXELS = """() => {
    const c = document.getElementById('chart-rows'), g = c.getContext('2d');
    const hex = getComputedStyle(document.documentElement).getPropertyValue('--rows').trim();
    const want = [1, 3, 5].map(i => parseInt(hex.slice(i, i + 2), 16));
    const d = g.getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4)
        if (d[i + 3] > 200 && Math.abs(d[i] - want[0]) + Math.abs(d[i + 1] - want[1]) + Math.abs(d[i + 2] - want[2]) < 30) n++;
    return n;
}"""


def test_the_dashboard_shows_the_batch_fill_and_empty_under_load(tmp_path):
    chromium = _chromium()
    from playwright.sync_api import sync_playwright

    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    done: list[int] = []
    page_errors: list[str] = []
    # 4 rows and a KV budget: the batch hits its limit, a queue forms, and both limit lines are
    # drawn.
    with (
        served("--max-seqs", "4", "--kv-budget-tokens", "512", tmp=tmp_path) as srv,
        sync_playwright() as pw,
    ):
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, timeout=600_000)
        try:
            page = browser.new_page(viewport=SCREEN)
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            page.set_default_timeout(600_000)  # watchdogs against a hang only
            page.goto(srv.url + "/dashboard")
            page.wait_for_function("() => document.body.className === 'live'")
            assert _number(page, "n-running") == 0
            bars_idle = page.evaluate(BAR_PIXELS)

            load = threading.Thread(target=_load, args=(srv.url, errors, done), daemon=True)
            started = time.monotonic()
            load.start()
            page.wait_for_function(
                "() => +document.getElementById('n-running').textContent > 0 && "
                "+document.getElementById('n-tps').textContent > 0"
            )
            # Well into the load (the last request arrives at 3 s), so the charts have a history to
            # show.
            page.wait_for_timeout(max(0, 2500 - 1000 * (time.monotonic() - started)))
            page.screenshot(path=str(ARTEFACTS / "dashboard.png"))
            during = {
                k: _number(page, k) for k in ("n-running", "n-tps", "n-waiting", "n-finished")
            }
            bars_busy = page.evaluate(BAR_PIXELS)
            fits = page.evaluate(
                "() => [document.documentElement.scrollWidth, "
                "document.documentElement.scrollHeight]"
            )
            assert load.is_alive(), (
                "the load had ended before the screenshot: it would not show the batch busy"
            )

            load.join(600)
            assert not load.is_alive(), (
                "watchdog: the load did not finish within 600 s (a hang, not a slow machine)"
            )
            page.wait_for_function(
                f"() => +document.getElementById('n-finished').textContent >= {REQUESTS}"
                " && document.getElementById('n-running').textContent === '0'"
            )
            after = {k: _number(page, k) for k in ("n-running", "n-waiting", "n-finished")}

            # A failed poll raises the banner; the next good one takes it down.
            page.route("**/v1/state", lambda route: route.abort())
            # polls come twice a second
            page.wait_for_selector("#banner", state="visible", timeout=600_000)
            banner = page.locator("#banner").inner_text()
            page.unroute("**/v1/state")
            page.wait_for_selector("#banner", state="hidden", timeout=600_000)
        finally:
            browser.close()

    assert not errors, errors
    assert sorted(done) == list(range(REQUESTS))
    assert not page_errors, page_errors
    assert during["n-running"] > 0 and during["n-tps"] > 0, during
    assert bars_idle == 0, f"{bars_idle} bar-coloured pixels before any request"
    assert bars_busy > 500, (
        f"only {bars_busy} bar-coloured pixels in the batch chart during the load"
    )
    assert fits[0] <= SCREEN["width"] and fits[1] <= SCREEN["height"], (
        f"the page is {fits} at {SCREEN}"
    )
    assert after == {"n-running": 0, "n-waiting": 0, "n-finished": REQUESTS}, after
    assert "unreachable" in banner.lower(), banner
