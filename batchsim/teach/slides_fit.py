"""What fits on a 1280x720 slide read from the back of a room: sizes, and columns cut to fit.

A projector shows a slide at about 1280x720, and the back row reads it from ten metres: text under
about 24 px is lost there, and a table whose rows wrap no longer lines up. So every text of a slide
is 24 px or more as the screen shows it; a slide's table or command output is set as large as the
page allows, never below that floor, and a row never wraps. What is too wide even at the floor is
refused with a message that says what to do: name the columns the slide is about, or write the
slide its own shorter table or code; the rest (the other columns, the other tables, the notes under
them) stays in the lesson. This module holds the page's geometry (the deck's CSS is made from the
same numbers), picks the sizes, and cuts command output and Markdown tables down to named columns.

Sizes come from DejaVu's glyph widths (the fonts Debian's Chromium uses: measured with matplotlib's
copy of them for tables, a monospace advance for output), with a little to spare;
tests/test_slides.py measures the real layout in Chromium.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence

__all__ = [
    "SlideError",
    "FLOOR_PX",
    "MIN_PX",
    "SCREEN_SCALE",
    "visual_box",
    "code_px",
    "table_px",
    "text_em",
    "trim_output",
    "trim_table",
    "table_cells",
    "visible",
]


class SlideError(ValueError):
    """A lesson asks for a slide that cannot be made; the message names the field and the value."""


# The page, in CSS px. The deck's stylesheet (slides.py) is written from these.
PAGE_W, PAGE_H = 1280, 720
PAD_X, PAD_Y = 48, 28
TITLE_PX = 36
TITLE_H = round(TITLE_PX * 1.2) + 3 + 14  # one line of heading, its rule and its margin
LINE_PX = 28  # the short lines beside a visual
LINE_H = round(LINE_PX * 1.3)
LINES_GAP = 12  # between the visual and the lines under it
#: On screen the deck scales a slide to the window less a 3 % margin (slides.py's script), so a
#: 1280x720 window shows every size at 0.97 of its CSS value.
SCREEN_SCALE = 0.97
#: The smallest text, as rendered on a 1280x720 screen, that a slide may hold: every text, the
#: slide's number and a figure's tick labels included.
FLOOR_PX = 24
#: The smallest CSS size any text of a slide gets: 25 px shows at 24.25 px on a 1280x720 screen.
MIN_PX = math.ceil(FLOOR_PX / SCREEN_SCALE)
NUM_PX = MIN_PX  # the slide number, bottom right, inside the padding (line height = its size)
CODE_MAX_PX, TABLE_MAX_PX = 32, 30  # larger reads no better and crowds the lines off the slide
MONO_EM = 0.61  # DejaVu Sans Mono's advance is 0.602 em
#: A table's cells are measured in DejaVu Sans, the deck's first font and the widest of its list
#: (Helvetica and Arial set the same text narrower), with this much to spare for the browser's
#: rounding of each glyph to its pixel grid.
MEASURE_SLACK = 1.04
CODE_LH, CODE_PAD = 1.25, 12
TABLE_LH, CELL_PAD_X, CELL_PAD_Y = 1.3, 10, 4


def visual_box(lines: int) -> tuple[int, int]:
    """Width and height (px) left for a slide's figure, table or output above ``lines`` short
    lines."""
    h = PAGE_H - 2 * PAD_Y - TITLE_H - (LINES_GAP + lines * LINE_H if lines else 0)
    return PAGE_W - 2 * PAD_X, h


def code_px(text: str, lines: int) -> int:
    """Font size for a block of code or command output, so that no line wraps and all lines show."""
    rows = text.splitlines() or [""]
    longest = max(len(r) for r in rows) or 1
    w, h = visual_box(lines)
    px = min(
        CODE_MAX_PX,
        int((w - 2 * CODE_PAD) / (MONO_EM * longest)),
        int((h - 2 * CODE_PAD) / (CODE_LH * len(rows))),
    )
    if px < MIN_PX:
        raise SlideError(
            f"output is {longest} characters wide and {len(rows)} lines long: it would be set at "
            f"{px} px, under the {MIN_PX} px a projector's back row reads; in its "
            "slide block, name the columns the slide is about (columns: a | b) or write its own "
            "shorter code (fenced)"
        )
    return px


def visible(text: str) -> str:
    """Markdown (a cell, a short line) as it shows: no emphasis marks or backticks, links as their
    text."""
    return (
        re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
        .replace("**", "")
        .replace("`", "")
        .replace("*", "")
    )


def table_cells(table: str) -> list[list[str]]:
    """A Markdown pipe table's rows (the header first, the ``|---|`` rule left out), cells
    stripped."""
    rows = [ln.strip() for ln in table.strip().splitlines()]
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    return [c for r, c in zip(rows, cells) if not re.fullmatch(r"\|?[\s:|-]+\|?", r)]


@functools.cache
def _font(style: str):
    """DejaVu Sans (``sans``, ``bold``) or DejaVu Sans Mono (``mono``), which matplotlib ships."""
    from matplotlib import font_manager, ft2font

    family, weight = {
        "sans": ("DejaVu Sans", "normal"),
        "bold": ("DejaVu Sans", "bold"),
        "mono": ("DejaVu Sans Mono", "normal"),
    }[style]
    props = font_manager.FontProperties(family=family, weight=weight)
    return ft2font.FT2Font(font_manager.findfont(props))


def text_em(cell: str, bold: bool = False) -> float:
    """The width of a table cell's Markdown as it shows, in em: its glyphs' advances (kerned) in
    DejaVu, code spans in the monospace at a full em (the deck sets no code under ``MIN_PX``)."""
    width = 0.0
    for k, part in enumerate(re.split(r"`([^`]*)`", cell)):
        font = _font("mono" if k % 2 else "bold" if bold or "**" in part else "sans")
        font.set_size(100, 72)  # 100 px to the em: the width comes back in 64ths of a pixel
        font.set_text(visible(part))
        width += font.get_width_height()[0] / 64 / 100
    return width


def table_px(table: str, lines: int) -> int:
    """Font size for a Markdown table, so that every row stays on one line and all rows show."""
    cells = table_cells(table)
    ncol = max(len(r) for r in cells)
    widest = [
        max((text_em(r[j], bold=i == 0) for i, r in enumerate(cells) if j < len(r)), default=0)
        for j in range(ncol)
    ]
    w, h = visual_box(lines)
    em = MEASURE_SLACK * max(sum(widest), 0.1)
    px = min(
        TABLE_MAX_PX,
        int((w - ncol * (2 * CELL_PAD_X + 1)) / em),
        int((h / len(cells) - 2 * CELL_PAD_Y - 1) / TABLE_LH),
    )
    if px < MIN_PX:
        raise SlideError(
            f"table of {ncol} columns, {sum(widest):.0f} em a row: it would be set at {px} px, "
            f"under the {MIN_PX} px a projector's back row reads; name the columns the slide is "
            f"about "
            "(columns: a | b) or write the slide its own short table"
        )
    return px


def trim_table(table: str, columns: Sequence[str]) -> str:
    """A Markdown table cut to ``columns`` (named by their header, in the order given)."""
    cells = table_cells(table)
    head = cells[0]
    if any(c not in head for c in columns):
        raise SlideError(
            f"columns: {', '.join(repr(c) for c in columns if c not in head)} not in the table, "
            f"whose columns are {' | '.join(head)}"
        )
    idx = [head.index(c) for c in columns]
    pick = [[r[j] if j < len(r) else "" for j in idx] for r in cells]
    out = ["| " + " | ".join(pick[0]) + " |", "|" + "---|" * len(idx)]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in pick[1:]])


_RULE = re.compile(r"-+(?: +-+)*")  # a column table's rule under its header: "------  ----  -----"


def trim_output(text: str, columns: Sequence[str]) -> str:
    """Command output cut to its command line and, of each table that has all ``columns``, those
    columns.

    The batchsim command line prints fixed-width tables: a header, a rule of dashes as wide as each
    column, the rows, then a blank line and notes. A column is the span of its dashes; what lies
    between two spans must be blank in every row, or the output is not a table this can cut.
    """
    lines = text.splitlines()
    keep = [ln for ln in lines if ln.startswith("$ ")]  # the command itself: what a student types
    headers: list[list[str]] = []
    cut = False
    for i, rule in enumerate(lines):
        if i == 0 or not _RULE.fullmatch(rule):
            continue
        spans = [m.span() for m in re.finditer(r"-+", rule)]
        block = [lines[i - 1], rule]
        for row in lines[i + 1 :]:
            if not row.strip():
                break
            block.append(row)
        width = max(len(r) for r in block)
        block = [r.ljust(width) for r in block]
        names = [block[0][a:b].strip() for a, b in spans]
        headers.append(names)
        if any(c not in names for c in columns):
            continue
        for r in block:
            gaps = [r[b:a] for (_, b), (a, _) in zip(spans, spans[1:])] + [r[spans[-1][1] :]]
            if any(g.strip() for g in gaps):
                raise SlideError(
                    f"columns: the output's line {r.strip()!r} does not line up under its header"
                )
        idx = [names.index(c) for c in columns]
        keep += [""] + [
            "  ".join(r[spans[j][0] : spans[j][1]] for j in idx).rstrip() for r in block
        ]
        cut = True
    if not headers:
        raise SlideError("columns: the output has no table (a header over a rule of dashes) to cut")
    if not cut:
        absent = [c for c in columns if not any(c in names for names in headers)]
        what = (
            f"{', '.join(map(repr, absent))} in no table of the output"
            if absent
            else f"no table of the output has all of {' | '.join(columns)}"
        )
        raise SlideError(
            f"columns: {what}; its tables have " + "; ".join(" | ".join(h) for h in headers)
        )
    return "\n".join(keep).strip("\n")
