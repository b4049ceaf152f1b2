"""The blank page every plot starts from: a pyplot-free figure, plain tick labels, saving, and text
a slide can read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, NullFormatter

__all__ = ["COLORS", "log_x", "new_figure", "plain", "raise_text", "save", "texts"]

COLORS = [
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]


def new_figure(w: float, h: float) -> Figure:
    """A figure with its own Agg canvas: no pyplot, so no global state and no backend to choose."""
    fig = Figure(figsize=(w, h), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def plain(x: float, _pos=None) -> str:
    """A tick label as prose writes the number: 0.001, 0.5, 20, 1,000 (never "0" for 0.0001)."""
    return (
        f"{x:,.0f}" if x >= 1 else f"{x:.{max(0, -int(np.floor(np.log10(x))))}f}" if x > 0 else "0"
    )


def log_x(ax) -> None:
    """A log x axis with plain numbers (0.01, 2, 5, 10, 20) rather than 2x10^0."""
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(plain))
    ax.xaxis.set_minor_formatter(NullFormatter())


def save(fig: Figure, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, format="png")
    return p


def texts(fig: Figure) -> list[Text]:
    """Every text ``fig`` draws: titles, axis and tick labels, legends, annotations (visible, not
    blank)."""
    # Tick labels exist only once the axes are laid out: a draw makes them, as saving the figure
    # would.
    fig.draw_without_rendering()
    # An axis keeps the labels of ticks that fell outside its view, undrawn: they are not on the
    # page.
    undrawn = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            # A twin's shared axis is hidden whole (its panel's own axis draws the labels).
            hidden = not axis.get_visible()
            if hidden:
                undrawn.add(id(axis.label))
            lo, hi = sorted(axis.get_view_interval())
            eps = (hi - lo) * 1e-9
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if hidden or not lo - eps <= tick.get_loc() <= hi + eps:
                    undrawn.update((id(tick.label1), id(tick.label2)))
    return [
        t
        for t in fig.findobj(Text)
        if t.get_visible() and t.get_text().strip() and id(t) not in undrawn
    ]


def raise_text(fig: Figure, floor_pt: float) -> Figure:
    """``fig`` with every text smaller than ``floor_pt`` set to ``floor_pt``; larger text keeps its
    size.

    Tick labels are raised through their axis, not one label at a time: the axis makes new labels
    from its own settings when the ticks change, and chooses how many ticks by the labels' size.
    Constrained layout then makes room for the larger text when the figure is drawn. An axis label
    that the larger size makes longer than its axes (a y label of a short panel) is broken onto two
    lines at its middle space, or it would run into the panel above or the title.
    """
    fig.draw_without_rendering()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for which in ("major", "minor"):
                if any(t.get_fontsize() < floor_pt for t in axis.get_ticklabels(which=which)):
                    axis.set_tick_params(which=which, labelsize=floor_pt)
    for t in texts(fig):
        if t.get_fontsize() < floor_pt:
            t.set_fontsize(floor_pt)
    fig.draw_without_rendering()
    for ax in fig.axes:
        box = ax.get_window_extent()
        for label, room in ((ax.xaxis.label, box.width), (ax.yaxis.label, box.height)):
            ext, words = label.get_window_extent(), label.get_text()
            if max(ext.width, ext.height) > room and " " in words and "\n" not in words:
                mid = min(
                    (i for i, c in enumerate(words) if c == " "),
                    key=lambda i: abs(i - len(words) / 2),
                )
                label.set_text(words[:mid] + "\n" + words[mid + 1 :])
    return fig
