"""What goes on a slide: one figure or table of the lesson, and at most three short lines.

A lesson is written to be read; a slide is read from the back of a room in the half minute a
teacher leaves it up. So a deck is not the lesson cut into pages. Each figure, table and block of
command output of a lesson becomes a slide of its own, under its section's heading, and the
lesson's prose stays in the lesson. What a slide says beside its visual is written for the slide,
in the lesson's template (``course/src/lessons/``), in a comment that a reader of the lesson never
sees::

    ![The taxi and the bus at 8 requests/s](../figures/01-why-batch.png)

    <!-- slide
    Throughput: taxi {{ l1.taxi_thr }} requests/s, both buses {{ l1.static_thr }}
    -->

A block right after a visual (nothing but blank lines between) is that visual's slide text; any
other block is a slide of its own: text alone, or with a table written for the slide (lines that
start with ``|``) where the lesson's table holds prose in its cells, or with code written for the
slide (fenced with three backticks) where the lesson's code is too long or too wide to read from
the back row; such a table or code, right after a table or code of the lesson, takes its place.
``columns: a | b | c`` cuts a wide table, or command output, to the columns the slide is about
(see ``slides_fit.trim_output``). A block in the lesson's head
(before its first ``##``) is the title slide's text. A section with no visual and no block is
shown by its heading alone.

Why written and not derived: a rule that shortens prose picks the wrong three lines, and a slide
made of the lesson's sentences is the defect this replaces (paragraphs copied verbatim, "the
timeline (left)" on a slide with no figure). A block beside the paragraph it condenses is edited
with it, and its numbers are the lesson's own placeholders, filled by ``make course``, so a slide
never disagrees with its lesson.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from batchsim.teach.slides_fit import (
    SlideError,
    code_px,
    table_px,
    trim_output,
    trim_table,
    visible,
)

__all__ = ["Visual", "Slide", "lesson_slides", "MAX_LINES", "LINE_CHARS", "visible"]

#: Lines beside a visual: what a glance takes in while the teacher talks.
MAX_LINES = 3
#: Characters of a short line: one line at 28 px across the slide (about 70 fit; bold and wide
#: glyphs take the rest), so a line never wraps into a paragraph.
LINE_CHARS = 60
_KINDS = ("figure", "table", "code")
_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]+)\)\s*$")
_NOTE = re.compile(r"^<!--\s*slide\b(.*?)-->\s*$", re.S)


@dataclass(frozen=True)
class Visual:
    """A slide's one figure, table or block of code: ``text`` is a figure's path as the lesson links
    it, a table's Markdown, or a code block's lines (no fences)."""

    kind: str
    text: str
    alt: str = ""  # a figure's alt text, its caption where the slide has no lines

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise SlideError(f"kind must be one of {', '.join(_KINDS)}, got {self.kind!r}")
        if not self.text.strip():
            raise SlideError(f"text of a {self.kind} must not be empty, got {self.text!r}")


@dataclass(frozen=True)
class Slide:
    """One slide: a heading, at most one visual, at most ``MAX_LINES`` short lines."""

    title: str
    lines: tuple[str, ...] = ()
    visual: Visual | None = None
    opening: bool = False  # the lesson's title slide

    def __post_init__(self) -> None:
        if not self.title.strip():
            raise SlideError(f"title must not be empty, got {self.title!r}")
        if len(self.lines) > MAX_LINES:
            raise SlideError(
                f"lines must be at most {MAX_LINES} on a slide, got {len(self.lines)}: "
                f"{self.lines!r}"
            )
        for ln in self.lines:
            if not ln.strip() or len(visible(ln)) > LINE_CHARS:
                raise SlideError(
                    f"a line must be 1 to {LINE_CHARS} characters (one line on the slide), got "
                    f"{len(visible(ln))}: {ln!r}"
                )
        if self.visual is not None and self.visual.kind != "figure":
            self.px()  # refused here, with the lesson named, if the page cannot hold it readably

    def px(self) -> int:
        """The font size of the slide's table or output (px): as large as the page allows."""
        fit = code_px if self.visual.kind == "code" else table_px
        return fit(self.visual.text, len(self.lines))

    @property
    def kind(self) -> str:
        return "title" if self.opening else self.visual.kind if self.visual else "text"


def _blocks(text: str) -> list[str]:
    """Markdown split at blank lines, keeping fenced code whole."""
    out, cur, fence = [], [], False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fence = not fence
        if not line.strip() and not fence:
            if cur:
                out.append("\n".join(cur))
                cur = []
            continue
        cur.append(line)
    if cur:
        out.append("\n".join(cur))
    return out


