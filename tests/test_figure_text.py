"""The course's figures read from the back row too: no text under 24 px on a slide at 1280x720.

A PNG holds no fonts, so each figure is drawn again as ``make course`` draws it, and each of its
texts (titles, axis and tick labels, legends, annotations) is sized as it is shown: the font in
pixels at the figure's resolution, times the scaling of the PNG into its box, times the screen's.
The slides show each figure in slide versions of its own (``course/figures/slides/``, a row of
panels or fewer each, every text at 24 px as the screen shows it, no two texts overlapping); the
lesson's figure keeps the 14 px it had when the slides showed it, in a box as wide and low as a
slide's (``slides_fit.visual_box``, the lines under it counted as the lesson's slide block writes
them). The committed PNGs must have the sizes measured, or the decks and lessons show others.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from course_script import make_course_figures

from batchsim.teach import lessons, plots
from batchsim.teach.plots.slide import collisions, slide_parts
from batchsim.teach.slides import SLIDE_VERSIONS
from batchsim.teach.slides_content import MAX_LINES, lesson_slides
from batchsim.teach.slides_fit import FLOOR_PX, SCREEN_SCALE, visual_box

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "course" / "lessons"
FIGURES = ROOT / "course" / "figures"
SLIDE_FIGURES = FIGURES / SLIDE_VERSIONS


mcf = make_course_figures()


def _figure_slides() -> list[tuple[str, str, int]]:
    """(lesson, figure file, lines under it) for every slide that shows a figure."""
    out = []
    for p in sorted(LESSONS.glob("[0-9][0-9]-*.md")):
        for s in lesson_slides(p.read_text(), p.name):
            if s.visual is not None and s.visual.kind == "figure":
                out.append((p.name, Path(s.visual.text).name, len(s.lines)))
    return out


def _png_size(path: Path) -> tuple[int, int]:
    png = path.read_bytes()
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


@pytest.fixture(scope="module")
def drawn() -> dict:
    return {name: mcf.course_figure(name)[1] for name in mcf.COURSE_FIGURES}


@pytest.fixture(scope="module")
def slide_drawn() -> dict:
    return {name: mcf.slide_figures(name) for name in mcf.COURSE_FIGURES}


def test_every_figure_of_the_course_is_drawn_by_the_table_and_shown_on_a_slide():
    on_slides = {f for _, f, _ in _figure_slides()}
    assert set(mcf.COURSE_FIGURES) == {p.name for p in FIGURES.glob("*.png")} == on_slides
    # Each has its slide versions, numbered from 1, and the folder holds nothing else.
    parts = {p.name for p in SLIDE_FIGURES.glob("*.png")}
    mine = {f"{Path(n).stem}-{k}.png" for n in mcf.COURSE_FIGURES for k in range(1, 10)}
    assert parts <= mine, parts - mine
    assert all(f"{Path(n).stem}-1.png" in parts for n in mcf.COURSE_FIGURES), parts


def test_every_slide_version_shows_its_text_at_24_px_and_no_two_texts_overlap(slide_drawn):
    floor_pt = mcf.slide_floor_pt()
    box = visual_box(MAX_LINES)
    worst = []
    for name, parts in slide_drawn.items():
        stem = Path(name).stem
        committed = sorted(SLIDE_FIGURES.glob(f"{stem}-[0-9].png"))
        # The decks show the committed PNGs: they must be these drawings (run: make course).
        assert [p.name for p in committed] == [f"{stem}-{k}.png" for k in range(1, len(parts) + 1)]
        for fig, png in zip(parts, committed):
            size = tuple(round(x) for x in fig.get_size_inches() * mcf.DPI)
            assert _png_size(png) == size, (png.name, size)
            assert size[0] <= box[0] and size[1] <= box[1], (png.name, size, box)  # shown at 1:1
            assert not collisions(fig), (png.name, collisions(fig))
            pt, text = min((t.get_fontsize(), t.get_text()) for t in plots.texts(fig))
            worst.append((round(pt * mcf.DPI / 72 * SCREEN_SCALE, 2), png.name, text))
            assert pt >= floor_pt, (png.name, pt, text)
    assert min(worst)[0] >= FLOOR_PX, min(worst)
    # A lesson's two rows are two slides at least: at 24 px a grid of four panels does not fit one.
    assert all(len(slide_drawn[n]) >= 2 for n in ("01-why-batch.png", "05-memory.png"))


def test_a_slide_version_is_the_figure_a_row_at_a_time_each_text_raised_or_wrapped():
    from batchsim.teach.plots.canvas import new_figure

    def draw():
        fig = new_figure(10, 6)
        for (r, c), ax in zip([(0, 0), (0, 1), (1, 0), (1, 1)], fig.subplots(2, 2).flat):
            ax.bar(["the taxi alone", "a bus that waits for sixteen", "a timetable"], [1, 2, 3])
            ax.set_title(
                f"panel {r}{c}: a title long enough to need two lines on a slide, even "
                "one panel wide",
                fontsize=8,
            )
            ax.set_ylabel("requests", fontsize=7)
        fig.suptitle("four panels")
        return fig

    parts = slide_parts(draw, (11.84, 4.84), 18.0)
    shown = [[ax.get_title().replace("\n", " ").split(":")[0] for ax in f.axes] for f in parts]
    assert sum(shown, []) == ["panel 00", "panel 01", "panel 10", "panel 11"], shown  # in order
    assert len(parts) >= 2 and all(len({p[6] for p in part}) == 1 for part in shown), shown  # a row
    for f in parts:
        assert not collisions(f) and min(t.get_fontsize() for t in plots.texts(f)) >= 18.0
        assert all("\n" in ax.get_title() for ax in f.axes)  # wrapped to the panel's width


def test_no_text_of_a_lesson_figure_is_under_14_px_in_a_slide_sized_box(drawn):
    worst = []
    for lesson, name, lines in _figure_slides():
        fig = drawn[name]
        # The lesson shows the committed PNG: it must be the figure measured here (make course).
        w, h = _png_size(FIGURES / name)
        assert (w, h) == tuple(round(x) for x in fig.get_size_inches() * mcf.DPI), (name, (w, h))
        px, text = mcf.text_px_on_slide(fig, lines)[0]
        worst.append((round(float(px), 1), lesson, name, text))
    floor = mcf.PAGE_FLOOR_PX
    small = [x for x in worst if x[0] < floor]
    assert not small, f"figure text under {floor} px in a slide's box (px, lesson, figure): {small}"
    # Not far above either: text set much larger than the page needs crowds the lesson's panels.
    assert min(worst)[0] < floor + 1.5, min(worst)


def test_the_lessons_own_fonts_are_what_the_floor_is_for():
    # The measurement can fail: the lesson figures as drawn for notebooks (7-10 pt) show their
    # text at 7 to 11 px on a slide. Raised, the same figure clears the floor and keeps its larger
    # text.
    fn, kwargs = mcf.COURSE_FIGURES["05-memory.png"]
    _, fig = getattr(lessons, fn)(**kwargs)
    before = mcf.text_px_on_slide(fig, 3)
    assert before[0][0] < 8, before[0]
    sizes = {id(t): t.get_fontsize() for t in plots.texts(fig)}
    floor = mcf.page_floor_pt(fig)
    plots.raise_text(fig, floor)
    after = plots.texts(fig)
    assert min(t.get_fontsize() for t in after) >= floor
    assert all(t.get_fontsize() == sizes[id(t)] for t in after if sizes.get(id(t), 0) > floor)


def test_raised_text_stays_on_the_figure_and_axis_labels_within_their_axes(drawn):
    for name, fig in drawn.items():
        fig.draw_without_rendering()
        W, H = fig.bbox.width, fig.bbox.height
        off = [
            t.get_text()
            for t in plots.texts(fig)
            if (lambda b: b.x0 < -1 or b.y0 < -1 or b.x1 > W + 1 or b.y1 > H + 1)(
                t.get_window_extent()
            )
        ]
        assert not off, (name, off)
        for ax in fig.axes:
            box = ax.get_window_extent()
            assert ax.xaxis.label.get_window_extent().width <= box.width + 1, (
                name,
                ax.xaxis.label.get_text(),
            )
            assert ax.yaxis.label.get_window_extent().height <= box.height + 1, (
                name,
                ax.yaxis.label.get_text(),
            )
