"""Slides for the projector, made from the lessons themselves, and a one-page handout.

A lesson (``course/lessons/NN-*.md``) is already a talk: a title, sections, a figure
or two, take-aways. ``build`` cuts each lesson into slides at its ``##`` headings,
gives every figure a slide of its own (with its section's heading), and splits a
section whose text would overflow a 16:9 slide. The decks are HTML files with the
figures linked, not copied, from ``course/figures/``, so a deck never disagrees
with the lesson or the figure it was made from: rebuild after ``make course`` and
it is current. Arrow keys or space move between slides; printing gives one slide
per landscape page. The handout gathers every lesson's take-aways on one A4 page.

    python -m batchsim.teach.slides                   # out/slides/NN-*.html and handout.html
    python -m batchsim.teach.slides --out DIR --pdf   # also PDFs, where Chromium is installed
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Slide", "lesson_slides", "build", "main", "MAX_LINES"]

#: How much text one slide holds, in lines of about ``_LINE_CHARS`` characters at the deck's font
#: size (28 px on a 1280x720 slide); past it a section continues on the next slide.
MAX_LINES = 13
_LINE_CHARS = 70
_WRAP_FROM = 110  # characters: a code line longer than this wraps on its slide
_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]+)\)\s*$")


@dataclass
class Slide:
    title: str
    blocks: list[str] = field(default_factory=list)  # Markdown blocks
    image: tuple[str, str] | None = None  # (alt text, path as the lesson links it)
    kind: str = "text"  # "title" | "text" | "image" | "code"


def _blocks(text: str) -> list[str]:
    """Markdown split at blank lines, keeping fenced code and tables whole."""
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


def _lines(block: str) -> int:
    """Roughly how many slide lines a block fills."""
    if block.startswith("```"):
        return len(block.splitlines()) - 1
    rows = block.splitlines()
    if rows and rows[0].startswith("|"):
        return -(-len(rows) * 8 // 5)  # cells wrap: a table row is about 1.6 lines
    items = re.split(r"\n(?=\s*(?:[-*]|\d+\.) )", block)
    return sum(max(1, -(-len(" ".join(i.split())) // _LINE_CHARS)) for i in items)


def _fit(block: str) -> list[str]:
    """A list too long for one slide, cut between its items; any other block unchanged."""
    items = re.split(r"\n(?=(?:[-*]|\d+\.) )", block)
    if len(items) < 2 or _lines(block) <= MAX_LINES:
        return [block]
    parts, cur = [], []
    for item in items:
        if cur and _lines("\n".join(cur + [item])) > MAX_LINES:
            parts.append("\n".join(cur))
            cur = []
        cur.append(item)
    return parts + ["\n".join(cur)]


def lesson_slides(text: str) -> list[Slide]:
    """A lesson's Markdown as slides (title, then each section, figures and long code on their own)."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S).strip()
    head, *sections = re.split(r"^## ", text, flags=re.M)
    title_lines = head.strip().splitlines()
    title = title_lines[0].lstrip("# ").strip() if title_lines else ""
    slides = [Slide(title, _blocks("\n".join(title_lines[1:])), kind="title")]
    for sec in sections:
        name, _, body = sec.partition("\n")
        cur = Slide(name.strip())
        used = 0
        for b in (part for block in _blocks(body) for part in _fit(block)):
            m = _IMAGE.match(b)
            big_code = b.startswith("```") and _lines(b) > MAX_LINES - 2
            if m or big_code:
                if cur.blocks:
                    slides.append(cur)
                if m:
                    slides.append(Slide(name.strip(), image=(m.group(1), m.group(2)), kind="image"))
                else:
                    slides.append(Slide(name.strip(), [b], kind="code"))
                cur, used = Slide(name.strip() + " (continued)"), 0
                continue
            n = _lines(b)
            if cur.blocks and used + n > MAX_LINES:
                slides.append(cur)
                cur, used = Slide(name.strip() + " (continued)"), 0
            cur.blocks.append(b)
            used += n
        if cur.blocks:
            slides.append(cur)
    return slides


