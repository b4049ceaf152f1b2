"""Reading real traffic from a file.

Two formats, told apart by the header line:

- the Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``,
  timestamps such as ``2023-11-16 18:15:46.6805900``), as published in Azure's
  public dataset (Patel et al., "Splitwise", ISCA 2024);
- a plain CSV ``arrival_s,prompt_tokens,output_tokens`` with arrivals in seconds, and maybe
  more columns after those three, which are not read (``realrun serve --record`` writes
  each request's measured times there).

Arrival times are made relative to the first row. A malformed row raises a
``ConfigError`` naming the file and the line, because a silently skipped row
would change the workload a student thinks they are replaying: a time that is not
a finite number (``nan`` would slip past the order check, since ``nan < x`` is
false), a time that goes backwards, a token count that is not a whole number from
1 to ``MAX_TOKENS``, a field too long for a CSV reader, bytes that are not UTF-8.

The file is read lazily: ``max_rows`` and ``max_seconds`` stop the reading as soon as
enough rows are in, so the first 30 requests of a 200 MB trace cost milliseconds.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from .errors import ConfigError
from .files import open_text
from .lengths import MAX_TOKENS

__all__ = ["Trace", "read_trace", "MAX_TOKENS", "MAX_TRACE_ROWS", "parse_token_count"]

AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
PLAIN_HEADER = ["arrival_s", "prompt_tokens", "output_tokens"]

#: The most rows read from one trace: the Azure 2023 traces hold 20k-30k rows each; ten million
#: requests is days of a busy service, and more than one machine simulates in reasonable time.
MAX_TRACE_ROWS = 10_000_000


@dataclass(frozen=True)
class Trace:
    path: str
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    truncated: bool = False  # reading stopped at max_rows / max_seconds: the file has more

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration(self) -> float:
        return float(self.arrival_s[-1]) if len(self) else 0.0

    def __repr__(self) -> str:
        more = " (first rows only)" if self.truncated else ""
        return (
            f"Trace({Path(self.path).name!r}, {len(self)} requests over {self.duration:.0f} "
            f"s{more})"
        )


_EPOCH = datetime(1970, 1, 1)


def _azure_time(text: str) -> float:
    # The trace carries 7 fractional digits, one more than datetime parses on Python 3.10.
    base, _, frac = text.strip().partition(".")
    if frac and not frac.isdigit():
        raise ValueError(
            f"timestamp must look like 2023-11-16 18:15:46.6805900, got {text.strip()!r}"
        )
    try:
        # Naive arithmetic, not .timestamp(): local time zones and daylight saving must not move
        # arrivals.
        t = (datetime.fromisoformat(base) - _EPOCH).total_seconds()
    except ValueError:
        raise ValueError(
            f"timestamp must look like 2023-11-16 18:15:46.6805900, got {text.strip()!r}"
        ) from None
    return t + (float("0." + frac) if frac else 0.0)


def _seconds(text: str) -> float:
    try:
        t = float(text)
    except ValueError:
        raise ValueError(f"arrival_s must be a number of seconds, got {text.strip()!r}") from None
    if not math.isfinite(t):
        raise ValueError(f"arrival_s must be finite, got {text.strip()!r}")
    return t


def parse_token_count(text: str, field: str) -> int:
    """A whole number of tokens from 1 to MAX_TOKENS; "12.0" counts as 12 (spreadsheets write
    it)."""
    s = text.strip()
    try:
        v = int(s)
    except ValueError:
        try:
            f = float(s)
        except ValueError:
            raise ValueError(f"{field} must be a whole number, got {s!r}") from None
        if not math.isfinite(f) or f != int(f):
            raise ValueError(f"{field} must be a whole number, got {s!r}") from None
        v = int(f)
    if v < 1:
        raise ValueError(f"{field} must be >= 1, got {s!r}")
    if v > MAX_TOKENS:
        raise ValueError(
            f"{field} must be <= {MAX_TOKENS:,} (no model reads more), got "
            f"{s if len(s) < 30 else s[:27] + '...'}"
        )
    return v


def read_trace(
    path: str | Path, max_rows: int | None = None, max_seconds: float | None = None
) -> Trace:
    """Read a trace; stop after ``max_rows`` rows or at the first row ``max_seconds`` after the
    first."""
    p = Path(path)
    limit = MAX_TRACE_ROWS if max_rows is None else min(max_rows, MAX_TRACE_ROWS)
    ts: list[float] = []
    ps: list[int] = []
    os_: list[int] = []
    truncated = False
    with open_text(p, "trace") as lines:
        reader = csv.reader(lines)
        lineno = 1
        try:
            header = [h.strip() for h in next(reader, [])]
            if header == AZURE_HEADER:
                parse_t = _azure_time
            elif header[:3] == PLAIN_HEADER and "" not in header:
                # Columns after the three are carried, not read: a record of `realrun serve` keeps
                # each request's measured times there, and replays as the trace of what the class
                # sent.
                parse_t = _seconds
            else:
                shown = ",".join(header)
                raise ConfigError(
                    f"trace {str(p)!r} line 1: header must be {','.join(AZURE_HEADER)} or "
                    f"{','.join(PLAIN_HEADER)}, got "
                    f"{shown if len(shown) < 80 else shown[:77] + '...'!r}"
                )
            for row in reader:
                lineno = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                if len(ts) >= limit:
                    truncated = True
                    break
                try:
                    if len(row) != len(header):
                        raise ValueError(f"expected {len(header)} fields, got {len(row)}")
                    t = parse_t(row[0])
                    pr, out = (
                        parse_token_count(row[1], header[1]),
                        parse_token_count(row[2], header[2]),
                    )
                    if ts and t < ts[-1]:
                        raise ValueError("arrival times must not go backwards")
                except ValueError as e:
                    shown = ",".join(row)
                    raise ConfigError(
                        f"trace {str(p)!r} line {lineno}: {e} in "
                        f"{shown if len(shown) < 80 else shown[:77] + '...'!r}"
                    ) from None
                if max_seconds is not None and ts and t - ts[0] >= max_seconds:
                    truncated = True
                    break
                ts.append(t)
                ps.append(pr)
                os_.append(out)
        except csv.Error as e:
            raise ConfigError(
                f"trace {str(p)!r} line {reader.line_num or lineno}: not a CSV row ({e})"
            ) from None
    if not ts:
        raise ConfigError(f"trace {str(p)!r} has no rows")
    if len(ts) >= MAX_TRACE_ROWS and truncated:
        raise ConfigError(
            f"trace {str(p)!r} has more than {MAX_TRACE_ROWS:,} rows; replay a part with "
            f"--requests or --duration"
        )
    arr = np.asarray(ts, dtype=np.float64)
    return Trace(
        str(p),
        arr - arr[0],
        np.asarray(ps, dtype=np.int64),
        np.asarray(os_, dtype=np.int64),
        truncated,
    )
