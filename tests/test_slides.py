"""The slide decks and the handout: made from the lessons, and readable from the back row.

A slide is one figure or table of its lesson and at most three short lines written for it, never
the lesson's paragraphs; wide command output is cut to the columns the slide names, or replaced by
a shorter table or code written for the slide. In Chromium, at 1280x720 as a projector shows the
deck, no text is under 24 px (every text, the slide's number included; a figure's, through the
size it is drawn at and the scale it is shown at), no table row or output line wraps, and nothing
runs off a slide. The browser part skips, saying why, where Chromium or Playwright's Python package
is missing (nothing is installed or downloaded here).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from course_script import make_course_figures

from batchsim.teach import slides
from batchsim.teach.slides_content import (
    LINE_CHARS,
    MAX_LINES,
    Slide,
    Visual,
    lesson_slides,
    visible,
)
from batchsim.teach.slides_fit import FLOOR_PX, SlideError, trim_output, trim_table

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "course" / "lessons"
SLIDE_FIGURES = ROOT / "course" / "figures" / slides.SLIDE_VERSIONS

# A command's output as batchsim prints it: a summary table, a second table, notes.
OUTPUT = """$ python -m batchsim run fleet
fleet: more buses or bigger buses

policy            servers  done  p99 E2E s  $/1M tok
----------------  -------  ----  ---------  --------
1 GPU x batch 64        1  1200       6.31      2.66
4 taxis                 4  1200       7.37     10.64

each server of a fleet:
policy              done  p99 E2E s  $/1M tok
------------------  ----  ---------  --------
4 taxis / server 0   300       7.63     10.75

workload: 1200 requests, Poisson(rate=2.0), prompt Uniform(lo=32, hi=512), output LogNormal(mean_tokens=128.0)"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("slides")
    assert slides.main(["--lessons", str(LESSONS), "--out", str(out)]) == 0
    return out


def _decks() -> dict[str, list[Slide]]:
    return {
        p.name: lesson_slides(p.read_text(), p.name)
        for p in sorted(LESSONS.glob("[0-9][0-9]-*.md"))
    }


def test_a_deck_per_lesson_and_a_handout(built):
    lessons = sorted(p.stem for p in LESSONS.glob("[0-9][0-9]-*.md"))
    assert len(lessons) == 9
    assert sorted(p.stem for p in built.glob("*.html")) == sorted(lessons + ["handout"])


def test_every_section_and_every_figure_of_a_lesson_is_on_its_slides(built):
    for lesson in sorted(LESSONS.glob("[0-9][0-9]-*.md")):
        text = lesson.read_text()
        deck = (built / f"{lesson.stem}.html").read_text()
        for heading in re.findall(r"^## (.+)$", text, flags=re.M):
            assert f"<h2>{heading.replace('&', '&amp;')}" in deck.replace("&#x27;", "'"), (
                lesson.name,
                heading,
            )
        figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
        linked = re.findall(r"<img src='([^']+)'", deck)
        # Each figure is shown in its slide versions (make course draws them), a slide a part.
        parts = [p for f in figures for p in slides.figure_parts(lesson, f)]
        assert len(parts) >= len(figures), lesson.name
        assert linked == [f"figures/{p.name}" for p in parts], lesson.name
        assert all(p.parent == SLIDE_FIGURES for p in parts), lesson.name
        for src in linked:
            # Copied beside the deck, byte for byte the course's figure: a deck folder carried
            # elsewhere shows it.
            assert src.startswith("figures/") and (built / src).is_file(), (lesson.name, src)
            assert (built / src).read_bytes() == (SLIDE_FIGURES / Path(src).name).read_bytes()


def test_a_deck_folder_copied_elsewhere_shows_every_figure(built, tmp_path):
    moved = tmp_path / "usb-stick" / "slides"
    shutil.copytree(built, moved)
    for deck in moved.glob("[0-9][0-9]-*.html"):
        for src in re.findall(r"<img src='([^']+)'", deck.read_text()):
            assert not src.startswith(("/", "..")) and (moved / src).is_file(), (deck.name, src)


