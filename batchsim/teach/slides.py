"""Slides for the projector, made from the lessons themselves, and a one-page handout.

A lesson (``course/lessons/NN-*.md``) is already a talk: a title, sections, figures, tables,
take-aways. ``build`` makes a deck of it that reads from the back row: each figure, table or
block of command output is a slide of its own under its section's heading, with at most three
short lines written for the slide (``slides_content`` says where they come from and why), set as
large as a 1280x720 page allows and never under 24 px as the screen shows it, wide output cut to
the columns the slide is about (``slides_fit``). A figure is shown in its slide version, which
``make course`` draws beside the lesson's (``course/figures/slides/``): its panels a row or fewer a
slide, its text at the same 24 px (``batchsim.teach.plots.slide``). The decks are HTML files with
their figures copied beside them (``figures/``), so the folder can be carried to any machine and
shows every figure; rebuild after ``make course`` (0.3 s) and it is current again. Arrow keys or
space move between slides; printing gives one slide per landscape page. The handout gathers every
lesson's take-aways on one A4 page.

    python -m batchsim.teach.slides                   # out/slides/NN-*.html and handout.html
    python -m batchsim.teach.slides --out DIR --pdf   # also PDFs, where Chromium is installed
"""

from __future__ import annotations

import argparse
import html
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from batchsim.teach import slides_fit as fit
from batchsim.teach.slides_content import LINE_CHARS, MAX_LINES, Slide, Visual, lesson_slides
from batchsim.teach.slides_fit import SlideError

__all__ = [
    "Slide",
    "Visual",
    "SlideError",
    "FIGURES",
    "SLIDE_VERSIONS",
    "figure_source",
    "figure_parts",
    "lesson_slides",
    "render_deck",
    "handout",
    "build",
    "main",
    "MAX_LINES",
    "LINE_CHARS",
]


def _markdown():
    import mistune

    return mistune.create_markdown(escape=False, plugins=["table"])


# The page's numbers live in slides_fit, which sizes tables and output to them.
_CSS = f"""
html, body {{ margin: 0; background: #222; font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; }}
section {{ box-sizing: border-box; width: {fit.PAGE_W}px; height: {fit.PAGE_H}px; margin: 20px auto;
          padding: {fit.PAD_Y}px {fit.PAD_X}px; background: white; overflow: hidden; position: relative;
          flex-direction: column; }}
section h1 {{ font-size: 52px; line-height: 1.2; margin: 150px 0 30px; color: #1f4e79; }}
section h2 {{ font-size: {fit.TITLE_PX}px; line-height: {fit.TITLE_H - 17}px; margin: 0 0 14px; color: #1f4e79;
             border-bottom: 3px solid #e8a317; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }}
section .body {{ flex: 1 1 auto; min-height: 0; display: flex; flex-direction: column; justify-content: center; }}
section .visual {{ display: flex; justify-content: center; align-items: center; flex: 0 0 auto; }}
section.figure .visual {{ flex: 1 1 auto; min-height: 0; }}
section .visual img {{ display: block; max-width: 100%; }}
section pre {{ margin: 0; line-height: {fit.CODE_LH}; background: #f4f4f4; padding: {fit.CODE_PAD}px; white-space: pre; }}
section table {{ border-collapse: collapse; line-height: {fit.TABLE_LH}; }}
section td, section th {{ border: 1px solid #bbb; padding: {fit.CELL_PAD_Y}px {fit.CELL_PAD_X}px; }}
section th {{ background: #eef3f8; }}
section code {{ font-size: max(0.9em, {fit.MIN_PX}px); }}
section pre code {{ font-size: 1em; }}
section ul.lines {{ margin: {fit.LINES_GAP}px 0 0; padding-left: 1.1em; font-size: {fit.LINE_PX}px;
                   line-height: {fit.LINE_H}px; }}
section.text ul.lines, section.title ul.lines {{ font-size: 30px; line-height: 44px; list-style: none; padding: 0; }}
section.text ul.lines li {{ margin-bottom: 18px; }}
section .alt {{ margin: {fit.LINES_GAP}px 0 0; text-align: center; font-size: {fit.MIN_PX}px;
               line-height: {fit.LINE_H}px; color: #555; }}
section .num {{ position: absolute; right: 20px; bottom: 2px; font-size: {fit.NUM_PX}px;
               line-height: 1; color: #888; }}
@media screen {{ section {{ display: none; }} section.current {{ display: flex; }}
                body {{ display: flex; align-items: center; justify-content: center; height: 100vh; }}
                section {{ transform-origin: center; }} }}
@media print {{ @page {{ size: {fit.PAGE_W}px {fit.PAGE_H}px; margin: 0; }} body {{ background: white; }}
               section {{ display: flex; margin: 0; page-break-after: always; }} }}
"""

