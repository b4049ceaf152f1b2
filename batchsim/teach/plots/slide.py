"""A lesson's figure redrawn for a slide: a few of its panels at a time, text for the back row.

A lesson figure is read on a page, a metre from the eye; the same figure on a projector is read
from the back of a room, where text under about 24 px (on a 1280x720 slide) is lost. A PNG's text
shows at its font size times the scale the slide shows it at, and a slide's figure box is about as
wide as the lesson's figure, so the figure cannot be shown larger: its text must be drawn larger.
At 24 px, though, a 2x2 grid in a 1184x484 box leaves each panel a sliver, and titles run into
each other. So a slide shows a figure's panels a few at a time: each row of its grid on a slide of
its own, and a row whose texts collide at the larger size is cut again (two panels a slide, then
one). Every text under the floor is raised to it (``raise_text``), titles and the names under bars
are wrapped to fit, a legend that covers a number moves to a free corner or beside its panel, and a
part is kept only when no two of its texts overlap and none runs off the figure (``collisions``).

Each part starts from a fresh copy of the lesson's figure with the other panels left out: the same
data, colours and labels.
"""

from __future__ import annotations

import pickle
import textwrap
from collections.abc import Callable

from matplotlib.figure import Figure
from matplotlib.gridspec import GridSpec
from matplotlib.text import Text

from .canvas import raise_text, texts

__all__ = ["panels", "keep_panels", "wrap_text", "collisions", "slide_parts"]

Cell = tuple[int, int]


def panels(fig: Figure) -> list[Cell]:
    """The (row, column) of each panel of ``fig``'s grid, in reading order (a twin axis is its
    panel's)."""
    specs = (ax.get_subplotspec() for ax in fig.axes)
    return sorted({(s.rowspan.start, s.colspan.start) for s in specs if s})


def keep_panels(fig: Figure, cells: list[Cell]) -> Figure:
    """``fig`` with only the panels at ``cells`` (one row of its grid), laid out side by side."""
    grid = next(ax.get_subplotspec() for ax in fig.axes if ax.get_subplotspec()).get_gridspec()
    ratios = grid.get_width_ratios() or [1] * grid.ncols
    cells = sorted(cells)
    row = GridSpec(1, len(cells), figure=fig, width_ratios=[ratios[c] for _, c in cells])
    for ax in list(fig.axes):
        s = ax.get_subplotspec()
        cell = (s.rowspan.start, s.colspan.start) if s else None
        if cell in cells:
            ax.set_subplotspec(row[0, cells.index(cell)])
        else:
            ax.remove()
    return fig


def _wrap(text: Text, width_px: float) -> None:
    """Break ``text`` at its spaces onto as many lines as keep it within ``width_px``."""
    words = text.get_text()
    shown = text.get_window_extent().width
    if not words.strip() or "\n" in words or shown <= width_px:
        return
    text.set_text("\n".join(textwrap.wrap(words, max(8, int(len(words) * width_px / shown)))))


def _middle_space(words: str) -> int:
    """The index of the space nearest the middle of ``words`` (-1: none)."""
    spaces = [i for i, c in enumerate(words) if c == " "]
    return min(spaces, key=lambda i: abs(i - len(words) / 2)) if spaces else -1


def _crowded(labels: list[Text]) -> bool:
    """Whether any two of an axis's tick labels run into each other."""
    boxes = sorted(
        (t.get_window_extent() for t in labels if t.get_visible() and t.get_text()),
        key=lambda b: b.x0,
    )
    return any(a.x1 > b.x0 for a, b in zip(boxes, boxes[1:]))