def test_a_figure_is_shown_in_its_slide_versions_in_order_or_as_itself_where_it_has_none(tmp_path):
    lessons, figures = tmp_path / "lessons", tmp_path / "figures"
    lessons.mkdir()
    (figures / slides.SLIDE_VERSIONS).mkdir(parents=True)
    # another figure's part, whose name starts alike
    for name in (
        "f.png",
        "g.png",
        "slides/f-2.png",
        "slides/f-10.png",
        "slides/f-1.png",
        "slides/f-low-1.png",
    ):
        (figures / name).write_bytes(name.encode())
    (lessons / "01-l.md").write_text(
        "# L\n\n## A\n\n![f](../figures/f.png)\n\n## B\n\n![g](../figures/g.png)\n"
    )
    out = tmp_path / "out"
    assert slides.main(["--lessons", str(lessons), "--out", str(out)]) == 0
    deck = (out / "01-l.html").read_text()
    shown = ["figures/f-1.png", "figures/f-2.png", "figures/f-10.png", "figures/g.png"]
    assert re.findall(r"<img src='([^']+)'", deck) == shown
    assert deck.count("<h2>A</h2>") == 3 and "5/5" in deck  # a slide a part, numbered through
    assert (out / "figures" / "f-10.png").read_bytes() == b"slides/f-10.png"


def test_each_slide_is_a_visual_or_short_lines_and_never_the_lessons_prose():
    for name, deck in _decks().items():
        text = (LESSONS / name).read_text()
        # A paragraph of the lesson (prose, not a list, table, code or comment) is not on any slide.
        prose = [
            " ".join(b.split())
            for b in re.split(r"\n\s*\n", re.sub(r"<!--.*?-->", "", text, flags=re.S))
            if b.strip() and not re.match(r"\s*([-*|#>!`]|\d+\.|    )", b)
        ]
        said = " ".join(visible(ln) for s in deck for ln in s.lines)
        for para in prose:
            assert visible(para)[:50] not in said, (name, para[:80])
        for s in deck:
            assert len(s.lines) <= MAX_LINES and all(
                len(visible(ln)) <= LINE_CHARS for ln in s.lines
            ), (name, s)
            assert s.opening or s.visual or s.lines, f"{name}: slide {s.title!r} holds nothing"
            # A line that points at a picture ("the timeline (left)") stands beside that picture.
            if any(re.search(r"\((left|right)\)|panel|timeline|the figure", ln) for ln in s.lines):
                assert s.kind == "figure", (name, s.title, s.lines)


def test_a_slide_block_captions_the_visual_before_it_and_cuts_it_to_its_columns():
    text = (
        "# Lesson 0. Fleet\n\n<!-- slide\nten minutes\n-->\n\n## A fleet\n\nProse a reader reads, "
        "not a slide.\n\n```\n"
        + OUTPUT
        + "\n```\n\n<!-- slide\ncolumns: policy | servers | $/1M tok\nOne big bus is "
        "cheapest\n-->\n\n![A fleet](f.png)\n\n## Why\n\n<!-- slide\nBecause a step reads the "
        "weights once\n-->\n"
    )
    title, output, figure, why = lesson_slides(text)
    assert title.opening and title.lines == ("ten minutes",)
    assert output.kind == "code" and output.lines == ("One big bus is cheapest",)
    shown = [ln for ln in output.visual.text.splitlines() if ln.strip()]
    assert shown[0] == "$ python -m batchsim run fleet"  # the command a student types stays
    # One table: the per-server one has no "servers" column; the notes and the description are gone.
    assert [ln.split()[0] for ln in shown[1:]] == ["policy", "----------------", "1", "4"]
    assert (
        "server 0" not in output.visual.text
        and "workload" not in output.visual.text
        and "done" not in shown[1]
    )
    assert shown[1].split() == ["policy", "servers", "$/1M", "tok"] and shown[-1].split() == [
        "4",
        "taxis",
        "4",
        "10.64",
    ]
    assert figure.kind == "figure" and figure.lines == () and figure.visual.alt == "A fleet"
    assert why.kind == "text" and why.lines == ("Because a step reads the weights once",)
    assert "Prose" not in " ".join(ln for s in (title, output, figure, why) for ln in s.lines)


def test_a_slide_block_may_give_its_slide_shorter_code_or_a_table_of_its_own():
    steps = "".join(f"    step{k}()  # {'why ' * 20}\n" for k in range(20))
    code = f"```python\ndef serve(self):\n{steps}```"
    own = "<!-- slide\n```python\ndef serve(self):\n    step0()\n```\nThe loop, in short\n-->"
    _, short = lesson_slides(f"# L\n\n## S\n\n{code}\n\n{own}\n")
    assert short.kind == "code" and short.lines == ("The loop, in short",)
    assert short.visual.text == "def serve(self):\n    step0()"  # indents kept, fences gone
    with pytest.raises(SlideError, match="fenced block of code, got 2 table lines and 2 fences"):
        lesson_slides(f"# L\n\n## S\n\n{code}\n\n<!-- slide\n| a |\n|---|\n```\nx\n```\n-->\n")
    with pytest.raises(SlideError, match="own code takes the place of a table or output, not of f"):
        lesson_slides("# L\n\n## S\n\n![f](f.png)\n\n<!-- slide\n```\nx\n```\n-->\n")
    with pytest.raises(SlideError, match="output is .* characters wide"):  # the lesson's: too long
        lesson_slides(f"# L\n\n## S\n\n{code}\n")


