"""``realrun serve --record FILE``: what the class sent, as a trace batchsim replays.

The first three columns are batchsim's plain trace (``arrival_s,prompt_tokens,output_tokens``),
so ``python -m batchsim run --trace FILE`` and ``realrun compare --trace FILE`` replay the very
arrivals the room made; the columns after them are what this server measured for each
request (seconds since the server started), which the trace reader carries without reading.

``output_tokens`` is the length the policy scheduled: ``max_tokens``, or what was made
before the client left. A request that never ran (withdrawn while queued, or refused) is
kept with its ``rejected`` reason; a replay serves it, which is what the model predicts for
the traffic that came, not for the traffic that stayed.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path



from batchsim.core.files import write_atomic

__all__ = ["RECORD_FIELDS", "record_rows", "write_record", "meta_path"]

RECORD_FIELDS = ("arrival_s", "prompt_tokens", "output_tokens", "start_s", "first_token_s", "finish_s", "tokens",
                 "rejected")


def _t(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.6f}"


def record_rows(records) -> list[list[str]]:
    rows = []
    for i in range(len(records)):
        made = int(records.tokens[i])
        out = int(records.output_tokens[i])
        if records.rejected[i] is not None and made > 0:
            out = made  # the client left after these: the server made no more
        rows.append([f"{records.arrival[i]:.6f}", str(int(records.prompt_tokens[i])), str(max(1, out)),
                     _t(records.start[i]), _t(records.first_token[i]), _t(records.finish[i]), str(made),
                     (records.rejected[i] or "").replace("\n", " ")])
    return rows


def meta_path(path: str | Path) -> Path:
    """The record's sidecar: what served it (model, machine, policy and its knobs, limits)."""
    p = Path(path)
    return p.with_name(p.name + ".json")


def write_record(records, path: str | Path, meta: dict | None = None) -> Path:
    """Write the record whole or not at all (a half-written trace would replay as a shorter class),
    and beside it ``meta`` (``meta_path``), what served it."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(RECORD_FIELDS)
    w.writerows(record_rows(records))
    out = write_atomic(Path(path), buf.getvalue())
    if meta is not None:
        write_atomic(meta_path(path), json.dumps(meta, indent=1) + "\n")
    return out
