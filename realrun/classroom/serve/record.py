"""``realrun serve --record FILE``: what the class sent, as a trace batchsim replays.

The first three columns are batchsim's plain trace (``arrival_s,prompt_tokens,output_tokens``),
so ``python -m batchsim run --trace FILE`` and ``realrun compare --trace FILE`` replay the very
arrivals the room made; the columns after them are what this server measured for each
request (seconds since the server started), which the trace reader carries without reading.

``output_tokens`` is the length the policy scheduled: ``max_tokens``, or what was made
before the client left. A request that never ran (withdrawn while queued, or refused) is
kept with its ``rejected`` reason; a replay serves it, which is what the model predicts for
the traffic that came, not for the traffic that stayed. A request turned away at the door (503,
the queue full) is kept too, in arrival order, with ``tokens`` 0 and its reason.

The record is the class's: it is written readable by others (as any file the teacher's umask
allows, not the 0600 of a temporary file), and a stop never loses it: if its folder has gone,
it is written to a fallback path, named on stderr (``write_with_fallback``).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
import time
from pathlib import Path

from batchsim.core.files import write_atomic

__all__ = ["RECORD_FIELDS", "record_rows", "write_record", "write_with_fallback", "meta_path"]

RECORD_FIELDS = (
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "start_s",
    "first_token_s",
    "finish_s",
    "tokens",
    "rejected",
)
#: The columns written: ``RECORD_FIELDS`` (what a reader needs; records written before it existed
#: lack the rest), then ``client``, the short id of who sent each request (``clients.client_id``).
WRITTEN_FIELDS = RECORD_FIELDS + ("client",)


def _t(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.6f}"


def record_rows(records, refused=(), clients=None) -> list[list[str]]:
    """The CSV rows: the run's requests, and ``refused`` ones, each
    ``(arrival_s, prompt_tokens, max_tokens, reason, client)`` turned away before the engine saw it,
    in arrival order; ``clients``: request id -> the short id of who sent it
    (``clients.client_id``)."""
    clients = clients or {}
    rows = []
    for i in range(len(records)):
        made = int(records.tokens[i])
        out = int(records.output_tokens[i])
        if records.rejected[i] is not None and made > 0:
            out = made  # the client left after these: the server made no more
        rows.append(
            [
                f"{records.arrival[i]:.6f}",
                str(int(records.prompt_tokens[i])),
                str(max(1, out)),
                _t(records.start[i]),
                _t(records.first_token[i]),
                _t(records.finish[i]),
                str(made),
                (records.rejected[i] or "").replace("\n", " "),
                clients.get(i, ""),
            ]
        )
    for arrival, prompt, out, reason, client in refused:
        rows.append(
            [
                f"{arrival:.6f}",
                str(int(prompt)),
                str(max(1, int(out))),
                "",
                "",
                "",
                "0",
                str(reason).replace("\n", " "),
                client,
            ]
        )
    rows.sort(key=lambda r: float(r[0]))  # stable: the engine's own rows keep their order
    return rows


def meta_path(path: str | Path) -> Path:
    """The record's sidecar: what served it (model, machine, policy and its knobs, limits)."""
    p = Path(path)
    return p.with_name(p.name + ".json")


def _shared(path: Path) -> None:
    """Readable as any new file of this user is (mkstemp makes 0600: the class could not read
    it)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def write_record(
    records, path: str | Path, meta: dict | None = None, refused=(), clients=None
) -> Path:
    """Write the record whole or not at all (a half-written trace would replay as a shorter class),
    and beside it ``meta`` (``meta_path``), what served it."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(WRITTEN_FIELDS)
    w.writerows(record_rows(records, refused, clients))
    out = write_atomic(Path(path), buf.getvalue())
    _shared(out)
    if meta is not None:
        _shared(write_atomic(meta_path(path), json.dumps(meta, indent=1) + "\n"))
    return out


def fallback_paths(path: str | Path) -> list[Path]:
    """Where a record goes when its own folder has gone: the working folder, then the system's
    temporary folder, under a name that says what it is and when, so no earlier record is
    overwritten."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"{Path(path).stem}-{stamp}-{os.getpid()}{Path(path).suffix or '.csv'}"
    return [Path.cwd() / name, Path(tempfile.gettempdir()) / name]


def write_with_fallback(
    records, path: str | Path, meta: dict | None = None, refused=(), clients=None
) -> tuple[Path, str | None]:
    """``write_record`` to ``path``, or else to the first ``fallback_paths`` that takes it: (where,
    why not ``path``: None when it was written there). The last failure is raised: nowhere could
    take it."""
    why = None
    for target in [Path(path), *fallback_paths(path)]:
        try:
            return write_record(records, target, meta, refused, clients), why
        except OSError as e:
            why = why or (e.strerror or str(e))
            last = e
    raise last