def test_columns_name_what_exists_and_every_table_that_has_them_is_cut():
    both = trim_output(OUTPUT, ["policy", "p99 E2E s"])  # both tables have these two
    assert (
        "4 taxis / server 0" in both and sum(ln.startswith("---") for ln in both.splitlines()) == 2
    )
    with pytest.raises(
        SlideError, match=r"'busy' in no table of the output; its tables have policy \| servers"
    ):
        trim_output(OUTPUT, ["policy", "busy"])
    with pytest.raises(SlideError, match="no table"):
        trim_output("$ echo hi\nhi", ["policy"])
    table = "| GPU | $/hour | note |\n|---|---|---|\n| T4 | 0.50 | does not fit, a long note |"
    assert trim_table(table, ["GPU", "$/hour"]).splitlines() == [
        "| GPU | $/hour |",
        "|---|---|",
        "| T4 | 0.50 |",
    ]
    with pytest.raises(
        SlideError, match=r"'price' not in the table, whose columns are GPU \| \$/hour \| note"
    ):
        trim_table(table, ["price"])


def test_what_a_slide_cannot_hold_is_refused_with_the_field_and_the_value():
    with pytest.raises(SlideError, match=r"lines must be at most 3 on a slide, got 4"):
        Slide("t", ("a", "b", "c", "d"))
    with pytest.raises(SlideError, match=rf"1 to {LINE_CHARS} characters.*got {LINE_CHARS + 1}"):
        Slide("t", ("x" * (LINE_CHARS + 1),))
    with pytest.raises(SlideError, match=r"kind must be one of figure, table, code, got 'video'"):
        Visual("video", "a.mp4")
    wide = (
        "```\n" + "\n".join(" ".join(f"col{j:02d}" for j in range(30)) for _ in range(3)) + "\n```"
    )
    with pytest.raises(
        SlideError, match=r"x.md, 'Wide': output is 179 characters wide.*columns: a \| b"
    ):
        lesson_slides(f"# L\n\n## Wide\n\n{wide}\n", "x.md")
    with pytest.raises(SlideError, match="no table or output comes right before"):
        lesson_slides("# L\n\n## S\n\nProse.\n\n<!-- slide\ncolumns: a\n-->\n")


