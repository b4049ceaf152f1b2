"""Files in and out, so that a bad path is one clear line and nothing computed is lost.

Reading: ``read_text`` and ``read_json`` turn every way a file can be wrong (missing,
a folder, unreadable, too big, not UTF-8, not JSON, NaN in the JSON) into one
``ConfigError`` that names what the file was for and its path. A UTF-8 byte-order
mark, which spreadsheet programs write, is accepted. ``open_text`` is the same for a
file read line by line (a trace), where decoding errors surface while reading.

Writing: ``Staging`` writes outputs into a hidden folder next to their destination
and moves them into place only when every file is complete (``commit``), so Ctrl-C
or a full disk never leaves a half-written CSV or PNG behind. ``check_out_dir``
proves, before any work starts, that a folder can be written: the program writes a
probe file where the folder would go, because permission bits do not tell (root
passes them all, and /proc refuses even root).

``dumps`` prints JSON that any parser reads: non-finite floats become null.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Any

from .errors import ConfigError

__all__ = [
    "read_text",
    "read_json",
    "open_text",
    "check_out_dir",
    "check_out_file",
    "write_atomic",
    "Staging",
    "dumps",
    "finite",
    "MAX_TEXT_BYTES",
]

#: The largest catalog or calibration file read whole: real ones are a few kilobytes, and a
#: profile with every point stays under a megabyte. A bigger file is almost surely the wrong one.
MAX_TEXT_BYTES = 16 * 2**20
#: The longest line read from a file read line by line: a trace row is a few dozen bytes.
MAX_LINE_BYTES = 2**20
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _where(what: str, p: Path) -> str:
    return f"{what} {str(p)!r}"


def _check_is_file(what: str, p: Path) -> None:
    if not p.exists():
        raise ConfigError(f"{_where(what, p)} not found")
    if p.is_dir():
        raise ConfigError(f"{_where(what, p)} is a folder, not a file")
    if not p.is_file():
        raise ConfigError(f"{_where(what, p)} is not a regular file")


def _decode_error(what: str, p: Path, e: UnicodeDecodeError) -> ConfigError:
    byte = (
        e.object[e.start : e.start + 1].hex() if isinstance(e.object, (bytes, bytearray)) else "?"
    )
    return ConfigError(
        f"{_where(what, p)} is not UTF-8 text (byte 0x{byte} at offset {e.start}); "
        "save it as UTF-8 (CSV/JSON)"
    )


def read_text(path: str | Path, what: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The whole file as text (UTF-8, a BOM allowed), or one ConfigError naming ``what`` and the
    path."""
    p = Path(path)
    _check_is_file(what, p)
    try:
        size = p.stat().st_size
        if size > max_bytes:
            raise ConfigError(
                f"{_where(what, p)} is {size / 2**20:.0f} MiB, more than the "
                f"{max_bytes / 2**20:.0f} MiB "
                "such a file can sensibly be; is it the right file?"
            )
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"{_where(what, p)} cannot be read: {e.strerror or e}") from None
    if data.startswith(_UTF16_BOMS):
        raise _utf16_error(what, p)
    if b"\x00" in data[:4096]:
        raise ConfigError(f"{_where(what, p)} is not text (it holds NUL bytes: binary, or UTF-16)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise _decode_error(what, p, e) from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def read_json(path: str | Path, what: str, max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """Parsed JSON (NaN and Infinity refused: JSON has no such numbers), or one ConfigError."""
    p = Path(path)
    text = read_text(p, what, max_bytes)
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{_where(what, p)} is not valid JSON: {e.msg} at line {e.lineno}"
        ) from None
    except ValueError as e:  # NaN / Infinity
        raise ConfigError(f"{_where(what, p)} is not valid JSON: {e}") from None
    except RecursionError:
        raise ConfigError(f"{_where(what, p)} is not valid JSON: nested too deeply") from None


def _utf16_error(what: str, p: Path) -> ConfigError:
    return ConfigError(f"{_where(what, p)} is UTF-16 text; save it as UTF-8 (CSV/JSON)")


class _Lines:
    """A text file's lines, decoded one at a time so that a bad byte is reported with its line
    number."""

    def __init__(self, fh: IO[bytes], what: str, p: Path) -> None:
        self.fh, self.what, self.p, self.lineno = fh, what, p, 0

    def __iter__(self):
        return self

    def __next__(self) -> str:
        raw = self.fh.readline(MAX_LINE_BYTES + 1)
        if not raw:
            raise StopIteration
        self.lineno += 1
        if len(raw) > MAX_LINE_BYTES:
            raise ConfigError(
                f"{_where(self.what, self.p)} line {self.lineno} is longer than "
                f"{MAX_LINE_BYTES // 2**20} MiB: not a line of text"
            )
        if self.lineno == 1:
            if raw.startswith(_UTF16_BOMS):
                raise _utf16_error(self.what, self.p)
            if raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark, as spreadsheets write
                raw = raw[3:]
        if b"\x00" in raw:
            raise ConfigError(
                f"{_where(self.what, self.p)} line {self.lineno} is not text (NUL bytes: binary, "
                f"or UTF-16)"
            )
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(
                f"{_where(self.what, self.p)} line {self.lineno} is not UTF-8 text (byte "
                f"0x{raw[e.start : e.start + 1].hex()}); save it as UTF-8"
            ) from None

    def close(self) -> None:
        self.fh.close()

    def __enter__(self) -> _Lines:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_text(path: str | Path, what: str) -> _Lines:
    """A file to read line by line (UTF-8, a BOM allowed; line endings kept for ``csv``)."""
    p = Path(path)
    _check_is_file(what, p)
    try:
        fh = p.open("rb")
    except OSError as e:
        raise ConfigError(f"{_where(what, p)} cannot be read: {e.strerror or e}") from None
    return _Lines(fh, what, p)


def check_out_dir(path: str | Path, flag: str = "out") -> Path:
    """Make sure ``path`` is, or can become, a folder this process can write; before any work.

    Nothing is created: a probe file is written into the nearest folder that exists (and removed),
    so a run refused later for a bad flag leaves no empty folder behind.
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{flag} {str(p)!r} is a file, not a folder")
    base = p
    while not base.exists():
        if base.parent == base:
            break
        base = base.parent
    if base.exists() and not base.is_dir():
        raise ConfigError(f"{flag} {str(p)!r} cannot be a folder: {str(base)!r} is a file")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ConfigError(f"{flag} {str(p)!r} cannot be written: {e.strerror or e}") from None
    return p


def check_out_file(path: str | Path, flag: str) -> Path:
    """Make sure ``path`` can be written as a file, before any work: a folder that is not there
    is a typo, found before minutes of serving or load rather than after."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise ConfigError(f"{flag} {str(path)!r} is a folder: give a file name")
    if not p.parent.is_dir():
        raise ConfigError(f"{flag} {str(path)!r}: the folder {str(p.parent)!r} does not exist")
    check_out_dir(p.parent, flag)
    return p


def write_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` whole or not at all: beside the target, then moved over it."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=".partial-", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


class Staging:
    """Outputs written into a hidden folder beside ``dest``; ``commit`` moves them in, ``discard``
    drops them.

    Use it as a context manager: leaving the block by an exception (Ctrl-C included) discards; a
    failed write (a full disk, a folder removed meanwhile) becomes one ConfigError line, and since
    results are printed before files are written, nothing computed is lost with it.
    """

    def __init__(self, dest: str | Path) -> None:
        self.dest = Path(dest)
        try:
            self.dest.mkdir(parents=True, exist_ok=True)
            self.dir = Path(tempfile.mkdtemp(prefix=".partial-", dir=self.dest))
        except OSError as e:
            raise ConfigError(
                f"out {str(self.dest)!r} cannot be written: {e.strerror or e}"
            ) from None

    def path(self, name: str) -> Path:
        """Where to write ``name`` now (inside the staging folder)."""
        return self.dir / name

    def final(self, staged: str | Path) -> Path:
        """Where a staged file will be after ``commit``."""
        return self.dest / Path(staged).relative_to(self.dir)

    def commit(self) -> list[Path]:
        moved = []
        for f in sorted(q for q in self.dir.rglob("*") if q.is_file()):
            target = self.final(f)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(f, target)
            moved.append(target)
        self.discard()
        return moved

    def discard(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.discard()
        if exc_type is not None and issubclass(exc_type, OSError):
            raise ConfigError(
                f"out {str(self.dest)!r}: writing failed ({exc.strerror or exc}); "
                "the results above are complete, the files are not written"
            ) from None


def finite(obj: Any) -> Any:
    """``obj`` with every non-finite float (and numpy number) made JSON-safe: nan and inf become
    None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "shape", None) == ():
        return finite(obj.item())
    return obj


def dumps(obj: Any) -> str:
    """JSON text that every parser reads (no NaN or Infinity); objects it cannot encode become
    strings."""
    return json.dumps(finite(obj), indent=2, default=str, allow_nan=False)