def _pre_px(s: Slide) -> int:
    """Font size for a slide's code, so its longest line fits the width and its lines the height."""
    code = [ln for b in s.blocks if b.startswith("```") for ln in b.splitlines()[1:-1]]
    if not code:
        return 17
    # Size for the widest table-like line; longer lines (a command's notes) wrap instead (pre-wrap).
    longest = max([len(ln) for ln in code if len(ln) <= _WRAP_FROM] or [_WRAP_FROM])
    rows = sum(1 + len(ln) // _WRAP_FROM for ln in code)
    # Monospace glyphs are about 0.6 em wide; 1,140 px of width and 560 px of height are free.
    return max(7, min(17, int(1140 / (0.61 * max(longest, 1))), int(560 / (1.27 * rows))))


def _markdown():
    import mistune

    return mistune.create_markdown(escape=False, plugins=["table"])


_CSS = """
html, body { margin: 0; background: #222; font-family: 'DejaVu Sans', Helvetica, Arial, sans-serif; }
section { box-sizing: border-box; width: 1280px; height: 720px; margin: 20px auto; padding: 40px 60px;
          background: white; overflow: hidden; position: relative; font-size: 28px; line-height: 1.35; }
section h1 { font-size: 52px; margin: 140px 0 30px; color: #1f4e79; }
section h2 { font-size: 38px; margin: 0 0 18px; color: #1f4e79; border-bottom: 3px solid #e8a317; }
section.image img { display: block; margin: 0 auto; max-width: 100%; max-height: 540px; }
section.image .alt { text-align: center; font-size: 20px; color: #555; }
section pre { font-size: var(--pre, 17px); line-height: 1.25; background: #f4f4f4; padding: 10px; white-space: pre-wrap; overflow-wrap: anywhere; }
section table { border-collapse: collapse; font-size: 20px; }
section td, section th { border: 1px solid #bbb; padding: 3px 8px; }
section code { font-size: 0.9em; }
section .num { position: absolute; right: 24px; bottom: 14px; font-size: 16px; color: #888; }
@media screen { section { display: none; } section.current { display: block; }
                body { display: flex; align-items: center; justify-content: center; height: 100vh; }
                section { transform-origin: center; } }
@media print { @page { size: 1280px 720px; margin: 0; } body { background: white; }
               section { display: block; margin: 0; page-break-after: always; } }
"""

_JS = """
const s = [...document.querySelectorAll('section')]; let i = 0;
function show(k) { i = Math.max(0, Math.min(s.length - 1, k)); s.forEach((e, j) => e.classList.toggle('current', j === i));
  const f = Math.min(innerWidth / 1280, innerHeight / 720) * 0.97; s[i].style.transform = `scale(${f})`; location.hash = i + 1; }
addEventListener('keydown', e => { if (['ArrowRight', 'PageDown', ' '].includes(e.key)) show(i + 1);
  if (['ArrowLeft', 'PageUp'].includes(e.key)) show(i - 1); if (e.key === 'Home') show(0); if (e.key === 'End') show(s.length - 1); });
addEventListener('click', e => show(e.clientX > innerWidth / 3 ? i + 1 : i - 1));
addEventListener('resize', () => show(i)); show((parseInt(location.hash.slice(1)) || 1) - 1);
"""


def _page(title: str, body: str, css: str = _CSS, js: str = _JS) -> str:
    script = f"<script>{js}</script>" if js else ""
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{css}</style></head><body>\n{body}\n{script}</body></html>\n")


def render_deck(slides: list[Slide], lesson: Path, out_dir: Path) -> str:
    """The deck as one HTML page; figures linked relative to ``out_dir``."""
    md = _markdown()
    parts = []
    for k, s in enumerate(slides, 1):
        if s.kind == "title":
            inner = f"<h1>{html.escape(s.title)}</h1>" + md("\n\n".join(s.blocks))
        elif s.kind == "image":
            alt, src = s.image
            target = os.path.relpath((lesson.parent / src).resolve(), out_dir.resolve())
            inner = (f"<h2>{html.escape(s.title)}</h2><img src='{html.escape(target)}' alt='{html.escape(alt)}'>"
                     f"<div class='alt'>{html.escape(alt)}</div>")
        else:
            inner = f"<h2>{html.escape(s.title)}</h2>" + md("\n\n".join(s.blocks))
        parts.append(f"<section class='{s.kind}' id='s{k}' style='--pre: {_pre_px(s)}px'>{inner}"
                     f"<div class='num'>{k}/{len(slides)}</div></section>")
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
        text = p.read_text()
        title = re.search(r"^# (.+)$", text, flags=re.M).group(1)
        take = text.split("## Take-aways", 1)[1].split("\n## ", 1)[0] if "## Take-aways" in text else ""
        parts.append(f"<div class='lesson'><h2>{html.escape(title)}</h2>{md(take.strip())}</div>")
    intro = ("<p class='intro'>A GPU that serves one request at a time is a <b>taxi</b>; one that serves many "
             "together is a <b>bus</b>: each step reads the weights once for everyone aboard. What each lesson "
             "leaves you with:</p>")
    body = f"<h1>The taxi and the bus: batching in AI inference</h1>{intro}<div class='grid'>{''.join(parts)}</div>"
    return _page("Handout: the taxi and the bus", body, css=_HANDOUT_CSS, js="")


def _chromium() -> str | None:
    return next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


def _pdf(chromium: str, page: Path) -> Path:
    pdf = page.with_suffix(".pdf")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
                    f"--print-to-pdf={pdf}", page.resolve().as_uri()], check=True, capture_output=True, timeout=120)
    return pdf


def build(lessons_dir: Path, out_dir: Path, pdf: bool = False) -> list[Path]:
    """Write a deck per lesson and the handout under ``out_dir``; return the files written."""
    lessons = sorted(lessons_dir.glob("[0-9][0-9]-*.md"))
    if not lessons:
        raise FileNotFoundError(f"no lessons (NN-*.md) in {lessons_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for p in lessons:
        deck = out_dir / f"{p.stem}.html"
        deck.write_text(render_deck(lesson_slides(p.read_text()), p, out_dir))
        written.append(deck)
    h = out_dir / "handout.html"
    h.write_text(handout(lessons))
    written.append(h)
    if pdf:
        chromium = _chromium()
        if chromium is None:
            print("no Chromium found: HTML only (apt-get install chromium for PDFs)", file=sys.stderr)
        else:
            written += [_pdf(chromium, f) for f in list(written)]
    return written


def main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    p = argparse.ArgumentParser(prog="python -m batchsim.teach.slides", description=__doc__.splitlines()[0])
    p.add_argument("--lessons", default=str(root / "course" / "lessons"), help="folder of the lessons' Markdown")
    p.add_argument("--out", default="out/slides", help="folder for the decks and the handout (default out/slides)")
    p.add_argument("--pdf", action="store_true", help="also print each to PDF with headless Chromium")
    args = p.parse_args(argv)
    lessons_dir = Path(args.lessons)
    if not lessons_dir.is_dir():
        print(f"slides: error: lessons must be a folder, got {args.lessons!r}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    files = build(lessons_dir, Path(args.out), pdf=args.pdf)
    print(f"{len(files)} files in {args.out} ({time.perf_counter() - t0:.1f} s): " + ", ".join(f.name for f in files))
    return 0


if __name__ == "__main__":
    sys.exit(main())