def wrap_text(fig: Figure) -> Figure:
    """Each panel's title wrapped to the panel's width, the figure's title to the figure's, and the
    names under a panel's bars (``taxi``, ``bus: wait for 16``) broken onto two lines where they
    run into each other."""
    fig.draw_without_rendering()
    for ax in fig.axes:
        _wrap(ax.title, ax.get_window_extent().width)
        labels = ax.get_xticklabels()
        names = [t.get_text() for t in labels]
        if ax.xaxis.get_visible() and any(" " in n for n in names) and _crowded(labels):
            cut = [_middle_space(n) for n in names]
            ax.set_xticks(
                ax.get_xticks(),
                labels=[n if i < 0 else n[:i] + "\n" + n[i + 1 :] for n, i in zip(names, cut)],
            )
    if fig._suptitle is not None:  # matplotlib keeps the figure's title Text here, with no getter
        _wrap(fig._suptitle, 0.98 * fig.bbox.width)
    fig.draw_without_rendering()
    return fig


def collisions(fig: Figure, slack: float = 1.0) -> list[tuple[str, str]]:
    """Pairs of ``fig``'s texts that overlap by more than ``slack`` px each way; a text cut by the
    figure's edge is paired with "the edge"."""
    boxes = [(t.get_text(), t.get_window_extent()) for t in texts(fig)]
    w, h = fig.bbox.width, fig.bbox.height
    out = [
        (s, "the edge")
        for s, b in boxes
        if b.x0 < -slack or b.y0 < -slack or b.x1 > w + slack or b.y1 > h + slack
    ]
    for i, (s, a) in enumerate(boxes):
        for r, b in boxes[i + 1 :]:
            across = min(a.x1, b.x1) - max(a.x0, b.x0)
            if across > slack and min(a.y1, b.y1) - max(a.y0, b.y0) > slack:
                out.append((s, r))
    return out


def _part(
    draw: Callable[[], Figure], cells: list[Cell], size: tuple[float, float], floor_pt: float
) -> tuple[Figure, list[tuple[str, str]]]:
    """The panels at ``cells`` as one slide figure, and what still collides on it."""
    fig = keep_panels(draw(), cells)
    fig.set_size_inches(*size)
    wrap_text(raise_text(fig, floor_pt))
    # A legend placed for the lesson's small text can cover a panel's numbers at the slide's size:
    # matplotlib's "best" finds the corner that covers the least of the lines, bars and texts.
    legends = [leg for leg in (ax.get_legend() for ax in fig.axes) if leg is not None]
    for leg in legends:
        leg.set_loc("best")
    hits = collisions(fig)
    # Where no corner is free, the legend goes beside its panel, and the panel gives up the width.
    hit = {r for pair in hits for r in pair}
    moved = [leg for leg in legends if hit & {t.get_text() for t in leg.get_texts()}]
    for leg in moved:
        leg.set_loc("center left")
        leg.set_bbox_to_anchor((1.0, 0.5))
    return fig, collisions(fig) if moved else hits


def _copies(draw: Callable[[], Figure]) -> Callable[[], Figure]:
    """Fresh copies of ``draw()``'s figure: unpickled from one drawing (a lesson's function runs
    its simulations again on every call), or drawn again where the figure cannot be pickled."""
    try:
        blob = pickle.dumps(draw())
    except (pickle.PicklingError, TypeError, AttributeError):  # a lambda formatter, say
        return draw
    return lambda: pickle.loads(blob)


def slide_parts(
    draw: Callable[[], Figure], size: tuple[float, float], floor_pt: float
) -> list[Figure]:
    """``draw()``'s figure as slide figures of ``size`` inches with no text under ``floor_pt``:
    one a row of its grid, the row cut into fewer panels a figure until its texts no longer
    collide (one panel a figure is kept even then; ``collisions`` tells what is left)."""
    fresh = _copies(draw)
    rows: dict[int, list[Cell]] = {}
    for cell in panels(fresh()):
        rows.setdefault(cell[0], []).append(cell)
    parts = []
    for row in rows.values():
        for n in range(len(row), 0, -1):
            figs = []
            for i in range(0, len(row), n):
                fig, hits = _part(fresh, row[i : i + n], size, floor_pt)
                figs.append(fig)
                if n > 1 and hits:
                    break  # the row does not fit n panels a figure: try fewer
            else:
                break
        parts += figs
    return parts