def test_a_bad_lesson_is_one_line_and_exit_code_2(tmp_path, capsys):
    (tmp_path / "01-bad.md").write_text("# L\n\n## S\n\n<!-- slide\n" + "a line\n" * 4 + "-->\n")
    assert slides.main(["--lessons", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(
        "slides: error: 01-bad.md, 'S': lines must be at most 3"
    )
    assert slides.main(["--lessons", str(tmp_path / "none"), "--out", str(tmp_path / "out")]) == 2
    assert "lessons must be a folder" in capsys.readouterr().err


def test_the_handout_holds_every_take_away_on_one_page(built):
    page = (built / "handout.html").read_text()
    total = 0
    for lesson in sorted(LESSONS.glob("[0-9][0-9]-*.md")):
        take = lesson.read_text().split("## Take-aways", 1)[1]
        items = re.findall(r"^\d+\. (.{20})", take, flags=re.M)
        assert items, lesson.name
        total += len(items)
    assert page.count("<li>") == total and "<!--" not in page


# Each slide as the deck's own script shows it on a 1280x720 screen (scaled, as a projector gets
# it): the smallest text as rendered and its CSS size, table cells whose text takes more than one
# line, output blocks whose lines wrapped or ran past their box, the short lines counted as lines on
# the page, cut-off headings, content past the slide's edge or its body's, and each figure's scale
# (screen px per PNG px).
_MEASURE = """() => {
  const lines = (el) => { const r = document.createRange(); r.selectNodeContents(el);
    const lh = parseFloat(getComputedStyle(el).lineHeight) * scale;
    const tops = [...r.getClientRects()].filter(q => q.width > 0).map(q => q.top).sort((a, b) => a - b);
    let n = 0, last = -1e9; for (const t of tops) if (t - last > lh / 2) { n++; last = t; } return n; };
  const spills = (e) => e.scrollHeight > e.clientHeight || e.scrollWidth > e.clientWidth;
  let scale = 1;
  return [...document.querySelectorAll('section')].map((s, i) => {
    show(i);
    scale = s.getBoundingClientRect().width / 1280;
    let small = [1e9, '', 1e9];
    const w = document.createTreeWalker(s, NodeFilter.SHOW_TEXT);
    while (w.nextNode()) { const t = w.currentNode; if (!t.textContent.trim()) continue;
      const css = parseFloat(getComputedStyle(t.parentElement).fontSize);
      if (css * scale < small[0]) small = [css * scale, t.textContent.trim().slice(0, 40), css]; }
    return { slide: i + 1, kind: s.className.replace(' current', ''), min_px: small[0], min_text: small[1],
      min_css_px: small[2],
      wrapped: [...s.querySelectorAll('td, th')].filter(c => c.textContent.trim() && lines(c) > 1).map(c => c.textContent.trim()),
      output: [...s.querySelectorAll('pre')].filter(p => p.scrollWidth > p.clientWidth + 1 ||
        lines(p) !== p.textContent.split('\\n').filter(x => x.length).length).length,
      text_lines: [...s.querySelectorAll('ul.lines li, .alt')].reduce((n, e) => n + lines(e), 0),
      cut_title: [...s.querySelectorAll('h2')].some(h => h.scrollWidth > h.clientWidth + 1),
      over: spills(s) || [...s.querySelectorAll('.body, .visual')].some(spills),
      figures: [...s.querySelectorAll('img')].map(m => [m.getAttribute('src'),
        m.complete && m.naturalWidth > 0 ? m.getBoundingClientRect().width / m.naturalWidth : 0]) };
  });
}"""


def measure(folder: Path) -> dict[str, list[dict]]:
    """Every deck under ``folder``, slide by slide, measured in headless Chromium at 1280x720."""
    chromium = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
    if chromium is None:
        pytest.skip(
            "no Chromium on PATH (chromium or chromium-browser): the slides' layout cannot be "
            "measured; apt-get install chromium to run this check"
        )
    sync_api = pytest.importorskip(
        "playwright.sync_api",
        reason="Playwright's Python package is not installed (pip install playwright; Debian's "
        "Chromium is used, nothing is downloaded)",
    )
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            out = {}
            for deck in sorted(folder.glob("[0-9][0-9]-*.html")):
                page.goto(deck.resolve().as_uri())
                # A watchdog against a hang only: the figures are local files.
                page.wait_for_function(
                    "() => [...document.images].every(i => i.complete)", timeout=600_000
                )
                out[deck.name] = page.evaluate(_MEASURE)
            page.emulate_media(media="print")
            page.goto((folder / "handout.html").resolve().as_uri())
            out["handout height px"] = page.evaluate("() => document.body.scrollHeight")
        finally:
            browser.close()
    return out


def test_in_chromium_at_1280x720_no_text_under_24_px_no_row_wraps_nothing_runs_off(built):
    m = measure(built)
    height = m.pop("handout height px")
    assert height <= (297 - 24) / 25.4 * 96, (
        f"the handout is {height} px tall: more than one A4 page"
    )
    slides_seen = [(deck, s) for deck, ss in m.items() for s in ss]
    assert len(slides_seen) > 80
    # Every text element: its computed size, and the size the 1280x720 screen shows it at (0.97 x).
    small = [
        (d, s["slide"], round(s["min_px"], 2), s["min_css_px"], s["min_text"])
        for d, s in slides_seen
        if s["min_px"] < FLOOR_PX or s["min_css_px"] < FLOOR_PX
    ]
    assert not small, f"text under {FLOOR_PX} px at 1280x720 (shown px, CSS px): {small}"
    wrapped = [(d, s["slide"], s["wrapped"][:3]) for d, s in slides_seen if s["wrapped"]]
    assert not wrapped, f"table rows that wrap: {wrapped}"
    cut = [(d, s["slide"]) for d, s in slides_seen if s["output"] or s["cut_title"] or s["over"]]
    assert not cut, f"output wrapped or run off, cut headings, content past slide or body: {cut}"
    wordy = [
        (d, s["slide"], s["text_lines"]) for d, s in slides_seen if s["text_lines"] > MAX_LINES
    ]
    assert not wordy, (
        f"slides with more than {MAX_LINES} lines of text beside their visual: {wordy}"
    )
    # A figure's smallest text is drawn at the slide floor (tests/test_figure_text.py draws each):
    # shown at its natural size it stays there; shrunk to fit, it would not.
    mcf = make_course_figures()
    drawn_px = mcf.slide_floor_pt() * mcf.DPI / 72
    figures = [(d, s["slide"], src, scale) for d, s in slides_seen for src, scale in s["figures"]]
    assert len(figures) >= len(mcf.COURSE_FIGURES)
    shrunk = [
        (d, k, src, round(drawn_px * scale, 2))
        for d, k, src, scale in figures
        if drawn_px * scale < FLOOR_PX
    ]
    assert not shrunk, f"figures whose smallest text shows under {FLOOR_PX} px: {shrunk}"
