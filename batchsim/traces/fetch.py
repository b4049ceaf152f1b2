"""``python -m batchsim.traces``: list the traces batchsim knows, fetch the public ones.

    python -m batchsim.traces list                   # what ships, is cached, can be fetched
    python -m batchsim.traces fetch                  # every public trace not here yet
    python -m batchsim.traces fetch azure-2023-code  # one
    # from a copy of the publisher's files:
    python -m batchsim.traces fetch --from file:///media/usb/traces/

A download goes to a hidden file beside its destination while its SHA-256 is computed,
and is moved into place only if the checksum is the published one; a wrong or cut-off
file is deleted and named, so the cache holds published traces or nothing. A trace
already in the cache (or shipped, with the right checksum) is not downloaded again.
Without a network the command says so in one line and exits with code 2; nothing at
run time or in the tests downloads anything unless this command is run.
"""

from __future__ import annotations

import hashlib
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from ..core.errors import ConfigError
from . import PUBLIC_TRACES, PublicTrace, cache_dir, find_trace, public_trace, shipped_trace

__all__ = ["main", "fetch_one", "sha256_of", "TIMEOUT_S"]

#: Seconds to wait for a server to answer (and between two chunks of the answer).
TIMEOUT_S = 20.0
_CHUNK = 1 << 16


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _source(trace: PublicTrace, base: str | None) -> str:
    """The publisher's URL, or the same file name under a mirror (``--from``: a URL or a folder)."""
    if base is None:
        return trace.url
    if "://" not in base:  # a plain folder: a file URL, so that one code path reads both
        base = Path(base).resolve().as_uri()
    return base.rstrip("/") + "/" + trace.upstream_file


def fetch_one(trace: PublicTrace, dest: Path, base: str | None = None) -> tuple[Path, str]:
    """Download ``trace`` into the folder ``dest``; (its path, what was done). ConfigError if it
    cannot."""
    target = dest / trace.file
    for have in (target, find_trace(trace.file)):
        if have is not None and have.is_file() and sha256_of(have) == trace.sha256:
            return have, "already here"
    url = _source(trace, base)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--to {str(dest)!r} cannot be made: {e.strerror or e}") from None
    part = dest / f".{trace.file}.part"
    h, got = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer, open(part, "wb") as out:
            # one byte past the published size proves the file is another one
            while got <= trace.size:
                block = answer.read(_CHUNK)
                if not block:
                    break
                h.update(block)
                out.write(block)
                got += len(block)
    except (urllib.error.URLError, OSError, ValueError) as e:
        part.unlink(missing_ok=True)
        why = getattr(e, "reason", None) or getattr(e, "strerror", None) or e
        hint = (
            ""
            if base
            else (
                " (offline? the conversation trace ships with batchsim; with the files on a USB "
                "stick or a share, give --from FOLDER)"
            )
        )
        raise ConfigError(f"cannot fetch {trace.name} from {url}: {why}{hint}") from None
    if h.hexdigest() != trace.sha256:
        part.unlink(missing_ok=True)
        raise ConfigError(
            f"{trace.name} from {url} is not the published file ({got:,} bytes, sha256 "
            f"{h.hexdigest()[:16]}..., expected {trace.size:,} bytes, {trace.sha256[:16]}...): not "
            f"kept"
        )
    os.replace(part, target)
    return target, f"fetched {got:,} bytes from {url}, sha256 checked"


def _list() -> int:
    print(f"cache: {cache_dir()}")
    for t in PUBLIC_TRACES:
        here = find_trace(t.file)
        where = (
            "shipped with batchsim"
            if here is not None and here == shipped_trace(t.file)
            else f"here: {here}"
            if here is not None
            else f"fetch with: python -m batchsim.traces fetch {t.name}"
        )
        print(f"{t.name:16}  {t.about}; {t.license}; {where}")
    print(f"cite: {PUBLIC_TRACES[0].citation}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from ..cli import OneLineParser  # a bad flag is one line and exit code 2, as in every command

    OneLineParser.argv = list(sys.argv[1:] if argv is None else argv)
    p = OneLineParser(
        prog="python -m batchsim.traces",
        description=__doc__.split("\n\n")[0],
        epilog="Fetched traces are kept in $BATCHSIM_TRACES, else ~/.cache/batchsim/traces.",
    )
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    sub.add_parser("list", help="the traces batchsim knows and where each one is")
    f = sub.add_parser("fetch", help="download public traces into the cache, checksummed")
    f.add_argument(
        "names", nargs="*", help=f"which ({', '.join(t.name for t in PUBLIC_TRACES)}; default: all)"
    )
    f.add_argument(
        "--from",
        dest="base",
        default=None,
        metavar="URL_OR_FOLDER",
        help="a mirror holding the publisher's file names, instead of the publisher",
    )
    f.add_argument(
        "--to", default=None, metavar="DIR", help="the folder to keep them in (default: the cache)"
    )
    try:
        args = p.parse_args(argv)
    except SystemExit as e:  # --help (0), or a bad flag already reported in one line (2)
        return int(e.code or 0)
    if args.command == "list":
        return _list()
    try:
        traces = [public_trace(n) for n in args.names] or list(PUBLIC_TRACES)
        dest = Path(args.to) if args.to else cache_dir()
        for t in traces:
            path, what = fetch_one(t, dest, args.base)
            print(f"{t.name}: {what} -> {path}")
    except ConfigError as e:
        print(f"batchsim.traces: error: {e}", file=sys.stderr)
        return 2
    print(f"cite: {traces[0].citation} ({traces[0].license})")
    return 0