def _visual(block: str) -> Visual | None:
    """The block as a figure, a table or code; None for prose."""
    m = _IMAGE.match(block)
    if m:
        return Visual("figure", m.group(2), m.group(1))
    rows = block.splitlines()
    if block.startswith("```"):
        return Visual("code", "\n".join(rows[1:-1]))
    if len(rows) > 1 and rows[0].startswith("|") and re.fullmatch(r"\|[\s:|-]+", rows[1].strip()):
        return Visual("table", block)
    if all(r.startswith("    ") for r in rows):  # an indented code block: the lessons' formulas
        return Visual("code", "\n".join(r[4:] for r in rows))
    return None


def _note(body: str) -> tuple[tuple[str, ...], list[str] | None, Visual | None]:
    """A slide block's lines, its ``columns:`` (or None) and its own table or code (or None)."""
    lines, table, code, columns = [], [], [], None
    fences = 0
    fence = None  # the indent of an open fence: the code's lines keep theirs, less that
    for raw in body.strip("\n").splitlines():
        ln = raw.strip()
        if ln.startswith("```"):
            fence = None if fence is not None else len(raw) - len(raw.lstrip())
            fences += 1
        elif fence is not None:
            code.append(raw[fence:])
        elif ln.startswith("columns:"):
            columns = [c.strip() for c in ln[len("columns:") :].split("|") if c.strip()]
            if not columns:
                raise SlideError(f"columns must name at least one column, got {raw!r}")
        elif ln.startswith("|"):
            table.append(ln)
        elif ln:
            lines.append(ln[2:] if ln.startswith("- ") else ln)
    if fences not in (0, 2) or (table and fences):
        raise SlideError(
            f"a slide block holds one table or one fenced block of code, got {len(table)} table "
            f"lines and {fences} fences"
        )
    own = (
        Visual("table", "\n".join(table))
        if table
        else Visual("code", "\n".join(code))
        if fences
        else None
    )
    return tuple(lines), columns, own


def _cut(v: Visual, columns: list[str] | None) -> Visual:
    if columns is None:
        return v
    if v.kind == "figure":
        raise SlideError(
            f"columns: a figure has no columns to cut, got {' | '.join(columns)} for {v.text}"
        )
    return Visual(v.kind, (trim_output if v.kind == "code" else trim_table)(v.text, columns))


def _section(title: str, body: str) -> list[Slide]:
    slides: list[Slide] = []
    pending: Visual | None = None  # the last block's visual: a slide block now is its text
    for b in _blocks(body):
        note = _NOTE.match(b)
        if note:
            lines, columns, own = _note(note.group(1))
            if pending is None and columns:
                raise SlideError(
                    f"columns: {' | '.join(columns)} given, but no table or output comes right "
                    f"before"
                )
            if own and pending is not None and pending.kind == "figure":
                raise SlideError(
                    f"a slide's own {own.kind} takes the place of a table or output, not of "
                    f"{pending.text}"
                )
            visual = own or pending
            slides.append(Slide(title, lines, _cut(visual, columns) if visual else None))
            pending = None
        elif not b.startswith("<!--"):  # other comments are not for slides
            if pending is not None:
                slides.append(Slide(title, (), pending))
            pending = _visual(b)
    if pending is not None:
        slides.append(Slide(title, (), pending))
    return slides or [Slide(title)]


def lesson_slides(text: str, name: str = "lesson") -> list[Slide]:
    """A lesson's Markdown as slides: its title, then each section's visuals and slide blocks.

    ``name`` (the lesson's file) only labels errors: ``06-cost.md, 'Check the claim': ...``.
    """
    head, *sections = re.split(r"^## ", text.strip(), flags=re.M)
    m = re.search(r"^# (.+)$", head, flags=re.M)
    title = m.group(1).strip() if m else name
    try:
        notes = [_note(n.group(1))[0] for n in map(_NOTE.match, _blocks(head)) if n]
        slides = [Slide(title, notes[0] if notes else (), opening=True)]
    except SlideError as e:
        raise SlideError(f"{name}, title slide: {e}") from None
    for sec in sections:
        heading, _, body = sec.partition("\n")
        try:
            slides += _section(heading.strip(), body)
        except SlideError as e:
            raise SlideError(f"{name}, {heading.strip()!r}: {e}") from None
    return slides