_JS = f"""
const s = [...document.querySelectorAll('section')]; let i = 0;
function show(k) {{ i = Math.max(0, Math.min(s.length - 1, k)); s.forEach((e, j) => e.classList.toggle('current', j === i));
  const f = Math.min(innerWidth / {fit.PAGE_W}, innerHeight / {fit.PAGE_H}) * {fit.SCREEN_SCALE};
  s[i].style.transform = `scale(${{f}})`; location.hash = i + 1; }}
addEventListener('keydown', e => {{ if (['ArrowRight', 'PageDown', ' '].includes(e.key)) show(i + 1);
  if (['ArrowLeft', 'PageUp'].includes(e.key)) show(i - 1); if (e.key === 'Home') show(0); if (e.key === 'End') show(s.length - 1); }});
addEventListener('click', e => show(e.clientX > innerWidth / 3 ? i + 1 : i - 1));
addEventListener('resize', () => show(i)); show((parseInt(location.hash.slice(1)) || 1) - 1);
"""


def _page(title: str, body: str, css: str = _CSS, js: str = _JS) -> str:
    script = f"<script>{js}</script>" if js else ""
    return (
        f"<!DOCTYPE html>\n<html lang='en'><head><meta "
        f"charset='utf-8'><title>{html.escape(title)}</title><style>{css}</style></head><body>\n{body}\n{script}</body></html>\n"
    )


def _inline(md, line: str) -> str:
    """One short line's Markdown (bold, code) without the paragraph around it."""
    return re.sub(r"^<p>|</p>\s*$", "", md(line).strip())


def _visual_html(s: Slide, figure: Path | None, md) -> str:
    v = s.visual
    if v.kind == "figure":
        target = f"{FIGURES}/{figure.name}"  # copied beside the deck by ``build``
        # a figure without lines keeps a line for its caption
        _, h = fit.visual_box(len(s.lines) or 1)
        return (
            f"<div class='visual'><img src='{html.escape(target)}' alt='{html.escape(v.alt)}' "
            f"style='max-height: {h}px'></div>"
        )
    if v.kind == "table":
        return f"<div class='visual' style='font-size: {s.px()}px'>{md(v.text)}</div>"
    return (
        f"<div class='visual'><pre style='font-size: "
        f"{s.px()}px'><code>{html.escape(v.text)}</code></pre></div>"
    )


#: The folder beside the decks that holds their figures: a deck folder copied to a USB stick or a
#: classroom machine shows every figure (a link into course/figures/ showed none once moved).
FIGURES = "figures"


#: Beside a lesson's figures, the folder of their slide versions: ``NAME-1.png``, ``NAME-2.png``...
#: for ``NAME.png``, one a slide, drawn by ``make course`` (scripts/make_course_figures.py).
SLIDE_VERSIONS = "slides"


def figure_source(lesson: Path, link: str) -> Path:
    """The figure a lesson links (``![alt](../figures/x.png)``), refused in one line when it is not
    there."""
    src = (lesson.parent / link).resolve()
    if not src.is_file():
        raise SlideError(
            f"{lesson.name}: figure {link!r} is not there ({src}); make course draws the course's "
            f"figures"
        )
    return src


def figure_parts(lesson: Path, link: str) -> list[Path]:
    """The slide versions of the figure a lesson links, in order; the lesson's figure itself where
    it has none (a lesson folder of one's own, whose figures ``make course`` did not draw)."""
    src = figure_source(lesson, link)
    name = re.compile(rf"{re.escape(src.stem)}-(\d+)\.png")
    parts = {
        int(m.group(1)): p
        for p in (src.parent / SLIDE_VERSIONS).glob(f"{src.stem}-*.png")
        if (m := name.fullmatch(p.name))
    }
    return [parts[k] for k in sorted(parts)] or [src]


def _pages(slides: list[Slide], lesson: Path) -> list[tuple[Slide, Path | None]]:
    """Each slide with its figure; a figure in parts is a slide a part, each with the lines."""
    return [
        (s, part)
        for s in slides
        for part in (figure_parts(lesson, s.visual.text) if s.kind == "figure" else [None])
    ]


def render_deck(slides: list[Slide], lesson: Path) -> str:
    """The deck as one HTML page; figures linked from ``FIGURES/`` beside it (``build`` copies them
    there)."""
    md = _markdown()
    parts = []
    pages = _pages(slides, lesson)
    for k, (s, figure) in enumerate(pages, 1):
        lines = "".join(f"<li>{_inline(md, ln)}</li>" for ln in s.lines)
        lines = f"<ul class='lines'>{lines}</ul>" if lines else ""
        if s.opening:
            inner = f"<h1>{html.escape(s.title)}</h1>{lines}"
        else:
            visual = _visual_html(s, figure, md) if s.visual else ""
            if s.kind == "figure" and not lines and s.visual.alt:
                lines = f"<p class='alt'>{html.escape(s.visual.alt)}</p>"
            inner = f"<h2>{html.escape(s.title)}</h2><div class='body'>{visual}{lines}</div>"
        number = f"<div class='num'>{k}/{len(pages)}</div>"
        parts.append(f"<section class='{s.kind}' id='s{k}'>{inner}{number}</section>")
    return _page(slides[0].title, "\n".join(parts))


