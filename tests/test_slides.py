"""The slide decks and the handout are made from the lessons, show every figure, and fit their pages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from batchsim.teach import slides

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "course" / "lessons"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("slides")
    assert slides.main(["--lessons", str(LESSONS), "--out", str(out)]) == 0
    return out


def test_a_deck_per_lesson_and_a_handout(built):
    lessons = sorted(p.stem for p in LESSONS.glob("[0-9][0-9]-*.md"))
    assert len(lessons) == 8
    assert sorted(p.stem for p in built.glob("*.html")) == sorted(lessons + ["handout"])


def test_every_section_and_every_figure_of_a_lesson_is_on_its_slides(built):
    for lesson in sorted(LESSONS.glob("[0-9][0-9]-*.md")):
        text = lesson.read_text()
        deck = (built / f"{lesson.stem}.html").read_text()
        for heading in re.findall(r"^## (.+)$", text, flags=re.M):
            assert f"<h2>{heading.replace('&', '&amp;')}" in deck.replace("&#x27;", "'"), (lesson.name, heading)
        figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
        linked = re.findall(r"<img src='([^']+)'", deck)
        assert len(linked) == len(figures), lesson.name
        for src in linked:
            # Linked, not copied: the deck shows the figure as it is now.
            assert (built / src).resolve().is_file(), (lesson.name, src)
            assert (built / src).resolve().parent == (ROOT / "course" / "figures").resolve()


def test_a_long_section_is_split_and_no_text_slide_is_overfull():
    text = "# Lesson 0. Long\n\n## Many points\n\n" + "\n".join(f"- point number {i}, said plainly" for i in range(40))
    deck = slides.lesson_slides(text)
    body = [s for s in deck if s.kind == "text"]
    assert len(body) >= 3 and body[1].title.endswith("(continued)")
    assert all(sum(slides._lines(b) for b in s.blocks) <= slides.MAX_LINES for s in body)
    assert sum(b.count("- point") for s in body for b in s.blocks) == 40  # nothing lost


def test_the_handout_holds_every_take_away_on_one_page(built):
    page = (built / "handout.html").read_text()
    total = 0
    for lesson in sorted(LESSONS.glob("[0-9][0-9]-*.md")):
        take = lesson.read_text().split("## Take-aways", 1)[1]
        items = re.findall(r"^\d+\. (.{20})", take, flags=re.M)
        assert items, lesson.name
        total += len(items)
    assert page.count("<li>") == total


def test_slides_fit_their_pages_in_a_real_browser(built):
    chromium = pytest.importorskip("test_browser")._chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.emulate_media(media="print")  # every slide laid out at once, as printed
            over = {}
            for deck in sorted(built.glob("0*.html")):
                page.goto(deck.resolve().as_uri())
                bad = page.evaluate("() => [...document.querySelectorAll('section')].map((s, i) => [i + 1,"
                                    " s.scrollHeight, s.scrollWidth]).filter(x => x[1] > 722 || x[2] > 1282)")
                if bad:
                    over[deck.name] = bad
            page.goto((built / "handout.html").resolve().as_uri())
            # One A4 page: 297 mm less 24 mm of margins, at 96 px per inch.
            height = page.evaluate("() => document.body.scrollHeight")
        finally:
            browser.close()
    assert not over, f"slides whose content overflows 1280x720: {over}"
    assert height <= (297 - 24) / 25.4 * 96, f"the handout is {height} px tall: more than one A4 page"
