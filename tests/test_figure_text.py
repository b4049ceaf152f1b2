"""The course's figures read from the back row too: no text under 14 px on its slide at 1280x720.

A PNG holds no fonts, so each figure is drawn again as ``make course`` draws it, and each of its
texts (titles, axis and tick labels, legends, annotations) is sized as its slide shows it: the font
in pixels at the figure's resolution, times the slide's scaling of the PNG into its figure box
(``slides_fit.visual_box``, the lines under it counted as the lesson's slide block writes them),
times the screen's. The committed PNG must have the size measured, or the slide shows another.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from batchsim.teach import lessons, plots
from batchsim.teach.slides_content import lesson_slides
from batchsim.teach.slides_fit import FLOOR_PX
from course_script import make_course_figures

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "course" / "lessons"
FIGURES = ROOT / "course" / "figures"


mcf = make_course_figures()


def _figure_slides() -> list[tuple[str, str, int]]:
    """(lesson, figure file, lines under it) for every slide that shows a figure."""
    out = []
    for p in sorted(LESSONS.glob("[0-9][0-9]-*.md")):
        for s in lesson_slides(p.read_text(), p.name):
            if s.visual is not None and s.visual.kind == "figure":
                out.append((p.name, Path(s.visual.text).name, len(s.lines)))
    return out


@pytest.fixture(scope="module")
def drawn() -> dict:
    return {name: mcf.course_figure(name)[1] for name in mcf.COURSE_FIGURES}


def test_every_figure_of_the_course_is_drawn_by_the_table_and_shown_on_a_slide():
    on_slides = {f for _, f, _ in _figure_slides()}
    assert set(mcf.COURSE_FIGURES) == {p.name for p in FIGURES.glob("*.png")} == on_slides


def test_no_text_of_a_figure_is_under_14_px_on_its_slide(drawn):
    worst = []
    for lesson, name, lines in _figure_slides():
        fig = drawn[name]
        png = (FIGURES / name).read_bytes()
        w, h = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
        # The slide shows the committed PNG: it must be the figure measured here (run: make course).
        assert (w, h) == tuple(round(x) for x in fig.get_size_inches() * mcf.DPI), (name, (w, h))
        px, text = mcf.text_px_on_slide(fig, lines)[0]
        worst.append((round(float(px), 1), lesson, name, text))
    small = [x for x in worst if x[0] < FLOOR_PX]
    assert not small, f"figure text under {FLOOR_PX} px on a 1280x720 slide (px, lesson, figure, text): {small}"
    # Not far above either: text set much larger than the slide needs crowds the lesson's panels.
    assert min(worst)[0] < FLOOR_PX + 1.5, min(worst)


def test_the_lessons_own_fonts_are_what_the_floor_is_for():
    # The measurement can fail: the lesson figures as drawn for notebooks (7-10 pt) show their
    # text at 7 to 11 px on a slide. Raised, the same figure clears the floor and keeps its larger text.
    fn, kwargs = mcf.COURSE_FIGURES["05-memory.png"]
    _, fig = getattr(lessons, fn)(**kwargs)
    before = mcf.text_px_on_slide(fig, 3)
    assert before[0][0] < 8, before[0]
    sizes = {id(t): t.get_fontsize() for t in plots.texts(fig)}
    floor = mcf.slide_floor_pt(fig)
    plots.raise_text(fig, floor)
    after = plots.texts(fig)
    assert min(t.get_fontsize() for t in after) >= floor
    assert all(t.get_fontsize() == sizes[id(t)] for t in after if sizes.get(id(t), 0) > floor)


def test_raised_text_stays_on_the_figure_and_axis_labels_within_their_axes(drawn):
    for name, fig in drawn.items():
        fig.draw_without_rendering()
        W, H = fig.bbox.width, fig.bbox.height
        off = [t.get_text() for t in plots.texts(fig)
               if (lambda b: b.x0 < -1 or b.y0 < -1 or b.x1 > W + 1 or b.y1 > H + 1)(t.get_window_extent())]
        assert not off, (name, off)
        for ax in fig.axes:
            box = ax.get_window_extent()
            assert ax.xaxis.label.get_window_extent().width <= box.width + 1, (name, ax.xaxis.label.get_text())
            assert ax.yaxis.label.get_window_extent().height <= box.height + 1, (name, ax.yaxis.label.get_text())