_HANDOUT_CSS = """
@page { size: A4; margin: 12mm; }
body { font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; font-size: 8.6pt; line-height: 1.28; margin: 0 auto;
       max-width: 186mm; }
h1 { font-size: 14pt; margin: 0 0 2mm; color: #1f4e79; }
.intro { margin: 0 0 2mm; }
.grid { column-count: 2; column-gap: 6mm; }
.lesson { break-inside: avoid; margin-bottom: 2.4mm; }
h2 { font-size: 9.6pt; margin: 0 0 0.6mm; color: #1f4e79; }
ol { margin: 0; padding-left: 4.5mm; }
code { font-size: 8pt; }
"""


def handout(lessons: list[Path]) -> str:
    """Every lesson's take-aways on one A4 page (two columns), in teaching order."""
    md = _markdown()
    parts = []
    for p in lessons:
        # slide blocks are not the handout's
        text = re.sub(r"<!--.*?-->", "", p.read_text(), flags=re.S)
        title = re.search(r"^# (.+)$", text, flags=re.M).group(1)
        take = (
            text.split("## Take-aways", 1)[1].split("\n## ", 1)[0]
            if "## Take-aways" in text
            else ""
        )
        parts.append(f"<div class='lesson'><h2>{html.escape(title)}</h2>{md(take.strip())}</div>")
    intro = (
        "<p class='intro'>A GPU that serves one request at a time is a <b>taxi</b>; one that "
        "serves many together is a <b>bus</b>: each step reads the weights once for everyone "
        "aboard. What each lesson leaves you with:</p>"
    )
    body = (
        f"<h1>The taxi and the bus: batching in AI inference</h1>{intro}<div "
        f"class='grid'>{''.join(parts)}</div>"
    )
    return _page("Handout: the taxi and the bus", body, css=_HANDOUT_CSS, js="")


def _chromium() -> str | None:
    return next(
        (
            p
            for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome"))
            if p
        ),
        None,
    )


def _pdf(chromium: str, page: Path) -> Path:
    pdf = page.with_suffix(".pdf")
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-pdf-header-footer",
            f"--print-to-pdf={pdf}",
            page.resolve().as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return pdf


def build(lessons_dir: Path, out_dir: Path, pdf: bool = False) -> list[Path]:
    """Write a deck per lesson and the handout under ``out_dir``; return the files written."""
    lessons = sorted(lessons_dir.glob("[0-9][0-9]-*.md"))
    if not lessons:
        raise SlideError(f"lessons must hold NN-*.md files, got none in {str(lessons_dir)!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for p in lessons:
        deck = out_dir / f"{p.stem}.html"
        slides = lesson_slides(p.read_text(), p.name)
        deck.write_text(render_deck(slides, p))
        written.append(deck)
        for src in {f for _, f in _pages(slides, p) if f is not None}:
            (out_dir / FIGURES).mkdir(exist_ok=True)
            shutil.copyfile(src, out_dir / FIGURES / src.name)
    h = out_dir / "handout.html"
    h.write_text(handout(lessons))
    written.append(h)
    if pdf:
        chromium = _chromium()
        if chromium is None:
            print(
                "no Chromium found: HTML only (apt-get install chromium for PDFs)", file=sys.stderr
            )
        else:
            written += [_pdf(chromium, f) for f in list(written)]
    return written


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    p = argparse.ArgumentParser(
        prog="python -m batchsim.teach.slides", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--lessons",
        default=str(root / "course" / "lessons"),
        help="folder of the lessons' Markdown",
    )
    p.add_argument(
        "--out",
        default="out/slides",
        help="folder for the decks and the handout (default out/slides)",
    )
    p.add_argument(
        "--pdf", action="store_true", help="also print each to PDF with headless Chromium"
    )
    args = p.parse_args(argv)
    lessons_dir = Path(args.lessons)
    if not lessons_dir.is_dir():
        print(f"slides: error: lessons must be a folder, got {args.lessons!r}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        files = build(lessons_dir, Path(args.out), pdf=args.pdf)
    except (
        SlideError
    ) as e:  # a lesson asks for a slide the page cannot hold: say which, no traceback
        print(f"slides: error: {e}", file=sys.stderr)
        return 2
    print(
        f"{len(files)} files in {args.out} ({time.perf_counter() - t0:.1f} s): "
        + ", ".join(f.name for f in files)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
