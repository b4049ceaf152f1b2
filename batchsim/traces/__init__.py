"""Trace files: the one that ships with batchsim, and the public ones fetched into a cache.

The Azure LLM inference trace 2023, conversation part (19,366 requests over 58 minutes,
CC-BY-4.0; its attribution is in README.md beside it), is package data: a fresh clone
replays it with no download and no folder beside the checkout, so lesson 8, notebook 8,
the ``azure-conv`` scenario and the README's commands give the numbers the course quotes.
The other public traces (``catalog.py``) are fetched on request, where a network allows,
by ``python -m batchsim.traces fetch``, and kept only if their SHA-256 is the published one.

A trace is looked for, by file name, in this order:

1. ``$BATCHSIM_TRACES`` (a folder of your own; ``fetch`` writes there too when it is set);
2. the cache, ``~/.cache/batchsim/traces`` (``$XDG_CACHE_HOME`` moves it);
3. this folder, the copy in the package.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..core.errors import ConfigError
from .catalog import PUBLIC_TRACES, SPLITWISE, PublicTrace, public_trace

__all__ = [
    "AZURE_TRACE",
    "SHIPPED",
    "served_record_note",
    "PUBLIC_TRACES",
    "PublicTrace",
    "SPLITWISE",
    "public_trace",
    "cache_dir",
    "find_trace",
    "shipped_trace",
    "missing_trace_hint",
    "check_trace_file",
]

#: The file name of the trace that ships: the Azure 2023 conversation trace.
AZURE_TRACE = "azure_llm_2023_conv.csv"
#: The folder of the shipped trace and its attribution.
SHIPPED = Path(__file__).resolve().parent


def _user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "batchsim" / "traces"


def cache_dir() -> Path:
    """Where fetched traces are kept: $BATCHSIM_TRACES, else the user's cache folder."""
    return (
        Path(os.environ["BATCHSIM_TRACES"]) if os.environ.get("BATCHSIM_TRACES") else _user_cache()
    )


def shipped_trace(name: str = AZURE_TRACE) -> Path | None:
    """The package's own copy of ``name``, if it ships (a wheel built without package data has
    none)."""
    p = SHIPPED / name
    return p if p.is_file() else None


def find_trace(name: str = AZURE_TRACE) -> Path | None:
    """The trace file called ``name``: from $BATCHSIM_TRACES, the cache, or the package; None if
    nowhere."""
    folders = (
        [Path(os.environ["BATCHSIM_TRACES"])] if os.environ.get("BATCHSIM_TRACES") else []
    ) + [_user_cache()]
    places = [f / name for f in folders]
    for p in places:
        if p.is_file():
            return p.resolve()
    return shipped_trace(name)


def _shown(p: Path) -> str:
    """A path as a command line in the working folder would write it (relative when under it)."""
    try:
        return str(p.relative_to(Path.cwd()))
    except (ValueError, OSError):  # elsewhere, or the working folder is gone
        return str(p)


def missing_trace_hint(path: str | Path) -> str:
    """One line for a trace file that is not there: where this one, or any, comes from."""
    name = Path(path).name
    here = find_trace(name)
    if here is not None:
        return f"trace {str(path)!r} not found; batchsim has {name}: --trace {_shown(here)}"
    known = next((t for t in PUBLIC_TRACES if name in (t.file, t.upstream_file)), None)
    if known is not None:
        return (
            f"trace {str(path)!r} not found; it is the public trace {known.name}: python -m "
            f"batchsim.traces fetch {known.name} (needs a network) keeps it in {cache_dir()}"
        )
    shipped = shipped_trace()
    return (
        f"trace {str(path)!r} not found; traces come from batchsim "
        f"itself{f' (--trace {_shown(shipped)})' if shipped else ''}, from python -m "
        f"batchsim.traces fetch (the public ones: python -m batchsim.traces list), or a CSV of "
        f"your own "
        "(arrival_s,prompt_tokens,output_tokens)"
    )


def check_trace_file(path: str | Path | None) -> None:
    """Nothing for a trace that exists (the reader judges its contents); a ConfigError with the hint
    if not."""
    if path is not None and not Path(path).exists():
        raise ConfigError(missing_trace_hint(path))


def served_record_note(path: str | Path | None) -> str | None:
    """For a trace that a real server recorded (``realrun serve --record``: a sidecar ``PATH.json``
    naming the model and the machine), one line saying that batchsim replays its arrivals on the
    simulated server, which is not the machine that served them; None for any other trace. Read as
    plain JSON: batchsim does not import realrun."""
    import json

    if path is None:
        return None
    side = Path(str(path) + ".json")
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or "model" not in meta or "policy" not in meta:
        return None
    where = " on ".join(str(meta[k]) for k in ("model", "device") if meta.get(k))
    return (
        f"{Path(path).name} is a record of a real server ({where}, {meta['policy']}, says "
        f"{side.name}): "
        "batchsim replays its arrivals on the simulated server below, a what-if on other hardware, "
        "not a "
        f"prediction of what was measured; to predict the record itself: python -m realrun predict "
        f"{path}"
    )
